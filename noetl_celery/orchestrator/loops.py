"""`loop.in` epochs: plan once, keep a window of iterations in flight, count, finish once.

Entering a loop step renders `loop.in` once and plans every item as a command row; the
window (`max_in_flight`, 1 for sequential) is issued and refilled as completions arrive.
When every iteration is terminal the epoch emits `loop.done` (unique per epoch in the
event table), its result becomes `{stats: {total, success, failed}, results: [...]}` and
only then are the step's arcs evaluated with `event.name == "loop.done"`.
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

from noetl_celery.constants import EV_LOOP_DONE, LOOP_DONE, StepStatus
from noetl_celery.errors import NoetlError
from noetl_celery.models.outcome import Outcome, StepError, error_message, output_view
from noetl_celery.models.playbook import FrameSpec, Step
from noetl_celery.orchestrator import cursor
from noetl_celery.orchestrator.decisions import (
    Completion,
    EngineEvent,
    IssueRange,
    LoopMirror,
    LoopPlan,
)
from noetl_celery.orchestrator.state import ExecutionState, ItemError, LoopProgress, StepState
from noetl_celery.orchestrator.variables import apply_set
from noetl_celery.templating.context import iteration_names

if TYPE_CHECKING:
    from noetl_celery.orchestrator.decide import Pass


# item errors an epoch keeps in the execution's snapshot (and names in its failure)
ITEM_ERRORS_KEPT = 5
# characters of one item error's message kept there
ITEM_ERROR_CHARS = 500


def item_error(completion: Completion) -> ItemError:
    """`{item, kind, message}` of a failed iteration (item: its index in the epoch)."""
    error = completion.outcome.error
    kind = error.kind if error is not None else None
    message = error_message(error)
    if len(message) > ITEM_ERROR_CHARS:
        message = message[: ITEM_ERROR_CHARS - 1] + "…"
    return {"item": completion.iteration, "kind": kind or "error", "message": message}


def keep_item_error(kept: list[ItemError], error: ItemError) -> None:
    """Keep the errors of the lowest item indexes, in index order: what an epoch reports
    then does not depend on the order in which parallel items happened to finish."""
    kept.append(error)
    kept.sort(key=lambda e: -1 if e["item"] is None else e["item"])
    del kept[ITEM_ERRORS_KEPT:]


def event(type_: str, step: str | None, epoch: int | None, payload: dict[str, Any]) -> EngineEvent:
    return EngineEvent(type=type_, step=step, epoch=epoch, payload=payload)


def as_collection(value: Any) -> list[Any]:
    """NoETL's coercion of a rendered `loop.in`: a list stays, None is empty, a JSON list
    in a string is parsed, anything else (a dict, a scalar) is a one-item list."""
    if value is None:
        return []
    if isinstance(value, list):
        return value
    if isinstance(value, tuple):
        return list(value)
    if isinstance(value, str) and value.strip().startswith("["):
        try:
            parsed = json.loads(value)
        except ValueError:
            return [value]
        return parsed if isinstance(parsed, list) else [value]
    return [value]


def window_of(run: Pass, step: Step, default: int | None = None) -> int:
    assert step.loop is not None
    spec = step.loop.spec
    if spec.mode == "sequential":
        return 1
    raw = spec.max_in_flight
    if raw is None:
        return default if default is not None else run.limits.default_parallel_window
    return positive_int(run, step, raw, "loop.spec.max_in_flight")


def positive_int(run: Pass, step: Step, raw: int | str, field: str) -> int:
    """A loop size that may be a template; rendered against the current context."""
    value = run.renderer.value(raw, run.context(), f"step '{step.step}' {field}")
    try:
        number = int(value)
    except (TypeError, ValueError):
        raise NoetlError(
            f"step '{step.step}': {field} rendered to {value!r}, not an integer"
        ) from None
    if number < 1:
        raise NoetlError(f"step '{step.step}': {field} must be >= 1, got {number}")
    return number


def enter_loop(run: Pass, step: Step) -> None:
    assert step.loop is not None
    st = run.state.step(step.step)
    if st.loop is not None and not st.loop.done:
        return  # an epoch is still running; a concurrent second epoch would orphan it
    st.epoch += 1
    epoch = st.epoch
    if step.loop.is_cursor:
        frame = step.loop.spec.frame or FrameSpec.model_validate({})
        try:
            window = window_of(run, step, default=1)
            max_rows = positive_int(run, step, frame.max_rows, "loop.spec.frame.max_rows")
            row_concurrency = positive_int(
                run, step, frame.row_concurrency, "loop.spec.frame.row_concurrency"
            )
            attempts = (
                run.limits.claim_attempts
                if frame.max_attempts is None
                else positive_int(run, step, frame.max_attempts, "loop.spec.frame.max_attempts")
            )
        except NoetlError as exc:
            run.fail(step.step, epoch, str(exc))
            return
        cursor.enter_cursor(run, step, window, max_rows, row_concurrency, attempts)
        return
    preplanned = run.state.preplanned.pop(step.step, None) if epoch == 1 else None
    if preplanned is not None:
        enter_preplanned(run, step, preplanned)
        return
    try:
        items = as_collection(
            run.renderer.value(step.loop.in_, run.context(), f"step '{step.step}' loop.in")
        )
        window = window_of(run, step)
    except NoetlError as exc:
        run.fail(step.step, epoch, str(exc))
        return
    st.status = StepStatus.RUNNING
    st.loop = LoopProgress(epoch=epoch, total=len(items), window=window, mode=step.loop.spec.mode)
    run.touched_loops.add(step.step)
    if not items:
        finish_loop(run, step, st)
        return
    run.decision.plans.append(
        LoopPlan(
            step=step.step,
            epoch=epoch,
            items=items,
            ctx_version=run.ctx_version(),
            meta={"iterator": step.loop.iterator, "total": len(items)},
        )
    )
    refill(run, step.step, st)


def enter_preplanned(run: Pass, step: Step, total: int) -> None:
    """The first epoch of a loop whose items were given at start (decide.start's
    `loop_items`, a rerun of failed items): they are planned rows already, `loop.in` is
    not rendered; later epochs render it as usual."""
    assert step.loop is not None
    st = run.state.step(step.step)
    try:
        window = window_of(run, step)
    except NoetlError as exc:
        run.fail(step.step, st.epoch, str(exc))
        return
    st.status = StepStatus.RUNNING
    st.loop = LoopProgress(epoch=st.epoch, total=total, window=window, mode=step.loop.spec.mode)
    run.touched_loops.add(step.step)
    if total == 0:
        finish_loop(run, step, st)
    else:
        refill(run, step.step, st)


def refill(run: Pass, name: str, st: StepState) -> None:
    progress = st.loop
    assert progress is not None
    count = min(progress.window - progress.in_flight, progress.total - progress.next_index)
    if count <= 0:
        return
    start, stop = progress.next_index, progress.next_index + count
    issue_range(run, name, progress.epoch, start, stop)
    progress.next_index = stop
    progress.in_flight += count
    run.state.in_flight += count


def issue_range(run: Pass, name: str, epoch: int, start: int, stop: int) -> None:
    """Issue planned iterations [start, stop), merged with the previous range when they
    continue it (one UPDATE instead of one per completion)."""
    version = run.ctx_version()
    issues = run.decision.issues
    last = issues[-1] if issues else None
    if last is not None and (last.step, last.epoch, last.stop, last.ctx_version) == (
        name,
        epoch,
        start,
        version,
    ):
        issues[-1] = IssueRange(name, epoch, last.start, stop, version)
    else:
        issues.append(IssueRange(name, epoch, start, stop, version))


def apply_iteration(run: Pass, step: Step, completion: Completion, weight: int = 1) -> None:
    """Count a finished iteration (`weight` rows for a cursor frame body) and apply what
    it reports."""
    progress = run.state.step(step.step).loop
    assert progress is not None
    outcome = completion.outcome
    if completion.ok:
        progress.succeeded += weight
    else:
        progress.failed += weight
        keep_item_error(progress.errors, item_error(completion))
    if outcome.ctx:
        run.state.vars.update(outcome.ctx)
        run.touch()
    if completion.ok and step.set:
        _iteration_set(run, step, completion)


def on_iteration(run: Pass, step: Step, completion: Completion) -> None:
    st = run.state.step(step.step)
    progress = st.loop
    if progress is None or progress.epoch != completion.epoch or progress.done:
        return  # stale: an older epoch, or a duplicate after the epoch finished
    if progress.lanes is not None:
        cursor.on_body(run, step, completion)
        return
    progress.in_flight -= 1
    run.state.in_flight -= 1
    apply_iteration(run, step, completion)
    if progress.finished >= progress.total:
        finish_loop(run, step, st)
    else:
        refill(run, step.step, st)


def _iteration_set(run: Pass, step: Step, completion: Completion) -> None:
    """Step-level `set` runs after every successful iteration (NoETL semantics)."""
    assert step.loop is not None
    scope = dict(completion.outcome.iter or {})
    item = scope.get(step.loop.iterator)
    names = iteration_names(step.loop.iterator, item, completion.iteration or 0, None, scope)
    extra = {"output": output_view(completion.outcome), "event": {"name": "call.done"}, **names}
    try:
        apply_set(
            run.state.vars,
            step.set,
            run.context(extra),
            f"step '{step.step}' set",
            renderer=run.renderer,
        )
    except NoetlError as exc:
        run.fail(step.step, completion.epoch, str(exc))
    run.touch()


def finish_loop(run: Pass, step: Step, st: StepState) -> None:
    progress = st.loop
    assert progress is not None
    progress.done = True
    st.status = StepStatus.COMPLETED
    run.touched_loops.add(step.step)
    # the finished epoch's row, kept apart: the same pass may re-enter the step (an arc
    # back to itself), replacing the epoch the state holds before the pass ends
    run.finished_loops.append(mirror_of(step.step, progress))
    cap = run.limits.loop_results_cap
    per_item = run.facts.iteration_results(step.step, progress.epoch, cap) if progress.total else []
    stats = {"total": progress.total, "success": progress.succeeded, "failed": progress.failed}
    aggregate = {"stats": stats, "results": per_item}
    run.decision.events.append(event(EV_LOOP_DONE, step.step, progress.epoch, {"stats": stats}))
    run.record_result(step.step, progress.epoch, "ok", aggregate)
    run.state.last_step = step.step
    if progress.failed:
        # NoETL fails the execution on any unhandled iteration error, and so does every
        # peer (Airflow: a failed mapped task fails the run). The loop still completes
        # and routes; the execution ends FAILED once its flow is done. A body policy that
        # continues past the error (or a retry that succeeds) makes the item a success.
        fail_items(run, step, progress)
    output = output_view(Outcome("ok", aggregate))
    run.route(step, progress.epoch, output, LOOP_DONE)


def fail_items(run: Pass, step: Step, progress: LoopProgress) -> None:
    """Record the epoch's unhandled item failures as the step's failure."""
    noun = "item" if progress.total == 1 else "items"
    first = "; ".join(f"item {e['item']}: {e['message']}" for e in progress.errors[:3])
    message = f"{progress.failed} of {progress.total} {noun} failed"
    if first:
        message += f" (first: {first})"
    counts = {"failed": progress.failed, "total": progress.total, "items": list(progress.errors)}
    error = StepError("items_failed", message, extra=counts)
    run.fail(step.step, progress.epoch, message, error)


def mirror_of(name: str, progress: LoopProgress) -> LoopMirror:
    return LoopMirror(
        step=name,
        epoch=progress.epoch,
        mode=progress.mode,
        total=progress.total,
        issued=progress.next_index,
        succeeded=progress.succeeded,
        failed=progress.failed,
        done=progress.done,
        window=progress.window,
        in_flight=progress.in_flight,
    )


def mirrors_of(state: ExecutionState) -> dict[str, LoopMirror]:
    """The mirror of every loop epoch the state holds (its current one per step)."""
    return {
        name: mirror_of(name, st.loop) for name, st in state.steps.items() if st.loop is not None
    }


def mirrors(run: Pass) -> list[LoopMirror]:
    """The loops rows this pass changed: every epoch whose counters differ from the
    state the pass started from (a worker's close reads them mid-loop), and every epoch
    it started or finished."""
    current = {
        (name, m.epoch): m
        for name, m in mirrors_of(run.state).items()
        if name in run.touched_loops or run.loops_before.get(name) != m
    }
    for m in run.finished_loops:
        current.setdefault((m.step, m.epoch), m)  # an epoch the state no longer holds
    return [current[key] for key in sorted(current)]
