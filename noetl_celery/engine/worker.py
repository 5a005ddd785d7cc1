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

from noetl_celery.engine.orchestrate import Orchestrator
from noetl_celery.engine.playbooks import PlaybookCache
from noetl_celery.engine.runner import StepRunner
from noetl_celery.models.outcome import make_outcome
from noetl_celery.store.repository import Store

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
        self.store.complete(command, outcome)
        self.orchestrator.drive(command.execution_id, wait=False)
        return True
