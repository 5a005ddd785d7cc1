"""Driving orchestration passes for one execution (design §3).

A pass locks the execution row (Postgres `FOR UPDATE`, SKIP LOCKED when called from a
worker; SQLite's write lock), folds the waiting completions, persists the decision and
commits; the commands it issued are published after commit. Before letting go the driver
re-checks the inbox: a completion that arrived while the lock was held found the lock
taken and left the work to us, so we must not exit while one is waiting.
"""

from __future__ import annotations

import copy
import logging

from noetl_celery.constants import RUNNING
from noetl_celery.engine.dispatch import Dispatcher
from noetl_celery.engine.playbooks import PlaybookCache
from noetl_celery.errors import PlaybookError
from noetl_celery.orchestrator.decide import decide, start
from noetl_celery.orchestrator.decisions import Decision, Limits, Terminal
from noetl_celery.orchestrator.state import ExecutionState
from noetl_celery.store.orchestration import OrchestrationTx
from noetl_celery.store.repository import Store

log = logging.getLogger("noetl_celery.orchestrate")


class Orchestrator:
    def __init__(
        self,
        store: Store,
        playbooks: PlaybookCache,
        dispatcher: Dispatcher,
        *,
        batch: int = 1000,
        limits: Limits | None = None,
    ) -> None:
        self.store = store
        self.playbooks = playbooks
        self.dispatcher = dispatcher
        self.batch = batch
        self.limits = limits or Limits()

    def drive(self, execution_id: str, *, wait: bool = False) -> int:
        """Run passes until the inbox is empty or another driver holds the lock.
        Returns the number of passes that changed something."""
        passes = 0
        while True:
            with self.store.orchestration(execution_id, wait=wait) as tx:
                if tx is None:
                    return passes  # the holder re-checks the inbox before it exits
                publish, changed = self._pass(tx)
            if changed:
                passes += 1
            if publish:
                self.dispatcher.publish(publish)
            if not self.store.has_unhandled(execution_id):
                return passes
            wait = False

    def _pass(self, tx: OrchestrationTx) -> tuple[list[str], bool]:
        row = tx.execution
        if row.status != RUNNING:
            # finished or cancelled: late completions change nothing, just consume them
            tx.mark_handled([c.event_id for c in tx.inbox(self.batch)])
            return [], False
        try:
            playbook = self.playbooks.get(row.catalog_id)
        except PlaybookError as exc:  # a catalog row that no longer validates
            decision = Decision(state=ExecutionState(row.execution_id, status="FAILED"))
            decision.terminal = Terminal("FAILED", None, {"message": str(exc)})
            return tx.apply(decision, []), True
        if row.state is None:
            decision = start(playbook, row.execution_id, row.payload, tx, self.limits)
            return tx.apply(decision, []), True
        completions = tx.inbox(self.batch)
        if not completions:
            return [], False
        state = ExecutionState.from_json(copy.deepcopy(row.state))
        decision = decide(playbook, state, completions, tx, self.limits)
        publish = tx.apply(decision, [c.event_id for c in completions])
        if decision.terminal is not None:
            log.info(
                "execution %s %s",
                row.execution_id,
                decision.terminal.status,
                extra={"execution_id": row.execution_id},
            )
        return publish, True
