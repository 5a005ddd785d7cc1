"""Driving orchestration passes for one execution (docs/design.md §3).

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
(passes.retry).

A pass that crashes rolls back and leaves everything as it was. When the database was
away (`store.database.transient`) the error goes to the caller, who tries again later.
Any other crash (a bug, a value the database refuses, an input the core cannot handle)
would crash again, since a pass redone decides the same: it is recorded as a
`pass.failed` event, and the execution ends FAILED once `PASS_CRASH_LIMIT` passes in a
row crashed, instead of staying RUNNING with every reaper sweep crashing on it.
"""

from __future__ import annotations

import logging
import time
import traceback
from dataclasses import dataclass, field
from functools import partial
from typing import TYPE_CHECKING, Any

from noetl_celery.constants import FAILED, RUNNING
from noetl_celery.errors import PlaybookError
from noetl_celery.models.outcome import StepError
from noetl_celery.models.playbook import Playbook
from noetl_celery.orchestrator.batching import backlog_needs_pass, could_defer, may_defer_all
from noetl_celery.orchestrator.decide import decide, start
from noetl_celery.orchestrator.decisions import Completion, Decision, Facts, Limits, Terminal
from noetl_celery.orchestrator.state import ExecutionState
from noetl_celery.passes.dispatch import Dispatcher
from noetl_celery.passes.playbooks import PlaybookCache
from noetl_celery.passes.rerun import start_inputs
from noetl_celery.passes.retry import again_if_interrupted
from noetl_celery.passes.termination import end_tree
from noetl_celery.store.database import transient
from noetl_celery.store.orchestration import OrchestrationTx
from noetl_celery.store.repository import Store
from noetl_celery.store.rows import ExecutionRow

if TYPE_CHECKING:  # built by the engine only when NOETL_RECORD_PASSES is set
    from noetl_celery.passes.pass_recorder import PassRecorder

log = logging.getLogger("noetl_celery.orchestrate")

# passes of one execution that may crash in a row (at the same point of its history)
# before it ends FAILED. A pure pass redone crashes again, so one would do for a true
# bug; a few more let a crash that depended on where the pass ran (a thread's stack
# depth, memory pressure in one process) be retried elsewhere, by the next caller
PASS_CRASH_LIMIT = 3
# characters of a crash's message kept in its event and the execution's error
CRASH_MESSAGE_CHARS = 500


class PassDriver:
    def __init__(
        self,
        store: Store,
        playbooks: PlaybookCache,
        dispatcher: Dispatcher,
        *,
        batch: int = 1000,
        limits: Limits | None = None,
        recorder: PassRecorder | None = None,
    ) -> None:
        self.store = store
        self.playbooks = playbooks
        self.dispatcher = dispatcher
        self.batch = batch
        self.limits = limits or Limits()
        self.recorder = recorder  # NOETL_RECORD_PASSES: passes written for replay tests

    def drive(self, execution_id: str, *, wait: bool = False, recheck_first: bool = False) -> int:
        """Run passes until the inbox is empty or another driver holds the lock.

        `recheck_first` is for a caller that has just committed a pass of its own: it
        only needs to look for completions that arrived meanwhile. Returns the number of
        passes that changed something."""
        passes = 0
        if recheck_first and not self.store.has_unhandled(execution_id):
            return passes
        defer = True
        while True:
            try:
                result = again_if_interrupted(
                    f"an orchestration pass of execution {execution_id}",
                    partial(self._locked_pass, execution_id, wait, defer),
                    extra={"execution_id": execution_id},
                )
            except Exception as exc:
                if transient(exc):
                    raise  # the database is away: the caller (or the reaper) tries later
                self.crashed(execution_id, exc)
                return passes
            if result is None:
                return passes  # the holder re-checks the inbox before it exits
            if result.changed:
                passes += 1
            if result.publish:
                self.dispatcher.publish(result.publish)
            if result.deferred:
                # closers in parallel may each have deferred too, counting on this pass:
                # look at what is committed now, and fold it all if nothing will come back
                if not backlog_needs_pass(self.store.backlog(execution_id)):
                    return passes
                defer = False  # the next pass folds: no two rules can keep this looping
            elif not self.store.has_unhandled(execution_id):
                return passes
            wait = False

    def after_deferral(self, execution_id: str) -> int:
        """For a closer whose completion was left for a later pass, once committed: drive
        the execution if what is committed now needs a pass (orchestrator.batching: closers
        in parallel may all have deferred, each counting on the others)."""
        if not backlog_needs_pass(self.store.backlog(execution_id)):
            return 0
        return self.drive(execution_id, wait=False)

    def crashed(self, execution_id: str, exc: BaseException) -> None:
        """A pass of `execution_id` crashed for a reason other than the database being
        away: record it, and end the execution FAILED when too many crashed in a row."""
        message = crash_message(exc)
        # the last frames only: a RecursionError's traceback is a thousand of them
        tail = "".join(traceback.format_exception(exc, limit=-12))
        log.error(
            "orchestration pass of execution %s crashed: %s\n%s",
            execution_id,
            message,
            tail,
            extra={"execution_id": execution_id},
        )
        crashes = self.store.termination.record_pass_crash(
            execution_id, StepError("engine_error", message)
        )
        if crashes < PASS_CRASH_LIMIT:
            return
        end_tree(
            self.store,
            self.dispatcher,
            execution_id,
            FAILED,
            f"the engine could not orchestrate this execution: {crashes} passes in a row "
            f"crashed ({message})",
            kind="engine_error",
        )

    def _locked_pass(self, execution_id: str, wait: bool, defer: bool) -> PassResult | None:
        """One pass in a transaction of its own; None when another pass holds the lock."""
        with self.store.orchestration(execution_id, wait=wait) as tx:
            return None if tx is None else self.run_pass(tx, defer=defer)

    def run_pass(self, tx: OrchestrationTx, *, defer: bool = True) -> PassResult:
        """One pass inside the caller's transaction; publish `result.publish` after the
        commit. `defer=False`: fold what waits even if the window could wait for more."""
        return self._pass(tx, defer)

    def _pass(self, tx: OrchestrationTx, defer: bool = True) -> PassResult:
        row = tx.execution
        now = time.time()  # the pass's time, read once: the core never reads a clock
        if row.status != RUNNING:
            # finished or cancelled: late completions change nothing, just consume them
            tx.mark_handled([c.event_id for c in tx.inbox(self.batch)])
            return PassResult()
        try:
            playbook = self.playbooks.get(row.catalog_id)
        except PlaybookError as exc:  # a catalog row that no longer validates
            decision = Decision(state=ExecutionState(row.execution_id, status=FAILED))
            decision.terminal = Terminal(FAILED, None, {"message": str(exc)})
            return PassResult(tx.apply(decision, []), changed=True)
        if row.state is None:
            # a rerun may start elsewhere: its inputs are read from the original it names
            inputs = start_inputs(self.store, row)
            if self.recorder is None:
                decision = start(
                    playbook, row.execution_id, row.payload, tx, self.limits, now=now, **inputs
                )
            else:
                decision = self._recorded_start(playbook, row, inputs, tx, now)
            return PassResult(tx.apply(decision, []), changed=True)
        state = ExecutionState.from_json(row.state)
        if defer and could_defer(state) and may_defer_all(state, tx.waiting()):
            return PassResult(deferred=True)
        completions = tx.inbox(self.batch)
        if not completions:
            return PassResult()
        completions = tx.first_claims(completions)
        if self.recorder is None:
            decision = decide(playbook, state, completions, tx, self.limits, now)
        else:
            decision = self._recorded(playbook, row.catalog_id, state, completions, tx, now)
        publish = tx.apply(decision, [c.event_id for c in completions])
        if decision.terminal is not None:
            log.info(
                "execution %s %s",
                row.execution_id,
                decision.terminal.status,
                extra={"execution_id": row.execution_id},
            )
        return PassResult(publish, changed=True)

    def _recorded(
        self,
        playbook: Playbook,
        catalog_id: int,
        state: ExecutionState,
        completions: list[Completion],
        facts: Facts,
        now: float,
    ) -> Decision:
        """`decide`, with its inputs, the facts it read and its decision recorded."""
        from noetl_celery.orchestrator.recording import RecordingFacts

        assert self.recorder is not None
        recording = RecordingFacts(facts)
        decision = decide(playbook, state, completions, recording, self.limits, now)
        self.recorder.write(
            playbook_text=self.store.catalog_content(catalog_id),
            state=state,
            completions=completions,
            facts=recording,
            now=now,
            limits=self.limits,
            decision=decision,
        )
        return decision

    def _recorded_start(
        self,
        playbook: Playbook,
        row: ExecutionRow,
        inputs: dict[str, Any],
        facts: Facts,
        now: float,
    ) -> Decision:
        """`start`, with its inputs and decision recorded."""
        from noetl_celery.orchestrator.recording import RecordingFacts

        assert self.recorder is not None
        recording = RecordingFacts(facts)
        decision = start(
            playbook, row.execution_id, row.payload, recording, self.limits, now=now, **inputs
        )
        self.recorder.write_start(
            playbook_text=self.store.catalog_content(row.catalog_id),
            execution_id=row.execution_id,
            payload=row.payload,
            inputs=inputs,
            facts=recording,
            now=now,
            limits=self.limits,
            decision=decision,
        )
        return decision


@dataclass(frozen=True)
class PassResult:
    publish: list[str] = field(default_factory=list)  # command ids, publish after commit
    changed: bool = False
    # every waiting completion may wait for a later pass (orchestrator.batching)
    deferred: bool = False


def crash_message(exc: BaseException) -> str:
    """`Type: first line of the message`, shortened, as text Postgres can store (an
    exception's message may quote the very value that could not be stored)."""
    lines = str(exc).strip().splitlines()
    text = f"{type(exc).__name__}: {lines[0]}" if lines else type(exc).__name__
    if len(text) > CRASH_MESSAGE_CHARS:
        text = text[: CRASH_MESSAGE_CHARS - 1] + "…"
    text = text.replace("\x00", "\\u0000")
    return text.encode("utf-8", "backslashreplace").decode("utf-8")
