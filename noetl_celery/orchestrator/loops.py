"""`loop.in` epochs: plan once, keep a window of iterations in flight, count, finish once.

Entering a loop step renders `loop.in` once and plans every item as a command row; the
window (`max_in_flight`, 1 for sequential) is issued and refilled as completions arrive.
When every iteration is terminal the epoch emits `loop.done` (unique per epoch in the
event table), its result becomes `{stats: {total, success, failed}, results: [...]}` and
only then are the step's arcs evaluated with `event.name == "loop.done"`.
"""

from __future__ import annotations

import bisect
import json
from collections.abc import Mapping, Sequence
from typing import Any

from noetl_celery.constants import StepStatus
from noetl_celery.errors import NoetlError, playbooks_fault
from noetl_celery.models.playbook import FrameSpec, Playbook, Step
from noetl_celery.orchestrator import cursor
from noetl_celery.orchestrator.decisions import Completion, LoopMirror, LoopPlan
from noetl_celery.orchestrator.iterations import (
    apply_iteration,
    finish_loop,
    issue_range,
    mirror_of,
)
from noetl_celery.orchestrator.run import Run
from noetl_celery.orchestrator.state import ExecutionState, LoopProgress, StepState


def as_collection(value: Any) -> Sequence[Any]:
    """NoETL's coercion of a rendered `loop.in`: a list stays, None is empty, a JSON list
    in a string is parsed, anything else (a dict, a scalar) is a one-item list. A
    `range` stays a range (its numbers, planned chunk by chunk, never built as a list)."""
    if value is None:
        return []
    if isinstance(value, list | range):
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


def collection_of(run: Run, step: Step) -> Sequence[Any]:
    """The items of a `loop.in`; `{{ range(n) | list }}` stays an unbuilt range."""
    assert step.loop is not None
    where, context = f"step '{step.step}' loop.in", run.context()
    lazy = run.renderer.lazy_range(step.loop.in_, context, where)
    if lazy is not None:
        return lazy
    return as_collection(run.renderer.value(step.loop.in_, context, where))


def window_of(run: Run, step: Step, default: int | None = None) -> int:
    assert step.loop is not None
    spec = step.loop.spec
    if spec.mode == "sequential":
        return 1
    raw = spec.max_in_flight
    if raw is None:
        return default if default is not None else run.limits.default_parallel_window
    return positive_int(run, step, raw, "loop.spec.max_in_flight")


def cursor_window(run: Run, step: Step) -> int:
    """How many rows of a cursor loop run at once: its lanes times each lane's rows."""
    assert step.loop is not None
    frame = step.loop.spec.frame or FrameSpec.model_validate({})
    rows = positive_int(run, step, frame.row_concurrency, "loop.spec.frame.row_concurrency")
    return window_of(run, step, default=1) * rows


def positive_int(run: Run, step: Step, raw: int | str, field: str) -> int:
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


def enter_loop(run: Run, step: Step) -> None:
    assert step.loop is not None
    st = run.state.step(step.step)
    if st.loop is not None and not st.loop.done:
        return  # an epoch is still running; a concurrent second epoch would orphan it
    st.epoch += 1
    epoch = st.epoch
    preplanned = run.state.preplanned.pop(step.step, None) if epoch == 1 else None
    if preplanned is not None:  # checked first: a cursor's redrive claims nothing
        enter_preplanned(run, step, preplanned)
        return
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
            if not playbooks_fault(exc):
                raise
            run.fail(step.step, epoch, str(exc))
            return
        cursor.enter_cursor(run, step, window, max_rows, row_concurrency, attempts)
        return
    try:
        items = collection_of(run, step)
        window = window_of(run, step)
    except NoetlError as exc:
        if not playbooks_fault(exc):
            raise
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


def given_problem(
    playbook: Playbook, entry: str, loop_items: Mapping[str, Sequence[Any]]
) -> str | None:
    """Why decide.start cannot begin at `entry` with `loop_items` (the engine checks
    first; this keeps the core from issuing a command of a step that does not exist)."""
    if not playbook.has_step(entry):
        return f"cannot start at step '{entry}': the playbook has no such step"
    for name in loop_items:
        loop = playbook.step(name).loop if playbook.has_step(name) else None
        if loop is None:
            return f"loop items given for step '{name}', which is not a loop"
        if loop.is_cursor and loop.spec.frame is not None and loop.spec.frame.process == "frame":
            return f"loop items given for step '{name}', whose cursor runs a body per frame"
    return None


def plan_given(run: Run, playbook: Playbook, loop_items: Mapping[str, Sequence[Any]]) -> None:
    """Plan the items given at start as the first epoch of their loops (stored once, now;
    `enter_preplanned` issues them when the step is entered)."""
    for name, items in loop_items.items():
        loop = playbook.step(name).loop
        assert loop is not None
        meta: dict[str, Any] = {"iterator": loop.iterator, "total": len(items)}
        if loop.is_cursor:
            # a redrive's rows, claimed by the original: its bodies run them as one frame
            # of one lane of this epoch (`iter._worker_slot_id`, `_frame_index` and
            # `_frame_row_index` render), and nothing claims from the queue
            meta.update(lane=0, frame=1, frame_start=0)
        if items:
            run.decision.plans.append(
                LoopPlan(
                    step=name,
                    epoch=1,
                    items=list(items),
                    ctx_version=run.ctx_version(),
                    meta=meta,
                )
            )
        run.state.preplanned[name] = len(items)


def enter_preplanned(run: Run, step: Step, total: int) -> None:
    """The first epoch of a loop whose items were given at start (decide.start's
    `loop_items`, a rerun of failed items): they are planned rows already, `loop.in` is
    not rendered; later epochs render it as usual. A cursor's (a redrive of the rows its
    original claimed) claims nothing: its rows run as a `loop.in` epoch's items, as many
    at once as its lanes would (`max_in_flight` x `frame.row_concurrency`)."""
    assert step.loop is not None
    st = run.state.step(step.step)
    try:
        window = cursor_window(run, step) if step.loop.is_cursor else window_of(run, step)
    except NoetlError as exc:
        if not playbooks_fault(exc):
            raise
        run.fail(step.step, st.epoch, str(exc))
        return
    st.status = StepStatus.RUNNING
    st.loop = LoopProgress(epoch=st.epoch, total=total, window=window, mode=step.loop.spec.mode)
    run.touched_loops.add(step.step)
    if total == 0:
        finish_loop(run, step, st)
    else:
        refill(run, step.step, st)


def refill(run: Run, name: str, st: StepState) -> None:
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


def on_iteration(run: Run, step: Step, completion: Completion) -> None:
    st = run.state.step(step.step)
    progress = st.loop
    if progress is None or progress.epoch != completion.epoch or progress.done:
        return  # stale: an older epoch, or a duplicate after the epoch finished
    if progress.lanes is not None:
        cursor.on_body(run, step, completion)
        return
    if completion.iteration in progress.released:
        # its window slot was given back when it parked (on_parked): not again
        progress.released.remove(completion.iteration)
    else:
        progress.in_flight -= 1
    run.state.in_flight -= 1
    apply_iteration(run, step, completion)
    if progress.finished >= progress.total:
        finish_loop(run, step, st)
    else:
        refill(run, step.step, st)


def on_parked(run: Run, step: Step, parked: Completion) -> None:
    """A loop item parked for its rate_limit key's turn (`item.throttled`, written by
    the worker that parked it, once per item run): its slot of the window is given
    back and the window refilled, so the items of other keys are not held to the pace
    of a slow key whose parked items would fill the window. It stays in the
    execution's in_flight (the execution does not end before it), and its later
    completion does not give the slot back again (`released`).

    A sequential loop's item keeps its slot (its items run one at a time, in order).
    Bounded: an item whose turn is further than `release_horizon_seconds` keeps its
    slot, and so does every item past `max_in_flight` x `released_per_window` given
    back at once: a loop of one slow key then waits for it as before (its turns are
    booked at most about that far ahead) instead of booking turns without end. A
    second event of the same item (a worker killed after parking it, its next
    attempt parking again) changes nothing."""
    st = run.state.step(step.step)
    progress = st.loop
    index = parked.iteration
    if (
        index is None
        or progress is None
        or progress.epoch != parked.epoch
        or progress.done
        or progress.lanes is not None  # a cursor's bodies: its lanes count them
        or progress.mode == "sequential"  # one item at a time, in order: it waits
        or index >= progress.next_index  # never issued (a stale event of another plan)
        or index in progress.released
        or progress.in_flight <= 0
    ):
        return
    if parked.parked_for is None or parked.parked_for > run.limits.release_horizon_seconds:
        return
    if len(progress.released) >= progress.window * run.limits.released_per_window:
        return
    bisect.insort(progress.released, index)
    progress.in_flight -= 1
    refill(run, step.step, st)


def mirrors_of(state: ExecutionState) -> dict[str, LoopMirror]:
    """The mirror of every loop epoch the state holds (its current one per step)."""
    return {
        name: mirror_of(name, st.loop) for name, st in state.steps.items() if st.loop is not None
    }


def mirrors(run: Run) -> list[LoopMirror]:
    """The loops rows this pass writes: every epoch it started or finished, and every
    epoch whose counters a worker's close reads mid-loop (done, window, in flight)
    changed. A pass that only folds completions and refills the window leaves those
    as they were, so most passes of a long loop write no row: the succeeded/failed
    counters of a running epoch are live in the state snapshot (engine.summaries)."""
    current = {
        (name, m.epoch): m
        for name, m in mirrors_of(run.state).items()
        if name in run.touched_loops or _close_reads_changed(run.loops_before.get(name), m)
    }
    for m in run.finished_loops:
        current.setdefault((m.step, m.epoch), m)  # an epoch the state no longer holds
    return [current[key] for key in sorted(current)]


def _close_reads_changed(before: LoopMirror | None, after: LoopMirror) -> bool:
    """Whether a close would read another answer from the epoch's row than before."""
    if before is None or before.epoch != after.epoch:
        return True
    return (before.done, before.window, before.in_flight) != (
        after.done,
        after.window,
        after.in_flight,
    )
