"""Routing commands to worker pools by queue name (pure; tasks.dispatcher publishes,
engine.routing decides per command).

A step's `spec.queue: NAME` sends its commands to queue NAME; otherwise
`NOETL_QUEUE_BY_KIND=http:io,python:cpu` maps the kind of a step's tool to a queue;
otherwise they go to the engine's commands queue. `noetl-celery worker -Q NAME` serves a
queue. A command published to a queue no worker serves waits there (its row says
`issued`; `status` shows it with its queue); the reaper republishes it to the same queue.
"""

from __future__ import annotations

import re
from collections.abc import Mapping

from noetl_celery.errors import ConfigurationError

_NAME = re.compile(r"^[A-Za-z0-9_-]{1,100}$")
# the engine's own queue names (`noetl.commands`) have a dot: `-Q` accepts them
_WORKER_QUEUE = re.compile(r"^[A-Za-z0-9_.-]{1,200}$")


def is_step_queue(name: object) -> bool:
    """A name a step may route to: letters, digits, `-` and `_`."""
    return isinstance(name, str) and bool(_NAME.match(name))


def is_queue_name(name: str) -> bool:
    """A name `worker -Q` accepts (a routed queue or one of the engine's)."""
    return bool(_WORKER_QUEUE.match(name))


def parse_queue_by_kind(raw: str) -> tuple[tuple[str, str], ...]:
    """`http:io,python:cpu` as ((kind, queue), ...); a bad entry is a one-line error."""
    pairs: dict[str, str] = {}
    for entry in (part.strip() for part in raw.split(",")):
        if not entry:
            continue
        kind, sep, queue = (s.strip() for s in entry.partition(":"))
        if not sep or not kind or not is_step_queue(queue):
            raise ConfigurationError(
                "NOETL_QUEUE_BY_KIND must be kind:queue[,kind:queue...] with queue names of "
                f"letters, digits, - and _ (e.g. http:io,python:cpu), got {entry!r}"
            )
        pairs[kind.lower()] = queue
    return tuple(pairs.items())


def step_queue(spec: object, kinds: tuple[str, ...], by_kind: Mapping[str, str]) -> str | None:
    """The queue of a step's commands: its `spec.queue`, else the queue of its tool's
    kind (one kind for all its tools), else None (the engine's commands queue)."""
    if isinstance(spec, Mapping):
        named = spec.get("queue")
        if is_step_queue(named):
            return str(named)
    chosen = {by_kind.get(kind.lower()) for kind in kinds}
    if len(chosen) == 1:
        return chosen.pop()
    return None
