"""Brokers and fleets: a 10,000-item no-op loop on Redis vs RabbitMQ with 1 or 2
workers, and the longest stall of a 20,000-item loop during a rolling restart.

    python -m bench.fleet brokers [--n 10000] [--runs 3] [--workers 1,2] [--broker redis,amqp]
    python -m bench.fleet rolling [--n 20000] [--broker redis] [--budget 20]

`brokers` prints the median wall time (of `--runs`) from start to COMPLETED per broker
and worker count (each worker prefork -c 2, NOETL_BATCH_SIZE ids per message).
`rolling` runs 2 workers; when a quarter of the items has finished it sends SIGTERM to
worker 1's main process (as Kubernetes does), starts a replacement and waits for the
stopped one to exit; at 60 % the same for worker 2. It prints the longest gap between
two consecutive item completions from the first SIGTERM to the end, and how long each
stopped worker took to exit. Redis is NOETL_BENCH_REDIS_URL (default db 11), RabbitMQ
NOETL_BENCH_AMQP_URL (default amqp://guest:guest@127.0.0.1:5672/noetl_bench; its engine
queues are deleted before each run).
"""

from __future__ import annotations

import argparse
import itertools
import os
import signal
import statistics
import subprocess
import tempfile
import time
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from pathlib import Path
from typing import TYPE_CHECKING

from bench import harness, loop_fanout
from noetl_celery.constants import QUEUE_COMMANDS, QUEUE_ORCHESTRATE

if TYPE_CHECKING:
    from noetl_celery.engine.service import Engine

AMQP_URL = os.environ.get("NOETL_BENCH_AMQP_URL", "amqp://guest:guest@127.0.0.1:5672/noetl_bench")

# the same fan-out as bench.loop_fanout, registered under its own path
PLAYBOOK = loop_fanout.PLAYBOOK.replace("bench_fanout", "bench_fleet").replace(
    "bench/fanout", "bench/fleet"
)


def broker_url(broker: str) -> str:
    if broker == "redis":
        harness.flush_redis()
        return harness.REDIS_URL
    from kombu.connection import Connection

    with Connection(AMQP_URL, connect_timeout=5) as conn:
        for name in (QUEUE_COMMANDS, QUEUE_ORCHESTRATE):
            channel = conn.channel()
            channel.queue_delete(name)
            channel.close()
    return AMQP_URL


def worker_cmd(name: str) -> list[str]:
    """A worker named `name@host`: RabbitMQ refuses two workers of one node name (each
    holds an exclusive remote-control queue)."""
    return [
        harness.python(),
        "-m",
        "noetl_celery.cli.main",
        "worker",
        *harness.POOLS["prefork"],
        "-l",
        "INFO",
        "--without-heartbeat",
        "-n",
        f"{name}@%h",
    ]


@contextmanager
def engine_for(url: str, broker: str) -> Iterator[Engine]:
    """An engine in this process publishing through the broker (as a client does)."""
    from noetl_celery.engine.service import Engine
    from noetl_celery.settings import Settings
    from noetl_celery.store.database import SchemaMode
    from noetl_celery.tasks.app import make_app
    from noetl_celery.tasks.dispatcher import CeleryDispatcher

    settings = Settings(
        home=Path(tempfile.mkdtemp()),
        database_url=url,
        broker_url=broker,
        wait_poll_seconds=0.01,
        batch_size=int(harness.BATCH_SIZE),
    )
    engine = Engine(settings, schema=SchemaMode.REQUIRE)
    engine.use_broker(
        CeleryDispatcher(
            make_app(settings), database_id=engine.database_id, batch_size=settings.batch_size
        )
    )
    try:
        yield engine
    finally:
        engine.close()


def fleet_env(url: str, broker: str, **extra: str) -> dict[str, str]:
    return harness.env_for(
        NOETL_DATABASE_URL=url,
        NOETL_BROKER_URL=broker,
        NOETL_BATCH_SIZE=harness.BATCH_SIZE,
        **extra,
    )


def timed_loop(engine: Engine, n: int) -> float:
    started = time.time()
    eid = engine.start_text(PLAYBOOK, {"n": n})
    row = engine.wait(eid, timeout=3600)
    assert row.status == "COMPLETED", row.error
    stats = engine.summary(eid)["result"]["stats"]
    assert stats == {"total": n, "success": n, "failed": 0}, stats
    return time.time() - started


def brokers(args: argparse.Namespace) -> None:
    logdir = Path(tempfile.mkdtemp(prefix="bench-fleet-"))
    print(f"logs in {logdir}", flush=True)
    results: dict[tuple[str, int], list[float]] = {}
    for run, broker, count in itertools.product(
        range(args.runs), args.broker.split(","), [int(w) for w in args.workers.split(",")]
    ):
        url = harness.fresh_database("noetl_bench_fleet")
        target = broker_url(broker)
        env = fleet_env(url, target)
        with ExitStack() as stack:
            for i in range(count):
                stack.enter_context(harness.worker(worker_cmd(f"w{i}"), env, logdir / f"w{i}.log"))
            engine = stack.enter_context(engine_for(url, target))
            timed_loop(engine, 10)  # connections and caches warm
            wall = timed_loop(engine, args.n)
        results.setdefault((broker, count), []).append(wall)
        print(f"run {run + 1} {broker} workers={count}: {wall:.2f}s", flush=True)
    print(f"\n{'broker':<7} {'workers':>7} {'median s':>9} {'items/s':>8}  runs")
    for (broker, count), walls in sorted(results.items()):
        median = statistics.median(walls)
        runs = " ".join(f"{w:.2f}" for w in walls)
        print(f"{broker:<7} {count:>7} {median:9.2f} {args.n / median:8.0f}  {runs}")


def completions(engine: Engine, eid: str) -> list[float]:
    """When each command of `eid` finished (epoch seconds, ordered)."""
    from sqlalchemy import select

    from noetl_celery.store.schema import events

    with engine.database.engine.connect() as conn:
        rows = conn.execute(
            select(events.c.created_at)
            .where(
                events.c.execution_id == eid,
                events.c.type.in_(("command.completed", "command.failed")),
            )
            .order_by(events.c.created_at)
        ).all()
    return [r[0].timestamp() for r in rows]


def finished(engine: Engine, eid: str) -> int:
    return len(completions(engine, eid))


def rolling(args: argparse.Namespace) -> None:
    logdir = Path(tempfile.mkdtemp(prefix="bench-rolling-"))
    print(f"logs in {logdir}", flush=True)
    url = harness.fresh_database("noetl_bench_rolling")
    target = broker_url(args.broker)
    env = fleet_env(url, target, NOETL_WORKER_SHUTDOWN_SECONDS=str(args.budget))
    procs: list[subprocess.Popen[bytes]] = []
    exits: list[float] = []
    with ExitStack() as stack:
        for i in range(2):
            procs.append(
                stack.enter_context(harness.worker(worker_cmd(f"w{i}"), env, logdir / f"w{i}.log"))
            )
        engine = stack.enter_context(engine_for(url, target))
        timed_loop(engine, 10)
        eid = engine.start_text(PLAYBOOK, {"n": args.n})
        first_term = 0.0
        for round_, share in enumerate((0.25, 0.6)):
            while finished(engine, eid) < args.n * share:
                time.sleep(0.05)
            old = procs[round_]
            termed = time.time()
            first_term = first_term or termed
            os.kill(old.pid, signal.SIGTERM)
            log = logdir / f"r{round_}.log"
            procs.append(stack.enter_context(harness.worker(worker_cmd(f"r{round_}"), env, log)))
            old.wait(timeout=args.budget + 60)
            exits.append(time.time() - termed)
        row = engine.wait(eid, timeout=3600)
        assert row.status == "COMPLETED", row.error
        stats = engine.summary(eid)["result"]["stats"]
        assert stats == {"total": args.n, "success": args.n, "failed": 0}, stats
        times = [first_term, *(t for t in completions(engine, eid) if t >= first_term)]
        stall = max(b - a for a, b in itertools.pairwise(times))
        wall = completions(engine, eid)[-1] - completions(engine, eid)[0]
    print(
        f"{args.broker}: {args.n} items in {wall:.2f}s, rolling restart of 2 workers: "
        f"longest stall {stall:.2f}s; stopped workers exited after "
        f"{', '.join(f'{e:.2f}s' for e in exits)} (the replacement's start included)",
        flush=True,
    )


def main() -> None:
    parser = argparse.ArgumentParser()
    sub = parser.add_subparsers(dest="what", required=True)
    b = sub.add_parser("brokers")
    b.add_argument("--n", type=int, default=10_000)
    b.add_argument("--runs", type=int, default=3)
    b.add_argument("--workers", default="1,2")
    b.add_argument("--broker", default="redis,amqp")
    r = sub.add_parser("rolling")
    r.add_argument("--n", type=int, default=20_000)
    r.add_argument("--broker", choices=("redis", "amqp"), default="redis")
    r.add_argument("--budget", type=float, default=20.0)
    args = parser.parse_args()
    brokers(args) if args.what == "brokers" else rolling(args)


if __name__ == "__main__":
    main()
