"""One command per cursor frame (`frame.process: frame`, docs/design.md §4).

The worker that claimed a frame runs the frame's body itself when the body is simple
enough (orchestrator.frame_rules.inline_body) and the claim reserved the body's iteration
(`meta.iteration`), instead of closing the claim and running the body as a command of
its own:

1. the claimed rows are recorded on the claim command (`resume.frame`: the rows its
   epoch had not claimed before, their keys written as claimed, one transaction)
   BEFORE the queue transaction commits, so a crash in between leaves no row claimed
   that the engine does not know about;
2. the queue transaction commits;
3. the body runs as its command would (the same context, `iter.<iterator>` = the rows,
   the same tool), under the claim's lease;
4. one close records the claim (its completion carries the rows and the body's
   outcome) and the body's command row and terminal event, and the pass folds it:
   the frame is counted and the lane's next claim issued, in one transaction.

The same holds for per-row bodies (`meta.process: rows`: no `frame.process: frame`,
orchestrator.frame_rules.inline_rows): the claim reserved `max_rows` iterations, each row's
body runs as its command would (the reservation's first + the row's position), one
after another or `meta.row_concurrency` at a time in threads (worker.frame_rows), and
the close writes every row's body with the claim's (a row that parked: its body
command, parked, woken here when due); the claim's status is polled while rows run, so
a cancel stops the frame (docs/design.md §4).

A run of the claim after its worker died (the reaper's re-issue) finds the rows on the
command and hands them over without claiming again (worker.claims); the pass then
plans the body command as for any other frame, so the body runs again on those rows
(at least once, as every body) and they are counted once. A body outcome the database
refuses is handed over the same way (the body command then fails with it as today).

Chains (orchestrator.cursor): when the claim's block has a number left and the frame's
body succeeded, the close issues the lane's next claim itself (worker.closing: one
statement, no pass) and this process runs it next. With a postgres cursor that next
frame is claimed ahead, before the close, and the close records its rows on the next
claim (`_ahead_of`); the queue transaction commits once it did, or rolls back. The next
claim then runs its body with no record of its own (`take_ahead`, worker.execute).
"""

from __future__ import annotations

import datetime as dt
from dataclasses import replace
from typing import Any

from noetl_celery.constants import KIND_CLAIM, KIND_ITERATION
from noetl_celery.errors import ResultNotStorable
from noetl_celery.logcapture import Capture
from noetl_celery.models.outcome import Outcome
from noetl_celery.models.playbook import Playbook, Step
from noetl_celery.orchestrator.cursor import PARKED, body_meta, chain_next, counted
from noetl_celery.orchestrator.frame_rules import inline_body
from noetl_celery.orchestrator.ids import claim_command_id, iteration_command_id
from noetl_celery.passes.retry import again_if_interrupted
from noetl_celery.store.bodies import BodyRun, ParkedBody, Ran
from noetl_celery.store.queries.frames import NextClaim
from noetl_celery.store.repository import Store
from noetl_celery.store.rows import ClaimedCommand, FrameRows
from noetl_celery.worker.claims import HeldFrame, handed_over
from noetl_celery.worker.closing import NOT_CLOSED, Closer, FrameBody, Recorded
from noetl_celery.worker.frame_rows import RowRunner, RunBody
from noetl_celery.worker.heartbeat import Heartbeats
from noetl_celery.worker.parking import Wakeups


def reserved_iteration(command: ClaimedCommand) -> int | None:
    """The body iteration a per-frame claim reserved (None: not such a claim)."""
    meta = command.meta or {}
    number = meta.get("iteration")
    if meta.get("process") not in ("frame", "rows") or not isinstance(number, int):
        return None
    return number


def per_row(command: ClaimedCommand) -> bool:
    """The claim reserved iterations for its frame's per-row bodies (not one per frame)."""
    return (command.meta or {}).get("process") == "rows"


def body_command(
    claim: ClaimedCommand,
    playbook: Playbook,
    iteration: int,
    rows: Any,
    frame_start: int | None = None,
) -> ClaimedCommand:
    """A body of the frame as the command the pass would plan for it (same id, item and
    meta): the whole frame (`rows`: its rows), or with `frame_start` (the frame's first
    iteration) the body of one row (`rows`: that row). It runs with the claim's context
    version."""
    step = playbook.step(claim.step)
    assert step.loop is not None
    item = claim.item if isinstance(claim.item, dict) else {}
    lane, frame = int(item.get("lane", 0)), int(item.get("frame", 1))
    if frame_start is None:
        meta = body_meta(step.loop.iterator, lane, frame, iteration, len(rows))
    else:
        meta = body_meta(step.loop.iterator, lane, frame, frame_start, None)
    return replace(
        claim,
        command_id=iteration_command_id(claim.execution_id, claim.step, claim.epoch, iteration),
        kind=KIND_ITERATION,
        iteration=iteration,
        attempt=1,
        item=rows,
        meta=meta,
        resume=None,
    )


class FrameRunner:
    """Runs a held claim's frame body, or its per-row bodies, in the claiming worker
    (see the module)."""

    def __init__(
        self,
        store: Store,
        closer: Closer,
        heartbeats: Heartbeats,
        run_body: RunBody,
        wakeups: Wakeups | None = None,
    ) -> None:
        self.store = store
        self.closer = closer
        self.heartbeats = heartbeats
        self.run_body = run_body  # CommandExecutor.run_claimed: masked, never raises
        self.rows = RowRunner(heartbeats)
        self.wakeups = wakeups  # issues a row's body parked by a frame's close when due
        # frames claimed ahead, recorded on the lane's next claim, which runs here next
        self._ahead: dict[str, FrameRows] = {}

    def finish(
        self,
        command: ClaimedCommand,
        playbook: Playbook,
        held: HeldFrame,
        capture: Capture | None,
        chain: bool,
    ) -> Recorded | None:
        """Record the frame, run its body and close both; None when this frame's body is
        not for this worker to run (the caller closes the claim as before)."""
        iteration = reserved_iteration(command)
        rows = held.claim.rows
        if iteration is None or not held.outcome.ok or not (rows or held.recorded):
            return None
        if not per_row(command) and not inline_body(playbook.step(command.step)):
            return None
        if per_row(command) and len(rows) > int((command.meta or {}).get("max_rows", 0)):
            return None  # more rows than it reserved iterations for: the pass plans them
        # recorded by the close of the lane's frame before (claimed ahead), or here now
        frame = held.recorded or self._record(command, held)
        if not isinstance(frame, FrameRows):
            return frame
        claimed = handed_over(command, frame, iteration)
        if not frame.rows:  # every row was another claim's: claim the next frame
            return self.closer.finish(command, claimed, capture=capture, chain=chain)
        if per_row(command):
            bodies = [
                body_command(command, playbook, iteration + i, row, frame_start=iteration)
                for i, row in enumerate(frame.rows)
            ]
        else:
            bodies = [body_command(command, playbook, iteration, frame.rows)]
        ran = self._run(command, bodies, row_threads(command))
        if ran is None:  # cancelled or taken over mid-frame: the close would find it so
            return Recorded(NOT_CLOSED, as_given=False, outcome=claimed)
        following, ahead = None, None
        if per_row(command):
            step = playbook.step(command.step)
            given = with_bodies(step, claimed, [outcome for _, outcome in ran])
        else:
            assert isinstance(ran[0][1], Outcome)  # (only a row's pipeline parks)
            given = with_body(claimed, ran[0][1])
            chains = chain and self.store.frames.chains  # (SQLite: a pass per frame)
            if chains and ran[0][1].ok and chain_next(command.meta, iteration):
                following, ahead = self._ahead_of(playbook, next_claim(command, iteration))
        return self._close(
            command, given, capture, chain, FrameBody(ran, claimed), following, ahead
        )

    def _record(self, command: ClaimedCommand, held: HeldFrame) -> FrameRows | Recorded | None:
        """Record the claimed rows on the claim, then commit its queue transaction: the
        rows recorded, or what finish returns when they could not be."""
        try:
            frame = again_if_interrupted(
                f"recording the frame claimed by command {command.command_id}",
                lambda: self.store.record_frame(command, list(held.claim.rows), held.claim.witness),
            )
        except ResultNotStorable:
            return None  # nothing recorded: the claim's own close fails it, saying why
        except BaseException:
            held.claim.rollback()
            raise
        if frame is None:  # no longer ours (cancelled, re-issued): the rows go back
            held.claim.rollback()
            return Recorded(NOT_CLOSED, as_given=False, outcome=held.outcome)
        held.claim.commit()
        return frame

    def _close(
        self,
        command: ClaimedCommand,
        given: Outcome,
        capture: Capture | None,
        chain: bool,
        body: FrameBody,
        following: NextClaim | None,
        ahead: HeldFrame | None,
    ) -> Recorded:
        """Close the claim with its frame's bodies (and, chained, issue the lane's next
        claim); the frame claimed `ahead` is committed once recorded on that claim."""
        try:
            recorded = self.closer.finish(
                command, given, capture=capture, chain=chain, body=body, following=following
            )
        except BaseException:
            if ahead is not None:
                ahead.claim.rollback()
            raise
        if recorded.close.closed and recorded.outcome is given:  # (else no body written)
            self._wake_parked(body.ran)
        if ahead is not None:
            # the rows claimed ahead are the engine's once the close recorded them on the
            # next claim (and it was issued); else they go back to the queue
            close = recorded.close
            if close.chained and close.follow is not None and close.follow_frame is not None:
                ahead.claim.commit()
                self._ahead[close.follow.command_id] = close.follow_frame
            else:
                ahead.claim.rollback()
        return recorded

    def _ahead_of(
        self, playbook: Playbook, following: ClaimedCommand
    ) -> tuple[NextClaim, HeldFrame | None]:
        """The lane's next claim for a chained close, with its frame claimed ahead when
        it can be: a postgres cursor (its claim transaction held until the close has
        recorded the rows on the next claim). The claim runs
        as the next claim's own run would (its context, its frame's names); an error or
        no row claims nothing ahead (the next claim, run next, claims again)."""
        step = playbook.step(following.step)
        cursor = step.loop.cursor if step.loop is not None else None
        lease = self.closer.lease_seconds
        if cursor is None or cursor.kind != "postgres":
            return NextClaim(following, lease), None
        ran = self.run_body(following)  # (a claim command's run is its claim)
        if not isinstance(ran, HeldFrame):
            return NextClaim(following, lease), None
        if not ran.outcome.ok or not ran.claim.rows:
            ran.claim.rollback()
            return NextClaim(following, lease), None
        rows = list(ran.claim.rows)
        return NextClaim(following, lease, rows, ran.claim.witness), ran

    def take_ahead(self, command_id: str) -> FrameRows | None:
        """The frame claimed ahead and recorded on `command_id` by the close before it,
        once (worker.execute runs that claim next)."""
        return self._ahead.pop(command_id, None)

    def _run(self, claim: ClaimedCommand, bodies: list[ClaimedCommand], threads: int) -> Ran | None:
        """Run the frame's bodies under the claim's lease, at most `threads` at a time
        (worker.frame_rows; `frame.row_concurrency` bounds a lane's rows in flight). None:
        the claim was cancelled or taken over before its last row (the rows left are not
        started; its status is polled with the other watched commands': no statement per
        row)."""
        self.heartbeats.start(claim.command_id)  # the claim's lease covers its bodies
        if len(bodies) > 1:
            self.heartbeats.watch(claim.command_id)
        try:
            return self.rows.run(claim, bodies, threads, self.run_body)
        finally:
            self.heartbeats.stop(claim.command_id)

    def _wake_parked(self, ran: Ran) -> None:
        """Rows whose bodies the close wrote parked are issued by this process when due
        (by the reaper's sweep if it is gone first)."""
        if self.wakeups is None:
            return
        now = dt.datetime.now(dt.UTC).replace(tzinfo=None)
        for body, run in ran:
            if isinstance(run, ParkedBody):
                delay = max(0.0, (run.due - now).total_seconds())
                self.wakeups.at(body.command_id, run.due, delay)


def row_threads(claim: ClaimedCommand) -> int:
    """How many of a per-row claim's bodies run at once (orchestrator.cursor sets
    `meta.row_concurrency` for bodies whose rows may overlap in threads)."""
    number = (claim.meta or {}).get("row_concurrency")
    return number if isinstance(number, int) and number > 1 else 1


def next_claim(claim: ClaimedCommand, iteration: int) -> ClaimedCommand:
    """The lane's next claim as the pass would issue it after this per-frame claim, its
    body run as `iteration` (orchestrator.cursor's chains): the next frame, the block's
    next number, the same block and context version."""
    item = claim.item if isinstance(claim.item, dict) else {}
    lane, frame = int(item.get("lane", 0)), int(item.get("frame", 1)) + 1
    return replace(
        claim,
        command_id=claim_command_id(claim.execution_id, claim.step, claim.epoch, lane, frame),
        kind=KIND_CLAIM,
        iteration=None,
        attempt=1,
        item={"lane": lane, "frame": frame},
        meta={**(claim.meta or {}), "iteration": iteration + 1},
        resume=None,
    )


def with_body(claimed: Outcome, body: Outcome) -> Outcome:
    """The claim's outcome carrying its frame's body outcome (what the pass counts)."""
    assert isinstance(claimed.result, dict)
    return Outcome("ok", {**claimed.result, "body": body.to_json()}, meta=claimed.meta)


def with_bodies(step: Step, claimed: Outcome, bodies: list[BodyRun]) -> Outcome:
    """The claim's outcome carrying the outcomes of its frame's per-row bodies, in row
    order (what the pass counts, one row each: orchestrator.cursor.counted; a parked
    row's body is in flight: PARKED)."""
    assert isinstance(claimed.result, dict)
    runs = [PARKED if isinstance(body, ParkedBody) else counted(step, body) for body in bodies]
    result = {**claimed.result, "bodies": runs}
    return Outcome("ok", result, meta=claimed.meta)
