"""The Celery application (composition root for workers: settings are read here).

At-least-once delivery: `acks_late` + `reject_on_worker_lost` put a message back when a
worker dies mid-task, prefetch 1 keeps un-started commands in the broker rather than in
a worker's memory, and duplicates are harmless because `execute_command` starts with a
conditional claim in Postgres. The broker is not what recovery relies on: Redis may lose
every message (FLUSHALL, a restart without persistence), and the reaper, sent by beat
every `reaper_interval_seconds`, republishes from the command table what was lost, and
without beat every worker process's relay (engine.outbox) publishes what the broker could
not take and, when the broker comes back, what it lost.
Messages go through the anonymous exchange (Celery's default for direct queues), so a
wiped Redis, which also loses kombu's exchange bindings, still routes them.

RabbitMQ (`amqp://`) is served the same way: the queues are durable and the messages
persistent (Celery's defaults, stated here), so a RabbitMQ restart keeps what was
queued; `NOETL_BROKER_QUEUE_TYPE=quorum` declares quorum queues (replicated; Celery then
uses per-consumer QoS, `worker_detect_quorum_queues`). A publisher declares the queue it
publishes to (tasks.dispatcher): RabbitMQ drops a message routed to no queue.
"""

from __future__ import annotations

import logging
from typing import Any

from celery import Celery
from kombu.entity import Queue

from noetl_celery.constants import (
    QUEUE_COMMANDS,
    QUEUE_ORCHESTRATE,
    RETENTION_CHECK_SECONDS,
    TASK_EXECUTE_COMMAND,
    TASK_EXECUTE_COMMANDS,
    TASK_FIRE_SCHEDULES,
    TASK_ORCHESTRATE,
    TASK_PRUNE,
    TASK_REAP,
)
from noetl_celery.settings import Settings
from noetl_celery.tasks import kombu_redis
from noetl_celery.tasks.quiet import quiet_periodic_task_logs

# how long one attempt to reach the broker may take (connect, publish)
PUBLISH_TIMEOUT_SECONDS = 1.0


def make_app(settings: Settings) -> Celery:
    # every process with an app (workers, beat, clients) gets the Redis transport's
    # fixes: a broker outage must not kill it (tasks.kombu_redis)
    kombu_redis.install()
    app = Celery("noetl_celery", broker=settings.broker_url or "memory://", set_as_current=False)
    queue_type = settings.broker_queue_type
    app.conf.update(
        task_queues=[
            engine_queue(QUEUE_COMMANDS, queue_type),
            engine_queue(QUEUE_ORCHESTRATE, queue_type),
        ],
        # queues named by `worker -Q` or a route (tasks.dispatcher) get the same type
        task_default_queue_type=queue_type,
        task_create_missing_queue_type=queue_type,
        task_default_delivery_mode="persistent",
        # a worker told to stop gets this long for what runs (tasks.shutdown hands back
        # what is still running after it); Celery's own soft shutdown stays off: it
        # sleeps its whole timeout even once every task has ended
        worker_soft_shutdown_timeout=0.0,
        task_ignore_result=True,
        result_backend=None,
        task_acks_late=True,
        task_reject_on_worker_lost=True,
        worker_prefetch_multiplier=1,
        task_serializer="json",
        accept_content=["json"],
        task_default_queue=QUEUE_COMMANDS,
        task_routes={
            TASK_EXECUTE_COMMAND: {"queue": QUEUE_COMMANDS},
            TASK_EXECUTE_COMMANDS: {"queue": QUEUE_COMMANDS},
            TASK_ORCHESTRATE: {"queue": QUEUE_ORCHESTRATE},
            TASK_REAP: {"queue": QUEUE_ORCHESTRATE},
            TASK_FIRE_SCHEDULES: {"queue": QUEUE_ORCHESTRATE},
            TASK_PRUNE: {"queue": QUEUE_ORCHESTRATE},
        },
        # Redis redelivers a message not acked within this time. Leases, not redelivery,
        # recover a dead worker's command (the reaper re-issues it after `lease_seconds`);
        # a redelivered message of a command still running is dropped by the claim. So
        # keep it well above the lease: an early redelivery only costs a wasted claim.
        broker_transport_options={
            "visibility_timeout": max(3600, settings.lease_seconds * 4),
            # a publish to a broker that is away fails in about a second, not after
            # kombu's default retries over the connect timeout (6.6 s measured): the
            # engine then holds it in Postgres (engine.outbox) and answers at once
            "max_retries": 1,
            "interval_start": 0.2,
            "interval_step": 0.2,
            "interval_max": 0.5,
            "socket_connect_timeout": PUBLISH_TIMEOUT_SECONDS,
        },
        broker_connection_timeout=PUBLISH_TIMEOUT_SECONDS,
        task_publish_retry_policy={
            "max_retries": 1,
            "interval_start": 0,
            "interval_step": 0.2,
            "interval_max": 0.2,
        },
        # reconnects within a second of the broker's return (tasks.consumer)
        worker_consumer="noetl_celery.tasks.consumer:Consumer",
        beat_schedule=beat_schedule(settings),
        broker_connection_retry_on_startup=True,
        # a lost broker connection must not kill running commands: they finish and
        # record their outcome in Postgres; their messages are simply gone
        worker_cancel_long_running_tasks_on_connection_loss=False,
        worker_hijack_root_logger=False,
        # task events cost broker traffic per task; Flower turns them on when it runs
        worker_send_task_events=False,
        imports=("noetl_celery.tasks.tasks",),
    )
    return app


def beat_schedule(settings: Settings) -> dict[str, dict[str, Any]]:
    """What beat sends: the reaper's sweep, the cron tick and, with NOETL_RETENTION, the
    prune's check (every 10 minutes; the prune itself runs once a day, engine.retention)."""
    schedule: dict[str, dict[str, Any]] = {
        "noetl-reaper": {
            "task": TASK_REAP,
            "schedule": settings.reaper_interval_seconds,
            # a sweep that waited longer than an interval is replaced by the next one
            "options": {"expires": settings.reaper_interval_seconds},
        },
        # cron schedules live in Postgres (`noetl-celery schedule`); beat only asks
        # often whether one is due
        "noetl-schedules": {
            "task": TASK_FIRE_SCHEDULES,
            "schedule": settings.schedule_tick_seconds,
            "options": {"expires": max(1.0, settings.schedule_tick_seconds)},
        },
    }
    if settings.retention_seconds > 0:
        # safe with any number of beats: the prune's daily lease lets one run a day
        schedule["noetl-retention"] = {
            "task": TASK_PRUNE,
            "schedule": RETENTION_CHECK_SECONDS,
            "options": {"expires": RETENTION_CHECK_SECONDS},
        }
    return schedule


def engine_queue(name: str, queue_type: str) -> Queue:
    """A durable queue of the engine's, bound to its direct exchange of the same name
    (how Celery declares a missing queue) and of `queue_type` on RabbitMQ."""
    arguments = {"x-queue-type": "quorum"} if queue_type == "quorum" else None
    return Queue(name, routing_key=name, durable=True, queue_arguments=arguments)  # type: ignore[no-untyped-call]


# httpx logs every request at INFO: at thousands of requests a second that is most of a
# worker's log volume (and CPU); failures reach the engine's own log lines anyway
logging.getLogger("httpx").setLevel(logging.WARNING)
# beat's ticks (schedules every second, the reaper) log at DEBUG unless they act
quiet_periodic_task_logs()

settings = Settings.from_env()
app = make_app(settings)
