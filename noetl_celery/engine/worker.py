"""`execute_command`: claim, run, complete, then orchestrate in place (design §3).

Running the orchestration pass in the worker that just finished (when the execution's
lock is free) saves a broker round trip per completion; if another process holds the
lock, that process handles our completion before it lets go.
"""

from __future__ import annotations

import logging
import os
import socket
import traceback

from noetl_celery.constants import RUNNING
from noetl_celery.engine.orchestrate import Orchestrator
from noetl_celery.engine.playbooks import PlaybookCache
from noetl_celery.engine.runner import StepRunner
from noetl_celery.models.outcome import make_outcome
from noetl_celery.orchestrator.batching import may_defer_loop
from noetl_celery.orchestrator.state import LoopProgress
from noetl_celery.store.completion import Closed
from noetl_celery.store.repository import Store
from noetl_celery.store.rows import ClaimedCommand

log = logging.getLogger("noetl_celery.worker")


def worker_identity() -> str:
    return f"{socket.gethostname()}:{os.getpid()}"


class CommandExecutor:
    def __init__(
        self,
        store: Store,
        playbooks: PlaybookCache,
        runner: StepRunner,
        orchestrator: Orchestrator,
        lease_seconds: int,
    ) -> None:
        self.store = store
        self.playbooks = playbooks
        self.runner = runner
        self.orchestrator = orchestrator
        self.lease_seconds = lease_seconds

    def execute(self, command_id: str) -> bool:
        """Returns False when the delivery was a duplicate (nothing ran)."""
        command = self.store.claim(command_id, worker_identity(), self.lease_seconds)
        if command is None:
            log.info(
                "command %s already claimed or finished: duplicate delivery dropped",
                command_id,
                extra={"command_id": command_id},
            )
            return False
        try:
            playbook = self.playbooks.get(command.catalog_id)
            outcome = self.runner.run(playbook, command)
        except Exception as exc:  # an engine bug must fail the step, never hang it
            log.exception("command %s crashed", command_id)
            outcome = make_outcome(
                "error",
                None,
                {
                    "kind": "engine_error",
                    "message": f"{type(exc).__name__}: {exc}",
                    "traceback": traceback.format_exc(limit=8),
                },
            )
        publish: list[str] = []
        with self.store.completion(command) as completion:
            closed = completion.close(outcome)
            if not closed.closed:
                return True  # no longer ours (cancelled or re-issued meanwhile)
            if self._deferrable(command, closed):
                return True  # enough of the window still runs: a later pass folds this
            tx = completion.lock()
            if tx is not None:  # the lock was free: orchestrate in this same transaction
                result = self.orchestrator.run_pass(tx)
                if result.deferred:
                    return True
                publish = result.publish
            ran_pass = tx is not None
        if publish:
            self.orchestrator.dispatcher.publish(publish)
        # either look for completions that arrived during our pass, or (lock was busy)
        # try once more now that our completion is committed: the holder may have done
        # its final inbox check before our commit
        self.orchestrator.drive(command.execution_id, wait=False, recheck_first=ran_pass)
        return True

    @staticmethod
    def _deferrable(command: ClaimedCommand, closed: Closed) -> bool:
        if command.iteration is None or closed.status != RUNNING or not closed.loop:
            return False
        progress = LoopProgress.from_json(closed.loop)
        return may_defer_loop(progress, command.epoch, closed.waiting)
