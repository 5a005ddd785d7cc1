"""The fan-in barrier and untaken exclusive branches: pure functions of an execution's
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
- an exclusive router's untaken arc targets that were never entered record
  `step.skipped` (`reason: exclusive`), unless the router is on a cycle (a pagination
  branch point's exit is "not this iteration", not dead: NoETL skips those too).
Differences: NoETL never re-enters a finished step except by a loop back-edge; here a
barrier passed once waits again for the next arrivals (a new epoch). A failed upstream
that still arrives (an unconditional arc) is an arrival and the execution ends FAILED
after the joined step, as without a barrier. Exactly one command per barrier pass: passes
are serialized per execution and the joined step's command id is (execution, step,
epoch), inserted ON CONFLICT DO NOTHING (tests/integration/test_distributed.py).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from noetl_celery.constants import EV_STEP_SKIPPED, StepStatus
from noetl_celery.models.playbook import ArcGraph
from noetl_celery.orchestrator.decisions import EngineEvent
from noetl_celery.orchestrator.state import ExecutionState


def arrive(
    state: ExecutionState, graph: ArcGraph, name: str, source: str, queued: Iterable[str]
) -> bool:
    """Record `source`'s arc reaching `name`; True when `name` may be entered now (not a
    fan-in step, not one of its upstreams, or the barrier is passed). `queued`: the
    steps waiting to be entered in this pass."""
    if source not in graph.fan_in(name):
        return True
    arrived = state.joins.setdefault(name, [])
    if source not in arrived:
        arrived.append(source)
        arrived.sort()
    return pass_barrier(state, graph, name, queued)


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


def released(state: ExecutionState, graph: ArcGraph, queued: Iterable[str]) -> list[str]:
    """The waiting fan-in steps whose barrier is passed now (their arrivals cleared)."""
    waiting = set(queued)
    return [name for name in sorted(state.joins) if pass_barrier(state, graph, name, waiting)]


def skip_untaken(
    state: ExecutionState,
    graph: ArcGraph,
    router: str,
    targets: Sequence[str],
    taken: set[str],
) -> list[EngineEvent]:
    """An exclusive router's arc targets neither taken nor queued and never entered are
    marked skipped, a `step.skipped` event each (NoETL server v2.57.2); none for a
    router on a cycle."""
    if graph.on_cycle(router):
        return []
    events: list[EngineEvent] = []
    for target in targets:
        if target in taken:
            continue
        known = state.steps.get(target)
        if known is not None and (
            known.epoch > 0 or known.in_flight > 0 or known.status != StepStatus.NOT_STARTED
        ):
            continue
        st = state.step(target)
        st.status = StepStatus.SKIPPED
        events.append(
            EngineEvent(EV_STEP_SKIPPED, target, st.epoch, {"reason": "exclusive", "by": router})
        )
    return events
