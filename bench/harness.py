"""Shared pieces of the benchmarks: a scratch Postgres database, a Redis db, worker
processes started and stopped per measurement, and readings (RSS, Redis command counts)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING

import psycopg
import redis

from noetl_celery.settings import DEFAULT_BATCH_SIZE

if TYPE_CHECKING:
    from noetl_celery.engine.service import Engine

ROOT = Path(__file__).resolve().parents[1]
PG_ADMIN = os.environ.get("NOETL_BENCH_PG_ADMIN", "postgresql://postgres@127.0.0.1:5432/postgres")
# the NoETL compat kit sits beside the repository; NOETL_COMPAT_KIT points elsewhere
COMPAT_KIT = Path(os.environ.get("NOETL_COMPAT_KIT", ROOT.parent / "shared" / "compat" / "run.py"))
REDIS_URL = os.environ.get("NOETL_BENCH_REDIS_URL", "redis://127.0.0.1:6379/11")
# command ids per message in the benches (NOETL_BATCH_SIZE; the engine's default is 50 too)
BATCH_SIZE = os.environ.get("NOETL_BENCH_BATCH_SIZE", str(DEFAULT_BATCH_SIZE))
WORKER_FLAGS = ["--without-gossip", "--without-mingle", "--without-heartbeat"]
# the worker pools a bench may run its workers (the engine's and the chord's) with
POOLS = {"prefork": ["-c", "2"], "threads": ["--pool", "threads", "-c", "8"]}


def fresh_database(name: str) -> str:
    """A new engine database with its tables (as `noetl-celery db upgrade` makes them:
    workers never create tables)."""
    from noetl_celery.store.database import SchemaMode, open_database

    # benches run side by side (helpers, CI) each name their databases apart
    name += os.environ.get("NOETL_BENCH_DB_SUFFIX", "")
    with psycopg.connect(PG_ADMIN, autocommit=True) as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        conn.execute(f'CREATE DATABASE "{name}"')
    host = PG_ADMIN.split("@", 1)[1].rsplit("/", 1)[0]
    user = PG_ADMIN.split("://", 1)[1].split("@", 1)[0]
    url = f"postgresql+psycopg://{user}@{host}/{name}"
    open_database(url, SchemaMode.MIGRATE).dispose()
    return url


def migrate(url: str) -> None:
    """Make the engine's tables in an existing database (`db upgrade`)."""
    from noetl_celery.store.database import SchemaMode, open_database

    open_database(url, SchemaMode.MIGRATE).dispose()


def flush_redis() -> redis.Redis:
    client = redis.Redis.from_url(REDIS_URL)
    client.flushdb()
    return client


def push_calls(client: redis.Redis) -> int:
    """Messages published so far: kombu's Redis transport LPUSHes each message."""
    stats = client.info("commandstats")
    return sum(int(stats.get(f"cmdstat_{c}", {}).get("calls", 0)) for c in ("lpush", "rpush"))


def env_for(**values: str) -> dict[str, str]:
    # the engine's settings come from `values` only; the bench's own (which Redis db,
    # which database names) reach the processes it starts, e.g. the chord worker
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith("NOETL_") or k.startswith("NOETL_BENCH_")
    }
    env.update(values)
    env["PYTHONPATH"] = str(ROOT) + os.pathsep + env.get("PYTHONPATH", "")
    return env


@contextmanager
def worker(cmd: list[str], env: Mapping[str, str], log: Path) -> Iterator[subprocess.Popen[bytes]]:
    with log.open("w") as fh:
        # cwd: `python -m` puts the working directory first on sys.path, so a worker
        # started elsewhere could import another checkout's code than env_for's
        # PYTHONPATH names (an A/B run against a worktree would measure one tree twice)
        proc = subprocess.Popen(
            cmd,
            env=dict(env),
            stdout=fh,
            stderr=subprocess.STDOUT,
            start_new_session=True,
            cwd=ROOT,
        )
        try:
            deadline = time.monotonic() + 60
            while " ready." not in log.read_text(errors="replace"):
                if proc.poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError(f"worker did not start:\n{log.read_text()[-2000:]}")
                time.sleep(0.05)
            time.sleep(1.0)  # a fresh worker ignores the broker for ~1 s after "ready"
            yield proc
        finally:
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGTERM)
                try:
                    proc.wait(30)
                except subprocess.TimeoutExpired:
                    os.killpg(proc.pid, signal.SIGKILL)
                    proc.wait(10)


def children(pid: int) -> list[int]:
    out = subprocess.run(["pgrep", "-P", str(pid)], capture_output=True, text=True).stdout
    return [int(p) for p in out.split()]


def peak_rss_mb(pids: list[int]) -> float:
    """Highest VmHWM (peak resident set) among the processes, in MiB."""
    peak = 0.0
    for pid in pids:
        try:
            for line in Path(f"/proc/{pid}/status").read_text().splitlines():
                if line.startswith("VmHWM:"):
                    peak = max(peak, int(line.split()[1]) / 1024)
        except OSError:
            continue
    return peak


def python() -> str:
    return sys.executable


@contextmanager
def engine_and_worker(
    url: str,
    log: Path,
    credentials: Path | None = None,
    pool: str = "prefork",
    poll_seconds: float = 0.005,
) -> Iterator[tuple[Engine, subprocess.Popen[bytes]]]:
    """A fresh Redis db, one `noetl-celery worker` (prefork, concurrency 2, or `POOLS`),
    and an engine in this process publishing to it, whose `wait` looks at the execution
    every `poll_seconds` (short: wall times to the millisecond; a bench of the database's
    own cost polls less, or the polls count as the engine's)."""
    from noetl_celery.engine.service import Engine
    from noetl_celery.settings import Settings
    from noetl_celery.store.database import SchemaMode
    from noetl_celery.tasks.app import make_app
    from noetl_celery.tasks.dispatcher import CeleryDispatcher

    flush_redis()
    creds = str(credentials or "")
    settings = Settings(
        home=Path(tempfile.mkdtemp()),
        database_url=url,
        broker_url=REDIS_URL,
        wait_poll_seconds=poll_seconds,
        batch_size=int(BATCH_SIZE),
        credentials_file=creds,
    )
    env = env_for(
        NOETL_DATABASE_URL=url,
        NOETL_BROKER_URL=REDIS_URL,
        NOETL_CREDENTIALS_FILE=creds,
        NOETL_BATCH_SIZE=BATCH_SIZE,
    )
    cmd = [
        python(),
        "-m",
        "noetl_celery.cli.main",
        "worker",
        *POOLS[pool],
        "-l",
        "INFO",
        "--without-heartbeat",
    ]
    # migrated here, before the worker starts: workers never migrate
    engine = Engine(settings, schema=SchemaMode.MIGRATE)
    engine.use_dispatcher(
        CeleryDispatcher(
            make_app(settings), database_id=engine.database_id, batch_size=settings.batch_size
        )
    )
    try:
        with worker(cmd, env, log) as proc:
            yield engine, proc
    finally:
        engine.close()


def machine_cpu() -> tuple[float, float]:
    """(busy, total) CPU seconds of every core of the machine so far (/proc/stat; busy:
    all but idle and iowait): around a run, what it cost the whole machine, Postgres,
    Redis and the workers included, and how busy the machine was."""
    with open("/proc/stat") as fh:
        ticks = [int(v) for v in fh.readline().split()[1:]]
    per_second = os.sysconf("SC_CLK_TCK")
    return (sum(ticks) - ticks[3] - ticks[4]) / per_second, sum(ticks) / per_second


def machine_busy_seconds() -> float:
    """The busy half of machine_cpu()."""
    return machine_cpu()[0]
