"""`loop.cursor` epochs: lanes that claim frames of rows until the work queue is drained.

Each of the `max_in_flight` lanes runs: a claim command (the claim SQL, run by a worker
through a cursor driver) -> one body command per claimed row, at most
`frame.row_concurrency` of them in flight -> the lane's next claim once every row of
the frame is finished. No worker slot is held between frames: a frame is just commands.
A claim that returns no rows drains its lane; when every lane is drained and nothing is
in flight, `loop.done` (unique per epoch), then the step's arcs.

A claim that fails with a retryable error (the queue database restarting, a deadlock)
rolled its transaction back, so no row was taken: the lane claims the same frame again
as the claim's next attempt (`:a<n>`, a deterministic id like the reaper's re-issues),
parked for a backoff that doubles per attempt (`delay_seconds`: the engine stores a due
time and the reaper's sweep publishes it then; no worker waits). After
`frame.max_attempts` runs (default `Limits.claim_attempts`) the step fails with the
claim's last error. Any other claim error fails the step at once.

Body commands are planned as loop iterations numbered across the epoch, so a lane's
frame is a contiguous iteration range; a body's lane is the lane whose range holds it.
"""

from __future__ import annotations

from typing import Any

from noetl_celery.constants import KIND_CLAIM, StepStatus
from noetl_celery.models.outcome import Outcome, error_message
from noetl_celery.models.playbook import Step
from noetl_celery.orchestrator.decisions import Completion, Limits, LoopPlan, NewCommand
from noetl_celery.orchestrator.ids import attempt_of, claim_command_id, parse_claim, with_attempt
from noetl_celery.orchestrator.iterations import apply_iteration, finish_loop, issue_range
from noetl_celery.orchestrator.run import Run
from noetl_celery.orchestrator.state import Lane, LoopProgress, StepState


def enter_cursor(
    run: Run, step: Step, window: int, max_rows: int, row_concurrency: int, claim_attempts: int
) -> None:
    """Start a new epoch: `window` lanes, each claiming its first frame.

    With `frame.process: frame` a frame has one body command whose item is the list of
    its rows (bulk processing); counts are still per row."""
    assert step.loop is not None
    frame = step.loop.spec.frame
    per_frame = frame is not None and frame.process == "frame"
    concurrency = 1 if per_frame else row_concurrency
    st = run.state.step(step.step)
    st.status = StepStatus.RUNNING
    st.loop = LoopProgress(
        epoch=st.epoch,
        total=0,
        window=window * concurrency,
        mode="cursor",
        lanes=[Lane() for _ in range(window)],
        max_rows=max_rows,
        row_concurrency=concurrency,
        per_frame=per_frame,
        claim_attempts=claim_attempts,
    )
    run.touched_loops.add(step.step)
    for lane in range(window):
        _claim(run, step, st, lane)


def _claim(
    run: Run, step: Step, st: StepState, lane_no: int, attempt: int = 1, delay: float = 0.0
) -> None:
    """Issue the lane's claim of its next frame, or (`attempt` > 1) of the same frame
    again after `delay` seconds."""
    progress = st.loop
    assert progress is not None and progress.lanes is not None
    lane = progress.lanes[lane_no]
    if attempt == 1:
        lane.frame += 1
    lane.claiming = True
    progress.in_flight += 1
    run.state.in_flight += 1
    base = claim_command_id(run.state.execution_id, step.step, progress.epoch, lane_no, lane.frame)
    meta: dict[str, Any] = {"max_rows": progress.max_rows}
    if progress.per_frame:  # the worker may run the frame's body itself next
        meta["process"] = "frame"
    run.decision.commands.append(
        NewCommand(
            command_id=with_attempt(base, attempt),
            step=step.step,
            kind=KIND_CLAIM,
            epoch=progress.epoch,
            ctx_version=run.ctx_version(),
            item={"lane": lane_no, "frame": lane.frame},
            meta=meta,
            attempt=attempt,
            delay_seconds=delay,
        )
    )


def claim_backoff(limits: Limits, attempt: int) -> float:
    """Seconds to wait before run `attempt` (>= 2) of a claim: the base delay, doubled
    for every run after the second, capped. Deterministic (no jitter): a pass redone
    decides the same. The reaper's sweep interval rounds it up in practice."""
    delay = limits.claim_retry_delay_seconds * 2 ** min(attempt - 2, 30)
    return float(min(delay, limits.max_retry_delay_seconds))


def on_claim(run: Run, step: Step, completion: Completion) -> None:
    st = run.state.step(step.step)
    progress = st.loop
    coordinate = parse_claim(completion.command_id)
    if progress is None or progress.lanes is None or coordinate is None:
        return
    lane_no, frame = coordinate
    if progress.epoch != completion.epoch or progress.done or lane_no >= len(progress.lanes):
        return  # stale: an older epoch
    lane = progress.lanes[lane_no]
    if not lane.claiming or lane.frame != frame:
        return  # a duplicate completion of a claim already folded
    lane.claiming = False
    progress.in_flight -= 1
    run.state.in_flight -= 1
    rows = _rows(completion.outcome)
    if not completion.ok:
        _claim_failed(run, step, st, lane_no, frame, completion)
    elif rows:
        _plan_frame(run, step, st, lane_no, rows)
    elif _duplicates(completion.outcome):
        # every row was one this epoch had claimed already (returned to the queue by a
        # claim that died before its commit): not drained, claim the next frame
        _claim(run, step, st, lane_no)
    else:
        lane.drained = True
    _after_lane_change(run, step, st)


def _claim_failed(
    run: Run, step: Step, st: StepState, lane_no: int, frame: int, completion: Completion
) -> None:
    """Claim the frame again after a backoff when the error is retryable and attempts
    are left; otherwise the lane is drained and the step fails with the claim's error."""
    progress = st.loop
    assert progress is not None and progress.lanes is not None
    error = completion.outcome.error
    attempt = attempt_of(completion.command_id)
    attempts = progress.claim_attempts or run.limits.claim_attempts
    retryable = error is not None and error.retryable is True
    if retryable and attempt < attempts:
        _claim(run, step, st, lane_no, attempt + 1, claim_backoff(run.limits, attempt + 1))
        return
    progress.lanes[lane_no].drained = True
    runs = f" after {attempt} attempts" if attempt > 1 else ""
    run.fail(
        step.step,
        completion.epoch,
        f"cursor claim (lane {lane_no}, frame {frame}) failed{runs}: {error_message(error)}",
        error,
    )


def _duplicates(outcome: Outcome) -> int:
    result = outcome.result
    return int(result.get("duplicates") or 0) if isinstance(result, dict) else 0


def _rows(outcome: Outcome) -> list[Any]:
    result = outcome.result
    rows = result.get("rows") if isinstance(result, dict) else None
    return rows if isinstance(rows, list) else []


def _plan_frame(run: Run, step: Step, st: StepState, lane_no: int, rows: list[Any]) -> None:
    assert step.loop is not None
    progress = st.loop
    assert progress is not None and progress.lanes is not None
    lane = progress.lanes[lane_no]
    bodies: list[Any] = [rows] if progress.per_frame else rows
    lane.start = lane.next = progress.next_index  # body iterations are numbered per epoch
    lane.stop = progress.next_index = lane.start + len(bodies)
    lane.rows = len(rows)
    progress.total += len(rows)
    meta = {
        "iterator": step.loop.iterator,
        "lane": lane_no,
        "frame": lane.frame,
        "frame_start": lane.start,
    }
    if progress.per_frame:
        meta.update(process="frame", frame_rows=len(rows))
    run.decision.plans.append(
        LoopPlan(
            step=step.step,
            epoch=progress.epoch,
            items=bodies,
            ctx_version=run.ctx_version(),
            meta=meta,
            start=lane.start,
        )
    )
    _refill(run, step, st, lane_no)


def _refill(run: Run, step: Step, st: StepState, lane_no: int) -> None:
    progress = st.loop
    assert progress is not None and progress.lanes is not None
    lane = progress.lanes[lane_no]
    count = min(progress.row_concurrency - lane.in_flight, lane.stop - lane.next)
    if count <= 0:
        return
    issue_range(run, step.step, progress.epoch, lane.next, lane.next + count)
    lane.next += count
    lane.in_flight += count
    progress.in_flight += count
    run.state.in_flight += count


def lane_of(progress: LoopProgress, iteration: int) -> int | None:
    for number, lane in enumerate(progress.lanes or []):
        if lane.start <= iteration < lane.stop:
            return number
    return None


def on_body(run: Run, step: Step, completion: Completion) -> None:
    """A claimed row finished: count it, refill its lane, claim the next frame."""
    st = run.state.step(step.step)
    progress = st.loop
    assert progress is not None and progress.lanes is not None
    lane_no = lane_of(progress, completion.iteration or 0)
    if lane_no is None:
        return
    lane = progress.lanes[lane_no]
    lane.in_flight -= 1
    progress.in_flight -= 1
    run.state.in_flight -= 1
    apply_iteration(run, step, completion, weight=lane.rows if progress.per_frame else 1)
    if lane.next < lane.stop:
        _refill(run, step, st, lane_no)
    elif lane.in_flight == 0 and not lane.drained:
        _claim(run, step, st, lane_no)
    _after_lane_change(run, step, st)


def _after_lane_change(run: Run, step: Step, st: StepState) -> None:
    progress = st.loop
    assert progress is not None and progress.lanes is not None
    if progress.in_flight == 0 and all(lane.drained for lane in progress.lanes):
        finish_loop(run, step, st)
