"""A small local HTTP API for engine tests (127.0.0.1 only).

- `/status/<code>` answers that status; any other path echoes its path and query, after
  `sleep` seconds when the query has it (`/slow/1?sleep=0.3`)
- `/pages/<id>?page=N`: `pages_for(id)` pages of 3 items each, `{items, page, has_more}`;
  a page past the end is 404 `{error}`; `fail=1` answers 500 on the first request of each
  page; `limit=R` caps the route at R requests per sliding second (429, Retry-After: 1)
- `/throttle/<key>?times=N&after=S`: the first N requests of `key` answer 429 with
  `Retry-After: S`, later ones 200 `{key, requests}` (requests: of `key` so far)
- `GET /stats` counts requests per route and status
"""

from __future__ import annotations

import hashlib
import json
import threading
import time
from collections import Counter, deque
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import parse_qs, urlsplit


def pages_for(item_id: str) -> int:
    return 1 + int(hashlib.md5(item_id.encode()).hexdigest(), 16) % 4  # 1..4


class _State:
    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.counts: Counter[str] = Counter()
        self.seen: set[str] = set()
        self.recent: deque[float] = deque()


class _Handler(BaseHTTPRequestHandler):
    disable_nagle_algorithm = True
    state = _State()

    def do_GET(self) -> None:
        url = urlsplit(self.path)
        query = {k: v[0] for k, v in parse_qs(url.query).items()}
        parts = url.path.strip("/").split("/")
        if parts[0] == "stats":
            with self.state.lock:
                self._send(200, dict(self.state.counts))
            return
        if parts[0] == "status":
            self._count(url.path, int(parts[1]))
            self._send(int(parts[1]), {"code": int(parts[1])})
        elif parts[0] == "pages":
            self._pages(parts[1], query)
        elif parts[0] == "throttle":
            self._throttle(parts[1], query)
        else:
            time.sleep(float(query.get("sleep", 0)))
            self._count(url.path, 200)
            self._send(200, {"path": url.path, "query": query})

    def _pages(self, item_id: str, query: dict[str, str]) -> None:
        page = int(query.get("page", 1))
        key = f"{item_id}:{page}"
        with self.state.lock:
            limit = int(query.get("limit", 0))
            now = time.monotonic()
            while self.state.recent and now - self.state.recent[0] > 1.0:
                self.state.recent.popleft()
            if limit and len(self.state.recent) >= limit:
                self.state.counts["pages:429"] += 1
                self._send(429, {"error": "slow down"}, {"Retry-After": "1"})
                return
            self.state.recent.append(now)
            first = key not in self.state.seen
            self.state.seen.add(key)
        if query.get("fail") == "1" and first:
            self._count("pages", 500)
            self._send(500, {"error": "flaky"})
            return
        total = pages_for(item_id)
        if page > total:
            self._count("pages", 404)
            self._send(404, {"error": "page not found"})
            return
        self._count("pages", 200)
        items = [f"{item_id}-{page}-{i}" for i in range(3)]
        self._send(200, {"items": items, "page": page, "has_more": page < total})

    def _throttle(self, key: str, query: dict[str, str]) -> None:
        with self.state.lock:
            self.state.counts[f"throttle:{key}"] += 1
            requests = self.state.counts[f"throttle:{key}"]
        if requests <= int(query.get("times", 0)):
            self._count(f"throttle:{key}", 429)
            self._send(429, {"error": "slow down"}, {"Retry-After": query.get("after", "1")})
            return
        self._count(f"throttle:{key}", 200)
        self._send(200, {"key": key, "requests": requests})

    def _count(self, route: str, code: int) -> None:
        with self.state.lock:
            self.state.counts[f"{route}:{code}"] += 1

    def _send(self, code: int, body: object, headers: dict[str, str] | None = None) -> None:
        data = json.dumps(body).encode()
        self.send_response(code)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        for key, value in (headers or {}).items():
            self.send_header(key, value)
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, format: str, *args: object) -> None:
        return None


@contextmanager
def http_api() -> Iterator[str]:
    """Start a fresh API (counters reset) and yield its base URL."""
    _Handler.state = _State()
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()


def stats() -> dict[str, int]:
    with _Handler.state.lock:
        return dict(_Handler.state.counts)
