"""The http tool's pacer (tools.http_pacing) against a real local server that allows
LIMIT requests per sliding second and answers the excess 429 with `Retry-After: 1`.

Sixteen threads share one ToolServices (one worker process on a thread pool) and send
as fast as they can, a 429 counting as an answer (the test measures what reaches the
server, not the retry policy). Unpaced, most requests trip the window; paced, after
the first second's burst nearly none do, while the accepted rate stays near the limit.
"""

from __future__ import annotations

import collections
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler
from pathlib import Path

import pytest

from noetl_celery.tools.services import ToolServices

from .conftest import make_services, run_with, serving

# requests per sliding second: low enough that 16 threads exceed it many times over
# even on a busy machine
LIMIT = 40
THREADS = 16
SECONDS = 5.0
SETTLED = 1.5  # the pacer learns from the first second's burst; count after this


class _Window:
    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.times: collections.deque[float] = collections.deque()

    def accept(self) -> bool:
        now = time.monotonic()
        with self.lock:
            while self.times and now - self.times[0] >= 1.0:
                self.times.popleft()
            if len(self.times) >= LIMIT:
                return False
            self.times.append(now)
            return True


class _Limited(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    window = _Window()

    def do_GET(self) -> None:
        ok = self.window.accept()
        body = b'{"ok": true}' if ok else b'{"error": "Too Many Requests"}'
        self.send_response(200 if ok else 429)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        if not ok:
            self.send_header("Retry-After", "1")
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *_args: object) -> None:
        pass


@pytest.fixture
def limited_url() -> Iterator[str]:
    _Limited.window = _Window()
    with serving(_Limited) as base:
        yield f"{base}/limited"


def _hammer(services: ToolServices, url: str) -> tuple[int, int]:
    """(accepted, 429s) among the requests sent after SETTLED seconds."""
    counts = collections.Counter[int]()
    lock = threading.Lock()
    assert run_with(services, "http", {"url": url}).ok  # the client is built (imports)
    start = time.monotonic()

    def loop() -> None:
        while (now := time.monotonic()) - start < SECONDS:
            out = run_with(services, "http", {"url": url})
            code = out.data["status_code"] if isinstance(out.data, dict) else 0
            if now - start >= SETTLED:
                with lock:
                    counts[code] += 1

    threads = [threading.Thread(target=loop) for _ in range(THREADS)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert set(counts) <= {200, 429}, counts
    return counts[200], counts[429]


def test_paced_threads_stay_under_the_servers_limit(
    limited_url: str, tools_credentials_file: Path, tmp_path: Path
) -> None:
    services = make_services(tools_credentials_file, tmp_path)
    try:
        accepted, limited = _hammer(services, limited_url)
    finally:
        services.close()
    seconds = SECONDS - SETTLED
    assert limited <= 0.05 * (accepted + limited), (accepted, limited)
    # near the limit, not throttled far below it
    assert accepted >= 0.6 * LIMIT * seconds, (accepted, limited)
    assert accepted <= 1.05 * LIMIT * seconds + LIMIT, (accepted, limited)


def test_unpaced_threads_trip_the_window(
    limited_url: str, tools_credentials_file: Path, tmp_path: Path
) -> None:
    """The control: the same load with NOETL_HTTP_PACING=off trips the window often."""
    services = make_services(tools_credentials_file, tmp_path, http_pacing="off")
    try:
        accepted, limited = _hammer(services, limited_url)
    finally:
        services.close()
    assert limited > 0.5 * (accepted + limited), (accepted, limited)


def test_declared_limit_paces_from_the_first_request(
    limited_url: str, tools_credentials_file: Path, tmp_path: Path
) -> None:
    host = limited_url.split("//", 1)[1].split("/", 1)[0]
    services = make_services(
        tools_credentials_file, tmp_path, http_rate_limits=((host, LIMIT * 0.9),)
    )
    try:
        codes = collections.Counter[int]()
        for _ in range(LIMIT + 20):  # more than the server allows in one second
            out = run_with(services, "http", {"url": limited_url})
            codes[out.data["status_code"]] += 1
    finally:
        services.close()
    assert codes == {200: LIMIT + 20}
