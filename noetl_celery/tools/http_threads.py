"""One connection pool per thread for the worker's shared http client.

httpcore's connection pool walks every connection it holds twice per request (when the
request joins the pool and when its response is closed): a `poll()` on each idle socket
to see whether the server hung up, then a count of the idle ones for each idle one
(quadratic; encode/httpcore#1035 has been open since 2025). A worker process whose
threads call one API at once keeps as many connections as it ever had requests in
flight, so every request paid for all of them: with 8 idle connections one request cost
892 µs of CPU against 636 µs with one, and a prefork child of `bench.pft_cursor` held
13 to 19 (`_assign_requests_to_connections` alone 7 % of its CPU, py-spy).

A thread runs one request at a time, so a pool of its own holds one connection per host
it calls, and the walk is over that one. Sixteen threads calling the compat kit's test
API at once: 1,123 µs of process CPU per call against 1,242 µs through one shared pool
(`python -m bench.http_tool --threads 16`); the workers of `bench.pft_cursor` at full
size: 4.59 ms of CPU per request against 5.00 ms (medians of 5 and 4 interleaved runs).

What it keeps: one TLS context for every thread (building one costs ~20 ms), the
transport's exceptions and keep-alive expiry, as many keep-alive connections per host as
threads call it (the shared pool kept as many as requests ever ran at once). A pool
whose thread ended is closed when the next thread's pool is made, and all of them with
the transport.
"""

from __future__ import annotations

import ssl
import threading

import httpx

# hosts a thread keeps a connection to (a thread's requests run one at a time: this
# bounds how many different hosts stay connected, not how many requests run)
KEEPALIVE_PER_THREAD = 8


class ThreadPools(httpx.BaseTransport):
    """An `httpx.HTTPTransport` per calling thread, sharing one TLS context."""

    def __init__(self, verify: ssl.SSLContext | bool = True) -> None:
        self._ssl = httpx.create_ssl_context(verify=verify) if isinstance(verify, bool) else verify
        self._local = threading.local()
        self._lock = threading.Lock()
        self._pools: dict[threading.Thread, httpx.HTTPTransport] = {}
        self._closed = False

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        pool: httpx.HTTPTransport | None = getattr(self._local, "pool", None)
        if pool is None or self._closed:
            pool = self._local.pool = self._new_pool()
        return pool.handle_request(request)

    def _new_pool(self) -> httpx.HTTPTransport:
        pool = httpx.HTTPTransport(
            verify=self._ssl,
            limits=httpx.Limits(max_keepalive_connections=KEEPALIVE_PER_THREAD),
        )
        with self._lock:
            if self._closed:
                pool.close()
                raise RuntimeError("the worker's http client is closed")
            gone = self._ended()
            self._pools[threading.current_thread()] = pool
        for old in gone:  # a pool nobody can call again: its sockets close now
            old.close()
        return pool

    def _ended(self) -> list[httpx.HTTPTransport]:
        """The pools of threads that ended, taken out (caller holds the lock)."""
        ended = [thread for thread in self._pools if not thread.is_alive()]
        return [self._pools.pop(thread) for thread in ended]

    def pools(self) -> int:
        """How many live threads hold a pool (those of ended threads are closed here)."""
        with self._lock:
            gone = self._ended()
            held = len(self._pools)
        for old in gone:
            old.close()
        return held

    def close(self) -> None:
        with self._lock:
            self._closed = True
            pools, self._pools = list(self._pools.values()), {}
        for pool in pools:
            pool.close()
