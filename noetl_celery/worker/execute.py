"""`execute_command`: claim, run, complete, then orchestrate in place (docs/design.md §3).

Running the orchestration pass in the worker that just finished (when the execution's
lock is free) saves a broker round trip per completion; if another process holds the
lock, that process handles our completion before it lets go. This module claims and
runs one delivery (and the commands it continues locally); recording what it came to is
`worker.closing`'s, starting a sub-playbook `worker.children`'s.
"""

from __future__ import annotations

import dataclasses
import logging
import time
import traceback

from noetl_celery import logcapture, tracing
from noetl_celery.logcontext import about, of_command
from noetl_celery.models.outcome import ErrorKind, Outcome, StepError
from noetl_celery.models.playbook import Playbook, step_timeout
from noetl_celery.passes.logsink import LogSink
from noetl_celery.passes.orchestrate import PassDriver
from noetl_celery.passes.playbooks import PlaybookCache
from noetl_celery.store.repository import Store
from noetl_celery.store.rows import ClaimedCommand
from noetl_celery.tools.redaction import command_masks, mask_command_value
from noetl_celery.worker import parking
from noetl_celery.worker.children import CommandChildren, wait_for_child
from noetl_celery.worker.claims import HeldFrame, claimed_ahead
from noetl_celery.worker.closing import Closer, worker_identity
from noetl_celery.worker.frames import FrameRunner
from noetl_celery.worker.heartbeat import Heartbeats
from noetl_celery.worker.pipeline import Parked, StopCheck
from noetl_celery.worker.reports import DUPLICATE, WAITING, CommandReport, report_of
from noetl_celery.worker.runner import StepRunner
from noetl_celery.worker.subplaybook import Suspended

log = logging.getLogger("noetl_celery.worker")


class CommandExecutor:
    """One delivery of a command: claim it, run it (its heartbeat, stop check, a
    sub-playbook it starts, a retry it parks), and hand what it came to to the `Closer`;
    then run here the command its pass continued locally."""

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
        self.closer = Closer(store, orchestrator, self.heartbeats, lease_seconds, runner.services)
        # parked commands are issued by this process when due (the sweep if it is gone)
        self.wakeups = parking.Wakeups(
            store.parking.issue_when_due, lambda ids: self.orchestrator.dispatcher.publish(ids)
        )
        self.frames = FrameRunner(
            store, self.closer, self.heartbeats, self.run_claimed, self.wakeups
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
        ahead = None if claimed is None else self.frames.take_ahead(command_id)
        if ahead is not None:  # its frame claimed and recorded by the close before it
            return self._conclude(command, claimed_ahead(command, ahead), capture, chain_until)
        return self._conclude(command, self.run_claimed(command), capture, chain_until)

    def run_claimed(
        self, command: ClaimedCommand, watch: str | None = None
    ) -> Outcome | Suspended | HeldFrame | Parked:
        """Run a claimed command (its heartbeat started) to its masked result; stops its
        heartbeat. Never raises for the command's own faults: they become its outcome.
        `watch`: the command whose status stops it (a cursor frame's row body, run by
        the frame's claim: worker.frame_rows), if not its own."""
        resumed = bool(command.resume)
        try:
            with tracing.command_span(command, resumed):
                playbook = self.playbooks.get(command.catalog_id)
                stop = self._stop_check(playbook, command, watch)
                children = CommandChildren(self.store, self.orchestrator, command)
                result = self.runner.run(playbook, command, children, stop)
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
            parked = parking.park(self.store, command, result, capture, self.wakeups)
            if parked and parking.releases(command, result) is not None:
                self._refill(command)
            return CommandReport(command_id, WAITING), None
        if isinstance(result, Suspended):
            # what it printed so far is stored now; the resumed run adds a block of its own
            self.store.history.write_logs(LogSink.command_rows(capture, command))
            wait_for_child(self.store, self.orchestrator, command, result)
            return CommandReport(command_id, WAITING), None
        chain = chain_until is not None and time.monotonic() < chain_until
        if isinstance(result, HeldFrame):
            # one command per frame when the claim may run its frame's body itself
            playbook = self.playbooks.get(command.catalog_id)
            done = self.frames.finish(command, playbook, result, capture, chain)
            recorded = done or self.closer.finish(
                command, result.outcome, result.claim, capture, chain
            )
        else:
            recorded = self.closer.finish(command, result, capture=capture, chain=chain)
        report = report_of(command_id, recorded.outcome, recorded=recorded.close.closed)
        return report, recorded.close.follow

    def _refill(self, command: ClaimedCommand) -> None:
        """A loop item parked for its key's turn gave its window slot back: a pass
        refills the window now, since no completion may come for a while (every item of
        the window may be parked for a slow key). The database away: the reaper wakes
        the execution for the waiting inbox entry."""
        try:
            self.orchestrator.drive(command.execution_id, wait=False)
        except Exception:
            log.warning(
                "command %s parked for its rate_limit turn; its loop's pass is left to the reaper",
                command.command_id,
                exc_info=True,
                extra=of_command(command.command_id),
            )

    def _stop_check(
        self, playbook: Playbook, command: ClaimedCommand, watch: str | None = None
    ) -> StopCheck:
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
                self.heartbeats.watch(watch or command.command_id)
                watched = True
            if self.heartbeats.lost(watch or command.command_id):
                return "cancelled", "the command was cancelled or taken over; stopped"
            return None

        return check


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
