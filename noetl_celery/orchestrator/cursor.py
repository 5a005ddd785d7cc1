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

With `frame.process: frame` a frame has one body, and the lane's claim reserves its
iteration number when it is issued (`meta.iteration`; a claim that finds no row leaves
its number unused, and the lane's next claim reuses it). Knowing it, the worker that
claimed the frame can run its body itself, when the body is simple enough
(`inline_body`): the claim's completion then carries the frame's rows (`recorded`: the
worker stored them on the command before its queue transaction committed) and the
body's outcome (`body`), and one fold counts the frame and claims the next
(`_count_frame`): one command, one close, one pass per frame. A claim's completion with
recorded rows but no body (a claim run again after its worker died) plans the body
command as before.

Without `frame.process: frame`, a claim whose per-row bodies the claiming worker may
run (`inline_rows`; `row_threads` of them at a time) reserves `max_rows` iterations
(`meta.process: rows`); its completion then carries one outcome per row (`bodies`) and
`_count_rows` counts each row as its body command's would, then claims the next frame.
A row marked `PARKED` is its body command, written parked by the frame's close: in
flight in its lane until its completion (on_body) claims the next frame. Numbers a
shorter frame leaves are `unused`, never issued (docs/design.md §4).

Chains (`frame.process: frame` with a body run by the claiming worker,
`Limits.cursor_chain` > 0): the pass reserves a lane a block of `1 + chain` iteration
numbers at once (`Lane.chain_end`, the claim's `meta.chain`), and the worker whose frame's
body succeeded issues the lane's next claim itself, numbered the block's next, in the
close that records its frame (worker.frames), and runs it next, with no pass: its
completion says so (`chained`). A later pass folds the chain's completions in order,
counting each frame and taking each next claim as issued (`_claim(chained=True)`), as
it would have issued it. The close issues nothing once the execution or the loop epoch
has ended, nor past the block: the pass then issues the next claim, starting a new
block. A chained claim runs with its predecessor's context version.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace
from typing import Any

from noetl_celery.constants import KIND_CLAIM, StepStatus
from noetl_celery.models.outcome import Outcome, error_message
from noetl_celery.models.playbook import Step
from noetl_celery.orchestrator.decisions import Completion, Limits, LoopPlan, NewCommand
from noetl_celery.orchestrator.frame_rules import inline_body, inline_rows, row_threads
from noetl_celery.orchestrator.ids import (
    attempt_of,
    claim_command_id,
    iteration_command_id,
    parse_claim,
    with_attempt,
)
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
    chain = run.limits.cursor_chain if per_frame and inline_body(step) else 0
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
        chain=max(chain, 0),
    )
    run.touched_loops.add(step.step)
    for lane in range(window):
        _claim(run, step, st, lane)


def _claim(
    run: Run,
    step: Step,
    st: StepState,
    lane_no: int,
    attempt: int = 1,
    delay: float = 0.0,
    chained: bool = False,
) -> None:
    """Issue the lane's claim of its next frame, or (`attempt` > 1) of the same frame
    again after `delay` seconds. `chained`: the worker that ran the lane's frame issued
    this claim itself (see the module): counted as in flight, not issued again."""
    progress = st.loop
    assert progress is not None and progress.lanes is not None
    lane = progress.lanes[lane_no]
    if attempt == 1:
        lane.frame += 1
    rows = inline_rows(step, progress)
    if (progress.per_frame or rows) and lane.body is None:
        # the frame's body iterations, known before the claim runs (one per frame, or
        # `max_rows` for per-row bodies the claiming worker may run; a reservation a
        # claim that found no row left unused is kept for the next)
        if lane.stop < lane.chain_end:  # the lane's block has numbers left
            lane.body = lane.stop
        else:
            lane.body = progress.next_index
            progress.next_index += reservation(progress) * (1 + progress.chain)
            lane.chain_end = progress.next_index if progress.chain else 0
    lane.claiming = True
    progress.in_flight += 1
    run.state.in_flight += 1
    if chained:
        return
    base = claim_command_id(run.state.execution_id, step.step, progress.epoch, lane_no, lane.frame)
    meta: dict[str, Any] = {"max_rows": progress.max_rows}
    if progress.per_frame:  # the worker may run the frame's body itself next
        meta.update(process="frame", iteration=lane.body)
        if lane.chain_end:  # and issue the lane's next claims up to the block's end
            meta["chain"] = lane.chain_end
    elif rows:  # the worker may run the frame's per-row bodies itself next
        meta.update(process="rows", iteration=lane.body)
        threads = row_threads(step, progress)
        if threads > 1:  # that many rows at a time (worker.frame_rows)
            meta["row_concurrency"] = threads
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
    body = _body(completion.outcome)
    bodies = _bodies(completion.outcome)
    reserved_here = lane.body is not None and _iteration(completion.outcome) == lane.body
    if not completion.ok:
        _claim_failed(run, step, st, lane_no, frame, completion)
    elif rows and body is not None and reserved_here and progress.per_frame:
        chained = _chained(completion.outcome)
        _count_frame(run, step, st, lane_no, rows, replace(completion, outcome=body), chained)
    elif (
        rows
        and bodies is not None
        and reserved_here
        and not progress.per_frame
        and len(bodies) == len(rows) <= progress.max_rows
    ):
        _count_rows(run, step, st, lane_no, rows, bodies, completion)
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


def _body(outcome: Outcome) -> Outcome | None:
    """The outcome of the frame's body the claiming worker ran (None: it ran none)."""
    result = outcome.result
    body = result.get("body") if isinstance(result, dict) else None
    return Outcome.from_json(body) if isinstance(body, dict) else None


def _bodies(outcome: Outcome) -> list[Outcome | None] | None:
    """The outcomes of the frame's per-row bodies the claiming worker ran, in row order,
    None for a row whose body parked (None: it ran none)."""
    result = outcome.result
    bodies = result.get("bodies") if isinstance(result, dict) else None
    if not isinstance(bodies, list) or not all(isinstance(b, dict) for b in bodies):
        return None
    return [None if b == PARKED else Outcome.from_json(b) for b in bodies]


def _chained(outcome: Outcome) -> bool:
    """The claim's worker issued the lane's next claim itself (worker.frames)."""
    result = outcome.result
    return isinstance(result, dict) and result.get("chained") is True


def chain_next(meta: Mapping[str, Any] | None, iteration: int) -> bool:
    """Whether the worker that ran a per-frame claim's body as `iteration` may issue
    the lane's next claim itself: the block its pass reserved (`meta.chain`, its end)
    has a number left for it. The pass takes it as issued by the same rule."""
    end = (meta or {}).get("chain")
    return isinstance(end, int) and iteration + 1 < end


def _iteration(outcome: Outcome) -> int | None:
    """The iteration the worker ran the frame's body as (the claim's reservation)."""
    result = outcome.result
    number = result.get("iteration") if isinstance(result, dict) else None
    return number if isinstance(number, int) else None


def body_meta(iterator: str, lane: int, frame: int, start: int, rows: int | None) -> dict[str, Any]:
    """The meta of a frame's body command (`rows`: the frame's row count when the body
    is the whole frame, `frame.process: frame`); the worker that runs a body itself
    builds the same."""
    meta: dict[str, Any] = {"iterator": iterator, "lane": lane, "frame": frame}
    meta["frame_start"] = start
    if rows is not None:
        meta.update(process="frame", frame_rows=rows)
    return meta


# a per-row body's entry in its claim's completion when it parked (worker.frame_rows): its
# body command was written parked by the frame's close, and is in flight
PARKED: dict[str, Any] = {"parked": True}


def counted(step: Step, outcome: Outcome) -> dict[str, Any]:
    """A per-row body's outcome as its claim's completion carries it: what the pass
    reads to count the row (apply_iteration: its status, error, meta and ctx), and its
    result, `iter` and detail only for a step-level `set`, which renders them. The
    whole outcome is the body's terminal event (per-item results are read from there):
    carried again, a frame's page payloads were encoded and decoded twice more per close
    (py-spy on bench.pft_cursor: 6 % of a worker's CPU in JSON for the frame's close)."""
    if step.set:
        return outcome.to_json()
    return Outcome(outcome.status, None, outcome.error, outcome.ctx, meta=outcome.meta).to_json()


def reservation(progress: LoopProgress) -> int:
    """Iteration numbers a claim reserves for its frame's bodies: one per frame, or a
    frame's most rows (`max_rows`) for per-row bodies; the numbers a shorter frame
    leaves are counted in `unused`, never issued."""
    return 1 if progress.per_frame else max(progress.max_rows, 1)


def _count_rows(
    run: Run,
    step: Step,
    st: StepState,
    lane_no: int,
    rows: list[Any],
    bodies: list[Outcome | None],
    claim: Completion,
) -> None:
    """The frame's per-row bodies ran with its claim: count each row as its body
    command's completion would (iteration = the reservation's start + its position),
    then claim the next frame. A row whose body parked (None) is a body command in
    flight: the lane claims its next frame when the last of those finishes (on_body)."""
    progress = st.loop
    assert progress is not None and progress.lanes is not None
    lane = progress.lanes[lane_no]
    assert lane.body is not None
    lane.start, lane.body = lane.body, None
    lane.next = lane.stop = lane.start + len(rows)
    lane.rows = len(rows)
    progress.total += len(rows)
    progress.unused += reservation(progress) - len(rows)
    eid = run.state.execution_id
    for number, outcome in enumerate(bodies, start=lane.start):
        if outcome is None:  # parked: written by the close, issued when due
            lane.in_flight += 1
            progress.in_flight += 1
            run.state.in_flight += 1
            continue
        cid = iteration_command_id(eid, step.step, progress.epoch, number)
        body = replace(claim, command_id=cid, iteration=number, outcome=outcome)
        apply_iteration(run, step, body, 1)
    if lane.in_flight == 0:
        _claim(run, step, st, lane_no)


def _count_frame(
    run: Run,
    step: Step,
    st: StepState,
    lane_no: int,
    rows: list[Any],
    body: Completion,
    chained: bool = False,
) -> None:
    """The frame's body ran with its claim: count its rows as the body's completion
    would (the same iteration, its result and events), then claim the next frame (or,
    `chained`, take the claim the worker issued as in flight)."""
    progress = st.loop
    assert progress is not None and progress.lanes is not None
    lane = progress.lanes[lane_no]
    assert lane.body is not None
    lane.start, lane.body = lane.body, None
    lane.next = lane.stop = lane.start + 1
    lane.rows = len(rows)
    progress.total += len(rows)
    cid = iteration_command_id(run.state.execution_id, step.step, progress.epoch, lane.start)
    apply_iteration(run, step, replace(body, command_id=cid, iteration=lane.start), len(rows))
    # (a chain is followed only within its block: the worker checked the same)
    _claim(run, step, st, lane_no, chained=chained and lane.stop < lane.chain_end)


def _plan_frame(run: Run, step: Step, st: StepState, lane_no: int, rows: list[Any]) -> None:
    assert step.loop is not None
    progress = st.loop
    assert progress is not None and progress.lanes is not None
    lane = progress.lanes[lane_no]
    bodies: list[Any] = [rows] if progress.per_frame else rows
    if lane.body is not None and len(bodies) <= reservation(progress):  # reserved by the claim
        lane.start, lane.body = lane.body, None
        lane.next, lane.stop = lane.start, lane.start + len(bodies)
        progress.unused += reservation(progress) - len(bodies)
    else:
        if lane.body is not None:  # more rows than the claim reserved numbers for
            progress.unused += reservation(progress)
            lane.body = None
        lane.start = lane.next = progress.next_index  # body iterations are numbered per epoch
        lane.stop = progress.next_index = lane.start + len(bodies)
    lane.rows = len(rows)
    progress.total += len(rows)
    frame_rows = len(rows) if progress.per_frame else None
    meta = body_meta(step.loop.iterator, lane_no, lane.frame, lane.start, frame_rows)
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
