"""Driving orchestration passes for one execution (design §3).

A pass locks the execution row (Postgres `FOR UPDATE`, SKIP LOCKED when called from a
worker; SQLite's write lock), folds the waiting completions, persists the decision and
commits; the commands it issued are published after commit. Before letting go the driver
re-checks the inbox: a completion that arrived while the lock was held found the lock
taken and left the work to us, so we must not exit while one is waiting.

The lock lives as long as the pass's transaction, so it is bounded by time whatever the
holder does: Postgres ends a session idle in its transaction past
`idle_in_transaction_session_timeout` (a frozen holder) and the transaction is rolled
back whole, inbox deletions included, so nothing it folded is lost. The reaper wakes the
execution when its completions have waited longer than the wake grace, and the next
pass does the work again. A pass the database cut short here is tried again
(engine.retry).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from functools import partial

from noetl_celery.constants import RUNNING
from noetl_celery.engine.dispatch import Dispatcher
from noetl_celery.engine.playbooks import PlaybookCache
from noetl_celery.engine.rerun import start_inputs
from noetl_celery.engine.retry import again_if_interrupted
from noetl_celery.errors import PlaybookError
from noetl_celery.orchestrator.batching import may_defer_all
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

    def drive(self, execution_id: str, *, wait: bool = False, recheck_first: bool = False) -> int:
        """Run passes until the inbox is empty or another driver holds the lock.

        `recheck_first` is for a caller that has just committed a pass of its own: it
        only needs to look for completions that arrived meanwhile. Returns the number of
        passes that changed something."""
        passes = 0
        if recheck_first and not self.store.has_unhandled(execution_id):
            return passes
        while True:
            result = again_if_interrupted(
                f"an orchestration pass of execution {execution_id}",
                partial(self._locked_pass, execution_id, wait),
                extra={"execution_id": execution_id},
            )
            if result is None:
                return passes  # the holder re-checks the inbox before it exits
            if result.changed:
                passes += 1
            if result.publish:
                self.dispatcher.publish(result.publish)
            if result.deferred or not self.store.has_unhandled(execution_id):
                return passes
            wait = False

    def _locked_pass(self, execution_id: str, wait: bool) -> PassResult | None:
        """One pass in a transaction of its own; None when another pass holds the lock."""
        with self.store.orchestration(execution_id, wait=wait) as tx:
            return None if tx is None else self.run_pass(tx)

    def run_pass(self, tx: OrchestrationTx) -> PassResult:
        """One pass inside the caller's transaction; publish `result.publish` after the
        commit."""
        return self._pass(tx)

    def _pass(self, tx: OrchestrationTx) -> PassResult:
        row = tx.execution
        if row.status != RUNNING:
            # finished or cancelled: late completions change nothing, just consume them
            tx.mark_handled([c.event_id for c in tx.inbox(self.batch)])
            return PassResult()
        try:
            playbook = self.playbooks.get(row.catalog_id)
        except PlaybookError as exc:  # a catalog row that no longer validates
            decision = Decision(state=ExecutionState(row.execution_id, status="FAILED"))
            decision.terminal = Terminal("FAILED", None, {"message": str(exc)})
            return PassResult(tx.apply(decision, []), changed=True)
        if row.state is None:
            # a rerun may start elsewhere: its inputs are read from the original it names
            inputs = start_inputs(self.store, row)
            decision = start(playbook, row.execution_id, row.payload, tx, self.limits, **inputs)
            return PassResult(tx.apply(decision, []), changed=True)
        state = ExecutionState.from_json(row.state)  # freshly decoded: ours to mutate
        if may_defer_all(state, tx.waiting()):
            return PassResult(deferred=True)
        completions = tx.inbox(self.batch)
        if not completions:
            return PassResult()
        completions = tx.first_claims(completions)
        decision = decide(playbook, state, completions, tx, self.limits)
        publish = tx.apply(decision, [c.event_id for c in completions])
        if decision.terminal is not None:
            log.info(
                "execution %s %s",
                row.execution_id,
                decision.terminal.status,
                extra={"execution_id": row.execution_id},
            )
        return PassResult(publish, changed=True)


@dataclass(frozen=True)
class PassResult:
    publish: list[str] = field(default_factory=list)  # command ids, publish after commit
    changed: bool = False
    # every waiting completion may wait for a later pass (orchestrator.batching)
    deferred: bool = False
