"""Tracing's cost: a 2,000-item parallel python loop on Postgres + Redis + one worker
process (prefork, concurrency 2), with tracing off (the default) and on (OTLP/HTTP to an
in-process receiver, tests/support/otlp_receiver.py, that decodes every span).

    python -m bench.tracing_overhead [--n 2000] [--runs 3]

Each mode gets a worker of its own (started with or without OTEL_EXPORTER_OTLP_ENDPOINT)
and the same fresh database; the runs alternate off/on so drift on a shared machine hits
both. Prints the median wall time and worker CPU time (main and pool processes, read
from /proc) of each mode, the overhead, and the spans the receiver
got per execution (one per command run, tool call, step and the execution: about
2 x n + 4 here). First, in this process, the CPU time tracing adds per command (its
span and its tool call's, exported): wall times on a shared machine are noisy, CPU time
much less. NOETL_BENCH_REDIS_URL picks the Redis db (default 11).
"""

from __future__ import annotations

import argparse
import os
import statistics
import tempfile
import threading
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from bench import harness
from noetl_celery import tracing
from noetl_celery.engine.service import Engine
from tests.support.otlp_receiver import Receiver, otlp_receiver

PLAYBOOK = """apiVersion: noetl.io/v2
kind: Playbook
metadata: {name: bench_traced, path: bench/traced}
workload: {n: 2000}
workflow:
  - step: fan
    loop:
      in: "{{ range(n) | list }}"
      iterator: i
      spec: {mode: parallel, max_in_flight: 100}
    tool: {kind: python, input: {i: "{{ iter.i }}"}, code: "result = i * 2"}
"""


@contextmanager
def fleet(url: str, otel: dict[str, str], log: Path) -> Iterator[tuple[Engine, int]]:
    """An engine in this process (tracing off: the passes it runs are not what is
    measured) and one worker with `otel` in its environment."""
    from noetl_celery.settings import Settings
    from noetl_celery.store.database import SchemaMode
    from noetl_celery.tasks.app import make_app
    from noetl_celery.tasks.dispatcher import CeleryDispatcher

    harness.flush_redis()
    settings = Settings(
        home=Path(tempfile.mkdtemp()),
        database_url=url,
        broker_url=harness.REDIS_URL,
        wait_poll_seconds=0.005,
        batch_size=int(harness.BATCH_SIZE),
    )
    env = harness.env_for(
        NOETL_DATABASE_URL=url,
        NOETL_BROKER_URL=harness.REDIS_URL,
        NOETL_BATCH_SIZE=harness.BATCH_SIZE,
        **otel,
    )
    cmd = [harness.python(), "-m", "noetl_celery.cli.main", "worker", *harness.POOLS["prefork"]]
    cmd += ["-l", "INFO", "--without-heartbeat"]
    engine = Engine(settings, schema=SchemaMode.MIGRATE)
    engine.use_dispatcher(
        CeleryDispatcher(
            make_app(settings), database_id=engine.database_id, batch_size=settings.batch_size
        )
    )
    try:
        with harness.worker(cmd, env, log) as proc:
            yield engine, proc.pid
    finally:
        engine.close()


def worker_cpu(pid: int) -> float:
    """CPU seconds (user + system) of the worker's main process and its pool's so far."""
    ticks = os.sysconf("SC_CLK_TCK")
    total = 0.0
    for each in [pid, *harness.children(pid)]:
        try:
            fields = Path(f"/proc/{each}/stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        total += (int(fields[11]) + int(fields[12])) / ticks  # utime, stime
    return total


def timed(engine: Engine, n: int) -> tuple[float, str]:
    started = time.perf_counter()
    eid = engine.start_text(PLAYBOOK, {"n": n})
    row = engine.wait(eid, timeout=3600)
    wall = time.perf_counter() - started
    assert row.status == "COMPLETED", row.error
    return wall, eid


def spans_of(receiver: Receiver, eid: str, timeout: float = 30) -> int:
    """The spans of `eid`'s trace, once its execution span arrived and the count holds."""
    trace_id = tracing.trace_id_of(eid)
    deadline = time.monotonic() + timeout
    last = -1
    while time.monotonic() < deadline:
        spans = [s for s in receiver.snapshot() if s.trace_id == trace_id]
        ended = any(s.name.startswith("execution ") for s in spans)
        if ended and len(spans) == last:
            return last
        last = len(spans)
        time.sleep(0.5)
    return last


@dataclass(frozen=True)
class _Command:
    command_id: str
    execution_id: str
    step: str
    kind: str
    epoch: int
    iteration: int | None
    attempt: int


def _thread_cpu(name: str) -> float:
    """CPU seconds of this process's thread called `name` (Linux: its own clock)."""
    for thread in threading.enumerate():
        if thread.name == name and thread.ident is not None:
            return time.clock_gettime(time.pthread_getcpuclockid(thread.ident))
    return 0.0


def cpu_per_command(n: int) -> tuple[float, float, int]:
    """What tracing adds to a python-tool command's run, in CPU time (less sensitive to a
    busy machine than wall time): recording its span and its tool call's on the thread
    that runs the command, and exporting them on the batch processor's thread (the
    receiver's decoding, in this process too, is not counted). Returns (µs recording,
    µs exporting, per command; spans received)."""
    exporter_thread = "OtelBatchSpanRecordProcessor"
    with otlp_receiver() as receiver:
        env = {
            "OTEL_EXPORTER_OTLP_ENDPOINT": receiver.url,
            "OTEL_BSP_SCHEDULE_DELAY": "100",
            "OTEL_BSP_MAX_QUEUE_SIZE": str(4 * n),  # nothing dropped: all is measured
        }
        saved = {k: os.environ.get(k) for k in env}
        os.environ.update(env)
        tracing.reset()
        try:
            tracing.runtime()  # the provider and exporter made before the clocks start
            exporting = _thread_cpu(exporter_thread)
            started = time.thread_time()
            for i in range(n):
                command = _Command(f"e:fan:1:{i}", "e", "fan", "python", 1, i, 1)
                with tracing.command_span(command), tracing.span("tool python"):
                    tracing.set_attributes({"noetl.outcome": "ok"})
            recording = time.thread_time() - started
            tracing.flush()
            exporting = _thread_cpu(exporter_thread) - exporting
        finally:
            for key, value in saved.items():
                if value is None:
                    os.environ.pop(key, None)
                else:
                    os.environ[key] = value
            tracing.reset()
        return recording / n * 1e6, exporting / n * 1e6, len(receiver.snapshot())


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--n", type=int, default=2000)
    parser.add_argument("--runs", type=int, default=3)
    args = parser.parse_args()
    tracing.check()
    micro = [cpu_per_command(args.n) for _ in range(args.runs)]
    recording = statistics.median(m[0] for m in micro)
    exporting = statistics.median(m[1] for m in micro)
    print(f"CPU tracing adds per command (2 spans), medians of {args.runs}:")
    print(f"  recording (the command's thread): {recording:.0f} µs")
    print(f"  exporting (the batch processor's thread): {exporting:.0f} µs")
    print(f"  spans received per round: {[m[2] for m in micro]}", flush=True)
    url = harness.fresh_database(f"noetl_bench_trace_{uuid.uuid4().hex[:8]}")
    logdir = Path(tempfile.mkdtemp(prefix="noetl-bench-trace-"))
    walls: dict[str, list[float]] = {"off": [], "on": []}
    cpus: dict[str, list[float]] = {"off": [], "on": []}
    spans: list[int] = []
    with otlp_receiver() as receiver:
        otel = {"OTEL_EXPORTER_OTLP_ENDPOINT": receiver.url, "OTEL_SERVICE_NAME": "noetl-bench"}
        for run in range(args.runs):
            for mode in ("off", "on"):
                with fleet(url, otel if mode == "on" else {}, logdir / f"{mode}{run}.log") as (
                    eng,
                    pid,
                ):
                    timed(eng, 1)  # warm: the worker's imports, its engine, the pools
                    before = worker_cpu(pid)
                    wall, eid = timed(eng, args.n)
                    # the spans still held are sent when the worker stops: not counted
                    cpus[mode].append(worker_cpu(pid) - before)
                walls[mode].append(wall)
                if mode == "on":
                    spans.append(spans_of(receiver, eid))
                print(
                    f"run {run + 1} {mode:>3}: {wall:.2f} s, worker CPU {cpus[mode][-1]:.2f} s",
                    flush=True,
                )
    off, on = statistics.median(walls["off"]), statistics.median(walls["on"])
    print(f"{args.n}-item python loop, 1 worker (prefork -c 2), medians of {args.runs}:")
    print(f"  tracing off: {off:.2f} s ({args.n / off:.0f} items/s)")
    print(f"  tracing on:  {on:.2f} s ({args.n / on:.0f} items/s)")
    print(f"  overhead:    {(on - off) / off * 100:+.1f} %")
    cpu_off, cpu_on = statistics.median(cpus["off"]), statistics.median(cpus["on"])
    print(
        f"  worker CPU (main and pool processes): {cpu_off:.2f} s off, {cpu_on:.2f} s on "
        f"({(cpu_on - cpu_off) / args.n * 1e6:+.0f} µs per item, "
        f"{(cpu_on - cpu_off) / cpu_off * 100:+.1f} %)"
    )
    print(f"  spans per execution received: {spans}")


if __name__ == "__main__":
    main()
