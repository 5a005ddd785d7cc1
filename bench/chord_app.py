"""The baseline: a raw Celery chord of no-op tasks, Redis broker and result backend, with
the worker settings the engine's workers use (acks_late, prefetch 1, json)."""

from __future__ import annotations

import os
import time

import redis
from celery import Celery

BROKER = os.environ.get("NOETL_BENCH_REDIS_URL", "redis://127.0.0.1:6379/11")
app = Celery("chord_bench", broker=BROKER, backend=BROKER)
app.conf.update(
    task_acks_late=True,
    task_reject_on_worker_lost=True,
    worker_prefetch_multiplier=1,
    task_serializer="json",
    accept_content=["json"],
    result_serializer="json",
    worker_send_task_events=False,
    broker_connection_retry_on_startup=True,
)
_redis = redis.Redis.from_url(BROKER)


@app.task(name="bench.noop")
def noop(i: int) -> int:
    return i


@app.task(name="bench.done")
def done(results: list[int], key: str) -> int:
    # completion is learned from Redis directly (AsyncResult.get lags ~2 s on big chords)
    _redis.set(key, repr(time.time()))
    return len(results)
