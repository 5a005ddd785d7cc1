"""Sending an http tool's request straight to the shared client's transport.

`httpx.Client.request` spends CPU around every request on steps the worker's shared
client never needs for a request that follows no redirects: its URL is parsed twice
(`build_request`, then the query merged in), its cookie jar is walked for every
response although the jar keeps nothing (tools.http_cookies), and the auth, redirect
and event-hook wrappers run empty. In an API-bound flow that was about 7 % of a worker's
CPU (py-spy on bench.pft_cursor: `build_request` 4.2 %, `extract_cookies` 2.1 %). One
http tool call against the compat kit's test API: 923 -> 744 µs of CPU on this path
(thread CPU time, 2,000 calls, the two paths alternated five times in one process:
`python -m bench.http_tool`).

`send` builds the request as the client builds it — the client's default headers under
the request's own, the timeout as the request's `timeout` extension — and hands it to
the client's transport with httpx's public `HTTPTransport.handle_request`: the same
connection pool, TLS settings and exceptions, the body read and the connection returned
to the pool before it returns, as `Client.request` does. What it leaves out is what the
tool never uses: cookies from the client's jar (it keeps none), redirects (a request
with `follow_redirects: true` goes through the client), the client's INFO log line (the
worker sets httpx's logger to WARNING).

When the environment names a proxy (`HTTP_PROXY`, `HTTPS_PROXY`, `ALL_PROXY`, as httpx
reads them), the client routes requests per scheme, so the services hand out no
transport and every request takes the client's path.
"""

from __future__ import annotations

import time
import urllib.request
from collections.abc import Mapping
from typing import Any

import httpx


def environment_proxies() -> bool:
    """Whether the environment names a proxy for some scheme (what httpx's `trust_env`
    reads: `urllib.request.getproxies`; `NO_PROXY` alone routes nothing)."""
    return any(scheme != "no" for scheme in urllib.request.getproxies())


def send(
    transport: httpx.BaseTransport,
    defaults: httpx.Headers,
    method: str,
    url: str,
    *,
    params: Mapping[str, Any] | None,
    headers: Mapping[str, str],
    timeout: float | None,
    body: Mapping[str, Any],
) -> tuple[httpx.Response, float]:
    """The response, read and closed, and the seconds from sending to the body's end
    (what `Response.elapsed` holds on the client's path). `body`: one of `json`, `data`,
    `content` as keyword arguments, or none. Raises what `Client.request` raises."""
    merged = defaults.copy()  # the client's defaults, the request's own headers win
    merged.update(headers)
    request = httpx.Request(
        method,
        url,
        params=params,
        headers=merged,
        extensions={"timeout": httpx.Timeout(timeout).as_dict()},
        **body,
    )
    started = time.perf_counter()
    response = transport.handle_request(request)
    try:
        response.request = request
        response.read()
    finally:
        response.close()  # the connection goes back to the pool
    return response, time.perf_counter() - started
