"""A multi-tenant API with a real rate limit per tenant, for keyed `rate_limit` tests
and bench/keyed_throttle.py (127.0.0.1 only).

- `GET /t/<tenant>/items/<n>?hold=S`: a token bucket per tenant (`rate` tokens per
  second, `burst` deep) decides; a refused request answers 429 with `Retry-After: 1`,
  an accepted one holds `hold` seconds (a slow backend: what makes concurrency
  measurable) and answers `{tenant, n}`.
- `GET /stats`: per tenant, measured here (server side): the accepted requests' times,
  the refused ones' times, the most requests in flight at once, and how many times
  each item was accepted (an item counted twice was done twice).

The limits are the server's truth; a playbook declares its own `per_second` per tenant,
which may be higher (then it must learn the real one from the 429s).
"""

from __future__ import annotations

import json
import threading
import time
from collections import Counter
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, urlsplit


@dataclass
class Tenant:
    rate: float  # tokens per second: the tenant's real limit
    burst: float = 1.0
    tokens: float = 1.0
    refilled: float = field(default_factory=time.monotonic)
    accepted: list[float] = field(default_factory=list)  # epoch seconds
    refused: list[float] = field(default_factory=list)
    in_flight: int = 0
    max_in_flight: int = 0
    items: Counter[str] = field(default_factory=Counter)

    def take(self, now: float) -> bool:
        self.tokens = min(self.burst, self.tokens + (now - self.refilled) * self.rate)
        self.refilled = now
        if self.tokens >= 1.0:
            self.tokens -= 1.0
            return True
        return False


class TenantApi:
    def __init__(self, limits: Mapping[str, tuple[float, float]]) -> None:
        """`limits`: tenant -> (rate per second, burst)."""
        self.lock = threading.Lock()
        self.tenants = {
            name: Tenant(rate=rate, burst=burst, tokens=burst)
            for name, (rate, burst) in limits.items()
        }
        self.base = ""

    def stats(self) -> dict[str, Any]:
        with self.lock:
            return {
                name: {
                    "rate": t.rate,
                    "burst": t.burst,
                    "accepted": list(t.accepted),
                    "refused": list(t.refused),
                    "max_in_flight": t.max_in_flight,
                    "items": dict(t.items),
                }
                for name, t in self.tenants.items()
            }

    def handle(self, tenant: str, item: str, hold: float) -> tuple[int, dict[str, Any]]:
        with self.lock:
            state = self.tenants.get(tenant)
            if state is None:
                return 404, {"error": f"no tenant {tenant}"}
            now = time.monotonic()
            state.in_flight += 1
            state.max_in_flight = max(state.max_in_flight, state.in_flight)
            ok = state.take(now)
        try:
            if ok and hold > 0:
                time.sleep(hold)
        finally:
            with self.lock:
                state.in_flight -= 1
                if ok:
                    state.accepted.append(time.time())
                    state.items[item] += 1
                else:
                    state.refused.append(time.time())
        if not ok:
            return 429, {"error": "Too Many Requests", "tenant": tenant}
        return 200, {"tenant": tenant, "n": item}


def _handler(api: TenantApi) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"
        disable_nagle_algorithm = True

        def do_GET(self) -> None:
            url = urlsplit(self.path)
            parts = url.path.strip("/").split("/")
            query = {k: v[0] for k, v in parse_qs(url.query).items()}
            if parts == ["stats"]:
                self._send(200, api.stats())
            elif len(parts) == 4 and parts[0] == "t" and parts[2] == "items":
                status, body = api.handle(parts[1], parts[3], float(query.get("hold", 0)))
                self._send(status, body)
            else:
                self._send(404, {"error": "unknown path"})

        def _send(self, status: int, body: Any) -> None:
            data = json.dumps(body).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            if status == 429:
                self.send_header("Retry-After", "1")
            self.end_headers()
            self.wfile.write(data)

        def log_message(self, *_args: object) -> None:
            pass

    return Handler


@contextmanager
def serving(limits: Mapping[str, tuple[float, float]]) -> Iterator[TenantApi]:
    """The API on a free loopback port; `api.base` is its URL."""
    api = TenantApi(limits)
    server = ThreadingHTTPServer(("127.0.0.1", 0), _handler(api))
    server.daemon_threads = True
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    api.base = f"http://127.0.0.1:{server.server_address[1]}"
    try:
        yield api
    finally:
        server.shutdown()
        server.server_close()


def windowed_rates(times: list[float], start: float, end: float, window: float) -> list[float]:
    """Requests per second in each whole `window` between `start` and `end`."""
    rates = []
    at = start
    while at + window <= end:
        rates.append(sum(at <= t < at + window for t in times) / window)
        at += window
    return rates
