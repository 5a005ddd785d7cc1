"""What one delivery of a command did, as a Celery-level observer should see it.

The engine's own record of a command is its row and events in Postgres; this report is
only what the task hands back to Celery (Flower, `celery events`, a result backend):

    completed   the tool ran and its outcome is recorded as success
    failed      the tool failed (`kind`, `message`): the step or item failed, whether or not
                the flow goes on (a policy `do: continue` is decided later, by the pass)
    waiting     the command started a sub-playbook and parks until it ends
    duplicate   another delivery had already claimed or finished it: nothing ran
    superseded  it ran, but the command had meanwhile been cancelled or re-issued to
                another worker: this run's outcome was dropped

The Celery task turns `failed` into a FAILURE state (tasks.tasks.CommandFailed), so a tool
failure never shows as a clean SUCCESS in Flower; the message is already redacted.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import NotRequired, TypedDict

from noetl_celery.constants import ReportStatus
from noetl_celery.models.outcome import Outcome
from noetl_celery.orchestrator.ids import base_command_id

COMPLETED = ReportStatus.COMPLETED
FAILED = ReportStatus.FAILED
WAITING = ReportStatus.WAITING
DUPLICATE = ReportStatus.DUPLICATE
SUPERSEDED = ReportStatus.SUPERSEDED
MESSAGE_CHARS = 500


class TaskResult(TypedDict):
    """What `execute_command` returns to Celery."""

    status: str
    execution_id: str
    step: str | None
    kind: NotRequired[str]  # of a failure


@dataclass(frozen=True)
class CommandReport:
    command_id: str
    status: ReportStatus
    kind: str | None = None
    message: str | None = None

    @property
    def execution_id(self) -> str:
        return self.command_id.split(":", 1)[0]

    @property
    def step(self) -> str | None:
        parts = base_command_id(self.command_id).split(":")
        return parts[1] if len(parts) > 1 else None

    def as_result(self) -> TaskResult:
        """The task's return value: small, JSON, no results or payload values."""
        out: TaskResult = {
            "status": self.status,
            "execution_id": self.execution_id,
            "step": self.step,
        }
        if self.kind is not None:
            out["kind"] = self.kind
        return out

    def failure_text(self) -> str:
        where = f"execution {self.execution_id} step {self.step} (command {self.command_id})"
        return f"{where}: {self.kind or 'error'}: {self.message or 'failed'}"


def report_of(command_id: str, outcome: Outcome, *, recorded: bool) -> CommandReport:
    """The report of a command that ran to an `outcome` (models.outcome), `recorded` when
    the outcome was stored as this run's."""
    if not recorded:
        return CommandReport(command_id, SUPERSEDED)
    if outcome.error is None:
        return CommandReport(command_id, COMPLETED)
    message = outcome.error.message
    if len(message) > MESSAGE_CHARS:
        message = message[: MESSAGE_CHARS - 1] + "…"
    return CommandReport(command_id, FAILED, outcome.error.kind or "error", message)
