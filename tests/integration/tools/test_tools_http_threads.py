"""One connection pool per thread (tools.http_threads), against a real local server that
notes which client socket each request came on."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from http.server import BaseHTTPRequestHandler
from pathlib import Path
from typing import Any

import httpx
import pytest

from noetl_celery.errors import ConfigurationError
from noetl_celery.settings import Settings
from noetl_celery.tools.http_threads import ThreadPools
from noetl_celery.tools.services import ToolServices
from tests.integration.tools.conftest import run_with, serving

PORTS: list[int] = []  # the client port of each request, in arrival order
HUNG_UP: list[int] = []  # the client port of each connection the client closed


class _Ports(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    disable_nagle_algorithm = True

    def log_message(self, format: str, *args: Any) -> None:
        pass

    def finish(self) -> None:
        super().finish()
        HUNG_UP.append(self.client_address[1])

    def do_GET(self) -> None:
        PORTS.append(self.client_address[1])
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", "2")
        self.end_headers()
        self.wfile.write(b"{}")


@pytest.fixture
def base() -> Iterator[str]:
    PORTS.clear()
    HUNG_UP.clear()
    with serving(_Ports) as url:
        yield url


def _get(transport: httpx.BaseTransport, url: str) -> int:
    response = transport.handle_request(httpx.Request("GET", url))
    response.read()
    response.close()
    return response.status_code


def _in_thread(transport: httpx.BaseTransport, url: str, calls: int) -> None:
    thread = threading.Thread(target=lambda: [_get(transport, url) for _ in range(calls)])
    thread.start()
    thread.join()


def test_a_thread_keeps_one_connection_and_threads_do_not_share_one(base: str) -> None:
    pools = ThreadPools()
    try:
        for _ in range(3):
            assert _get(pools, base) == 200
        barrier = threading.Barrier(2)

        def two_at_once() -> None:
            barrier.wait()
            for _ in range(3):
                _get(pools, base)

        threads = [threading.Thread(target=two_at_once) for _ in range(2)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
    finally:
        pools.close()
    # this thread's three requests came on one socket; each other thread on one of its own
    assert len(PORTS) == 9
    assert len(set(PORTS[:3])) == 1
    assert len(set(PORTS)) == 3
    assert all(PORTS.count(port) == 3 for port in set(PORTS))


def test_the_pool_of_an_ended_thread_closes_when_the_next_is_made(base: str) -> None:
    pools = ThreadPools()
    try:
        _in_thread(pools, base, 2)
        assert len(pools._pools) == 1  # the thread ended; its pool is still held
        _get(pools, base)  # this thread's pool is made: the ended thread's is closed
        assert len(pools._pools) == 1
        _until(lambda: [PORTS[0]] == HUNG_UP)
        _in_thread(pools, base, 1)
        assert len(pools._pools) == 2
        assert pools.pools() == 1  # counting closes the ended thread's too
    finally:
        pools.close()
    assert pools.pools() == 0
    assert len(set(PORTS)) == 3
    _until(lambda: sorted(HUNG_UP) == sorted(set(PORTS)))  # closing closed every socket


def _until(check: Callable[[], bool]) -> None:
    deadline = time.monotonic() + 5
    while not check():
        assert time.monotonic() < deadline, f"connections closed: {HUNG_UP}, used: {PORTS}"
        time.sleep(0.01)


def test_a_closed_transport_refuses_requests(base: str) -> None:
    pools = ThreadPools()
    _get(pools, base)
    pools.close()
    with pytest.raises(RuntimeError, match="closed"):
        _get(pools, base)


def test_the_worker_client_sends_through_a_pool_per_thread(base: str, tmp_path: Path) -> None:
    svc = ToolServices(Settings(home=tmp_path, http_timeout_seconds=10.0))
    try:
        direct = svc.http_direct()
        assert isinstance(direct, ThreadPools)
        for _ in range(2):  # the tool's direct path
            assert run_with(svc, "http", {"url": f"{base}/a"}).ok
        # a request that follows redirects goes through the client: the same pools
        assert run_with(svc, "http", {"url": f"{base}/b", "follow_redirects": True}).ok
        assert direct.pools() == 1
    finally:
        svc.close()
    assert len(PORTS) == 3 and len(set(PORTS)) == 1


def test_one_process_pool_when_the_settings_ask_for_it(base: str, tmp_path: Path) -> None:
    svc = ToolServices(Settings(home=tmp_path, http_timeout_seconds=10.0, http_pools="process"))
    try:
        direct = svc.http_direct()
        assert isinstance(direct, httpx.HTTPTransport)
        assert not isinstance(direct, ThreadPools)
        assert run_with(svc, "http", {"url": f"{base}/a"}).ok
        _in_thread(direct, base, 1)  # another thread finds the idle connection
    finally:
        svc.close()
    assert len(PORTS) == 2 and len(set(PORTS)) == 1


def test_the_pools_setting_is_read_and_checked() -> None:
    assert Settings.from_env({}).http_pools == "thread"
    assert Settings.from_env({"NOETL_HTTP_POOLS": "Process"}).http_pools == "process"
    with pytest.raises(ConfigurationError, match="NOETL_HTTP_POOLS"):
        Settings.from_env({"NOETL_HTTP_POOLS": "host"})
