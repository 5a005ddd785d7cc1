"""`Run`: what the loop and cursor handlers may use of an orchestration pass.

The pass (decide.Pass) implements it; loops, cursor and iterations take a `Run` instead
of importing the pass, so imports in the orchestrator point one way: decide -> loops ->
cursor -> iterations -> run, and nothing below decide reaches back up into it.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Protocol

from noetl_celery.models.outcome import StepError
from noetl_celery.models.playbook import Step
from noetl_celery.orchestrator.decisions import Decision, Facts, Limits, LoopMirror
from noetl_celery.orchestrator.state import ExecutionState
from noetl_celery.templating.renderer import Renderer


class Run(Protocol):
    state: ExecutionState  # the pass's own copy: handlers update it in place
    decision: Decision  # what the pass writes and issues: handlers append to it
    facts: Facts  # history the pass reads (iteration results)
    limits: Limits
    renderer: Renderer
    touched_loops: set[str]  # loops whose progress the pass mirrors at its end
    loops_before: dict[str, LoopMirror]  # each loop's row as the pass found it
    finished_loops: list[LoopMirror]  # epochs finished in this pass (the state may re-enter)

    def context(self, extra: Mapping[str, Any] | None = None) -> dict[str, Any]:
        """The template context: variables, step results, `extra` on top."""
        ...

    def touch(self) -> None:
        """Variables or result pointers changed: the next command needs a new context."""
        ...

    def ctx_version(self) -> int:
        """The context version new commands render with."""
        ...

    def record_result(self, step: str, epoch: int, status: str, data: Any) -> None:
        """Write `step`'s result for `epoch`."""
        ...

    def fail(self, step: str, epoch: int, message: str, error: StepError | None = None) -> None:
        """Record an unhandled failure of `step`."""
        ...

    def route(self, step: Step, epoch: int, output: Mapping[str, Any], event_name: str) -> bool:
        """Evaluate the step's arcs; True if a guarded arc matched."""
        ...
