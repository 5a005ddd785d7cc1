"""Loop fan-out: a parallel no-op `loop.in` (max_in_flight 100) on Postgres + Redis + one
worker process (prefork, concurrency 2), against a raw Celery chord of as many no-op tasks
on the same Redis with a Redis result backend and the same worker settings.

    python -m bench.loop_fanout [--sizes 1000,10000] [--runs 3] [--pool threads]

`--pool threads` runs both workers with `--pool threads -c 8` instead (report it apart).
Each run also times a 1-item loop: the fixed cost of starting and waiting for an
execution (what the CLI pays once per run, whatever the size); the adjusted ratio
subtracts it from the engine's time.

Prints, per size: median wall time of each, the ratio raw and adjusted (target <= 0.8,
issue 15), event rows per iteration (target <= 2; one terminal event per iteration) and
broker messages per iteration (below 1 with batched execution: a message carries up to
NOETL_BATCH_SIZE command ids). NOETL_BENCH_REDIS_URL picks the Redis db (default 11).
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
import uuid
from pathlib import Path

from celery import chord
from sqlalchemy import func, select

from bench import harness
from noetl_celery.engine.service import Engine
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


def run_chord(n: int, logdir: Path, pool: str = "prefork") -> float:
    from bench.chord_app import _redis, done, noop

    harness.flush_redis()
    cmd = [
        harness.python(),
        "-m",
        "celery",
        "-A",
        "bench.chord_app",
        "worker",
        *harness.POOLS[pool],
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


def run_engine(
    n: int, url: str, logdir: Path, pool: str = "prefork"
) -> tuple[float, float, float, float]:
    """(wall time of n items, of 1 item (the fixed cost), events/it, msgs/it)."""
    log = logdir / "noetl.log"
    with harness.engine_and_worker(url, log, pool=pool) as (engine, _):
        fixed, _, _ = _timed(engine, 1, log)
        wall, ev, msg = _timed(engine, n, log)
    return wall, fixed, ev, msg


def received(log: Path) -> int:
    """Messages the worker took so far (its INFO line per task received). Redis's own
    command counts are server-wide: other users of the server would count too."""
    return log.read_text(errors="replace").count("] received")


def _timed(engine: Engine, n: int, log: Path) -> tuple[float, float, float]:
    before = received(log)
    started = time.time()
    eid = engine.start_text(PLAYBOOK, {"n": n})
    row = engine.wait(eid, timeout=3600)
    wall = time.time() - started
    assert row.status == "COMPLETED", row.error
    time.sleep(0.2)  # the worker's log lines of the last messages
    messages = received(log) - before
    with engine.database.engine.connect() as conn:
        rows = conn.execute(
            select(func.count()).select_from(events).where(events.c.execution_id == eid)
        ).scalar_one()
    stats = engine.summary(eid)["result"]["stats"]
    assert stats == {"total": n, "success": n, "failed": 0}, stats
    return wall, rows / n, messages / n


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--sizes", default="1000,10000")
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--pool", choices=sorted(harness.POOLS), default="prefork")
    args = parser.parse_args()
    sizes = [int(s) for s in args.sizes.split(",")]
    url = harness.fresh_database("noetl_bench_fanout")
    logdir = Path(tempfile.mkdtemp(prefix="bench-fanout-"))
    print(f"logs in {logdir}; pool {args.pool} ({' '.join(harness.POOLS[args.pool])})", flush=True)
    results: dict[int, dict[str, list[float]]] = {
        n: {"chord": [], "engine": [], "fixed": [], "ev": [], "msg": []} for n in sizes
    }
    for run in range(args.runs):
        for n in sizes:
            chord_wall = run_chord(n, logdir, args.pool)
            wall, fixed, ev, msg = run_engine(n, url, logdir, args.pool)
            r = results[n]
            for key, value in (
                ("chord", chord_wall),
                ("engine", wall),
                ("fixed", fixed),
                ("ev", ev),
                ("msg", msg),
            ):
                r[key].append(value)
            print(
                f"run {run + 1} n={n}: chord {chord_wall:.2f}s engine {wall:.2f}s "
                f"({wall / chord_wall:.2f}x; 1-item run {fixed:.2f}s, adjusted "
                f"{(wall - fixed) / chord_wall:.2f}x) events/it {ev:.3f} msgs/it {msg:.3f}",
                flush=True,
            )
    print()
    print(
        f"{'n':>7} {'chord s':>8} {'engine s':>9} {'fixed s':>8} {'ratio':>6} {'adj.':>6} "
        f"{'ms/it':>6} {'events/it':>9} {'msgs/it':>8}"
    )
    for n in sizes:
        r = results[n]
        c, e = statistics.median(r["chord"]), statistics.median(r["engine"])
        f = statistics.median(r["fixed"])
        print(
            f"{n:>7} {c:8.2f} {e:9.2f} {f:8.2f} {e / c:6.2f} {(e - f) / c:6.2f} "
            f"{1000 * e / n:6.2f} {statistics.median(r['ev']):9.3f} "
            f"{statistics.median(r['msg']):8.3f}"
        )
    print(
        f"pool {args.pool}; targets: ratio (adjusted) <= 0.8, events/it <= 2 "
        f"(medians of {args.runs} runs); msgs/it < 1: batches of NOETL_BATCH_SIZE ids"
    )


if __name__ == "__main__":
    main()
