"""Loop fan-out: a parallel no-op `loop.in` (max_in_flight 100) on Postgres + Redis + one
worker process (prefork, concurrency 2), against a raw Celery chord of as many no-op tasks
on the same Redis with a Redis result backend and the same worker settings.

    python bench/loop_fanout.py [--sizes 1000,10000] [--runs 3]

Prints, per size: median wall time of each, the ratio (target <= 1.5), event rows per
iteration (target <= 2) and broker messages per iteration (target <= 2).
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
import uuid
from pathlib import Path

import redis
from celery import chord
from sqlalchemy import func, select

from bench import harness
from noetl_celery.store.schema import events

PLAYBOOK = """apiVersion: noetl.io/v2
kind: Playbook
metadata: {name: bench_fanout, path: bench/fanout}
workload: {n: 1000}
workflow:
  - step: fan
    loop:
      in: "{{ range(n) | list }}"
      iterator: i
      spec: {mode: parallel, max_in_flight: 100}
    tool: {kind: noop}
"""


def run_chord(n: int, logdir: Path) -> float:
    from bench.chord_app import _redis, done, noop

    harness.flush_redis()
    cmd = [
        harness.python(),
        "-m",
        "celery",
        "-A",
        "bench.chord_app",
        "worker",
        "-c",
        "2",
        "-l",
        "INFO",
        *harness.WORKER_FLAGS,
    ]
    with harness.worker(cmd, harness.env_for(), logdir / "chord.log"):
        key = f"done-{uuid.uuid4().hex}"
        started = time.time()
        chord(noop.s(i) for i in range(n))(done.s(key))
        while (value := _redis.get(key)) is None:
            time.sleep(0.005)
        return float(value) - started


def run_engine(n: int, url: str, logdir: Path) -> tuple[float, float, float]:
    with harness.engine_and_worker(url, logdir / "noetl.log") as (engine, _):
        client = redis.Redis.from_url(harness.REDIS_URL)  # no flush: the worker is bound
        pushes = harness.push_calls(client)
        started = time.time()
        eid = engine.start_text(PLAYBOOK, {"n": n})
        row = engine.wait(eid, timeout=3600)
        wall = time.time() - started
        assert row.status == "COMPLETED", row.error
        pushes = harness.push_calls(client) - pushes
        with engine.database.engine.connect() as conn:
            rows = conn.execute(
                select(func.count()).select_from(events).where(events.c.execution_id == eid)
            ).scalar_one()
        stats = engine.summary(eid)["result"]["stats"]
    assert stats == {"total": n, "success": n, "failed": 0}, stats
    return wall, rows / n, pushes / n


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--sizes", default="1000,10000")
    parser.add_argument("--runs", type=int, default=3)
    args = parser.parse_args()
    sizes = [int(s) for s in args.sizes.split(",")]
    url = harness.fresh_database("noetl_bench_fanout")
    logdir = Path(tempfile.mkdtemp(prefix="bench-fanout-"))
    print(f"logs in {logdir}")
    results: dict[int, dict[str, list[float]]] = {
        n: {"chord": [], "engine": [], "ev": [], "msg": []} for n in sizes
    }
    for run in range(args.runs):
        for n in sizes:
            chord_wall = run_chord(n, logdir)
            wall, ev, msg = run_engine(n, url, logdir)
            r = results[n]
            r["chord"].append(chord_wall)
            r["engine"].append(wall)
            r["ev"].append(ev)
            r["msg"].append(msg)
            print(
                f"run {run + 1} n={n}: chord {chord_wall:.2f}s engine {wall:.2f}s "
                f"({wall / chord_wall:.2f}x) events/it {ev:.3f} msgs/it {msg:.3f}",
                flush=True,
            )
    print()
    print(
        f"{'n':>7} {'chord s':>8} {'engine s':>9} {'ratio':>6} {'ms/it':>6} "
        f"{'events/it':>9} {'msgs/it':>8}"
    )
    for n in sizes:
        r = results[n]
        c, e = statistics.median(r["chord"]), statistics.median(r["engine"])
        print(
            f"{n:>7} {c:8.2f} {e:9.2f} {e / c:6.2f} {1000 * e / n:6.2f} "
            f"{statistics.median(r['ev']):9.3f} {statistics.median(r['msg']):8.3f}"
        )
    print("targets: ratio <= 1.5, events/it <= 2, msgs/it <= 2 (medians of", args.runs, "runs)")


if __name__ == "__main__":
    main()
