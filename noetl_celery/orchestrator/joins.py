"""The fan-in barrier and untaken branches: pure functions of an execution's
state and its playbook's arc graph (models.playbook `ArcGraph`), used by the pass
(orchestrator.decide).

Fan-in barrier (NoETL server orchestrate-core/src/orchestrator.rs, read at 3.83.1:
`build_incoming_arcs`, `live_reachable` and the "R4 fan-in / reduce barrier" of v2.49.0
#142, ai-meta#83/#120; `step.skipped` for untaken siblings of v2.57.2, ai-meta#67):
- a step is a fan-in step when two or more *steps* have arcs to it, not counting
  back-edges (an arc from a step the target reaches again: a loop's way back, `next:
  self`); several arcs of one step to it count once (models.playbook `ArcGraph`);
- an arc of an upstream reaching a fan-in step is an *arrival* (recorded in the state's
  `joins`); the step is entered once every upstream has arrived or can no longer fire,
  and its arrivals are then cleared (a later arrival starts the next epoch's barrier);
- an upstream can still fire when it is running (a command or a loop in flight), is
  queued to be entered in this pass, or is reachable by arcs from one of those; a
  skipped step, a step whose arcs did not choose the fan-in step, a failed branch that
  routed elsewhere and whatever only they lead to can no longer fire (NoETL's
  `live_reachable` seeds: running steps and the steps entered in the pass);
- waiting fan-in steps are checked again after each completion, so a branch that ends
  without arriving releases the barrier; an entry that is not an arc of an upstream
  (the start, a rerun's entry, a back-edge) passes straight through;
- a join released by that re-check (no arc reached it in this pass) is entered with the
  context of its last arrival's arc, as an arrival is: `event`, `error` and `output` of
  the arc (NoETL dispatches a released join from an arrived upstream's arc too). The
  state keeps that context while the join waits (`join_arcs`), without `output.data`:
  a pointer to the result it was read from, read again on release;
- a router's arc targets it did not choose (a `when` that did not match, in either
  mode, or an exclusive router's later arcs) record `step.skipped` (`reason` the
  router's mode) when they were never entered and no live step can still reach them,
  unless the router is on a cycle (a pagination branch point's exit is "not this
  iteration", not dead: NoETL skips those too). NoETL records it for every unmatched
  target and then treats the step as done, dropping any later arc to it (a step that
  another branch still reaches never runs: docs/compatibility.md, Deliberate
  differences); skipping only what nothing can reach, a step marked skipped here is
  never reached again by the flow that skipped it.
Differences: NoETL never re-enters a finished step except by a loop back-edge; here a
barrier passed once waits again for the next arrivals (a new epoch). A failed upstream
that still arrives (an unconditional arc) is an arrival and the execution ends FAILED
after the joined step, as without a barrier. Exactly one command per barrier pass: passes
are serialized per execution and the joined step's command id is (execution, step,
epoch), inserted ON CONFLICT DO NOTHING (tests/integration/test_distributed.py).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any, NamedTuple

from noetl_celery.constants import EV_STEP_SKIPPED, StepStatus
from noetl_celery.models.outcome import output_data
from noetl_celery.models.playbook import ArcGraph
from noetl_celery.models.shapes import with_read_aliases
from noetl_celery.orchestrator.decisions import EngineEvent
from noetl_celery.orchestrator.state import ExecutionState

# (step, epoch) of the result an arc's `output.data` was read from
Origin = tuple[str, int]


class Entry(NamedTuple):
    """A step to enter in this pass."""

    name: str
    # the context of the arc that reached it (what a step-level `when` sees: the routing
    # step's `output`, `event`, `error`); None when not reached by an arc
    extra: Mapping[str, Any] | None
    source: str | None  # the step whose arc it was (None: not an arc, e.g. the start)
    origin: Origin | None = None  # where `extra`'s `output.data` came from
    released: bool = False  # a join whose barrier the re-check passed: no barrier again


def arrive(state: ExecutionState, graph: ArcGraph, entry: Entry, queued: Iterable[str]) -> bool:
    """Record the arc of `entry.source` reaching `entry.name`; True when the step may be
    entered now (not a fan-in step, not one of its upstreams, or the barrier is passed).
    `queued`: the steps waiting to be entered in this pass."""
    name, source = entry.name, entry.source
    if source is None or source not in graph.fan_in(name):
        return True
    arrived = state.joins.setdefault(name, [])
    if source not in arrived:
        arrived.append(source)
        arrived.sort()
    state.join_arcs[name] = arc_record(entry)
    return pass_barrier(state, graph, name, queued)


def arc_record(entry: Entry) -> dict[str, Any]:
    """What the state keeps of a waiting join's last arrival: the arc's context without
    `output.data` when its origin is known (the result is history: read on release)."""
    extra = dict(entry.extra or {})
    record: dict[str, Any] = {"source": entry.source}
    output = extra.pop("output", None)
    if isinstance(output, Mapping) and entry.origin is not None:
        record["output"] = {k: v for k, v in output.items() if k != "data"}
        record["origin"] = list(entry.origin)
    elif output is not None:
        extra["output"] = output
    record["extra"] = extra
    return record


def arc_entry(name: str, record: Mapping[str, Any], result: Callable[[str, int], Any]) -> Entry:
    """A released join's entry, in the context its last arrival's arc gave (`result`
    reads the step result `output.data` came from)."""
    extra: dict[str, Any] = dict(record.get("extra") or {})
    origin: Origin | None = None
    if "origin" in record:
        step, epoch = record["origin"]
        origin = (step, int(epoch))
        data = output_data(with_read_aliases(result(step, origin[1])))
        extra["output"] = {**record.get("output", {}), "data": data}
    return Entry(name, extra or None, record.get("source"), origin, released=True)


def pass_barrier(state: ExecutionState, graph: ArcGraph, name: str, queued: Iterable[str]) -> bool:
    """True (and the arrivals cleared) when every upstream of fan-in step `name` has
    arrived or can no longer fire."""
    arrived = state.joins.get(name, [])
    waiting = [u for u in graph.fan_in(name) if u not in arrived]
    if waiting:
        live = live_steps(state, queued)
        for upstream in waiting:
            if upstream in live or any(upstream in graph.reach[s] for s in live):
                return False
    state.joins.pop(name, None)
    state.join_arcs.pop(name, None)
    return True


def live_steps(state: ExecutionState, queued: Iterable[str]) -> set[str]:
    """Steps that can still route: running (a command or a loop in flight) or queued to
    be entered in this pass."""
    live = {
        name
        for name, st in state.steps.items()
        if st.in_flight > 0 or st.status == StepStatus.RUNNING
    }
    live.update(queued)
    return live


def released(
    state: ExecutionState, graph: ArcGraph, queued: Iterable[str]
) -> list[tuple[str, dict[str, Any]]]:
    """The waiting fan-in steps whose barrier is passed now (their arrivals cleared),
    each with its last arrival's `arc_record`."""
    waiting = set(queued)
    passed = []
    for name in sorted(state.joins):
        record = state.join_arcs.get(name) or {"source": state.joins[name][-1]}
        if pass_barrier(state, graph, name, waiting):
            passed.append((name, record))
    return passed


def skip_untaken(
    state: ExecutionState,
    graph: ArcGraph,
    router: str,
    mode: str,
    targets: Sequence[str],
    queued: set[str],
) -> list[EngineEvent]:
    """A router's arc targets neither taken nor queued, never entered and out of every
    live step's reach are marked skipped, a `step.skipped` event each (NoETL server
    v2.57.2, both modes); none for a router on a cycle. `queued` holds the taken ones."""
    if graph.on_cycle(router):
        return []
    live = live_steps(state, queued)
    events: list[EngineEvent] = []
    for target in dict.fromkeys(targets):
        if target in queued or target in state.joins:
            continue  # chosen, or reached by another path (waiting at its barrier)
        if any(target in graph.reach[s] for s in live):
            continue  # another path can still reach it: not dead
        known = state.steps.get(target)
        if known is not None and (
            known.epoch > 0 or known.in_flight > 0 or known.status != StepStatus.NOT_STARTED
        ):
            continue
        st = state.step(target)
        st.status = StepStatus.SKIPPED
        events.append(
            EngineEvent(EV_STEP_SKIPPED, target, st.epoch, {"reason": mode, "by": router})
        )
    return events
