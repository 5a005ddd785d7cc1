"""`execute_command`: claim, run, complete, then orchestrate in place (docs/design.md §3).

Running the orchestration pass in the worker that just finished (when the execution's
lock is free) saves a broker round trip per completion; if another process holds the
lock, that process handles our completion before it lets go.

Whatever the command produced, it is closed once: an outcome the database refuses (a
NUL character in a result, on Postgres) fails the command with kind
`result_not_storable`, and an in-place pass that crashes is left to the orchestrator
(passes.orchestrate records the crash) while the close commits without it. Raising out
of here instead would leave the command `running` until its lease ran out, and the
reaper would run it again, to the same end, `NOETL_MAX_ATTEMPTS` times.
"""

from __future__ import annotations

import dataclasses
import logging
import os
import socket
import time
import traceback
from dataclasses import dataclass
from functools import partial

from noetl_celery import logcapture, tracing
from noetl_celery.constants import RUNNING
from noetl_celery.cursors.base import HeldClaim
from noetl_celery.errors import ResultNotStorable
from noetl_celery.logcontext import about, of_command
from noetl_celery.models.outcome import ErrorKind, Outcome, StepError
from noetl_celery.models.payload_walk import find_problem, format_path
from noetl_celery.models.playbook import Playbook, step_timeout
from noetl_celery.orchestrator.batching import may_defer_window
from noetl_celery.passes.ids import new_execution_id
from noetl_celery.passes.logsink import LogSink
from noetl_celery.passes.orchestrate import PassDriver, crash_message
from noetl_celery.passes.playbooks import PlaybookCache
from noetl_celery.passes.retry import again_if_interrupted
from noetl_celery.store.completion import Closed, CompletionTx
from noetl_celery.store.database import transient
from noetl_celery.store.orchestration import Follow, OrchestrationTx
from noetl_celery.store.repository import Store
from noetl_celery.store.rows import ClaimedCommand, SpawnRequest
from noetl_celery.tools.redaction import command_masks, mask_command_value
from noetl_celery.worker import parking
from noetl_celery.worker.claims import HeldFrame
from noetl_celery.worker.continuation import may_follow, next_here
from noetl_celery.worker.heartbeat import Heartbeats
from noetl_celery.worker.pipeline import Parked, StopCheck
from noetl_celery.worker.reports import DUPLICATE, WAITING, CommandReport, report_of
from noetl_celery.worker.runner import StepRunner
from noetl_celery.worker.subplaybook import Suspended

log = logging.getLogger("noetl_celery.worker")


def worker_identity() -> str:
    return f"{socket.gethostname()}:{os.getpid()}"


class _PassCrashed(Exception):
    """The in-place pass crashed after the close (not the database being away)."""


@dataclass(frozen=True)
class CloseResult:
    """What closing one command (and folding it in place) came to, in one transaction."""

    closed: bool  # False: the command was no longer ours (cancelled or re-issued)
    publish: list[str] | None  # what to publish; None: nothing more is to be done
    ran_pass: bool  # a pass ran in place (so its re-check is this process's to make)
    follow: ClaimedCommand | None = None  # issued by the pass, claimed to run here next


# the command was no longer ours: nothing recorded, nothing to publish
NOT_CLOSED = CloseResult(closed=False, publish=None, ran_pass=False)


@dataclass(frozen=True)
class _Recorded:
    close: CloseResult
    as_given: bool  # the outcome recorded is the one the command produced
    outcome: Outcome  # the outcome recorded (or offered, when not closed)


class CommandExecutor:
    def __init__(
        self,
        store: Store,
        playbooks: PlaybookCache,
        runner: StepRunner,
        orchestrator: PassDriver,
        lease_seconds: int,
        logs: LogSink | None = None,
        chain_seconds: float = 0.0,
    ) -> None:
        self.store = store
        # a cursor lane's next command runs in this process, unpublished, while the
        # delivery that started the chain is younger than this (0: never)
        self.chain_seconds = chain_seconds
        self.playbooks = playbooks
        self.runner = runner
        self.orchestrator = orchestrator
        self.lease_seconds = lease_seconds
        self.heartbeats = Heartbeats(
            lambda ids: store.renew_leases(ids, lease_seconds),
            lease_seconds,
            poll=store.running_of,
        )
        self.logs = logs
        # parked commands are issued by this process when due (the sweep if it is gone)
        self.wakeups = parking.Wakeups(
            store.parking.issue_when_due, lambda ids: self.orchestrator.dispatcher.publish(ids)
        )
        if logs is not None:
            logcapture.install()

    def execute(self, command_id: str) -> CommandReport:
        """Run one delivery of a command; the report says what it did (`duplicate` when
        nothing ran). What the command prints and logs meanwhile is captured and stored
        with its close.

        Local continuation: when the pass that folded a cursor lane's command issued
        that lane's next command alone (a frame's body after its claim, the next claim
        after a per-frame body), the command is not published: this process claims and
        runs it next, as the delivery of its message would have, without the broker
        round trip and the hand-off. It is a command like any other (its own row,
        conditional claim, lease, terminal event); left `issued` by a process that dies
        first, it is the reaper's (issued but not started: published again). The chain
        ends after `chain_seconds`: its next command is then published."""
        chain_until = time.monotonic() + self.chain_seconds
        report, follow = self._execute_captured(command_id, chain_until)
        if follow is None:
            return report
        while follow is not None:
            more, follow = self._execute_captured(follow.command_id, chain_until, follow)
            log.debug(
                "command %s ran here after command %s: %s",
                more.command_id,
                command_id,
                more.status,
                extra=of_command(more.command_id),
            )
        # the passes of the chain left their re-checks to the next command's pass: the
        # last one's is made here (holder of the lock, docs/design.md §2.5)
        self.orchestrator.drive(report.execution_id, wait=False, recheck_first=True)
        return report

    def _execute_captured(
        self, command_id: str, chain_until: float, claimed: ClaimedCommand | None = None
    ) -> tuple[CommandReport, ClaimedCommand | None]:
        capture = self.logs.command() if self.logs is not None else None
        # the keychain values the command resolves are masked in all it leaves behind
        with about(**of_command(command_id)), command_masks(), logcapture.capturing(capture):
            return self._execute(command_id, capture, chain_until, claimed)

    def _execute(
        self,
        command_id: str,
        capture: logcapture.Capture | None = None,
        chain_until: float | None = None,
        claimed: ClaimedCommand | None = None,
    ) -> tuple[CommandReport, ClaimedCommand | None]:
        """`claimed`: the command, already claimed by the close of the one before it."""
        command = claimed or self.store.claim(command_id, worker_identity(), self.lease_seconds)
        if command is None:
            log.info(
                "command %s already claimed or finished: duplicate delivery dropped",
                command_id,
                extra=of_command(command_id),
            )
            return CommandReport(command_id, DUPLICATE), None
        self.heartbeats.start(command_id)
        return self._conclude(command, self.run_claimed(command), capture, chain_until)

    def run_claimed(self, command: ClaimedCommand) -> Outcome | Suspended | HeldFrame | Parked:
        """Run a claimed command (its heartbeat started) to its masked result; stops its
        heartbeat. Never raises for the command's own faults: they become its outcome."""
        resumed = bool(command.resume)
        try:
            with tracing.command_span(command, resumed):
                playbook = self.playbooks.get(command.catalog_id)
                stop = self._stop_check(playbook, command)
                result = self.runner.run(playbook, command, _Children(self, command), stop)
                _trace_result(result)
        except Exception as exc:  # an engine bug must fail the step, never hang it
            log.exception("command %s crashed", command.command_id)
            redact = self.runner.services.redactor.redact
            result = Outcome.failed(
                StepError(
                    "engine_error",
                    redact(f"{type(exc).__name__}: {exc}"),
                    traceback=redact(traceback.format_exc(limit=8)),
                )
            )
        finally:
            self.heartbeats.stop(command.command_id)
        if isinstance(result, Parked):
            return parking.masked(result)
        return _masked(result)

    def conclude(
        self,
        command: ClaimedCommand,
        result: Outcome | Suspended | HeldFrame | Parked,
        capture: logcapture.Capture | None,
    ) -> CommandReport:
        """Record what a run of `command` came to, alone in its transaction."""
        return self._conclude(command, result, capture)[0]

    def _conclude(
        self,
        command: ClaimedCommand,
        result: Outcome | Suspended | HeldFrame | Parked,
        capture: logcapture.Capture | None,
        chain_until: float | None = None,
    ) -> tuple[CommandReport, ClaimedCommand | None]:
        """conclude(), and the command to run here next (local continuation) when
        `chain_until` is still ahead."""
        command_id = command.command_id
        if isinstance(result, Parked):  # a long retry delay: wait in Postgres, not here
            parking.park(self.store, command, result, capture, self.wakeups)
            return CommandReport(command_id, WAITING), None
        if isinstance(result, Suspended):
            # what it printed so far is stored now; the resumed run adds a block of its own
            self.store.history.write_logs(LogSink.command_rows(capture, command))
            self._wait_for_child(command, result)
            return CommandReport(command_id, WAITING), None
        chain = chain_until is not None and time.monotonic() < chain_until
        if isinstance(result, HeldFrame):
            recorded = self._finish(command, result.outcome, result.claim, capture, chain)
        else:
            recorded = self._finish(command, result, capture=capture, chain=chain)
        report = report_of(command_id, recorded.outcome, recorded=recorded.close.closed)
        return report, recorded.close.follow

    def _stop_check(self, playbook: Playbook, command: ClaimedCommand) -> StopCheck:
        """Asked by a pipeline before each task: stop when the command was cancelled or
        taken over (its row is no longer `running`: the heartbeat thread looks that up
        for every watched command of this process at once, every `heartbeat.POLL_SECONDS`,
        and a lease renewal that found it gone says so too) or when the step's
        `spec.timeout` passed (the reaper fails a command stuck inside one task)."""
        timeout = step_timeout(playbook.step(command.step))
        deadline = None
        if timeout is not None:
            # a parked pipeline resumed keeps the deadline of its first start: waiting
            # out a retry delay is part of the step's time
            resumed = command.resume is not None and "parked" in command.resume
            left = self.store.set_deadline(command.command_id, timeout, keep=resumed)
            deadline = time.monotonic() + left
        watched = False

        def check() -> tuple[ErrorKind, str] | None:
            nonlocal watched
            if deadline is not None and time.monotonic() > deadline:
                return "timeout", f"step '{command.step}' timed out after {timeout:g}s"
            if not watched:  # from its first task on
                self.heartbeats.watch(command.command_id)
                watched = True
            if self.heartbeats.lost(command.command_id):
                return "cancelled", "the command was cancelled or taken over; stopped"
            return None

        return check

    def _wait_for_child(self, command: ClaimedCommand, suspended: Suspended) -> None:
        """Park the command and start its child (one transaction), then drive the child."""
        child, resumed = self.store.children.suspend_and_spawn(
            command, suspended.continuation, suspended.request, new_execution_id()
        )
        if child is None:
            return  # no longer ours
        if resumed:  # that child had already finished (an earlier run of this command)
            self.orchestrator.dispatcher.publish([command.command_id])
        else:
            self.orchestrator.drive(child, wait=True)

    def _finish(
        self,
        command: ClaimedCommand,
        outcome: Outcome,
        held: HeldClaim | None = None,
        capture: logcapture.Capture | None = None,
        chain: bool = False,
    ) -> _Recorded:
        """Record the outcome (orchestrating in place when the lock is free), then publish
        what the pass issued. A cursor claim's transaction (`held`) is committed right
        after the engine's commit: a crash before it rolls the claim back (the rows stay
        pending, never lost); the window in between is one round trip.

        The close and the pass share a transaction, so a pass the database cuts short
        (this process stalled while holding the execution's lock and Postgres ended its
        idle transaction) takes the close with it: it is recorded again on a fresh
        connection, so the outcome survives. The close is conditional: if the command
        was re-issued meanwhile (the stall outlasted its lease) this run's outcome is
        dropped and the next attempt's counts."""
        try:
            recorded = again_if_interrupted(
                f"recording the outcome of command {command.command_id}",
                lambda: self._record(command, outcome, capture, chain),
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
        if close.follow is not None and close.ran_pass:
            # the re-check waits: the close of the command that runs here next waits for
            # the lock and folds whatever arrived meanwhile, and execute() re-checks
            # once the chain ends
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
    ) -> _Recorded:
        """Close the command with `outcome` and fold it in place when the lock is free.
        Two failures are deterministic, so raising them would only make the reaper run
        the command again to the same end: an outcome the database refuses is replaced
        by a failure saying what could not be stored, and a pass that crashes after the
        close is dropped (the close commits alone; `_finish` then drives the execution,
        and the orchestrator records the crash)."""
        given, fold = outcome, True
        while True:
            try:
                close = self._record_once(command, outcome, capture, fold, chain)
            except ResultNotStorable as exc:
                if outcome is not given:
                    raise  # not even the failure could be stored: a bug, not the data
                outcome = self.not_storable(command, given, exc)
                continue
            except _PassCrashed as exc:
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
            return _Recorded(close, as_given=outcome is given, outcome=outcome)

    def _record_once(
        self,
        command: ClaimedCommand,
        outcome: Outcome,
        capture: logcapture.Capture | None,
        fold: bool,
        chain: bool = False,
    ) -> CloseResult:
        """Close the command and fold it in place, in one transaction. Not closed: the
        command was no longer ours (cancelled or re-issued meanwhile). The captured
        output is stored in the same transaction, last, so it holds the lines the pass
        logged too; nothing is written when nothing was captured. With `chain`, a cursor
        lane's next command the pass issued is claimed in the same transaction (local
        continuation): it commits with the close, so a retried transaction claims it
        again or not at all."""
        with self.store.completion(command) as completion:
            wait = chain and may_follow(command)
            request = None
            if chain:
                pick = partial(next_here, command)
                request = Follow(pick, worker_identity(), self.lease_seconds)
            close = self._close_and_fold(completion, command, outcome, fold, wait, request)
            completion.add_logs(LogSink.command_rows(capture, command))
            return close

    def _close_and_fold(
        self,
        completion: CompletionTx,
        command: ClaimedCommand,
        outcome: Outcome,
        fold: bool = True,
        wait: bool = False,
        follow: Follow | None = None,
    ) -> CloseResult:
        """Close the command, then run a pass on it in place unless it may wait for a
        later one. `wait`: wait for the execution's lock if another pass holds it (a
        cursor lane continuing locally: its next command comes out of this pass, and the
        holder's re-check does not fold our completion, publishing that command, while
        we wait for a pass of our own). `follow`: the pass claims the command this
        process runs next in its own writes (local continuation; the result's `follow`),
        committed with the close or not at all."""
        tx: OrchestrationTx | None
        if wait and fold:  # a pass follows: the lock is taken by the closing statement
            closed, tx = completion.close_and_lock(outcome)
        else:
            closed, tx = completion.close(outcome), None
        if not closed.closed:
            return NOT_CLOSED
        if not fold:
            return CloseResult(closed=True, publish=[], ran_pass=False)
        if tx is None:
            if self.deferrable(command, closed):
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
            raise _PassCrashed from exc
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
        message = self.runner.services.redactor.redact(
            f"{where} returned a value that cannot be stored: {what}"
        )
        log.error(
            "command %s: %s", command.command_id, message, extra=of_command(command.command_id)
        )
        error = StepError("result_not_storable", message, retryable=False)
        return Outcome.failed(error, meta=outcome.meta)

    @staticmethod
    def deferrable(command: ClaimedCommand, closed: Closed) -> bool:
        loop = closed.loop  # the loops row of the command's epoch
        if command.iteration is None or closed.status != RUNNING or loop is None or loop.done:
            return False
        return may_defer_window(loop.window, loop.in_flight, closed.waiting)


def _trace_result(result: Outcome | Suspended | HeldFrame | Parked) -> None:
    """What the run came to, on its span (tracing on only)."""
    if not tracing.enabled():
        return
    if isinstance(result, Parked):
        tracing.set_attributes({"noetl.outcome": "parked"})
        return
    if isinstance(result, Suspended):
        tracing.set_attributes({"noetl.outcome": "waiting_for_child"})
        return
    outcome = result.outcome if isinstance(result, HeldFrame) else result
    tracing.set_attributes({"noetl.outcome": outcome.status})
    if outcome.error is not None:
        tracing.set_attributes({"noetl.error.kind": outcome.error.kind})
        tracing.failed(f"{outcome.error.kind}: {outcome.error.message}")


def _masked(result: Outcome | Suspended | HeldFrame) -> Outcome | Suspended | HeldFrame:
    """The outcome with the command's keychain values masked: a step that returns,
    echoes or fails with one stores `***` (what a child is started with, too)."""
    if isinstance(result, Outcome):
        return _masked_outcome(result)
    if isinstance(result, HeldFrame):
        return dataclasses.replace(result, outcome=_masked_outcome(result.outcome))
    request = dataclasses.replace(
        result.request, payload=mask_command_value(result.request.payload)
    )
    return Suspended(mask_command_value(result.continuation), request)


def _masked_outcome(outcome: Outcome) -> Outcome:
    # masked as the JSON it is stored as: a value may hide anywhere in it
    return Outcome.from_json(mask_command_value(outcome.to_json()))


class _Children:
    """Sub-playbook access for the task a worker runs (worker.subplaybook.Children)."""

    def __init__(self, executor: CommandExecutor, command: ClaimedCommand) -> None:
        self.executor = executor
        self.command = command

    def check(self, request: SpawnRequest) -> None:
        self.executor.store.resolve_catalog(request.path, request.version)

    def start_detached(self, request: SpawnRequest) -> str:
        request = dataclasses.replace(request, payload=mask_command_value(request.payload))
        child = self.executor.store.children.spawn_detached(
            self.command, request, new_execution_id()
        )
        self.executor.orchestrator.drive(child, wait=True)
        return child
