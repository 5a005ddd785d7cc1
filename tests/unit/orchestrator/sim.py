"""An in-memory driver for the pure orchestrator: it plays the engine's part (persisting
decisions, "running" commands through a function) so decision logic can be tested by
tables of cases without a database or workers."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import yaml

from noetl_celery.constants import KIND_ITERATION
from noetl_celery.models.outcome import ErrorKind, Outcome, StepError
from noetl_celery.models.playbook import Playbook
from noetl_celery.orchestrator.decide import decide, start
from noetl_celery.orchestrator.decisions import Completion, Decision, Limits
from noetl_celery.orchestrator.ids import iteration_command_id
from noetl_celery.orchestrator.state import ExecutionState

# run(step, item, iteration) -> outcome
Runner = Callable[[str, Any, int | None], Outcome]


def ok(result: Any = None) -> Outcome:
    return Outcome("ok", result)


def err(message: str, kind: ErrorKind = "python_error", result: Any = None) -> Outcome:
    return Outcome("error", result, StepError(kind, message, retryable=False))


@dataclass
class Sim:
    playbook: Playbook
    runner: Runner
    limits: Limits = field(default_factory=Limits)
    results: dict[tuple[str, int], Any] = field(default_factory=dict)
    events: list[dict[str, Any]] = field(default_factory=list)
    planned: dict[str, dict[str, Any]] = field(default_factory=dict)
    queue: list[dict[str, Any]] = field(default_factory=list)  # issued, not yet run
    ran: list[tuple[str, int | None]] = field(default_factory=list)  # (step, iteration)
    decisions: list[Decision] = field(default_factory=list)
    state: ExecutionState | None = None
    now: float = 0.0  # every pass's time (epoch seconds): templates' now() renders it
    # the queue entry being run (its id and meta: a runner that acts as the worker on
    # them, test_cursor_cases.InlineFrames, reads them here)
    current: dict[str, Any] | None = None
    _next_event: int = 1

    # -- Facts ------------------------------------------------------------------------------
    def result(self, step: str, epoch: int) -> Any:
        return self.results[(step, epoch)]

    def iteration_results(self, step: str, epoch: int, limit: int) -> list[Any]:
        done = [
            e
            for e in self.events
            if e.get("iteration") is not None and e["step"] == step and e["epoch"] == epoch
        ]
        done.sort(key=lambda e: e["iteration"])
        return [_iteration_result(e["outcome"]) for e in done[:limit]]

    # -- applying decisions --------------------------------------------------------------------
    def apply(self, d: Decision) -> None:
        self.decisions.append(d)
        self.state = d.state
        for r in d.results:
            self.results[(r.step, r.epoch)] = r.data
        for e in d.events:
            self.events.append(
                {"type": e.type, "step": e.step, "epoch": e.epoch, "payload": e.payload}
            )
        for c in d.commands:
            self.queue.append(
                {
                    "id": c.command_id,
                    "step": c.step,
                    "epoch": c.epoch,
                    "iteration": None,
                    "item": c.item,
                    "meta": c.meta,
                    "delay": c.delay_seconds,
                }
            )
        eid = self.state.execution_id
        for p in d.plans:
            for i, item in enumerate(p.items, p.start):
                cid = iteration_command_id(eid, p.step, p.epoch, i)
                assert cid not in self.planned, f"duplicate plan {cid}"
                self.planned[cid] = {
                    "id": cid,
                    "step": p.step,
                    "epoch": p.epoch,
                    "iteration": i,
                    "item": item,
                    "status": "planned",
                }
        for issue in d.issues:
            for i in range(issue.start, issue.stop):
                row = self.planned[iteration_command_id(eid, issue.step, issue.epoch, i)]
                assert row["status"] == "planned", f"issued twice: {row['id']}"
                row["status"] = "issued"
                self.queue.append(row)

    def run(
        self,
        payload: dict[str, Any] | None = None,
        batch: int = 1,
        max_passes: int = 10_000,
        **start_inputs: Any,
    ) -> ExecutionState:
        """Run to the end; `start_inputs` go to `start()` (entry, variables, ...)."""
        self.apply(
            start(self.playbook, "e1", payload, self, self.limits, now=self.now, **start_inputs)
        )
        passes = 0
        while self.state is not None and self.state.status == "RUNNING":
            passes += 1
            assert passes < max_passes, "no terminal state"
            assert self.queue, "execution RUNNING with nothing queued (stuck)"
            take, self.queue = self.queue[:batch], self.queue[batch:]
            completions = []
            for cmd in take:
                self.ran.append((cmd["step"], cmd["iteration"]))
                self.current = cmd
                outcome = self.runner(cmd["step"], cmd["item"], cmd["iteration"])
                event = {
                    "step": cmd["step"],
                    "epoch": cmd["epoch"],
                    "iteration": cmd["iteration"],
                    # stored as the store stores it
                    "outcome": outcome.to_json(),
                    "type": "command.completed" if outcome.ok else "command.failed",
                }
                self.events.append(event)
                completions.append(
                    Completion(
                        self._next_event,
                        cmd["id"],
                        cmd["step"],
                        cmd["epoch"],
                        cmd["iteration"],
                        outcome,
                    )
                )
                self._next_event += 1
            self.apply(decide(self.playbook, self.state, completions, self, self.limits, self.now))
        assert self.state is not None
        return self.state

    def iterations_ran(self, step: str) -> list[int]:
        """The iterations of loop step `step` that ran, sorted."""
        ran = [i for s, i in self.ran if s == step]
        assert None not in ran, f"step '{step}' also ran outside its loop"
        return sorted(i for i in ran if i is not None)

    def steps_ran(self) -> list[str]:
        return [s for s, i in self.ran if i is None]

    def event_types(self) -> list[str]:
        return [e["type"] for e in self.events if "type" in e]


def _iteration_result(outcome: dict[str, Any]) -> Any:
    """As the store answers (Facts.iteration_results): a failed iteration is its error."""
    if outcome["status"] == "error":
        return {"status": "error", "error": outcome.get("error")}
    return outcome.get("result")


def playbook(text: str) -> Playbook:
    return Playbook.model_validate(yaml.safe_load(text))


def terminal_event(sim: Sim) -> dict[str, Any]:
    return [e for e in sim.events if e.get("type", "").startswith("execution.")][-1]


__all__ = ["KIND_ITERATION", "Sim", "err", "ok", "playbook", "terminal_event"]
