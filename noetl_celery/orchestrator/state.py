"""The orchestrator's snapshot of one execution.

It is deliberately small and bounded by the playbook's size, not by the execution's
history: variables, per-step counters and pointers to results (the results themselves
live in the `results` table, immutable per (step, epoch)), and counters of the loop
epochs in progress (the items are planned command rows). It is rewritten once per
orchestration pass, so its size is the per-pass cost (docs/design.md §2.6).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, fields, replace
from typing import Any, NotRequired, TypedDict

from noetl_celery.constants import RUNNING, ExecutionStatus, StepStatus


class ItemError(TypedDict):
    """A failed iteration of a loop epoch, as the epoch's failure lists it."""

    item: int | None  # its index in the epoch
    kind: str
    message: str


class StepFailure(TypedDict):
    """An unhandled failure of a step kept in the snapshot: the execution ends FAILED
    with it."""

    step: str
    epoch: int
    message: str
    error: NotRequired[dict[str, Any]]  # the step's error (models.outcome.StepError)


@dataclass
class Lane:
    """One lane of a cursor loop: claim a frame, run its rows, claim the next."""

    frame: int = 0  # frames claimed so far (the current frame's number)
    claiming: bool = False  # a claim command is in flight
    start: int = 0  # body iterations of the current frame: [start, stop)
    stop: int = 0
    next: int = 0  # next body iteration of the frame to issue
    in_flight: int = 0  # bodies of the frame in flight
    drained: bool = False  # a claim returned no rows (or failed)
    rows: int = 0  # rows of the current frame
    # the first body iteration the lane's claim in flight reserved for its frame (one
    # with `frame.process: frame`, `max_rows` for per-row bodies the claiming worker may
    # run; None: no claim reserved any, or the frame's bodies are planned)
    body: int | None = None
    # the end (exclusive) of the block of iteration numbers the lane's chained frames use
    # (`frame.process: frame`, LoopProgress.chain): its frames take them in order, the
    # numbers `[stop, chain_end)` are the lane's; 0: no block
    chain_end: int = 0


@dataclass
class LoopProgress:
    epoch: int
    total: int  # items (loop.in) or bodies planned so far (cursor)
    window: int  # max commands in flight
    mode: str = "sequential"
    next_index: int = 0  # next planned iteration to issue (loop.in)
    in_flight: int = 0  # commands in flight (cursor: claims and bodies)
    succeeded: int = 0
    failed: int = 0
    quarantined: int = 0  # failed items set aside (a `do: quarantine` policy, the loop's option)
    done: bool = False
    # items parked for their rate_limit key's turn whose window slot was given back
    # (loops.on_parked): not in `in_flight`, still in the execution's in_flight; bounded
    # (Limits.released_per_window), sorted
    released: list[int] = field(default_factory=list)
    # cursor loops only
    lanes: list[Lane] | None = None
    max_rows: int = 0
    row_concurrency: int = 0
    per_frame: bool = False  # `frame.process: frame`: one body per frame, not per row
    claim_attempts: int = 0  # runs of a claim that fails retryably (0: the engine default)
    # frames a lane's claim may run after its own without a pass (orchestrator.cursor:
    # its worker issues each next claim itself); 0: every frame's close is folded
    chain: int = 0
    # iteration numbers cursor claims reserved for per-row bodies that their frames,
    # shorter than `max_rows`, left unused (never issued: `issued` leaves them out)
    unused: int = 0
    # the first few unhandled item errors, for the failure the epoch reports (bounded:
    # the snapshot is rewritten every pass)
    errors: list[ItemError] = field(default_factory=list)

    @property
    def finished(self) -> int:
        return self.succeeded + self.failed + self.quarantined

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> LoopProgress:
        fields = dict(data)
        lanes = fields.pop("lanes", None)
        progress = cls(**fields)
        if lanes is not None:
            progress.lanes = [Lane(**lane) for lane in lanes]
        return progress


@dataclass
class StepState:
    epoch: int = 0  # how many times the step was entered
    in_flight: int = 0  # commands of a non-loop step not yet terminal (0 or 1)
    status: StepStatus = StepStatus.NOT_STARTED
    result_epoch: int | None = None  # which epoch's result `{{ step }}` renders
    loop: LoopProgress | None = None

    def to_json(self) -> dict[str, Any]:
        # field by field, not dataclasses.asdict: its deep copy of every field was a tenth
        # of a cursor frame's worker CPU (issue 34); the keys and their order are asdict's,
        # and a field at its default is left out where it always was (old snapshots
        # read the same)
        data: dict[str, Any] = {
            "epoch": self.epoch,
            "in_flight": self.in_flight,
            "status": self.status,
            "result_epoch": self.result_epoch,
        }
        if self.loop is not None:
            data["loop"] = _loop_json(self.loop)
        return data

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> StepState:
        loop = data.get("loop")
        return cls(
            epoch=data.get("epoch", 0),
            in_flight=data.get("in_flight", 0),
            status=StepStatus(data.get("status", "")),
            result_epoch=data.get("result_epoch"),
            loop=LoopProgress.from_json(loop) if loop else None,
        )


@dataclass
class ExecutionState:
    execution_id: str
    vars: dict[str, Any] = field(default_factory=dict)
    steps: dict[str, StepState] = field(default_factory=dict)
    # bumped whenever vars or result pointers change; commands record the version
    # whose context they render with
    ctx_version: int = 0
    context_written: int = -1  # highest version with a `contexts` row
    in_flight: int = 0  # commands of this execution not yet terminal
    failures: list[StepFailure] = field(default_factory=list)  # unhandled failures
    failures_dropped: int = 0  # unhandled failures past the ones kept
    last_step: str | None = None  # last step that completed successfully
    status: ExecutionStatus = RUNNING
    # loop steps whose first epoch runs items given at start (a rerun of failed items):
    # step -> item count; the items are planned command rows already
    preplanned: dict[str, int] = field(default_factory=dict)
    # fan-in steps waiting at their barrier: step -> the upstreams that arrived (sorted)
    # since the step last passed it (orchestrator.decide `Pass._arrive`)
    joins: dict[str, list[str]] = field(default_factory=dict)
    # a waiting fan-in step's last arrival: its arc's context, `output.data` as a pointer
    # to the result it was read from (orchestrator.joins `arc_record`)
    join_arcs: dict[str, dict[str, Any]] = field(default_factory=dict)
    # loop steps whose `loop.done` routes nowhere: a redrive runs exactly its items
    halt: list[str] = field(default_factory=list)

    def step(self, name: str) -> StepState:
        state = self.steps.get(name)
        if state is None:
            state = self.steps[name] = StepState()
        return state

    def result_pointers(self) -> dict[str, int]:
        return {
            name: st.result_epoch for name, st in self.steps.items() if st.result_epoch is not None
        }

    def to_json(self) -> dict[str, Any]:
        return {
            "execution_id": self.execution_id,
            "vars": self.vars,
            "steps": {name: st.to_json() for name, st in self.steps.items()},
            "ctx_version": self.ctx_version,
            "context_written": self.context_written,
            "in_flight": self.in_flight,
            "failures": self.failures,
            "failures_dropped": self.failures_dropped,
            "last_step": self.last_step,
            "status": self.status,
            **({"preplanned": self.preplanned} if self.preplanned else {}),
            **({"joins": self.joins} if self.joins else {}),
            **({"join_arcs": self.join_arcs} if self.join_arcs else {}),
            **({"halt": self.halt} if self.halt else {}),
        }

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> ExecutionState:
        return cls(
            execution_id=data["execution_id"],
            vars=dict(data.get("vars") or {}),
            steps={k: StepState.from_json(v) for k, v in (data.get("steps") or {}).items()},
            ctx_version=data.get("ctx_version", 0),
            context_written=data.get("context_written", -1),
            in_flight=data.get("in_flight", 0),
            failures=list(data.get("failures") or []),
            failures_dropped=data.get("failures_dropped", 0),
            last_step=data.get("last_step"),
            status=ExecutionStatus(data.get("status", RUNNING)),
            preplanned=dict(data.get("preplanned") or {}),
            joins={k: list(v) for k, v in (data.get("joins") or {}).items()},
            join_arcs={k: dict(v) for k, v in (data.get("join_arcs") or {}).items()},
            halt=list(data.get("halt") or []),
        )


# LoopProgress fields written only when set (snapshots without them read as they did),
# and those of cursor loops only
_ONLY_WHEN_SET = frozenset({"quarantined", "released", "unused", "errors", "chain"})
_CURSOR_ONLY = frozenset({"lanes", "max_rows", "row_concurrency", "per_frame", "claim_attempts"})
# every field, in declaration order (asdict's): a field added later is written too
_LOOP_FIELDS = tuple(f.name for f in fields(LoopProgress))
_LANE_FIELDS = tuple(f.name for f in fields(Lane))


def _loop_json(loop: LoopProgress) -> dict[str, Any]:
    data: dict[str, Any] = {}
    for name in _LOOP_FIELDS:
        value = getattr(loop, name)
        if (name in _CURSOR_ONLY and loop.lanes is None) or (name in _ONLY_WHEN_SET and not value):
            continue
        if name == "lanes":
            value = [_lane_json(lane) for lane in value]
        elif name == "released":  # copies: the pass changes its state after writing
            value = list(value)
        elif name == "errors":
            value = [dict(error) for error in value]
        data[name] = value
    return data


def _lane_json(lane: Lane) -> dict[str, Any]:
    data = {name: getattr(lane, name) for name in _LANE_FIELDS}
    if lane.body is None:  # snapshots without a reservation read as they did
        del data["body"]
    if not lane.chain_end:  # nor those without a chain
        del data["chain_end"]
    return data


def copy_state(state: ExecutionState) -> ExecutionState:
    """A copy of `state` that a pass may mutate without touching the original.

    Structural, not deep: a pass only ever assigns top-level variables (`set:`, a
    step's `ctx`) and never changes a variable's value in place, so the variable map is
    copied and its values shared; the counters (steps, loops, lanes) and the lists a
    pass appends to are copied. A deep copy of a state holding a 10k-item collection
    costs ~30 ms a pass, this one well under a millisecond (tests/unit/test_replay.py).
    """
    return replace(
        state,
        vars=dict(state.vars),
        steps={name: _copy_step(st) for name, st in state.steps.items()},
        failures=list(state.failures),
        preplanned=dict(state.preplanned),
        joins={name: list(arrived) for name, arrived in state.joins.items()},
        join_arcs=dict(state.join_arcs),  # records are replaced whole, never changed
    )


def _copy_step(st: StepState) -> StepState:
    loop = st.loop
    if loop is not None:
        lanes = None if loop.lanes is None else [replace(lane) for lane in loop.lanes]
        loop = replace(loop, lanes=lanes, errors=list(loop.errors), released=list(loop.released))
    return replace(st, loop=loop)
