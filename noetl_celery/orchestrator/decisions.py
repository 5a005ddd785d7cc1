"""Inputs and outputs of an orchestration pass (plain data, no I/O)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, NotRequired, Protocol, TypedDict

from noetl_celery.constants import ExecutionStatus
from noetl_celery.models.outcome import Outcome
from noetl_celery.orchestrator.state import ExecutionState, StepFailure


@dataclass(frozen=True)
class Completion:
    """A command's terminal event, read from the inbox; or, with `parked_for`, a loop
    item's `item.throttled` (not terminal: the item parked that many seconds for its
    rate_limit key's turn, and its slot of the window may be given back)."""

    event_id: int
    command_id: str
    step: str
    epoch: int
    iteration: int | None
    outcome: Outcome
    parked_for: float | None = None

    @property
    def ok(self) -> bool:
        return self.outcome.ok


class Facts(Protocol):
    """Read-only access to immutable history the state only points at."""

    def result(self, step: str, epoch: int) -> Any:
        """The result of `step` in `epoch` (as written by `ResultWrite`)."""

    def iteration_results(self, step: str, epoch: int, limit: int) -> list[Any]:
        """Results of the first `limit` iterations of a loop epoch, in iteration order;
        a failed iteration's is `{"status": "error", "error": <its error>}` (the contract
        tests/integration/test_facts_contract.py holds every implementation to)."""


@dataclass(frozen=True)
class Limits:
    # `mode: parallel` without `max_in_flight` (NoETL would run it one at a time)
    default_parallel_window: int = 10
    # per-item results kept in a loop step's result (`{{ step.results }}`)
    loop_results_cap: int = 100
    # routing hops in one pass that issue no work: a cycle of empty loops / skipped
    # steps would otherwise spin forever
    max_idle_transitions: int = 10_000
    # "strict" or "noetl" (templating.renderer)
    template_mode: str = "strict"
    # runs of a cursor claim that fails with a retryable error (the queue database
    # restarting, a deadlock) before the step fails; `frame.max_attempts` overrides it
    claim_attempts: int = 5
    # frames a cursor lane with `frame.process: frame` runs after one pass before the
    # next folds them (orchestrator.cursor: the worker that ran a frame issues the
    # lane's next claim itself; the pass reserves the chain's iteration numbers)
    cursor_chain: int = 8
    # wait before the second run of such a claim, doubled for every later one, capped
    claim_retry_delay_seconds: float = 1.0
    max_retry_delay_seconds: float = 300.0
    # a loop item parked for its rate_limit key's turn gives its window slot back
    # (orchestrator.loops.on_parked) only while its turn is at most this far ahead and
    # fewer than `max_in_flight` x `released_per_window` items of the epoch are given
    # back: a loop whose items all wait for one slow key books that key's turns this far
    # ahead at most, and the snapshot keeps at most that many item numbers
    release_horizon_seconds: float = 120.0
    released_per_window: int = 50


@dataclass(frozen=True)
class NewCommand:
    command_id: str
    step: str
    kind: str
    epoch: int
    ctx_version: int
    iteration: int | None = None
    item: Any = None
    meta: dict[str, Any] | None = None
    attempt: int = 1
    # > 0: the command is parked (`delayed`) this long before it is published (a claim
    # retry's backoff); the engine turns it into a due time, the reaper publishes it then
    delay_seconds: float = 0.0


@dataclass(frozen=True)
class LoopPlan:
    """Plan every iteration of a loop epoch as a `planned` command row."""

    step: str
    epoch: int
    items: Sequence[Any]  # a list, or a `range` that is never built as one
    ctx_version: int
    meta: dict[str, Any]
    start: int = 0  # iteration number of the first item (cursor frames continue a range)


@dataclass(frozen=True)
class IssueRange:
    """Turn planned iterations [start, stop) of a loop epoch into issued commands."""

    step: str
    epoch: int
    start: int
    stop: int
    ctx_version: int


@dataclass(frozen=True)
class EngineEvent:
    type: str
    step: str | None = None
    epoch: int | None = None
    payload: dict[str, Any] | None = None
    # the loop item it is about (`item.quarantined`)
    iteration: int | None = None
    command_id: str | None = None


@dataclass(frozen=True)
class ResultWrite:
    step: str
    epoch: int
    status: str
    data: Any


@dataclass(frozen=True)
class LoopMirror:
    """A loop epoch's counters as its `loops` row holds them: what reads, the reaper and
    a worker's close (window, in_flight) see without knowing the snapshot's layout."""

    step: str
    epoch: int
    mode: str
    total: int
    issued: int
    succeeded: int
    failed: int
    done: bool
    window: int
    in_flight: int
    quarantined: int = 0


class ExecutionError(TypedDict):
    """Why an execution failed (executions.error, its terminal event's `error`)."""

    message: str
    kind: NotRequired[str]
    failures: NotRequired[list[StepFailure]]  # the unhandled step failures kept


@dataclass(frozen=True)
class Terminal:
    status: ExecutionStatus
    result: Any
    error: ExecutionError | None


@dataclass
class Decision:
    state: ExecutionState
    commands: list[NewCommand] = field(default_factory=list)
    plans: list[LoopPlan] = field(default_factory=list)
    issues: list[IssueRange] = field(default_factory=list)
    events: list[EngineEvent] = field(default_factory=list)
    results: list[ResultWrite] = field(default_factory=list)
    contexts: dict[int, dict[str, Any]] = field(default_factory=dict)
    loops: list[LoopMirror] = field(default_factory=list)
    terminal: Terminal | None = None

    @property
    def issued_work(self) -> bool:
        return bool(self.commands or self.issues)
