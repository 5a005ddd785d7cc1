"""Flower's `/metrics` behind the same login as its pages and API.

Flower 2 registers `/metrics` (its Prometheus exporter: task names and counts, worker
names, queue lengths) with a handler that never asks who is calling, so with
`--basic-auth` the pages and the API need the login while `/metrics` does not: anyone
who reaches the port can scrape it. Flower has no option for it. Its routes are a
module-level list (`flower.urls.handlers`) that `Flower.__init__` reads when the app is
built, so `protect_metrics` replaces that entry, before Flower starts, with a subclass
whose `get` is `tornado.web.authenticated`, as Flower's own API handlers are.

Without any authentication configured Flower's `get_current_user` lets everyone in, so
`/metrics` stays as open as the pages (a trusted loopback). `/healthcheck` stays open:
it answers "OK" and nothing else, for liveness probes.
"""

from __future__ import annotations

from typing import Any

import tornado.web
from flower import urls
from flower.views.monitor import Metrics

METRICS_PATH = r"/metrics"


class LoggedInMetrics(Metrics):  # type: ignore[misc]  # flower is untyped
    """Flower's metrics, served only to a caller its authentication lets in."""

    @tornado.web.authenticated
    async def get(self) -> None:
        await super().get()


def protect_metrics(handlers: list[Any] | None = None) -> None:
    """Route `/metrics` to `LoggedInMetrics` in Flower's handler list (in place; calling
    it again changes nothing)."""
    routes = urls.handlers if handlers is None else handlers
    for index, route in enumerate(routes):
        if isinstance(route, tuple) and route[0] == METRICS_PATH:
            routes[index] = (METRICS_PATH, LoggedInMetrics, *route[2:])
