"""Recording what a command came to: close it, fold it in place when the execution's lock
is free, then publish what the pass issued and drive the execution (docs/design.md §3).
`worker.execute` (one command) and `worker.batch` (many, in one transaction) both close
through here.

Whatever the command produced, it is closed once: an outcome the database refuses (a
NUL character in a result, on Postgres) fails the command with kind
`result_not_storable`, and an in-place pass that crashes is left to the orchestrator
(passes.orchestrate records the crash) while the close commits without it. Raising out
of here instead would leave the command `running` until its lease ran out, and the
reaper would run it again, to the same end, `NOETL_MAX_ATTEMPTS` times.
"""

from __future__ import annotations

import logging
import os
import socket
from dataclasses import dataclass, replace
from functools import partial

from noetl_celery import logcapture
from noetl_celery.constants import RUNNING
from noetl_celery.cursors.base import HeldClaim
from noetl_celery.errors import ResultNotStorable
from noetl_celery.logcontext import of_command
from noetl_celery.models.outcome import Outcome, StepError
from noetl_celery.models.payload_walk import find_problem, format_path
from noetl_celery.orchestrator.batching import may_defer_window
from noetl_celery.passes.logsink import LogSink
from noetl_celery.passes.orchestrate import PassDriver, crash_message
from noetl_celery.passes.retry import again_if_interrupted
from noetl_celery.store.bodies import Ran
from noetl_celery.store.completion import Closed, CompletionTx
from noetl_celery.store.database import transient
from noetl_celery.store.orchestration import Follow, OrchestrationTx
from noetl_celery.store.queries.frames import NextClaim
from noetl_celery.store.repository import Store
from noetl_celery.store.rows import ClaimedCommand, FrameRows, LogRow
from noetl_celery.tools.services import ToolServices
from noetl_celery.worker.continuation import may_follow, next_here
from noetl_celery.worker.heartbeat import Heartbeats

log = logging.getLogger("noetl_celery.worker")


def worker_identity() -> str:
    return f"{socket.gethostname()}:{os.getpid()}"


class PassCrashed(Exception):
    """The in-place pass crashed after the close (not the database being away)."""


@dataclass(frozen=True)
class CloseResult:
    """What closing one command (and folding it in place) came to, in one transaction."""

    closed: bool  # False: the command was no longer ours (cancelled or re-issued)
    publish: list[str] | None  # what to publish; None: nothing more is to be done
    ran_pass: bool  # a pass ran in place (so its re-check is this process's to make)
    follow: ClaimedCommand | None = None  # issued by the pass, claimed to run here next
    # the close issued its cursor lane's next claim itself (`follow`), with no pass: a
    # later close's pass folds it (orchestrator.cursor's chains)
    chained: bool = False
    # the rows recorded on `follow` by that close (its frame claimed ahead, worker.frames)
    follow_frame: FrameRows | None = None


@dataclass(frozen=True)
class FrameBody:
    """A cursor frame's bodies its claim's worker ran (worker.frames: the frame's one
    body, or one per row) with their outcomes: written with the claim's close;
    `claimed` is the claim's outcome without them, recorded instead when the database
    refuses a body's outcome (the pass then plans the body commands)."""

    ran: Ran
    claimed: Outcome


# the command was no longer ours: nothing recorded, nothing to publish
NOT_CLOSED = CloseResult(closed=False, publish=None, ran_pass=False)


@dataclass(frozen=True)
class Recorded:
    """What recording a command's outcome came to: the close, and the outcome recorded."""

    close: CloseResult
    as_given: bool  # the outcome recorded is the one the command produced
    outcome: Outcome  # the outcome recorded (or offered, when not closed)


class Closer:
    """Closes commands and runs the pass in place; shared by the one-command executor
    and the batch executor."""

    def __init__(
        self,
        store: Store,
        orchestrator: PassDriver,
        heartbeats: Heartbeats,
        lease_seconds: int,
        services: ToolServices,
    ) -> None:
        self.store = store
        self.orchestrator = orchestrator
        # a command claimed to run here next (local continuation) is watched from its claim
        self.heartbeats = heartbeats
        self.lease_seconds = lease_seconds
        # its redactor is asked per use: it follows the credentials file and the command's
        # own masks
        self.services = services

    def finish(
        self,
        command: ClaimedCommand,
        outcome: Outcome,
        held: HeldClaim | None = None,
        capture: logcapture.Capture | None = None,
        chain: bool = False,
        body: FrameBody | None = None,
        following: NextClaim | None = None,
    ) -> Recorded:
        """Record the outcome (orchestrating in place when the lock is free), then publish
        what the pass issued. A cursor claim's transaction (`held`) is committed right
        after the engine's commit: a crash before it rolls the claim back (the rows stay
        pending, never lost); the window in between is one round trip.

        The close and the pass share a transaction, so a pass the database cuts short
        (this process stalled while holding the execution's lock and Postgres ended its
        idle transaction) takes the close with it: it is recorded again on a fresh
        connection, so the outcome survives. The close is conditional: if the command
        was re-issued meanwhile (the stall outlasted its lease) this run's outcome is
        dropped and the next attempt's counts. `body`: a cursor frame's body this
        worker ran with the claim (worker.frames), recorded with its close; `following`:
        the lane's next claim, issued by the close itself when the claim's chain allows
        it (orchestrator.cursor), and then run here next with no pass."""
        try:
            recorded = again_if_interrupted(
                f"recording the outcome of command {command.command_id}",
                lambda: self._record(command, outcome, capture, chain, body, held, following),
            )
        except BaseException:
            if held is not None:
                held.rollback()
            raise
        close = recorded.close
        if held is not None:
            # the claimed rows are the engine's only once their outcome is recorded; a
            # claim closed as failed (its rows not storable) puts them back
            if close.closed and recorded.as_given:
                held.commit()
            else:
                held.rollback()
        if close.publish is None:
            if close.closed:  # deferred: folded later, unless it was the last to close
                self.orchestrator.after_deferral(command.execution_id)
            return recorded
        publish = close.publish
        if close.follow is not None:
            self.heartbeats.start(close.follow.command_id)
            publish = [cid for cid in publish if cid != close.follow.command_id]
        if publish:
            self.orchestrator.dispatcher.publish(publish)
        if close.follow is not None and (close.ran_pass or close.chained):
            # the re-check waits: the close of the command that runs here next waits for
            # the lock and folds whatever arrived meanwhile, and execute() re-checks
            # once the chain ends (a chained close ran no pass: the chain's next close
            # folds it, or whoever passes first)
            return recorded
        # either look for completions that arrived during our pass, or (lock was busy)
        # try once more now that our completion is committed: the holder may have done
        # its final inbox check before our commit
        self.orchestrator.drive(command.execution_id, wait=False, recheck_first=close.ran_pass)
        return recorded

    def _record(
        self,
        command: ClaimedCommand,
        outcome: Outcome,
        capture: logcapture.Capture | None = None,
        chain: bool = False,
        body: FrameBody | None = None,
        held: HeldClaim | None = None,
        following: NextClaim | None = None,
    ) -> Recorded:
        """Close the command with `outcome` and fold it in place when the lock is free.
        Two failures are deterministic, so raising them would only make the reaper run
        the command again to the same end: an outcome the database refuses is replaced
        by a failure saying what could not be stored, and a pass that crashes after the
        close is dropped (the close commits alone; `finish` then drives the execution,
        and the orchestrator records the crash)."""
        given, fold = outcome, True
        while True:
            try:
                close = self._record_once(
                    command, outcome, capture, fold, chain, body, held, following
                )
            except ResultNotStorable as exc:
                if body is not None:  # the frame's rows alone: its body becomes a command
                    given = outcome = body.claimed
                    body = following = None
                    continue
                if outcome is not given:
                    raise  # not even the failure could be stored: a bug, not the data
                outcome = self.not_storable(command, given, exc)
                continue
            except PassCrashed as exc:
                # the orchestrator logs the traceback when its own pass crashes too
                log.warning(
                    "the orchestration pass after command %s crashed (%s); its close is "
                    "stored alone",
                    command.command_id,
                    crash_message(exc.__cause__ or exc),
                    extra=of_command(command.command_id),
                )
                fold = False
                continue
            return Recorded(close, as_given=outcome is given, outcome=outcome)

    def _record_once(
        self,
        command: ClaimedCommand,
        outcome: Outcome,
        capture: logcapture.Capture | None,
        fold: bool,
        chain: bool = False,
        body: FrameBody | None = None,
        held: HeldClaim | None = None,
        following: NextClaim | None = None,
    ) -> CloseResult:
        """Close the command and fold it in place, in one transaction. Not closed: the
        command was no longer ours (cancelled or re-issued meanwhile). The captured
        output is stored in the same transaction, last, so it holds the lines the pass
        logged too; nothing is written when nothing was captured. With `chain`, a cursor
        lane's next command the pass issued is claimed in the same transaction (local
        continuation): it commits with the close, so a retried transaction claims it
        again or not at all. `held`: a cursor claim's queue transaction that commits once
        this does, so this is durable first (the rows are the engine's only if an engine
        crash cannot take the close back): synchronous, unless the queue runs on the
        engine's own server (its witness: store.queries.frames). `following`: try the
        chained close first (see _chain)."""
        logs = None
        if following is not None and body is not None and fold:
            chained, logs = self._chain(command, outcome, body, following, capture)
            if chained is not None:
                return chained
        witness = None if held is None else held.witness
        durable = held is not None
        with self.store.completion(command, durable=durable, witness=witness) as completion:
            wait = chain and may_follow(command)
            request = None
            if chain:
                pick = partial(next_here, command)
                request = Follow(pick, worker_identity(), self.lease_seconds)
            close = self._close_and_fold(completion, command, outcome, fold, wait, request, body)
            completion.add_logs(LogSink.command_rows(capture, command) if logs is None else logs)
            return close

    def _chain(
        self,
        command: ClaimedCommand,
        outcome: Outcome,
        body: FrameBody,
        following: NextClaim,
        capture: logcapture.Capture | None,
    ) -> tuple[CloseResult | None, list[LogRow] | None]:
        """The chained close (orchestrator.cursor): the claim closed with its frame's body
        and the lane's next claim issued to run here, in one statement (no lock, no
        pass; in autocommit unless the command printed something, stored with it).
        (None, the output it took) on SQLite: nothing is written then. Closed but not
        chained (the loop or the execution ended meanwhile): a close whose lock was
        busy, driven after its commit (finish)."""
        logs = LogSink.command_rows(capture, command)
        ran = (body.ran, worker_identity())
        try:
            done = self.store.frames.close_and_chain(command, outcome, ran, following, logs)
        except BaseException:
            # nothing was written: the output goes back for the close tried next
            if capture is not None:
                for row in logs:
                    capture.write(row.text)
            raise
        if done is None:
            return None, logs
        closed, issued, frame = done
        if not closed.closed:
            return NOT_CLOSED, logs
        if not issued:
            return CloseResult(closed=True, publish=[], ran_pass=False), logs
        follows = following.command
        if frame is not None:  # (as its row has it: any run of it hands these rows over)
            follows = replace(follows, resume={"frame": frame.to_json()})
        close = CloseResult(closed=True, publish=[], ran_pass=False, chained=True)
        return replace(close, follow=follows, follow_frame=frame), logs

    def _close_and_fold(
        self,
        completion: CompletionTx,
        command: ClaimedCommand,
        outcome: Outcome,
        fold: bool = True,
        wait: bool = False,
        follow: Follow | None = None,
        body: FrameBody | None = None,
    ) -> CloseResult:
        """Close the command, then run a pass on it in place unless it may wait for a
        later one. `wait`: wait for the execution's lock if another pass holds it (a
        cursor lane continuing locally: its next command comes out of this pass, and the
        holder's re-check does not fold our completion, publishing that command, while
        we wait for a pass of our own). `follow`: the pass claims the command this
        process runs next in its own writes (local continuation; the result's `follow`),
        committed with the close or not at all."""
        tx: OrchestrationTx | None
        # a frame's body run here is written only with its claim's close (never beside
        # a body command): by the closing statement, or before it
        ran = None if body is None else (body.ran, worker_identity())
        if wait and fold:  # a pass follows: the lock is taken by the closing statement
            closed, tx = completion.close_and_lock(outcome, ran)
        else:
            if ran is not None and not completion.record_body(*ran):
                return NOT_CLOSED
            closed, tx = completion.close(outcome), None
        if not closed.closed:
            return NOT_CLOSED
        if not fold:
            return CloseResult(closed=True, publish=[], ran_pass=False)
        if tx is None:
            if deferrable(command, closed):
                # enough of the window still runs: folded later
                return CloseResult(closed=True, publish=None, ran_pass=False)
            tx = completion.lock(wait=wait)
            if tx is None:
                return CloseResult(closed=True, publish=[], ran_pass=False)
        # a lock taken by the close always passes: a holder that skipped its pass would
        # leave those who found the lock taken waiting for a re-check it never makes
        tx.follow = follow
        try:
            passed = self.orchestrator.run_pass(tx)
        except Exception as exc:
            if transient(exc):
                raise  # the database is away: nothing can be recorded now
            raise PassCrashed from exc
        publish = None if passed.deferred else passed.publish
        return CloseResult(closed=True, publish=publish, ran_pass=True, follow=tx.followed)

    def not_storable(
        self, command: ClaimedCommand, outcome: Outcome, exc: ResultNotStorable
    ) -> Outcome:
        """The failure that replaces an outcome the database refused: it names the step,
        the item, and where in the outcome the value is and what is wrong with it."""
        where = f"step '{command.step}'"
        if command.iteration is not None:
            where += f" item {command.iteration}"
        found = find_problem(outcome.to_json())
        if found is not None and found[0]:
            keys, reason = found
            what = f"{format_path(str(keys[0]), keys[1:])} {reason}"
        else:  # the walk found nothing: the database's own words
            what = f"the database refused it ({exc})"
        message = self.services.redactor.redact(
            f"{where} returned a value that cannot be stored: {what}"
        )
        log.error(
            "command %s: %s", command.command_id, message, extra=of_command(command.command_id)
        )
        error = StepError("result_not_storable", message, retryable=False)
        return Outcome.failed(error, meta=outcome.meta)


def deferrable(command: ClaimedCommand, closed: Closed) -> bool:
    """The close may wait for a later pass: enough of its loop's window still runs
    (orchestrator.batching)."""
    loop = closed.loop  # the loops row of the command's epoch
    if command.iteration is None or closed.status != RUNNING or loop is None or loop.done:
        return False
    return may_defer_window(loop.window, loop.in_flight, closed.waiting)
