"""Publishes commands as Celery messages (ids only: a few dozen bytes each).

The ids one publish names go out packed (orchestrator.packing): at most `batch_size`
per `execute_commands` message (worker.batch runs them); a lone id goes as
`execute_command`, the message every version understands.

Messages are sent by task name, so any process with a configured app (the CLI, a test)
can publish without importing the task functions, and through the anonymous exchange, so
publishing does not depend on routing state kept in the broker. Each thread keeps one producer on a
connection of its own: a worker publishes after most completions, and acquiring a pooled
producer per publish cost more than the publish itself (see also tasks.kombu_redis).

Every message carries `db`, the identity of the engine database it was minted against: a
worker on another database refuses it and puts it back (tasks.tasks), instead of claiming
nothing and dropping it, which would lose the command until the reaper of the right
database republishes it, and would hide the misconfiguration.
"""

from __future__ import annotations

import logging
import os
import threading
import uuid
from collections.abc import Sequence
from typing import Any

from celery import Celery

from noetl_celery.constants import (
    QUEUE_COMMANDS,
    QUEUE_ORCHESTRATE,
    TASK_EXECUTE_COMMAND,
    TASK_EXECUTE_COMMANDS,
    TASK_ORCHESTRATE,
)
from noetl_celery.orchestrator.packing import pack
from noetl_celery.settings import DEFAULT_BATCH_SIZE
from noetl_celery.tasks import kombu_redis

log = logging.getLogger("noetl_celery.dispatch")

# a key kept in Redis itself: a Redis restarted without persistence, or flushed, has lost
# every queued message, and this key with them (engine.outbox's recovery)
EPOCH_KEY = "noetl:broker-epoch"
# the token of a broker that keeps no key (RabbitMQ): see CeleryDispatcher.probe
AMQP_TOKEN = "broker"


def is_redis(url: str) -> bool:
    """Whether `url` names kombu's Redis transport (redis, rediss, sentinel)."""
    scheme = url.split("://", 1)[0].lower()
    return scheme in ("redis", "rediss", "sentinel", "redis+socket")


def readable(task: str, arg: str | list[str]) -> str:
    """How Flower shows a message's argument: the coordinate spelled out. Ids only, so
    never a secret or a payload."""
    if isinstance(arg, list):
        return _readable_batch(arg)
    if task != TASK_EXECUTE_COMMAND:
        return f"execution={arg}"
    parts = arg.split(":")
    if len(parts) < 3:
        return f"command={arg}"
    return f"execution={parts[0]} step={parts[1]} command={arg}"


def _readable_batch(ids: list[str]) -> str:
    """A batch as its coordinate: the execution and step its commands share (one pass
    issues them), how many, and the first id; a batch that spans several names them."""
    coords = [cid.split(":") for cid in ids]
    executions = sorted({c[0] for c in coords})
    steps = sorted({c[1] for c in coords if len(c) >= 3})
    first = ids[0] if ids else "none"
    where = (
        f"execution={executions[0]}"
        if len(executions) == 1
        else (f"executions={','.join(executions[:3])}{',...' if len(executions) > 3 else ''}")
    )
    if len(steps) == 1:
        where += f" step={steps[0]}"
    return f"{where} commands={len(ids)} first={first}"


class CeleryDispatcher:
    def __init__(
        self,
        app: Celery | None = None,
        *,
        database_id: str | None = None,
        batch_size: int = DEFAULT_BATCH_SIZE,
    ) -> None:
        if app is None:
            from noetl_celery.tasks.app import app as default_app

            app = default_app
        self.app = app
        # None (tables made without the migrations' identity row): messages go without
        # `db`, and workers accept them as they accept those of older versions
        self._kwargs = {} if database_id is None else {"db": database_id}
        self.batch_size = batch_size
        self._redis = is_redis(self.app.conf.broker_url or "")
        self._local = threading.local()
        kombu_redis.install()

    def _producer(self) -> Any:
        producer = getattr(self._local, "producer", None)
        if producer is None or self._local.pid != os.getpid():
            connection = self.app.connection_for_write()
            producer = self.app.amqp.Producer(connection.default_channel)
            self._local.producer, self._local.pid = producer, os.getpid()
        return producer

    def _reset(self) -> None:
        producer = getattr(self._local, "producer", None)
        self._local.producer = None
        if producer is not None:
            try:
                producer.connection.close()
            except Exception:  # closing a broken connection may fail: it is gone anyway
                log.debug("closing a broken producer connection failed", exc_info=True)

    def _send_once(self, name: str, arg: str | list[str], queue: str) -> None:
        # the anonymous exchange routes by queue name alone: kombu's Redis transport keeps
        # exchange bindings in Redis keys, which a FLUSHALL wipes; this keeps working then
        self.app.send_task(
            name,
            args=(arg,),
            kwargs=self._kwargs,
            exchange="",
            routing_key=queue,
            producer=self._producer(),
            argsrepr=readable(name, arg),
            # the destination: without it Celery takes the task's route (the commands
            # queue) and sends to that queue's name, whatever the routing key. Celery
            # declares it on the way (once per connection): RabbitMQ would drop a
            # message routed to no queue, as one published before any worker of a pool
            # started
            queue=queue,
        )

    def _send(self, name: str, arg: str | list[str], queue: str) -> None:
        """Publish on this thread's producer; after any failure the producer is dropped
        (a producer whose channel died stays broken: kombu then fails with unrelated
        errors such as AttributeError) and the publish is tried once on a new one. A
        message that still cannot be sent is re-published by the reaper: the command
        row says `issued`."""
        try:
            self._send_once(name, arg, queue)
        except Exception:
            self._reset()
            try:
                self._send_once(name, arg, queue)
            except Exception:
                self._reset()
                raise

    def close(self) -> None:
        """Close this thread's producer connection (the engine's close)."""
        self._reset()

    def probe(self) -> str:
        """The broker's token (passes.dispatch.Probe): the value of `EPOCH_KEY`, set by
        the first process that finds it missing; raises when the broker is away.

        RabbitMQ keeps no key: the probe is a round trip (declaring the commands queue,
        as a worker does; a queue of another type is refused, and said) and the token a
        constant. A restart is seen as the broker away then back, which runs the same
        recovery; what a restart would lose it keeps (durable queues, persistent
        messages). A broker wiped and back between two probes (a second apart) is not
        seen: the reaper republishes after NOETL_ISSUED_GRACE_SECONDS."""
        try:
            channel = self._producer().channel
            acquire = getattr(channel, "conn_or_acquire", None)
            if acquire is None:
                if not self._redis:  # idempotent, the workers' arguments (tasks.app)
                    self.app.amqp.queues[QUEUE_COMMANDS].bind(channel).queue_declare()
                return AMQP_TOKEN
            with acquire() as client:
                client.set(EPOCH_KEY, uuid.uuid4().hex, nx=True)
                token = client.get(EPOCH_KEY)
        except Exception:
            self._reset()
            raise
        return token.decode() if isinstance(token, bytes) else str(token)

    def publish(self, command_ids: Sequence[str], queue: str | None = None) -> None:
        """Publish to `queue` (a step's, engine.routing) or the engine's commands queue."""
        target = queue or QUEUE_COMMANDS
        for ids in pack(command_ids, self.batch_size):
            if len(ids) == 1:
                self._send(TASK_EXECUTE_COMMAND, ids[0], target)
            else:
                self._send(TASK_EXECUTE_COMMANDS, ids, target)

    def wake(self, execution_id: str) -> None:
        self._send(TASK_ORCHESTRATE, execution_id, QUEUE_ORCHESTRATE)
