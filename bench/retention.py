"""Retention: what a loop item costs in the engine tables, and what a prune gives back.

    python -m bench.retention [--items 2000] [--runs 3] [--chunk 1000] [--explain 100000]

On a fresh Postgres engine database, embedded (in-process workers, Postgres store):

1. runs `--runs` loops of `--items` items each (a python tool that prints a line and
   returns a small dict: a command, a terminal event, a result row and a log row per
   item) and reports the bytes of the engine tables (`pg_total_relation_size`, table +
   indexes + TOAST, summed) per loop item;
2. makes those executions 40 days old, starts one more loop of `--items` items and, while
   it runs, prunes with `noetl-celery db prune --older-than 30d --json` in a process of
   its own: reports the rows deleted, the transactions, the longest one (ms) and
   the total time; then checks that the loop that ran meanwhile ended COMPLETED with
   every item counted exactly once;
3. reports the bytes after the prune, after a plain VACUUM (space reusable inside the
   files, little returned to the OS) and after VACUUM FULL (files rewritten: returned);
4. with `--explain N`: adds N ended executions (a row each) and prints the plans of the
   prune's page query and of a chunk delete, to show which indexes they use.

NOETL_BENCH_PG_ADMIN / NOETL_BENCH_DB_SUFFIX pick the server and the database name.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import psycopg
from sqlalchemy import func, select, text, update

from bench import harness
from noetl_celery.constants import ROW_CHUNK
from noetl_celery.engine.service import Engine
from noetl_celery.settings import Settings
from noetl_celery.store.database import SchemaMode
from noetl_celery.store.queries import prune as prune_sql
from noetl_celery.store.schema import commands, events, executions, metadata, utcnow

PLAYBOOK = """apiVersion: noetl.io/v2
kind: Playbook
metadata: {name: bench_retention, path: bench/retention}
workload: {n: 2000}
workflow:
  - step: start
    tool: {kind: noop}
    next: {arcs: [{step: drain}]}
  - step: drain
    loop: {in: "{{ range(n) | list }}", iterator: x, spec: {mode: parallel, max_in_flight: 50}}
    tool:
      kind: python
      input: {x: "{{ iter.x }}"}
      code: |
        def main(x):
            print(f"item {x} drained")
            return {"id": x, "status": "drained"}
    next: {arcs: [{step: end, when: "{{ event.name == 'loop.done' }}"}]}
  - step: end
    tool: {kind: noop}
"""
DAY = dt.timedelta(days=1)


def engine_bytes(conn: psycopg.Connection) -> int:
    names = list(metadata.tables)
    row = conn.execute(
        "SELECT sum(pg_total_relation_size(c.oid)) FROM pg_class c "
        "JOIN pg_namespace n ON n.oid = c.relnamespace "
        "WHERE n.nspname = 'public' AND c.relkind = 'r' AND c.relname = ANY(%s)",
        (names,),
    ).fetchone()
    return int(row[0] or 0) if row else 0


def mb(n: float) -> str:
    return f"{n / 1e6:.2f} MB"


def run_loop(engine: Engine, n: int) -> str:
    return engine.start_text(PLAYBOOK, {"n": n})


def exact(engine: Engine, eid: str, n: int) -> dict[str, Any]:
    """The loop's own counts: it must have run each item once."""
    row = engine.store.execution(eid)
    with engine.database.read() as conn:
        done = conn.execute(
            select(func.count())
            .select_from(events)
            .where(
                events.c.execution_id == eid,
                events.c.step == "drain",
                events.c.type == "command.completed",
            )
        ).scalar_one()
        cmds = conn.execute(
            select(func.count(func.distinct(commands.c.iteration))).where(
                commands.c.execution_id == eid, commands.c.step == "drain"
            )
        ).scalar_one()
    return {"status": row.status, "completed_items": int(done), "items": int(cmds), "n": n}


def explain(engine: Engine, admin: psycopg.Connection, count: int, loop: str) -> None:
    """Plans of the page query (on `count` more executions, a RUNNING one in 50; those
    older than 30 days are pruned with the loops) and of a chunk delete of `loop`'s
    events."""
    now = utcnow()
    admin.execute(
        "INSERT INTO executions (execution_id, catalog_id, path, status, passes, created_at, "
        "updated_at, finished_at, trigger) SELECT 'x' || g, (SELECT min(catalog_id) FROM "
        "catalog), 'bench/x', CASE WHEN g %% 50 = 0 THEN 'RUNNING' ELSE 'COMPLETED' END, 1, "
        "%s - g * interval '1 minute', %s - g * interval '1 minute' + interval '10 seconds', "
        "%s - g * interval '1 minute' + interval '10 seconds', 'schedule' "
        "FROM generate_series(1, %s) g",
        (now, now, now, count),
    )
    admin.execute("ANALYZE")
    cutoff = now - 30 * DAY
    # a transaction rolled back at the end: EXPLAIN ANALYZE of the delete deletes
    with engine.database.engine.connect() as conn:
        page = _sql(conn, prune_sql.page_query(cutoff, None, 1000))
        plan = conn.execute(text(f"EXPLAIN ANALYZE {page}")).scalars().all()
        print(f"\npage query on {count} more executions:")
        print("\n".join(f"  {ln}" for ln in plan))
        ids = [loop, *[f"x{g}" for g in range(1, 500)]]
        chunk = _sql(conn, prune_sql.chunk_delete("postgresql", events, ids, 5000))
        plan = conn.execute(text(f"EXPLAIN ANALYZE {chunk}")).scalars().all()
        conn.rollback()
        print("chunk delete (events, 500 executions, 5000 rows), rolled back:")
        print("\n".join(f"  {ln[:150]}" for ln in plan))


def _sql(conn: Any, query: Any) -> str:
    return str(query.compile(conn, compile_kwargs={"literal_binds": True}))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--items", type=int, default=2000)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--chunk", type=int, default=ROW_CHUNK)
    parser.add_argument("--explain", type=int, default=0)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()

    url = harness.fresh_database("noetl_bench_retention")
    admin_dsn = url.replace("postgresql+psycopg://", "postgresql://")
    settings = Settings(
        home=Path(tempfile.mkdtemp()), database_url=url, embedded_workers=4, wait_poll_seconds=0.02
    )
    engine = Engine(settings, schema=SchemaMode.MIGRATE)
    engine.use_in_process_workers()
    out: dict[str, Any] = {"items": args.items, "runs": args.runs}
    try:
        with psycopg.connect(admin_dsn, autocommit=True) as admin:
            empty = engine_bytes(admin)
            out["bytes_empty"] = empty
            started = time.perf_counter()
            old = []
            for _ in range(args.runs):
                eid = run_loop(engine, args.items)
                assert engine.wait(eid, 3600).status == "COMPLETED"
                old.append(eid)
            out["run_seconds"] = round(time.perf_counter() - started, 1)
            admin.execute("ANALYZE")
            full = engine_bytes(admin)
            per_item = (full - empty) / (args.items * args.runs)
            out["bytes_per_item"] = round(per_item)
            out["bytes_full"] = full
            with engine.database.write() as conn:
                conn.execute(
                    update(executions)
                    .where(executions.c.execution_id.in_(old))
                    .values(
                        created_at=executions.c.created_at - 40 * DAY,
                        finished_at=executions.c.finished_at - 40 * DAY,
                        updated_at=executions.c.updated_at - 40 * DAY,
                    )
                )
            if args.explain:  # before the prune: the plans on tables of full size
                explain(engine, admin, args.explain, old[0])
            # a loop running while the old ones are pruned
            live = run_loop(engine, args.items)
            time.sleep(1.0)
            assert engine.store.execution(live).status == "RUNNING"
            # the prune in a process of its own, as an operator runs it (its timings are
            # not those of a thread fighting the loop's threads for this one's GIL)
            command = ["db", "prune", "--older-than", "30d", "--json"]
            command += ["--chunk-rows", str(args.chunk)]
            proc = subprocess.run(
                [sys.executable, "-m", "noetl_celery.cli.main", *command],
                env=harness.env_for(NOETL_DATABASE_URL=url, NOETL_HOME=str(settings.home)),
                capture_output=True,
                text=True,
                check=True,
            )
            report = json.loads(proc.stdout)
            running_after = engine.store.execution(live).status == "RUNNING"
            engine.wait(live, 3600)
            out["prune"] = report
            out["live_loop_running_when_prune_ended"] = running_after
            out["live_loop"] = exact(engine, live, args.items)
            after = engine_bytes(admin)
            admin.execute("VACUUM")
            vacuumed = engine_bytes(admin)
            admin.execute("VACUUM FULL")
            full_vacuumed = engine_bytes(admin)
            out.update(
                bytes_after_prune=after, bytes_after_vacuum=vacuumed, bytes_after_full=full_vacuumed
            )
    finally:
        engine.close()

    if args.json:
        print(json.dumps(out))
        return
    p = out["prune"]
    rows = sum(n for t, n in p["rows"].items() if t != "executions")
    print(f"{args.runs} loops x {args.items} items in {out['run_seconds']} s (embedded, Postgres)")
    print(
        f"engine tables: {mb(out['bytes_empty'])} empty, {mb(out['bytes_full'])} after the "
        f"loops: {out['bytes_per_item']} bytes per loop item"
    )
    print(
        f"prune --older-than 30d --chunk-rows {args.chunk}: {p['executions']} executions, "
        f"{rows} rows, {p['transactions']} transactions, longest {p['longest_transaction_ms']} "
        f"ms ({p['longest_table']}), {p['seconds']} s in all"
    )
    print(f"  per table: {p['rows']}")
    live_loop = out["live_loop"]
    print(
        f"loop started before the prune (still running when it ended: "
        f"{out['live_loop_running_when_prune_ended']}): {live_loop['status']}, "
        f"{live_loop['completed_items']}/{live_loop['n']} items completed once each"
    )
    print(
        f"bytes: after prune {mb(out['bytes_after_prune'])}, after VACUUM "
        f"{mb(out['bytes_after_vacuum'])}, after VACUUM FULL {mb(out['bytes_after_full'])}"
    )


if __name__ == "__main__":
    main()
