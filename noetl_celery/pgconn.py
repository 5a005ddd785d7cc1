"""Postgres as a client of playbooks' databases, shared by the postgres tool and the postgres
cursor (neither reaches into the other): which credential a config names, a pooled
connection that fails fast and truthfully, and what a psycopg error means.

psycopg_pool connects in a background worker: when the server is down, a caller of
`getconn()` just waits for its timeout and learns nothing but "couldn't get a connection".
We wait in short slices instead; as soon as the pool reports a failed connect, we connect
directly once: that either yields a working connection (the server is back) or the real
libpq error (refused, bad password, unknown database) for the step's error message.
"""

from __future__ import annotations

import select
import time
import weakref
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from typing import Any

import psycopg
from psycopg_pool import ConnectionPool, PoolTimeout

from noetl_celery.models.outcome import ErrorKind

# How long a call waits for a connection when all pooled ones are busy.
POOL_WAIT_SECONDS = 60.0
_FIRST_SLICE = 0.02
_MAX_SLICE = 0.5


class PoolExhausted(Exception):
    """Every pooled connection stayed busy for the whole wait."""


def _connect_errors(pool: ConnectionPool[Any]) -> int:
    return int(pool.get_stats().get("connections_errors", 0))


# Pools that failed to connect and have not handed out a connection since. For those,
# calls try the pool only briefly and otherwise connect directly: that fails in a
# millisecond while the server is down, and works at once when it is back, instead of
# waiting out the pool's background retry delay.
_failing: weakref.WeakKeyDictionary[ConnectionPool[Any], float] = weakref.WeakKeyDictionary()
_FAILING_POOL_WAIT = 0.005


def _direct(pool: ConnectionPool[Any], conninfo: str) -> psycopg.Connection[Any]:
    try:
        return psycopg.connect(conninfo, autocommit=True, connect_timeout=10)
    except psycopg.Error:
        _failing[pool] = time.monotonic()
        raise


def _acquire(
    pool: ConnectionPool[Any], conninfo: str, wait: float
) -> tuple[psycopg.Connection[Any], bool]:
    """(connection, is_direct). A direct connection is not the pool's: close it after."""
    if pool in _failing:
        try:
            # also prompts the pool to try connecting again if it had given up
            conn = pool.getconn(timeout=_FAILING_POOL_WAIT)
        except PoolTimeout:
            return _direct(pool, conninfo), True
        _failing.pop(pool, None)
        return conn, False
    deadline = time.monotonic() + wait
    errors_before = _connect_errors(pool)
    slice_ = _FIRST_SLICE
    while True:
        remaining = deadline - time.monotonic()
        try:
            conn = pool.getconn(timeout=max(min(slice_, remaining), 0.001))
        except PoolTimeout:
            pass
        else:
            return conn, False
        if _connect_errors(pool) > errors_before:
            # The pool cannot connect: find out why with a direct attempt.
            return _direct(pool, conninfo), True
        if remaining <= slice_:
            raise PoolExhausted(
                f"no postgres connection became free within {wait:g}s (pool size {pool.max_size})"
            )
        slice_ = min(slice_ * 2, _MAX_SLICE)


@contextmanager
def pg_connection(
    pool: ConnectionPool[Any], conninfo: str, wait: float = POOL_WAIT_SECONDS
) -> Iterator[psycopg.Connection[Any]]:
    """A connection in autocommit mode; raises psycopg.OperationalError or PoolExhausted."""
    conn, direct = _acquire(pool, conninfo, wait)
    try:
        yield conn
    finally:
        if direct:
            conn.close()
        else:
            # The pool discards a connection that broke meanwhile, so the next call gets
            # a fresh one rather than the corpse.
            pool.putconn(conn)


def check_pooled(conn: psycopg.Connection[Any]) -> None:
    """The pools' checkout check, without a round trip in the common case.

    psycopg_pool's `check_connection` sends an empty query per checkout: one Postgres round
    trip per tool call (~1 in 2 of an API-bound flow's statements on the data database).
    An idle autocommit connection has nothing to read unless the server ended it: a
    restart or `pg_terminate_backend` sends FATAL and closes, a killed server's socket
    reads EOF. So a connection whose socket is readable gets the full check (which
    raises for a dead one: the pool discards it and hands out another), and any other
    goes out unchecked. A connection cut without a word (a network partition) fails its
    statement as before, with a retryable `db_connection` error."""
    if conn.closed or conn.broken:
        raise psycopg.OperationalError("the pooled connection is closed")
    poll = getattr(select, "poll", None)
    if poll is None:  # no poll() on this platform: the round trip it is
        ConnectionPool.check_connection(conn)
        return
    poller = poll()
    poller.register(conn.fileno(), select.POLLIN | select.POLLPRI)
    if poller.poll(0):  # something came in on an idle connection: look at what
        ConnectionPool.check_connection(conn)


def set_statement_timeout(conn: psycopg.Connection[Any], seconds: float) -> None:
    """Bound every statement of this call (milliseconds granularity)."""
    millis = max(1, int(seconds * 1000))
    # set_config takes a bind parameter, SET does not (server-side binding).
    conn.execute("SELECT set_config('statement_timeout', %s, false)", (f"{millis}ms",))


def reset_statement_timeout(conn: psycopg.Connection[Any]) -> None:
    """Give the pooled connection back with the server default timeout."""
    if not conn.closed and not conn.broken:
        conn.execute("RESET statement_timeout")


def auth_alias(config: Mapping[str, Any]) -> str | None:
    """The credential alias of `auth: name` or `auth: {key|name|credential: name}`."""
    auth = config.get("auth", config.get("credential"))  # `credential:` is NoETL's legacy
    if isinstance(auth, Mapping):
        auth = next((auth[k] for k in ("key", "name", "credential", "alias") if auth.get(k)), None)
    return (auth.strip() or None) if isinstance(auth, str) else None


def sqlstate_kind(sqlstate: str | None) -> tuple[ErrorKind, bool]:
    """(error kind, retryable) for a SQLSTATE."""
    code = sqlstate or ""
    if code.startswith("08") or code in ("57P01", "57P02", "57P03"):  # link or server gone
        return "db_connection", True
    if code.startswith("23"):
        return "db_constraint", False
    if code in ("40P01", "40001"):  # deadlock, serialization failure: retry may succeed
        return "db_deadlock", True
    if code == "57014":
        return "db_timeout", True
    if code.startswith("28"):
        return "auth", False
    if code == "42601":
        return "syntax_error", False
    return "db_error", False


def db_message(exc: psycopg.Error) -> str:
    """The server's message: primary line plus DETAIL, on one line."""
    diag = exc.diag
    primary = diag.message_primary or (str(exc).strip().splitlines() or [type(exc).__name__])[0]
    detail = diag.message_detail
    return f"{primary} (DETAIL: {detail})" if detail else primary
