"""CPU per http tool call: the direct path (tools.http_direct) against the shared client's
full path (`httpx.Client.request`, what the tool used before), in one process, alternated.

Both paths call the compat kit's test API (no rate limit) with a PFT-shaped GET (three
query parameters, a JSON page of ten records). CPU is this thread's CPU time, so the
test API's own work and the machine's other load do not count; each run is `--calls`
calls, the two paths alternate `--runs` times, and the medians are printed.

    python -m bench.http_tool [--runs 5] [--calls 2000]
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from pathlib import Path

from bench.pft_cursor import start_api
from noetl_celery.settings import Settings
from noetl_celery.tools.base import ToolCall
from noetl_celery.tools.http_tool import HttpTool
from noetl_celery.tools.services import ToolServices

PARAMS = {"patientId": "17", "page": "1", "pageSize": "10"}


def cpu_per_call(tool: HttpTool, services: ToolServices, url: str, calls: int) -> float:
    """Microseconds of this thread's CPU per call."""

    def call() -> None:
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

    call()  # the connection opened outside the timing
    started = time.thread_time()
    for _ in range(calls):
        call()
    return (time.thread_time() - started) / calls * 1e6


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--calls", type=int, default=2000)
    args = parser.parse_args()
    api, base = start_api(0)
    home = Path(tempfile.mkdtemp(prefix="bench-http-"))
    direct = ToolServices(Settings(home=home))
    client = ToolServices(Settings(home=home))
    client.http_direct = lambda verify=True: None  # type: ignore[method-assign]
    tool = HttpTool()
    url = f"{base}/api/v1/patient/assessments"
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
    for name, values in figures.items():
        runs = " / ".join(f"{v:.0f}" for v in values)
        print(f"{name:20} median {statistics.median(values):7.1f} us CPU per call ({runs})")
    ratio = statistics.median(figures["direct path"]) / statistics.median(
        figures["client's full path"]
    )
    print(f"direct / client: {ratio:.2f} ({args.runs} runs of {args.calls} calls, alternated)")


if __name__ == "__main__":
    main()
