"""Long-lived resources shared by tool calls: HTTP clients, Postgres pools, credentials.

One `ToolServices` lives per worker process. Creating an `httpx.Client` costs ~20 ms (SSL
context) and a Postgres connection ~8 ms, so both are built once, lazily (a process that
never runs an HTTP step never imports httpx) and reused by every thread.
"""

from __future__ import annotations

import contextlib
import logging
import os
import threading
import time
from collections.abc import Callable, Collection
from typing import TYPE_CHECKING, Any

from noetl_celery.errors import NoetlError
from noetl_celery.settings import Settings
from noetl_celery.tools.credentials import CredentialStore
from noetl_celery.tools.http_pacing import HttpPacer, PaceLedger
from noetl_celery.tools.keychain import Keychain
from noetl_celery.tools.keyed_pacing import KeyedPacer, KeyLedger
from noetl_celery.tools.redaction import Redactor, with_command_masks

if TYPE_CHECKING:
    import httpx
    from psycopg_pool import ConnectionPool

logger = logging.getLogger(__name__)

PG_POOL_MAX_SIZE = 8  # NoETL learned that a pool per command exhausts Postgres: share one
PG_CONNECT_TIMEOUT = 10  # seconds; a black-holed host must not hang a worker slot
# How long the pool keeps retrying a failed connect in the background before giving up.
# Short, so that the next call after a server restart triggers a fresh attempt at once
# instead of waiting out an exponential backoff.
PG_RECONNECT_TIMEOUT = 2.0
# How often the credentials file's mtime is looked at once it was read: every command
# asks for the credentials (and the redactor) several times, and an `os.stat` per ask was
# 4.4% of a worker's time on an API-bound flow. A rotated file is seen within a second.
CREDENTIALS_CHECK_SECONDS = 1.0


class ToolServices:
    """Resources for tools. Safe to use from many threads; `close()` releases everything."""

    def __init__(
        self,
        settings: Settings,
        credentials: CredentialStore | None = None,
        *,
        clock: Callable[[], float] = time.monotonic,
        pace_ledger: PaceLedger | None = None,
        key_ledger: KeyLedger | None = None,
    ) -> None:
        self.settings = settings
        # the engine database's server (store.Store.cluster_id): a postgres cursor on the
        # same server has its claims witnessed (cursors.postgres); None: not known
        self.engine_cluster: Callable[[], str | None] = lambda: None
        # the pacing schedule of the worker processes (tools.http_pacing); None: this
        # process paces on its own
        self._pace_ledger = pace_ledger
        self._lock = threading.Lock()
        # Credentials are read when a command first needs them and re-read when the file
        # changes, so a worker picks up a rotated password without a restart and a worker
        # started before the file exists fails only the commands that need it.
        self._credentials_path = settings.credentials_file if credentials is None else ""
        self._credentials_mtime: float | None = None
        self._clock = clock
        # when the file was last looked at with a good read (never: -inf)
        self._credentials_checked = float("-inf")
        self._credentials = credentials if credentials is not None else CredentialStore.empty()
        self._redactor = Redactor.from_store(self._credentials)
        self._pid = os.getpid()
        self._http: dict[bool, httpx.Client] = {}
        # each client's own transport, to send on directly (tools.http_direct); None
        # when the environment names a proxy
        self._direct: dict[bool, httpx.BaseTransport | None] = {}
        self._pools: dict[str, ConnectionPool[Any]] = {}
        self._pacer = self._new_pacer()
        # the schedules of keyed `rate_limit`s (tools.keyed_pacing); the fleet's with a
        # ledger
        self._key_ledger = key_ledger
        self._keyed = KeyedPacer(key_ledger)
        # resolved keychain entries live here, in this process only (tools.keychain)
        self.keychain = Keychain(lambda: self.http_client(), lambda: self.credentials)

    @property
    def credentials(self) -> CredentialStore:
        """The credential aliases (raises ConfigurationError for a bad/missing file)."""
        path = self._credentials_path
        if not path:
            return self._credentials
        now = self._clock()
        if now - self._credentials_checked < CREDENTIALS_CHECK_SECONDS:
            return self._credentials  # read and good within the last second
        try:
            mtime = os.stat(path).st_mtime
        except OSError:
            mtime = None
        if mtime is None or mtime != self._credentials_mtime:
            with self._lock:
                if mtime is None or mtime != self._credentials_mtime:
                    store = CredentialStore.from_file(path)  # raises with the file named
                    self._credentials, self._credentials_mtime = store, mtime
                    self._redactor = Redactor.from_store(store)
        # a missing or bad file is looked at again on every ask (it raised above), so it
        # fails each command that needs it and is picked up as soon as it is fixed
        self._credentials_checked = now
        return self._credentials

    @property
    def redactor(self) -> Redactor:
        """The credentials file's secrets, plus the keychain values of the command this
        thread runs (tools.redaction.CommandMasks)."""
        return with_command_masks(self.file_redactor)

    @property
    def file_redactor(self) -> Redactor:
        # refresh when the file changed; on a bad file keep the last good redactor (the
        # error surfaces where credentials are used)
        with contextlib.suppress(NoetlError):
            self.credentials  # noqa: B018
        return self._redactor

    def _new_pacer(self) -> HttpPacer:
        return HttpPacer(
            dict(self.settings.http_rate_limits),
            max_wait=self.settings.park_after_seconds,
            enabled=self.settings.http_pacing != "off",
            ledger=self._pace_ledger if self.settings.http_pacing == "on" else None,
        )

    @property
    def http_pacer(self) -> HttpPacer:
        """The per-host request pacer of this process, shared by its threads (and its
        schedule by the fleet's processes, with a ledger)."""
        if self._pid != os.getpid():
            with self._lock:
                self._check_fork()
        return self._pacer

    def _check_fork(self) -> None:
        # A Celery prefork child inherits these objects, but not the pool worker threads
        # or the sockets' owner: start afresh instead of sharing the parent's.
        # Caller holds self._lock.
        if os.getpid() != self._pid:
            self._pid = os.getpid()
            self._http = {}
            self._direct = {}
            self._pools = {}
            self._pacer = self._new_pacer()
            self._keyed = KeyedPacer(self._key_ledger)

    @property
    def keyed_pacer(self) -> KeyedPacer:
        """The send schedules of keyed `rate_limit`s for this process's threads."""
        if self._pid != os.getpid():
            with self._lock:
                self._check_fork()
        return self._keyed

    def http_client(self, verify: bool = True) -> httpx.Client:
        """The shared client (one per `verify` flag: httpx sets TLS checks per client)."""
        client = self._http.get(verify)
        if client is not None and self._pid == os.getpid():
            return client
        with self._lock:
            self._check_fork()
            client = self._http.get(verify)
            if client is None:
                import httpx  # lazy: ~90 ms import

                from noetl_celery.tools.http_cookies import no_cookies
                from noetl_celery.tools.http_direct import environment_proxies
                from noetl_celery.tools.http_threads import ThreadPools

                # NOETL_HTTP_POOLS=thread: a pool per thread (tools.http_threads says
                # why); =process: one pool that keeps every connection alive (a thread
                # pool's 32 threads calling one API must not reopen sockets per request)
                process_pool = httpx.Limits(max_connections=100, max_keepalive_connections=100)
                transport: httpx.BaseTransport | None = None
                if environment_proxies():
                    pass  # the client routes per scheme: it builds its own transports
                elif self.settings.http_pools == "thread":
                    transport = ThreadPools(verify=verify)
                else:
                    transport = httpx.HTTPTransport(verify=verify, limits=process_pool)
                client = httpx.Client(
                    verify=verify,
                    follow_redirects=False,
                    timeout=self.settings.http_timeout_seconds,
                    limits=process_pool,  # the client's own transports, with a proxy
                    # a shared client must not keep the cookies responses set: they
                    # would ride along on every later request of every execution
                    cookies=no_cookies(),
                    transport=transport,
                )
                self._http[verify], self._direct[verify] = client, transport
            return client

    def warm_up(self, kinds: Collection[str]) -> threading.Thread | None:
        """Import the http tool and build the shared client on a daemon thread when
        `kinds` has `http`: a fresh process (an embedded `run`) otherwise builds them in
        its first http command, under the lock its sibling commands wait on, and a
        parallel loop's items were then sent all at once after it, in any order (NoETL's
        e2e test_pagination_basic saw its slow probe reach the server last)."""
        if "http" not in kinds:
            return None

        def warm() -> None:
            try:
                from noetl_celery.tools.registry import get_tool  # lazy, as the tools are

                get_tool("http")
                self.http_client()
            except Exception:  # the first http command builds it then, as before
                logger.debug("warming the http client up failed", exc_info=True)

        thread = threading.Thread(target=warm, name="noetl-warm-up", daemon=True)
        thread.start()
        return thread

    def http_direct(self, verify: bool = True) -> httpx.BaseTransport | None:
        """The shared client's transport, for a request that needs none of the client's
        own steps (tools.http_direct says which); None when the environment names a
        proxy: every request then goes through the client, which picks the proxy."""
        self.http_client(verify)
        return self._direct.get(verify)

    def pg_pool(self, conninfo: str) -> ConnectionPool[Any]:
        """The pool for `conninfo`, created on first use (autocommit connections)."""
        pool = self._pools.get(conninfo)
        if pool is not None and self._pid == os.getpid():
            return pool
        with self._lock:
            self._check_fork()
            pool = self._pools.get(conninfo)
            if pool is None:
                from psycopg_pool import ConnectionPool  # lazy: ~85 ms import

                from noetl_celery.pgconn import check_pooled  # imports psycopg

                pool = ConnectionPool(
                    conninfo,
                    min_size=0,
                    # a thread-pool worker may run a postgres step on every thread
                    max_size=max(PG_POOL_MAX_SIZE, self.settings.worker_threads),
                    kwargs={"autocommit": True, "connect_timeout": PG_CONNECT_TIMEOUT},
                    # a connection killed by a server restart is discarded on checkout
                    # instead of failing the user's statement; without a round trip
                    # unless the server has said something (pgconn.check_pooled)
                    check=check_pooled,
                    reconnect_timeout=PG_RECONNECT_TIMEOUT,
                    num_workers=2,
                    open=True,
                    name=f"noetl-tools-{len(self._pools) + 1}",
                )
                self._pools[conninfo] = pool
            return pool

    def close(self) -> None:
        """Close every client and pool. Later calls create new ones."""
        with self._lock:
            clients, pools = list(self._http.values()), list(self._pools.values())
            self._http, self._direct, self._pools = {}, {}, {}
        for client in clients:
            try:
                client.close()
            except Exception:  # closing must release the rest even if one fails
                logger.warning("closing an http client failed", exc_info=True)
        for pool in pools:
            try:
                pool.close(timeout=5.0)
            except Exception:
                logger.warning("closing a postgres pool failed", exc_info=True)

    def __enter__(self) -> ToolServices:
        return self

    def __exit__(self, *_exc: object) -> None:
        self.close()
