"""Ending executions from outside their own flow: `cancel`, and the execution timeout.

`store.termination.end_execution` ends one execution in one transaction (terminal status
and event, every unfinished command cancelled so nothing more can be claimed, a waiting
parent command resumed). Here the tree is walked: running children end CANCELLED with
their parent, and a resumed parent command is published.
"""

from __future__ import annotations

import logging

from noetl_celery.constants import CANCELLED
from noetl_celery.engine.dispatch import Dispatcher
from noetl_celery.store.repository import Store
from noetl_celery.store.termination import end_execution

log = logging.getLogger("noetl_celery.termination")


def end_tree(
    store: Store,
    dispatcher: Dispatcher,
    execution_id: str,
    status: str,
    message: str,
    kind: str | None = None,
) -> bool:
    """End `execution_id` with `status` (its error: `message`, of `kind`) and its
    running descendants with CANCELLED. False when it had already ended."""
    ended = end_execution(store, execution_id, status, message, kind)
    if not ended.ended:
        return False
    log.info(
        "execution %s %s: %s", execution_id, status, message, extra={"execution_id": execution_id}
    )
    if ended.publish:  # a parent was waiting for this one: it goes on with our summary
        dispatcher.publish(ended.publish)
    for child in ended.children:
        end_tree(store, dispatcher, child, CANCELLED, f"parent execution {execution_id} ended")
    return True
