"""A webhook receiver for the notification tests: a threaded http.server on 127.0.0.1
(a random port) that records every POST (headers and raw body), answers 500 to the next
`failures` ones, and can be taken down and brought back up on the same port."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any


@dataclass(frozen=True)
class Delivery:
    path: str
    headers: dict[str, str]
    body: bytes
    answered: int  # the status this receiver answered

    @property
    def json(self) -> dict[str, Any]:
        data: dict[str, Any] = json.loads(self.body)
        return data


class Receiver:
    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.deliveries: list[Delivery] = []
        self.failures = 0  # answer 500 to this many POSTs next
        self.port = 0
        self._server: ThreadingHTTPServer | None = None
        self._thread: threading.Thread | None = None

    def url(self, path: str = "/hook") -> str:
        return f"http://127.0.0.1:{self.port}{path}"

    def up(self) -> None:
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
                with receiver.lock:
                    code = 500 if receiver.failures > 0 else 200
                    receiver.failures = max(0, receiver.failures - 1)
                    headers = {k.lower(): v for k, v in self.headers.items()}
                    receiver.deliveries.append(Delivery(self.path, headers, body, code))
                self.send_response(code)
                self.send_header("Content-Length", "0")
                self.end_headers()

            def log_message(self, format: str, *args: Any) -> None:
                return

        server = ThreadingHTTPServer(("127.0.0.1", self.port), Handler)
        server.daemon_threads = True
        self.port = server.server_address[1]
        self._server = server
        self._thread = threading.Thread(target=server.serve_forever, daemon=True)
        self._thread.start()

    def down(self) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._server = None

    def accepted(self) -> list[Delivery]:
        with self.lock:
            return [d for d in self.deliveries if d.answered == 200]

    def all(self) -> list[Delivery]:
        with self.lock:
            return list(self.deliveries)

    def wait_for(
        self, check: Callable[[list[Delivery]], bool], timeout: float = 30.0
    ) -> list[Delivery]:
        """The deliveries once `check` holds of the accepted ones (AssertionError
        after `timeout` seconds, naming what arrived)."""
        stop = time.monotonic() + timeout
        while time.monotonic() < stop:
            got = self.accepted()
            if check(got):
                return got
            time.sleep(0.05)
        raise AssertionError(f"receiver: condition not met; got {[d.json for d in self.all()]}")


@contextmanager
def receiving() -> Iterator[Receiver]:
    receiver = Receiver()
    receiver.up()
    try:
        yield receiver
    finally:
        receiver.down()
