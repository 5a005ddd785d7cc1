"""Growth: per-iteration time and peak RSS of the worker (where every orchestration pass
runs) of a parallel no-op loop at 10,000 and 1,000,000 items (Postgres + Redis, one
worker process with concurrency 2, a fresh worker per run so that its peak RSS belongs
to that run). The loop is not the entry step, so the pass that plans it runs in a
worker process, like every later pass.

    python -m bench.loop_growth [--sizes 10000,1000000] [--runs 3]

Target (issue 15): at 1,000,000 items the time per iteration within 1.2x and the peak
RSS within 1.3x of those at 10,000 (the first size given is the base).
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from pathlib import Path

from bench import harness

PLAYBOOK = """apiVersion: noetl.io/v2
kind: Playbook
metadata: {name: bench_growth, path: bench/growth}
workload: {n: 1000}
workflow:
  - step: start
    tool: {kind: noop}
    next: {arcs: [{step: fan}]}
  - step: fan
    loop:
      in: "{{ range(n) | list }}"
      iterator: i
      spec: {mode: parallel, max_in_flight: 100}
    tool: {kind: noop}
"""


def run_once(n: int, url: str, logdir: Path) -> tuple[float, float]:
    with harness.engine_and_worker(url, logdir / f"worker-{n}.log") as (engine, proc):
        started = time.time()
        eid = engine.start_text(PLAYBOOK, {"n": n})
        row = engine.wait(eid, timeout=7200)
        wall = time.time() - started
        assert row.status == "COMPLETED", row.error
        rss = harness.peak_rss_mb(harness.children(proc.pid))
        stats = engine.summary(eid)["steps"]["fan"]["stats"]
    assert stats == {"total": n, "success": n, "failed": 0}, stats
    return wall / n, rss


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--sizes", default="10000,1000000")
    parser.add_argument("--runs", type=int, default=3)
    args = parser.parse_args()
    sizes = [int(s) for s in args.sizes.split(",")]
    url = harness.fresh_database("noetl_bench_growth")
    logdir = Path(tempfile.mkdtemp(prefix="bench-growth-"))
    per_it: dict[int, list[float]] = {n: [] for n in sizes}
    rss: dict[int, list[float]] = {n: [] for n in sizes}
    for run in range(args.runs):
        for n in sizes:
            t, r = run_once(n, url, logdir)
            per_it[n].append(t)
            rss[n].append(r)
            print(
                f"run {run + 1} n={n}: {1000 * t:.3f} ms/iteration, peak RSS {r:.1f} MiB",
                flush=True,
            )
    base = sizes[0]
    print(f"\n{'n':>8} {'ms/it':>7} {'ratio':>6} {'peak MiB':>9} {'ratio':>6}")
    for n in sizes:
        t, r = statistics.median(per_it[n]), statistics.median(rss[n])
        print(
            f"{n:>8} {1000 * t:7.3f} {t / statistics.median(per_it[base]):6.2f} "
            f"{r:9.1f} {r / statistics.median(rss[base]):6.2f}"
        )
    print(f"target: ms/it ratio <= 1.2, peak MiB ratio <= 1.3 (medians of {args.runs} runs)")


if __name__ == "__main__":
    main()
