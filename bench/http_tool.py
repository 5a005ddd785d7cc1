"""CPU per http tool call: the direct path (tools.http_direct) against the shared client's
full path (`httpx.Client.request`, what the tool used before), in one process, alternated.

Both paths call the compat kit's test API (no rate limit) with a PFT-shaped GET (three
query parameters, a JSON page of ten records). CPU is this thread's CPU time, so the
test API's own work and the machine's other load do not count; each run is `--calls`
calls, the two paths alternate `--runs` times, and the medians are printed.

    python -m bench.http_tool [--runs 5] [--calls 2000]
    python -m bench.http_tool --threads 16 [--pause 0.004]

With `--threads N` it measures the connection pools instead (tools.http_threads): N
threads call the tool at once, each pausing `--pause` seconds between calls, once through
one pool shared by the threads (what the worker used before) and once through a pool per
thread; the figure is the process's CPU per call (every thread's, system time included:
httpcore's shared pool polls each idle socket on every request).
"""

from __future__ import annotations

import argparse
import resource
import statistics
import tempfile
import threading
import time
from pathlib import Path

import httpx

from bench.pft_cursor import start_api
from noetl_celery.settings import Settings
from noetl_celery.tools.base import ToolCall
from noetl_celery.tools.http_threads import ThreadPools
from noetl_celery.tools.http_tool import HttpTool
from noetl_celery.tools.services import ToolServices

PARAMS = {"patientId": "17", "page": "1", "pageSize": "10"}


def _call(tool: HttpTool, services: ToolServices, url: str) -> None:
    out = tool.run(
        ToolCall(
            kind="http",
            config={"url": url, "params": dict(PARAMS)},
            input={},
            execution_id="bench",
            step="fetch",
            command_id="bench",
            services=services,
        )
    )
    assert out.ok, out.error


def cpu_per_call(tool: HttpTool, services: ToolServices, url: str, calls: int) -> float:
    """Microseconds of this thread's CPU per call."""
    _call(tool, services, url)  # the connection opened outside the timing
    started = time.thread_time()
    for _ in range(calls):
        _call(tool, services, url)
    return (time.thread_time() - started) / calls * 1e6


def _process_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def threaded_cpu_per_call(
    tool: HttpTool, services: ToolServices, url: str, threads: int, calls: int, pause: float
) -> float:
    """Microseconds of the process's CPU per call, `threads` threads calling at once."""
    each = max(1, calls // threads)
    start = threading.Barrier(threads + 1)

    def calling() -> None:
        start.wait()
        for _ in range(each):
            _call(tool, services, url)
            time.sleep(pause)

    workers = [threading.Thread(target=calling) for _ in range(threads)]
    for worker in workers:
        worker.start()
    before = _process_cpu()
    start.wait()
    for worker in workers:
        worker.join()
    return (_process_cpu() - before) / (each * threads) * 1e6


def pools(args: argparse.Namespace, tool: HttpTool, url: str, home: Path) -> None:
    """One shared pool against a pool per thread, `args.threads` threads at once."""
    shared = ToolServices(Settings(home=home))
    one_pool = httpx.HTTPTransport(
        limits=httpx.Limits(max_connections=100, max_keepalive_connections=100)
    )
    shared.http_direct = lambda verify=True: one_pool  # type: ignore[method-assign]
    per_thread = ToolServices(Settings(home=home))
    figures: dict[str, list[float]] = {"one shared pool": [], "a pool per thread": []}
    try:
        assert isinstance(per_thread.http_direct(), ThreadPools), "a proxy in the environment"
        for _ in range(args.runs):
            for name, services in (("one shared pool", shared), ("a pool per thread", per_thread)):
                figures[name].append(
                    threaded_cpu_per_call(tool, services, url, args.threads, args.calls, args.pause)
                )
        held = len(one_pool._pool.connections)
    finally:
        one_pool.close()
        shared.close()
        per_thread.close()
    _report(figures, args)
    print(f"connections the shared pool held at the end: {held}")
    ratio = statistics.median(figures["a pool per thread"]) / statistics.median(
        figures["one shared pool"]
    )
    print(f"per thread / shared: {ratio:.2f} ({args.threads} threads, process CPU)")


def _report(figures: dict[str, list[float]], args: argparse.Namespace) -> None:
    for name, values in figures.items():
        runs = " / ".join(f"{v:.0f}" for v in values)
        print(f"{name:20} median {statistics.median(values):7.1f} us CPU per call ({runs})")


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--calls", type=int, default=2000)
    parser.add_argument("--threads", type=int, default=0, help="compare the pools instead")
    parser.add_argument("--pause", type=float, default=0.004, help="between a thread's calls")
    args = parser.parse_args()
    api, base = start_api(0)
    home = Path(tempfile.mkdtemp(prefix="bench-http-"))
    tool = HttpTool()
    url = f"{base}/api/v1/patient/assessments"
    if args.threads:
        try:
            pools(args, tool, url, home)
        finally:
            api.kill()
        return
    direct = ToolServices(Settings(home=home))
    client = ToolServices(Settings(home=home))
    client.http_direct = lambda verify=True: None  # type: ignore[method-assign]
    figures: dict[str, list[float]] = {"client's full path": [], "direct path": []}
    try:
        assert direct.http_direct() is not None, "a proxy in the environment: no direct path"
        for _ in range(args.runs):
            figures["client's full path"].append(cpu_per_call(tool, client, url, args.calls))
            figures["direct path"].append(cpu_per_call(tool, direct, url, args.calls))
    finally:
        direct.close()
        client.close()
        api.kill()
    _report(figures, args)
    ratio = statistics.median(figures["direct path"]) / statistics.median(
        figures["client's full path"]
    )
    print(f"direct / client: {ratio:.2f} ({args.runs} runs of {args.calls} calls, alternated)")


if __name__ == "__main__":
    main()
