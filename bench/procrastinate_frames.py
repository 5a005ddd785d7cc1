"""The procrastinate baseline of bench.cursor_drain: one procrastinate job per frame.

A procrastinate app on the same Postgres server (its own database, created here with
procrastinate's schema) gets `ceil(rows / frame_rows)` jobs; each claims one frame of the
bench queue with the bench's CLAIM statement on a pooled connection and commits: what the
engine's no-op frame body does with `frame.process: frame`, nothing more. With `mark`, the
job then commits one UPDATE marking the frame's rows done, as the engine's marking frame
body does (bench.cursor_drain --work mark). One procrastinate
worker (one process, `concurrency` jobs at a time; sync jobs run in threads) runs them
until the queue is caught up (`wait=False`). Needs the `bench` extra (procrastinate).
"""

from __future__ import annotations

import asyncio
import logging
import os
import time

import psycopg
from psycopg_pool import ConnectionPool

from bench import harness

CLAIM = """
WITH c AS (SELECT id FROM public.bench_queue WHERE run = %(run)s AND status = 'pending'
           ORDER BY id FOR UPDATE SKIP LOCKED LIMIT %(n)s)
UPDATE public.bench_queue q SET status = 'claimed' FROM c
WHERE q.run = %(run)s AND q.id = c.id RETURNING q.id
"""


def _database() -> str:
    name = "noetl_bench_procrastinate" + os.environ.get("NOETL_BENCH_DB_SUFFIX", "")
    with psycopg.connect(harness.PG_ADMIN, autocommit=True) as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        conn.execute(f'CREATE DATABASE "{name}"')
    return harness.PG_ADMIN.rsplit("/", 1)[0] + "/" + name


MARK = "UPDATE public.bench_queue SET status = 'done' WHERE run = %(run)s AND id = ANY(%(ids)s)"


def run(
    dsn: str, run: str, rows: int, frame_rows: int, concurrency: int, mark: bool = False
) -> tuple[float, int, float]:
    """Seconds from the first job deferred to the worker caught up, rows drained, and
    the machine's busy CPU seconds meanwhile (harness.machine_busy_seconds)."""
    import procrastinate
    from procrastinate.types import JSONValue

    logging.getLogger("procrastinate").setLevel(logging.WARNING)
    app = procrastinate.App(connector=procrastinate.PsycopgConnector(conninfo=_database()))
    pool = ConnectionPool(dsn, min_size=concurrency, max_size=concurrency, open=True)
    drained: list[int] = []
    used: list[float] = []

    @app.task(name="claim_frame")
    def claim_frame(run: str, n: int) -> None:
        with pool.connection() as conn:  # commits on leaving, like the engine's held claim
            ids = [r[0] for r in conn.execute(CLAIM, {"run": run, "n": n}).fetchall()]
        drained.append(len(ids))
        if mark and ids:  # the body's own transaction, as the engine's is
            with pool.connection() as conn:
                conn.execute(MARK, {"run": run, "ids": ids})

    async def drain() -> float:
        async with app.open_async():
            await app.schema_manager.apply_schema_async()
            frames = -(-rows // frame_rows)
            started, busy = time.perf_counter(), harness.machine_busy_seconds()
            job: dict[str, JSONValue] = {"run": run, "n": frame_rows}
            await claim_frame.batch_defer_async(*[job] * frames)
            await app.run_worker_async(
                concurrency=concurrency, wait=False, install_signal_handlers=False
            )
            used.append(harness.machine_busy_seconds() - busy)
            return time.perf_counter() - started

    try:
        wall = asyncio.run(drain())
    finally:
        pool.close()
    return wall, sum(drained), used[0]
