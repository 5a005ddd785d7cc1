"""Postgres "restarts" simulated by a TCP proxy we can stop and start on the same port.

The shared test server cannot be restarted, but from the client's side a restart is the
same thing: every open connection dies, new connects are refused for a while, then work.
"""

from __future__ import annotations

import contextlib
import socket
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import psycopg
import pytest
from psycopg.conninfo import conninfo_to_dict
from psycopg_pool import ConnectionPool

from noetl_celery.pgconn import PoolExhausted, check_pooled, pg_connection
from noetl_celery.settings import Settings
from noetl_celery.tools.base import ToolOutcome
from noetl_celery.tools.credentials import CredentialStore
from noetl_celery.tools.services import ToolServices

pytestmark = pytest.mark.integration


class TcpProxy:
    """Forwards 127.0.0.1:<port> to the real server until stopped."""

    def __init__(self, target: tuple[str, int]) -> None:
        self.target = target
        self.port = 0
        self._stop = threading.Event()
        self._sockets: list[socket.socket] = []
        self._lock = threading.Lock()
        self._thread: threading.Thread | None = None

    def start(self) -> None:
        listener = socket.socket()
        listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        listener.bind(("127.0.0.1", self.port))
        self.port = listener.getsockname()[1]
        listener.listen(16)
        listener.settimeout(0.05)
        self._stop.clear()
        self._thread = threading.Thread(target=self._accept, args=(listener,), daemon=True)
        self._thread.start()

    def _accept(self, listener: socket.socket) -> None:
        with listener:
            while not self._stop.is_set():
                try:
                    client, _ = listener.accept()
                except TimeoutError:
                    continue
                upstream = socket.create_connection(self.target)
                with self._lock:
                    self._sockets += [client, upstream]
                for a, b in ((client, upstream), (upstream, client)):
                    threading.Thread(target=self._pump, args=(a, b), daemon=True).start()

    @staticmethod
    def _pump(src: socket.socket, dst: socket.socket) -> None:
        try:
            while data := src.recv(65536):
                dst.sendall(data)
        except OSError:
            pass
        finally:
            for sock in (src, dst):
                with contextlib.suppress(OSError):
                    sock.shutdown(socket.SHUT_RDWR)

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
        with self._lock:
            sockets, self._sockets = self._sockets, []
        for sock in sockets:
            with contextlib.suppress(OSError):
                sock.shutdown(socket.SHUT_RDWR)
            sock.close()


@pytest.fixture
def proxy(pg_test_dsn: str) -> Iterator[TcpProxy]:
    info = conninfo_to_dict(pg_test_dsn)
    server = TcpProxy((str(info.get("host", "127.0.0.1")), int(str(info.get("port", 5432)))))
    server.start()
    yield server
    server.stop()


@pytest.fixture
def proxied_services(proxy: TcpProxy, pg_test_dsn: str, tmp_path: Path) -> Iterator[ToolServices]:
    info = conninfo_to_dict(pg_test_dsn)
    store = CredentialStore(
        {
            "via_proxy": {
                "db_host": "127.0.0.1",
                "db_port": proxy.port,
                "db_user": info.get("user", "postgres"),
                "db_password": info.get("password", ""),
                "db_name": info.get("dbname"),
            }
        }
    )
    svc = ToolServices(Settings(home=tmp_path), store)
    yield svc
    svc.close()


def test_server_restart_does_not_poison_the_pool(
    proxy: TcpProxy, proxied_services: ToolServices, run_tool_with: Callable[..., ToolOutcome]
) -> None:
    config = {"auth": "via_proxy", "query": "SELECT 1 AS up"}

    def call() -> ToolOutcome:
        return run_tool_with(proxied_services, "postgres", config)

    assert call().ok
    proxy.stop()  # server down: pooled connections die, connects are refused
    for _ in range(3):
        started = time.monotonic()
        down = call()
        assert time.monotonic() - started < 5
        assert down.error is not None and down.error.kind == "db_connection", down.error
        assert down.error.retryable is True
    proxy.start()  # server back on the same port
    for _ in range(5):
        back = call()
        assert back.ok, back.error
        assert back.data["rows"] == [{"up": 1}]
    # calls went back to pooled connections (not direct ones forever)
    pool = proxied_services.pg_pool(
        proxied_services.credentials.resolve("via_proxy").postgres_conninfo()
    )
    deadline = time.monotonic() + 5
    while not pool.get_stats().get("pool_available") and time.monotonic() < deadline:
        assert call().ok
        time.sleep(0.05)
    assert pool.get_stats().get("pool_available", 0) >= 1


def test_quick_restart_between_calls(
    proxy: TcpProxy, proxied_services: ToolServices, run_tool_with: Callable[..., ToolOutcome]
) -> None:
    config = {"auth": "via_proxy", "query": "SELECT 2 AS up"}
    assert run_tool_with(proxied_services, "postgres", config).ok
    proxy.stop()
    proxy.start()
    # the idle pooled connection is dead; the checkout check replaces it transparently
    out = run_tool_with(proxied_services, "postgres", config)
    assert out.ok, out.error


def test_pool_exhaustion_is_reported(pg_services: ToolServices) -> None:
    conninfo = pg_services.credentials.resolve("pg_test").postgres_conninfo()
    pool: ConnectionPool[Any] = ConnectionPool(
        conninfo, min_size=0, max_size=1, kwargs={"autocommit": True}, open=True
    )
    try:
        held = pool.getconn()
        started = time.monotonic()
        with (
            pytest.raises(PoolExhausted, match=r"within 0\.3s"),
            pg_connection(pool, conninfo, 0.3),
        ):
            pass
        assert time.monotonic() - started < 2
        pool.putconn(held)
        with pg_connection(pool, conninfo, 1.0) as conn:
            assert conn.execute("SELECT 1").fetchone() == (1,)
    finally:
        pool.close()


def test_checkout_check_needs_no_round_trip_until_the_server_speaks(
    pg_test_dsn: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    full_checks: list[object] = []
    real = ConnectionPool.check_connection

    def counted(conn: psycopg.Connection[Any]) -> None:
        full_checks.append(conn)
        real(conn)

    monkeypatch.setattr(ConnectionPool, "check_connection", staticmethod(counted))
    with (
        psycopg.connect(pg_test_dsn, autocommit=True) as conn,
        psycopg.connect(pg_test_dsn, autocommit=True) as admin,
    ):
        conn.execute("SELECT 1")
        for _ in range(3):
            check_pooled(conn)  # healthy and idle: nothing sent
        assert full_checks == []
        admin.execute("SELECT pg_terminate_backend(%s)", (conn.info.backend_pid,))
        deadline = time.monotonic() + 5
        while True:  # the FATAL is on its way: the check sees it and raises
            try:
                check_pooled(conn)
            except psycopg.OperationalError:
                break
            assert time.monotonic() < deadline, "a terminated connection passed the check"
            time.sleep(0.01)
        assert full_checks, "the terminated connection was not fully checked"
        with pytest.raises(psycopg.OperationalError):
            check_pooled(conn)  # broken now: refused without asking the server
