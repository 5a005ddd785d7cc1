"""`noetl-celery example-api`: a small local HTTP API for the bundled examples
(`playbooks/examples/api_to_postgres.yaml`), so they run without the internet.

Standard library only, so it works wherever the package is installed:

- `GET /shops` -> `{"shops": ["amsterdam", "berlin", "lisbon"]}`
- `GET /shops/<shop>/orders?page=N&page_size=M` (M 1..100, default 10) ->
  `{"shop", "page", "page_size", "total", "has_more", "orders": [{id, customer, amount,
  created_at}]}`; 50 orders in all (23, 12 and 15), the same on every start
- the first request for page 2 of each shop answers **503** (a flaky upstream, so the
  example's retry policy has something to do); the next request for it succeeds
- `GET /stats` -> `{"requests", "unavailable"}` (calls to `/shops...`, and how many of
  them got a 503), `GET /health`
"""

from __future__ import annotations

import datetime as dt
import json
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, urlsplit

import click

SHOPS = {"amsterdam": 23, "berlin": 12, "lisbon": 15}
FLAKY_PAGE = 2
MAX_PAGE_SIZE = 100
_EPOCH = dt.datetime(2026, 11, 1, tzinfo=dt.UTC)


def orders_of(shop: str) -> list[dict[str, Any]]:
    """Deterministic orders: every start serves the same data."""
    seed = sum(map(ord, shop))
    return [
        {
            "id": n,
            "customer": f"customer-{(seed + 7 * n) % 40 + 1:02d}",
            "amount": round(5 + ((seed * n * 37) % 9500) / 100, 2),
            "created_at": (_EPOCH + dt.timedelta(hours=seed % 24 + 5 * n)).isoformat(),
        }
        for n in range(1, SHOPS[shop] + 1)
    ]


class _State:
    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.requests = 0
        self.unavailable = 0
        self.failed_once: set[str] = set()


class ExampleApiHandler(BaseHTTPRequestHandler):
    # keep-alive (HTTP/1.1) with Nagle's algorithm on stalls each response ~40 ms
    # (delayed ACK on the client); examples make hundreds of calls
    protocol_version = "HTTP/1.1"
    disable_nagle_algorithm = True
    state = _State()
    quiet = False

    def do_GET(self) -> None:
        url = urlsplit(self.path)
        query = {k: v[-1] for k, v in parse_qs(url.query).items()}
        parts = [p for p in url.path.split("/") if p]
        if parts[:1] == ["shops"]:
            with self.state.lock:
                self.state.requests += 1
        if parts == ["health"]:
            self._send(200, {"status": "ok"})
        elif parts == ["stats"]:
            with self.state.lock:
                counts = {"requests": self.state.requests, "unavailable": self.state.unavailable}
            self._send(200, counts)
        elif parts == ["shops"]:
            self._send(200, {"shops": sorted(SHOPS)})
        elif len(parts) == 3 and parts[0] == "shops" and parts[2] == "orders":
            self._orders(parts[1], query)
        else:
            self._send(404, {"error": f"no route {url.path}"})

    def _orders(self, shop: str, query: dict[str, str]) -> None:
        if shop not in SHOPS:
            self._send(404, {"error": f"no shop {shop!r}; shops: {', '.join(sorted(SHOPS))}"})
            return
        try:
            page = int(query.get("page", "1"))
            size = int(query.get("page_size", "10"))
        except ValueError:
            self._send(400, {"error": "page and page_size must be integers"})
            return
        if page < 1 or not 1 <= size <= MAX_PAGE_SIZE:
            self._send(400, {"error": f"page >= 1 and 1 <= page_size <= {MAX_PAGE_SIZE}"})
            return
        if page == FLAKY_PAGE:
            with self.state.lock:
                first = shop not in self.state.failed_once
                if first:
                    self.state.failed_once.add(shop)
                    self.state.unavailable += 1
            if first:
                self._send(503, {"error": "temporarily unavailable, try again"})
                return
        orders = orders_of(shop)
        chunk = orders[(page - 1) * size : page * size]
        body = {
            "shop": shop,
            "page": page,
            "page_size": size,
            "total": len(orders),
            "has_more": page * size < len(orders),
            "orders": chunk,
        }
        self._send(200, body)

    def _send(self, code: int, body: object) -> None:
        data = json.dumps(body).encode()
        self.send_response(code)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, format: str, *args: Any) -> None:
        if not self.quiet:
            sys.stderr.write(f"{self.address_string()} {format % args}\n")


def make_server(host: str, port: int, *, quiet: bool = False) -> ThreadingHTTPServer:
    """A fresh server (its own request counters and failures); port 0 picks a free one."""
    handler = type("Handler", (ExampleApiHandler,), {"state": _State(), "quiet": quiet})
    server = ThreadingHTTPServer((host, port), handler)
    server.daemon_threads = True
    return server


@click.command("example-api")
@click.option("--host", default="127.0.0.1", show_default=True, help="Address to listen on.")
@click.option(
    "--port",
    type=click.IntRange(0, 65535),
    default=8765,
    show_default=True,
    help="Port to listen on (0: any free port).",
)
@click.option("--quiet", is_flag=True, help="Do not log each request on stderr.")
def example_api(host: str, port: int, quiet: bool) -> None:
    """Serve the small local API the bundled examples read (paginated orders of three
    shops; page 2 of each fails once with a 503). Prints its URL, runs until Ctrl-C."""
    try:
        server = make_server(host, port, quiet=quiet)
    except OSError as exc:
        raise click.ClickException(
            f"cannot listen on {host}:{port}: {exc.strerror or exc}"
        ) from exc
    bound_port = server.server_address[1]
    click.echo(f"example API on http://{host}:{bound_port} (Ctrl-C to stop)")
    sys.stdout.flush()
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        pass
    finally:
        server.server_close()
