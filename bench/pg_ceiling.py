"""The Postgres ceiling of a fleet: Postgres CPU and WAL per loop item and per drained row.

    python -m bench.pg_ceiling [--items 10000] [--rows 20000] [--runs 3] [--top 8] [--tables]
                               [--workloads loop,drain,frame]

A private Postgres cluster (tests.support.private_services, with `fsync = on` and
`pg_stat_statements` preloaded), one Redis db (NOETL_BENCH_REDIS_URL, default 11) and
one worker (prefork -c 2) run, one after the other:

- `loop`: the no-op `loop.in` fan-out of bench.loop_fanout (`--items` items);
- `drain`: the cursor drain of bench.cursor_drain with no-op per-row bodies (`--rows`
  rows, frames of 50; the queue table, with a partial index on its pending rows, lives
  in another database of the same cluster: its claims are the user's SQL, counted in the
  cluster's CPU but not in the engine database's);
- `frame`: the same drain with `frame.process: frame` (one command per frame of 50, a
  no-op frame body), per row.

For each: Postgres CPU seconds (every process of the cluster: the postmaster's own and
reaped children's CPU from /proc/<pid>/stat, plus the live backends'), WAL bytes
(`pg_current_wal_lsn()` before and after) and statement calls, per item or row; from the
CPU, the items (rows) per second one Postgres core carries when the engine is all it
runs; then the statements with the most execution time and WAL (pg_stat_statements, the
last run); with `--tables`, the engine tables' rows inserted, updated (how many of those
in place: HOT), deleted per item or row (pg_stat_user_tables, the last run). Medians of
`--runs`.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import psycopg

from bench import harness
from bench.cursor_drain import PLAYBOOK as DRAIN
from bench.cursor_drain import playbook, seed
from bench.loop_fanout import PLAYBOOK as LOOP
from tests.support.private_services import PrivatePostgres

ENGINE_DB = "noetl_ceiling"
DATA_DB = "noetl_ceiling_data"
CONF = (
    "fsync = on",  # what a production server pays per commit
    "shared_preload_libraries = 'pg_stat_statements'",
    "pg_stat_statements.track = all",
    "pg_stat_statements.max = 2000",
)


@dataclass(frozen=True)
class Reading:
    cpu: float  # seconds, the whole cluster
    engine_cpu: float  # seconds, live backends connected to the engine database
    wal: int  # bytes
    calls: int  # statements executed


def cluster_cpu(pg: PrivatePostgres) -> tuple[float, float]:
    """CPU seconds of the cluster's processes so far (the postmaster's own and those of
    its reaped children, cutime and cstime, and the live children's), and of the live
    backends connected to the engine database (their title names it: `postgres: user
    db host(port) state`). A connection that ends during a run counts in the first only."""
    ticks = os.sysconf("SC_CLK_TCK")
    postmaster = int((pg.data / "postmaster.pid").read_text().split()[0])
    total = engine = 0.0
    for pid in [postmaster, *harness.children(postmaster)]:
        try:
            fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
            title = Path(f"/proc/{pid}/cmdline").read_bytes().decode(errors="replace")
        except OSError:  # exited meanwhile: its CPU is in the postmaster's cutime now
            continue
        own = (int(fields[11]) + int(fields[12])) / ticks
        reaped = (int(fields[13]) + int(fields[14])) / ticks if pid == postmaster else 0.0
        total += own + reaped
        if f" {ENGINE_DB} " in title:
            engine += own
    return total, engine


def read(pg: PrivatePostgres) -> Reading:
    with psycopg.connect(pg.dsn(), autocommit=True) as conn:
        row = conn.execute(
            "SELECT pg_wal_lsn_diff(pg_current_wal_lsn(), '0/0')::bigint, "
            "(SELECT coalesce(sum(calls), 0) FROM pg_stat_statements)::bigint"
        ).fetchone()
    assert row is not None
    return Reading(*cluster_cpu(pg), int(row[0]), int(row[1]))


def reset_statements(pg: PrivatePostgres) -> None:
    with psycopg.connect(pg.dsn(), autocommit=True) as conn:
        conn.execute("SELECT pg_stat_statements_reset()")


def reset_tables(pg: PrivatePostgres) -> None:
    with psycopg.connect(pg.dsn(ENGINE_DB), autocommit=True) as conn:
        conn.execute("SELECT pg_stat_reset()")


def table_writes(pg: PrivatePostgres, units: int) -> list[str]:
    """The engine tables' row writes per unit since reset_tables. A backend reports its
    counts at most once a second: read after the workers have been idle that long."""
    time.sleep(1.5)
    with psycopg.connect(pg.dsn(ENGINE_DB), autocommit=True) as conn:
        rows = conn.execute(
            "SELECT relname, n_tup_ins, n_tup_upd, n_tup_hot_upd, n_tup_del "
            "FROM pg_stat_user_tables WHERE n_tup_ins + n_tup_upd + n_tup_del > 0 "
            "ORDER BY n_tup_ins + n_tup_upd + n_tup_del DESC"
        ).fetchall()
    return [
        f"  {name:16} {ins / units:5.2f} inserted  {upd / units:5.2f} updated "
        f"({hot / units:5.2f} in place)  {dele / units:5.2f} deleted  per unit"
        for name, ins, upd, hot, dele in rows
    ]


def top_statements(pg: PrivatePostgres, units: int, top: int) -> list[str]:
    with psycopg.connect(pg.dsn(), autocommit=True) as conn:
        rows = conn.execute(
            "SELECT regexp_replace(left(query, 90), '\\s+', ' ', 'g'), calls, "
            "total_exec_time, wal_bytes FROM pg_stat_statements "
            "WHERE query NOT ILIKE '%%pg_stat_statements%%' "
            "ORDER BY total_exec_time DESC LIMIT %s",
            (top,),
        ).fetchall()
    return [
        f"  {calls / units:6.2f} calls  {ms * 1000 / units:7.1f} us  "
        f"{int(wal) / units:8.0f} B WAL  per unit  {query}"
        for query, calls, ms, wal in rows
    ]


def run_once(
    pg: PrivatePostgres, name: str, n: int, logdir: Path, creds: Path, tables: bool = False
) -> tuple[Reading, float, list[str]]:
    """(the cluster's use during one run of workload `name`, wall seconds, with `tables`
    the engine tables' writes per unit)."""
    url = pg.url(ENGINE_DB)
    tag = f"ceiling-{time.monotonic_ns()}"
    if name in ("drain", "frame"):
        seed(pg.dsn(DATA_DB), tag, n)
    # the bench's own wait polls twice a second, not 200 times: its polls are not the engine's
    with harness.engine_and_worker(
        url, logdir / "worker.log", credentials=creds, poll_seconds=0.5
    ) as (engine, _):
        reset_statements(pg)
        if tables:
            reset_tables(pg)
        before = read(pg)
        started = time.perf_counter()
        if name == "loop":
            eid = engine.start_text(LOOP, {"n": n})
        else:
            text = DRAIN if name == "drain" else playbook(per_frame=True, work="none")
            eid = engine.start_text(text, {"run": tag})
        row = engine.wait(eid, 3600)
        wall = time.perf_counter() - started
        after = read(pg)
        assert row.status == "COMPLETED", row.error
        step = "fan" if name == "loop" else "drain"
        stats = engine.summary(eid)["steps"][step]["stats"]
        assert stats["total"] == n and stats["success"] == n, stats
        writes = table_writes(pg, n) if tables else []
    used = Reading(
        after.cpu - before.cpu,
        after.engine_cpu - before.engine_cpu,
        after.wal - before.wal,
        after.calls - before.calls,
    )
    return used, wall, writes


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--items", type=int, default=10_000)
    parser.add_argument("--rows", type=int, default=20_000)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--top", type=int, default=8)
    parser.add_argument("--tables", action="store_true", help="rows written per table")
    parser.add_argument(
        "--workloads", default="loop,drain,frame", help="which of loop, drain, frame to run"
    )
    args = parser.parse_args()
    pg = PrivatePostgres()
    pg.init(CONF)
    pg.start()
    try:
        pg.create_database(ENGINE_DB)
        pg.create_database(DATA_DB)
        with psycopg.connect(pg.dsn(), autocommit=True) as conn:  # read from `postgres`
            conn.execute("CREATE EXTENSION pg_stat_statements")
        harness.migrate(pg.url(ENGINE_DB))
        logdir = Path(tempfile.mkdtemp(prefix="bench-ceiling-"))
        creds = logdir / "creds.json"
        creds.write_text(json.dumps({"bench": {"dsn": pg.dsn(DATA_DB)}}))
        print(f"private Postgres on port {pg.port}; logs in {logdir}", flush=True)
        chosen = args.workloads.split(",")
        workloads = [("loop", args.items, "item"), ("drain", args.rows, "row")]
        workloads.append(("frame", args.rows, "row"))
        for name, n, unit in workloads:
            if name not in chosen:
                continue
            readings: list[Reading] = []
            walls: list[float] = []
            writes: list[str] = []
            for run in range(args.runs):
                last = run == args.runs - 1
                used, wall, writes = run_once(pg, name, n, logdir, creds, args.tables and last)
                readings.append(used)
                walls.append(wall)
                print(
                    f"run {run + 1} {name} ({n} {unit}s): {wall:.2f} s, Postgres CPU "
                    f"{used.cpu:.2f} s (engine database's connections {used.engine_cpu:.2f} s), "
                    f"WAL {used.wal / 1e6:.1f} MB, {used.calls} statements",
                    flush=True,
                )
            cpu_ms = statistics.median(r.cpu for r in readings) * 1000 / n
            engine_ms = statistics.median(r.engine_cpu for r in readings) * 1000 / n
            wal = statistics.median(r.wal for r in readings) / n
            calls = statistics.median(r.calls for r in readings) / n
            wall = statistics.median(walls)
            print(
                f"\n{name}: per {unit}, medians of {args.runs}: Postgres CPU {cpu_ms:.3f} ms "
                f"(the engine database's connections {engine_ms:.3f} ms), "
                f"WAL {wal:.0f} bytes, {calls:.1f} statements; wall {wall:.2f} s"
                f" -> one Postgres core carries about {1000 / cpu_ms:.0f} {unit}s/s"
            )
            print(f"top statements by execution time (last run), per {unit}:")
            print("\n".join(top_statements(pg, n, args.top)), flush=True)
            if writes:
                print(f"engine tables' rows written (last run), per {unit}:")
                print("\n".join(writes), flush=True)
    finally:
        pg.destroy()


if __name__ == "__main__":
    main()
