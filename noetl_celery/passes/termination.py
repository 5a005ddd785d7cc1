"""Ending executions from outside their own flow: `cancel`, and the execution timeout.

`store.termination.end_execution` ends one execution in one transaction (terminal status
and event, every unfinished command cancelled so nothing more can be claimed, a waiting
parent command resumed, the rows cursor steps leave claimed in the user's queue
recorded). Here the tree is walked: running children end CANCELLED with their parent,
and a resumed parent command is published.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

from noetl_celery.constants import CANCELLED, EV_CURSOR_UNFINISHED, ExecutionStatus
from noetl_celery.models.outcome import ErrorKind
from noetl_celery.passes.dispatch import Dispatcher
from noetl_celery.passes.retry import again_if_interrupted
from noetl_celery.store.repository import Store

log = logging.getLogger("noetl_celery.termination")


@dataclass
class Termination:
    """What ending an execution (and its running descendants) left behind."""

    execution_id: str
    # per cursor step: {epoch, count, rows, interrupted, truncated} (`cursor.unfinished`)
    unfinished_rows: dict[str, dict[str, Any]] = field(default_factory=dict)
    children: list[Termination] = field(default_factory=list)

    def descendants(self) -> Iterator[Termination]:
        for child in self.children:
            yield child
            yield from child.descendants()


def end_tree(
    store: Store,
    dispatcher: Dispatcher,
    execution_id: str,
    status: ExecutionStatus,
    message: str,
    kind: ErrorKind | None = None,
) -> Termination | None:
    """End `execution_id` with `status` (its error: `message`, of `kind`) and its
    running descendants with CANCELLED. None when it had already ended."""
    # done again when Postgres cuts it short: its lock on the execution, then on the
    # live commands, meets a worker's close that locked its command, then waits for the
    # execution (a cursor lane continuing locally, store.queries.close_lock_and_read);
    # one of the two is the deadlock's victim, and either may be
    ended = again_if_interrupted(
        f"ending execution {execution_id}",
        lambda: store.termination.end_execution(execution_id, status, message, kind),
    )
    if not ended.ended:
        return None
    extra = {"execution_id": execution_id}
    log.info("execution %s %s: %s", execution_id, status, message, extra=extra)
    for step, report in ended.unfinished_rows.items():
        # the engine cannot put them back: only the playbook knows its queue's states
        log.warning(
            "execution %s: cursor step '%s' leaves %d claimed row(s) unprocessed in its "
            "queue; list them with `noetl-celery events %s --type %s`",
            execution_id,
            step,
            report["count"],
            execution_id,
            EV_CURSOR_UNFINISHED,
            extra=extra,
        )
    if ended.publish:  # a parent was waiting for this one: it goes on with our summary
        dispatcher.publish(ended.publish)
    done = Termination(execution_id, ended.unfinished_rows)
    for child in ended.children:
        ended_child = end_tree(
            store, dispatcher, child, CANCELLED, f"parent execution {execution_id} ended"
        )
        if ended_child is not None:
            done.children.append(ended_child)
    return done
