"""A tiny local HTTP API for engine tests: `/status/<code>` answers that status,
`/json?k=v` echoes its query, `/count` counts calls. Binds 127.0.0.1 only."""

from __future__ import annotations

import json
import threading
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import parse_qs, urlsplit


class _Handler(BaseHTTPRequestHandler):
    disable_nagle_algorithm = True
    counts: Counter[str] = Counter()

    def do_GET(self) -> None:
        url = urlsplit(self.path)
        self.counts[url.path] += 1
        query = {k: v[0] for k, v in parse_qs(url.query).items()}
        if url.path.startswith("/status/"):
            code = int(url.path.rsplit("/", 1)[1])
            self._send(code, {"code": code})
        else:
            self._send(200, {"path": url.path, "query": query})

    def _send(self, code: int, body: object) -> None:
        data = json.dumps(body).encode()
        self.send_response(code)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, format: str, *args: object) -> None:
        return None


@contextmanager
def http_api() -> Iterator[str]:
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()
