"""Cursor drain: 20,000 queue rows drained by a cursor loop (max_in_flight 4,
frame.max_rows 50) on Postgres + Redis + one worker process (prefork, concurrency 2),
each engine figure beside a baseline doing the SAME work, measured in the same run.
`--work` chooses the work:

- `mark` (default): every row is marked done. The engine's per-row body is a postgres
  step committing `UPDATE ... SET status = 'done'` for its row; its baseline, `bare claim
  + mark`, is one client claiming frames of 50 (`UPDATE ... FOR UPDATE SKIP LOCKED ...
  RETURNING`) and committing the same UPDATE per row. With `frame.process: frame` the
  body commits one UPDATE for its frame's rows; its baseline, procrastinate, runs one job
  per frame that commits the claim, then the same UPDATE.
- `none`: nothing but the claims. The engine's bodies are no-ops; the baselines are `bare
  claim` (frames claimed until the queue is empty) and procrastinate jobs that only claim.

and, for perspective, a raw Celery chord of as many no-op tasks (the ceiling of anything
that runs one Celery task per row on this machine). procrastinate is
bench.procrastinate_frames (the `bench` extra).

    python -m bench.cursor_drain [--rows 20000] [--runs 3] [--work mark|none] [--skip-chord]
                                 [--skip-procrastinate] [--frames-only]
    python -m bench.cursor_drain --rows 2000 --count-sql   # the worker's SQL per frame

NOETL_BENCH_REDIS_URL picks the Redis db (default 11). The per-row bodies of a frame go
out as a few batched messages (NOETL_BATCH_SIZE ids each), not one message per row.

Targets (issue 34, same work both sides): per row >= 1.0x the bare loop; per frame >= 1.0x
procrastinate's jobs.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import tempfile
import time
from pathlib import Path

import psycopg

from bench import harness, procrastinate_frames, sqltrace
from bench.loop_fanout import run_chord

CLAIM = """
WITH c AS (SELECT id FROM public.bench_queue WHERE run = %(run)s AND status = 'pending'
           ORDER BY id FOR UPDATE SKIP LOCKED LIMIT %(n)s)
UPDATE public.bench_queue q SET status = 'claimed' FROM c
WHERE q.run = %(run)s AND q.id = c.id RETURNING q.id
"""

ENGINES = (("engine", False), ("engine, per frame", True))

# how often the bench looks whether a drain ended: a drain takes seconds, so 20 ms adds
# under 1% to its wall time
POLL_SECONDS = 0.02

# the procrastinate worker's concurrency: the engine's worker runs 2 prefork processes
PROCRASTINATE_JOBS = 2

PLAYBOOK = """apiVersion: noetl.io/v2
kind: Playbook
metadata: {name: bench_cursor, path: bench/cursor}
workload: {run: x}
workflow:
  - step: drain
    loop:
      cursor:
        kind: postgres
        auth: bench
        claim: |
          WITH c AS (SELECT id FROM public.bench_queue WHERE run = '{{ run }}'
                       AND status = 'pending'
                     ORDER BY id FOR UPDATE SKIP LOCKED LIMIT {{ __frame_max_rows }})
          UPDATE public.bench_queue q SET status = 'claimed' FROM c
          WHERE q.run = '{{ run }}' AND q.id = c.id RETURNING q.id
      iterator: row
      spec: {mode: cursor, max_in_flight: 4, frame: {max_rows: 50, row_concurrency: 25}}
    tool: {kind: noop}
"""

# `--work mark`: the bodies mark their rows done (one row, or the frame's rows at once)
MARK_ROW = """    tool:
      kind: postgres
      auth: bench
      command: "UPDATE public.bench_queue SET status = 'done'
        WHERE run = '{{ run }}' AND id = {{ iter.row.id }}"
"""
MARK_FRAME = """    tool:
      kind: postgres
      auth: bench
      command: "UPDATE public.bench_queue SET status = 'done'
        WHERE run = '{{ run }}' AND id = ANY(ARRAY[{{ iter.row | map(attribute='id')
        | join(',') }}]::int[])"
"""


def playbook(per_frame: bool, work: str) -> str:
    text = PLAYBOOK
    if per_frame:
        text = text.replace("row_concurrency: 25}", "row_concurrency: 25, process: frame}")
    if work == "mark":
        text = text.replace("    tool: {kind: noop}\n", MARK_FRAME if per_frame else MARK_ROW)
    return text


def seed(dsn: str, run: str, rows: int) -> None:
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(
            "CREATE TABLE IF NOT EXISTS public.bench_queue "
            "(run text, id int, status text, PRIMARY KEY (run, id))"
        )
        # what a work queue has: without it every claim rescans the rows already claimed
        conn.execute(
            "CREATE INDEX IF NOT EXISTS bench_queue_pending ON public.bench_queue (run, id) "
            "WHERE status = 'pending'"
        )
        conn.execute(
            "INSERT INTO public.bench_queue SELECT %s, g, 'pending' FROM generate_series(1, %s) g",
            (run, rows),
        )
        # statistics that know the new run: without them the planner expects a handful
        # of rows for it and marks a frame (`id = ANY(...)`) by reading every row of the
        # run, so whichever side drained before autovacuum's next ANALYZE read 400 times
        # the rows per frame (seen: the engine's marking UPDATE, 1.1 ms a frame against
        # procrastinate's 0.3 ms, auto_explain: "Rows Removed by Filter: 19950")
        conn.execute("ANALYZE public.bench_queue")


def bare(dsn: str, run: str, mark: bool) -> int:
    drained = 0
    with psycopg.connect(dsn) as conn:
        while True:
            ids = [r[0] for r in conn.execute(CLAIM, {"run": run, "n": 50}).fetchall()]
            conn.commit()
            if not ids:
                return drained
            if mark:
                for row_id in ids:
                    conn.execute(
                        "UPDATE public.bench_queue SET status = 'done' WHERE run = %s AND id = %s",
                        (run, row_id),
                    )
                    conn.commit()
            drained += len(ids)


def cpu_seconds(pids: list[int]) -> float:
    """User + system CPU seconds the processes have used so far (/proc/<pid>/stat)."""
    ticks = os.sysconf("SC_CLK_TCK")
    total = 0.0
    for pid in pids:
        try:
            fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        total += (int(fields[11]) + int(fields[12])) / ticks  # utime, stime
    return total


# rows an untimed first drain takes before each timed one (4 lanes x 2 frames of 50)
WARM_ROWS = 400


def engine_run(
    url: str,
    run: str,
    logdir: Path,
    creds: Path,
    per_frame: bool = False,
    work: str = "none",
    warm: bool = True,
) -> tuple[float, int, float, float]:
    """Seconds, rows drained, and CPU seconds of the worker's processes and of the whole
    machine meanwhile, after an untimed drain of WARM_ROWS by the same worker: its
    processes open their connections (engine, queue, tool pools) and load the playbook
    there, as procrastinate's side opens its pool and its app before its clock starts
    (`warm=False`: none, for a trace that counts every statement)."""
    # the bench's own wait looks every 20 ms, not every 5: at 5 ms its polls used about
    # 0.5 ms of CPU per frame on the same 2 cores (a tenth of the worker's), a cost the
    # procrastinate side, whose worker returns when the queue is empty, does not pay
    with harness.engine_and_worker(
        url, logdir / "worker.log", credentials=creds, poll_seconds=POLL_SECONDS
    ) as (engine, proc):
        if warm:
            tag = f"{run}-warm"
            seed(url.replace("postgresql+psycopg", "postgresql"), tag, WARM_ROWS)
            warmed = engine.wait(engine.start_text(playbook(per_frame, work), {"run": tag}), 600)
            assert warmed.status == "COMPLETED", warmed.error
        pids = [proc.pid, *harness.children(proc.pid)]
        cpu, busy = cpu_seconds(pids), harness.machine_busy_seconds()
        started = time.time()
        eid = engine.start_text(playbook(per_frame, work), {"run": run})
        row = engine.wait(eid, 3600)
        wall = time.time() - started
        cpu, busy = cpu_seconds(pids) - cpu, harness.machine_busy_seconds() - busy
        assert row.status == "COMPLETED", row.error
        stats = engine.summary(eid)["steps"]["drain"]["stats"]
    return wall, stats["total"], cpu, busy


def count_sql(url: str, dsn: str, rows: int, logdir: Path, creds: Path) -> None:
    """One traced run of the engine with `frame.process: frame`: the worker processes'
    statements, commits and rollbacks per frame (`bench.sqltrace`), grouped by shape."""
    trace = logdir / "sql.trace"
    tag = "sqlcount"
    seed(dsn, tag, rows)
    with sqltrace.traced(trace):
        _, total, _, _ = engine_run(url, tag, logdir, creds, per_frame=True, warm=False)
    assert total == rows, total
    frames = -(-rows // 50)
    _print_counts(trace, frames, "the worker, frame.process: frame")
    # procrastinate in this process (its worker and its jobs' claims), traced the same way
    trace = logdir / "sql-procrastinate.trace"
    seed(dsn, "sqlcount-procrastinate", rows)
    sqltrace.install(str(trace))
    _, total, _ = procrastinate_frames.run(
        dsn, "sqlcount-procrastinate", rows, 50, PROCRASTINATE_JOBS
    )
    assert total == rows, total
    _print_counts(trace, frames, "procrastinate, one job per frame")


def _print_counts(trace: Path, frames: int, what: str) -> None:
    counts = sqltrace.summary(trace)
    calls = sqltrace.round_trips(counts)
    print(f"\nSQL round trips per frame of 50 rows ({frames} frames), {what}:")
    for (kind, shape), n in counts.most_common():
        print(f"{n / frames:7.2f}/frame  {kind:11} {shape}")
    print(f"{calls / frames:7.2f}/frame  round trips ({calls}; `pipelined` ride on a `sync`)")


def marked(dsn: str, run: str) -> int:
    with psycopg.connect(dsn) as conn:
        row = conn.execute(
            "SELECT count(*) FROM public.bench_queue WHERE run = %s AND status = 'done'", (run,)
        ).fetchone()
    return int(row[0]) if row else 0


def report(
    work: str,
    runs: int,
    bare_name: str,
    rates: dict[str, list[float]],
    cpu_ms: dict[str, list[float]],
    machine_ms: dict[str, list[float]],
) -> None:
    print(f"\nwork per row: {work}; medians of {runs} runs")
    print(f"{'drain':20} {'rows/s':>8}")
    medians = {name: statistics.median(v) for name, v in rates.items() if v}
    for name, median in medians.items():
        print(f"{name:20} {median:8.0f}")
    for name, values in cpu_ms.items():
        if values:
            print(f"{name}: worker CPU {statistics.median(values):.1f} ms per frame of 50 rows")
    for name, values in machine_ms.items():
        if values:
            print(
                f"{name}: the machine's busy CPU {statistics.median(values):.1f} ms per frame "
                "of 50 rows (Postgres, Redis, workers; 2 cores)"
            )
    if "engine" in medians and bare_name in medians:
        print(f"per row: engine / {bare_name} = {medians['engine'] / medians[bare_name]:.2f}x")
    if "procrastinate" in medians:
        ratio = medians["engine, per frame"] / medians["procrastinate"]
        print(
            f"per frame: engine / procrastinate (one job per frame of 50 rows, one worker "
            f"process running {PROCRASTINATE_JOBS} jobs at a time, as the engine's prefork "
            f"worker runs 2) = {ratio:.2f}x"
        )


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rows", type=int, default=20_000)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument(
        "--work",
        choices=("mark", "none"),
        default="mark",
        help="what each side does per row: mark it done (default) or nothing but the claims",
    )
    parser.add_argument("--skip-chord", action="store_true", help="leave out the chord figure")
    parser.add_argument(
        "--skip-procrastinate",
        action="store_true",
        help="leave out the procrastinate baseline (needs the `bench` extra)",
    )
    parser.add_argument(
        "--frames-only",
        action="store_true",
        help="only the per-frame engine and procrastinate (no bare loop, no per-row engine)",
    )
    parser.add_argument(
        "--count-sql",
        action="store_true",
        help="only count the worker's SQL round trips per frame (frame.process: frame)",
    )
    args = parser.parse_args()
    url = harness.fresh_database("noetl_bench_cursor")
    dsn = url.replace("postgresql+psycopg", "postgresql")
    logdir = Path(tempfile.mkdtemp(prefix="bench-cursor-"))
    creds = logdir / "creds.json"
    creds.write_text(json.dumps({"bench": {"dsn": dsn}}))
    if args.count_sql:
        count_sql(url, dsn, args.rows, logdir, creds)
        return
    mark = args.work == "mark"
    bare_name = "bare claim + mark" if mark else "bare claim"
    rates: dict[str, list[float]] = {
        bare_name: [],
        "engine": [],
        "engine, per frame": [],
        "procrastinate": [],
        "celery chord": [],
    }
    cpu_ms: dict[str, list[float]] = {"engine": [], "engine, per frame": []}
    # the whole machine's busy CPU per frame of 50 rows (Postgres, Redis, workers)
    machine_ms: dict[str, list[float]] = {name: [] for name in rates}
    engines = (("engine, per frame", True),) if args.frames_only else ENGINES
    for run in range(args.runs):
        if not args.frames_only:
            tag = f"{bare_name}-{run}"
            seed(dsn, tag, args.rows)
            started = time.perf_counter()
            drained = bare(dsn, tag, mark)
            rates[bare_name].append(drained / (time.perf_counter() - started))
        for name, framed in engines:
            tag = f"{name}-{run}"
            seed(dsn, tag, args.rows)
            wall, total, cpu, busy = engine_run(url, tag, logdir, creds, framed, args.work)
            assert total == args.rows, total
            # the same work as the baseline, checked: every row marked (or none)
            assert marked(dsn, tag) == (args.rows if mark else 0), (name, marked(dsn, tag))
            rates[name].append(total / wall)
            cpu_ms[name].append(cpu * 1000 / -(-total // 50))
            machine_ms[name].append(busy * 1000 / -(-total // 50))
        if not args.skip_procrastinate:
            tag = f"procrastinate-{run}"
            seed(dsn, tag, args.rows)
            wall, total, busy = procrastinate_frames.run(
                dsn, tag, args.rows, 50, PROCRASTINATE_JOBS, mark=mark
            )
            machine_ms["procrastinate"].append(busy * 1000 / -(-total // 50))
            assert total == args.rows, total
            assert marked(dsn, tag) == (args.rows if mark else 0), marked(dsn, tag)
            rates["procrastinate"].append(total / wall)
        if not args.skip_chord:
            rates["celery chord"].append(args.rows / run_chord(args.rows, logdir))
        print(
            f"run {run + 1}: "
            + ", ".join(f"{k} {v[-1]:.0f} rows/s" for k, v in rates.items() if v),
            flush=True,
        )
    report(args.work, args.runs, bare_name, rates, cpu_ms, machine_ms)
    print("targets (issue 34): both >= 1.0x")


if __name__ == "__main__":
    main()
