"""The broker's dispatcher, routing each command to its step's queue (routing).

Publishes name command ids only; an id starts `<execution>:<step>:`, so the queue of a
command is its step's, found once per execution and step from the execution's playbook
(cached: a playbook of a catalog version never changes) and then a dictionary lookup.
Commands whose step routes nowhere go to the engine's commands queue, as before. A
republish (the reaper, the relay, a hand-back) goes through here too: the same queue.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Mapping, Sequence
from typing import Any

from noetl_celery.models.playbook import Playbook
from noetl_celery.passes.playbooks import PlaybookCache
from noetl_celery.routing import step_queue
from noetl_celery.store.repository import Store

log = logging.getLogger("noetl_celery.dispatch")

CACHE_LIMIT = 50_000  # (execution, step) entries kept; cleared whole when full


def routed_steps(playbook: Playbook, by_kind: Mapping[str, str]) -> dict[str, str]:
    """The steps of `playbook` whose commands go to a named queue, with that queue (what
    `status` names when one of them waits for a worker)."""
    routed: dict[str, str] = {}
    for step in playbook.workflow:
        queue = step_queue(step.spec, tuple(tool.kind for _, tool in step.tasks()), by_kind)
        if queue is not None:
            routed[step.step] = queue
    return routed


class Routed:
    """`target` (a dispatcher whose `publish` takes `queue=`), routing per step."""

    def __init__(
        self,
        target: Any,
        store: Store,
        playbooks: PlaybookCache,
        by_kind: Mapping[str, str],
    ) -> None:
        self.target = target
        self._store = store
        self._playbooks = playbooks
        self._by_kind = dict(by_kind)
        self._queues: dict[tuple[str, str], str | None] = {}
        self._lock = threading.Lock()

    def __getattr__(self, name: str) -> Any:  # probe, close: the target's
        return getattr(self.target, name)

    def queue_of(self, command_id: str) -> str | None:
        parts = command_id.split(":", 2)
        if len(parts) < 3:
            return None
        key = (parts[0], parts[1])
        with self._lock:
            if key in self._queues:
                return self._queues[key]
        queue = self._lookup(*key)
        with self._lock:
            if len(self._queues) >= CACHE_LIMIT:
                self._queues.clear()
            self._queues[key] = queue
        return queue

    def _lookup(self, execution_id: str, step_name: str) -> str | None:
        try:
            row = self._store.execution(execution_id)
            playbook = self._playbooks.get(row.catalog_id)
        except Exception:  # gone, or the database away: the default queue
            log.debug("no route for %s:%s", execution_id, step_name, exc_info=True)
            return None
        if not playbook.has_step(step_name):
            return None
        step = playbook.step(step_name)
        kinds = tuple(tool.kind for _, tool in step.tasks())
        return step_queue(step.spec, kinds, self._by_kind)

    def split(self, command_ids: Sequence[str]) -> dict[str | None, list[str]]:
        groups: dict[str | None, list[str]] = {}
        for cid in command_ids:
            groups.setdefault(self.queue_of(cid), []).append(cid)
        return groups

    def publish(self, command_ids: Sequence[str]) -> None:
        for queue, ids in self.split(command_ids).items():
            if queue is None:
                self.target.publish(ids)
            else:
                self.target.publish(ids, queue=queue)

    def wake(self, execution_id: str) -> None:
        self.target.wake(execution_id)
