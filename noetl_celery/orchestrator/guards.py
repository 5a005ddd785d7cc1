"""A step's enable guard: NoETL's step-level `when` (server `Step.when`, orchestrate-core
`evaluate_step_when` and its skip chain), evaluated by the pass (orchestrator.decide)
when the step is reached, in the context the arc that reached it saw (after the arc's
`set`).

False: the step does not run (no command, no result), a `step.skipped` event is recorded
and routing goes on through the first of its arcs that matches (NoETL's skip chain takes
the first match whatever the step's `next.spec.mode`), with `event.name: step.skipped`.
No arc matching ends that path, as a step without arcs does. A guard or arc that cannot
be rendered fails the step.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from noetl_celery.constants import EV_STEP_SKIPPED, StepStatus
from noetl_celery.errors import NoetlError, playbooks_fault
from noetl_celery.models.playbook import Step
from noetl_celery.orchestrator.decisions import EngineEvent
from noetl_celery.orchestrator.run import Run
from noetl_celery.orchestrator.variables import apply_set

# (the arc's target, the context it is entered with)
Chained = tuple[str, dict[str, Any]]


def evaluate(run: Run, step: Step, extra: Mapping[str, Any] | None) -> tuple[bool, Chained | None]:
    """(whether the step runs, where a skipped step's chain goes on)."""
    if step.when is None:
        return True, None
    st = run.state.step(step.step)
    if st.in_flight > 0 and step.loop is None:
        return True, None  # already running: the entry is deduplicated as before
    try:
        enabled = run.renderer.condition(step.when, run.context(extra), f"step '{step.step}' when")
    except NoetlError as exc:
        if not playbooks_fault(exc):
            raise
        run.fail(step.step, st.epoch, str(exc))
        return False, None
    if enabled:
        return True, None
    return False, skip(run, step, extra)


def skip(run: Run, step: Step, extra: Mapping[str, Any] | None) -> Chained | None:
    """Record the skip; the first matching arc to follow, None when none matches."""
    st = run.state.step(step.step)
    if st.status != StepStatus.RUNNING:  # a running loop keeps its status
        st.status = StepStatus.SKIPPED
    run.decision.events.append(
        EngineEvent(EV_STEP_SKIPPED, step.step, st.epoch, {"when": step.when})
    )
    chained = {**(extra or {}), "event": {"name": EV_STEP_SKIPPED, "step": step.step}}
    for index, arc in enumerate(step.arcs):
        try:
            where = f"step '{step.step}' next.arcs[{index}].when"
            if not run.renderer.condition(arc.when, run.context(chained), where):
                continue
            if arc.set:
                context = run.context(chained)
                where = f"step '{step.step}' arc set"
                apply_set(run.state.vars, arc.set, context, where, renderer=run.renderer)
                run.touch()
        except NoetlError as exc:
            if not playbooks_fault(exc):
                raise
            run.fail(step.step, st.epoch, str(exc))
            return None
        return arc.step, chained
    return None
