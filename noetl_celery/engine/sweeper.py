"""The reaper: puts back what crashes and a wiped broker took away (docs/design.md §3).

One sweep, run by one process at a time (a lease row in Postgres):
1. `issued` commands nobody started within the grace period are published again (a
   message lost with a flushed or restarted Redis, or an orchestrator that died between
   its commit and its publish); duplicates are harmless (conditional claim);
2. `running` commands whose lease expired (their worker died) are issued again as their
   next attempt, up to `max_attempts` runs; then, or when a step's deadline passed, they
   fail with a terminal event like any failed command, and the flow goes on from there;
3. executions with completions nobody folded (a lost wake-up) get an orchestration pass;
4. executions running longer than the execution timeout end FAILED;
5. running executions past (or, by their loops' ETA, heading past) their playbook's
   `metadata.deadline` get a `deadline.missed` / `deadline.at_risk` event, each once,
   and its notifications (engine.deadlines);
6. `delayed` commands whose due time came (a cursor claim retried after a backoff, a
   pipeline parked for a long retry delay whose worker is gone, worker.parking) are
   issued and published.

Each part, and each execution or command within it, is handled on its own: whatever goes
wrong with one is logged and the sweep goes on with the next, so one bad execution (a
pass that crashes on it, passes.orchestrate) cannot take the catch-up away from the rest.

Celery beat sends the sweep task every `reaper_interval_seconds`; the embedded default
runs it on a thread. Every worker process also looks every interval, and sweeps when
nobody did within the lease's TTL (`sweep_unless_swept`): a fleet started without beat,
or whose beat died, still re-issues the commands of a dead worker instead of leaving
their executions waiting in silence.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import TypeVar

from noetl_celery import logcapture, tracing
from noetl_celery.constants import FAILED
from noetl_celery.engine.deadlines import check_one
from noetl_celery.engine.periodic import Periodic
from noetl_celery.models.outcome import ErrorKind
from noetl_celery.passes.logsink import LogSink
from noetl_celery.passes.orchestrate import PassDriver
from noetl_celery.passes.termination import end_tree
from noetl_celery.store.reaper import LostCommand
from noetl_celery.store.repository import Store
from noetl_celery.store.schema import utcnow

log = logging.getLogger("noetl_celery.reaper")

_T = TypeVar("_T")

LEASE_NAME = "reaper"


@dataclass(frozen=True)
class ReaperPolicy:
    issued_grace_seconds: float
    max_attempts: int
    wake_grace_seconds: float
    execution_timeout_seconds: float  # 0: no limit
    # a sweep that takes longer than this may overlap with the next one (harmless: every
    # action is a conditional update); a sweeper that died holds the duty this long
    lease_ttl_seconds: float = 15.0


@dataclass
class Sweep:
    held: bool = True  # False: another process was sweeping
    republished: int = 0
    reissued: int = 0
    failed: int = 0
    woken: int = 0
    timed_out: int = 0
    released: int = 0  # delayed commands issued at their due time
    deadlines: int = 0  # deadline events recorded (engine.deadlines)
    errors: int = 0  # parts or executions the sweep could not handle (logged)

    def __bool__(self) -> bool:
        return any(
            (
                self.republished,
                self.reissued,
                self.failed,
                self.woken,
                self.timed_out,
                self.released,
                self.deadlines,
                self.errors,
            )
        )


class Reaper:
    def __init__(
        self,
        store: Store,
        orchestrator: PassDriver,
        policy: ReaperPolicy,
        owner: str,
        logs: LogSink | None = None,
    ) -> None:
        self.store = store
        self.orchestrator = orchestrator
        self.policy = policy
        self.owner = owner
        self.logs = logs

    def sweep(self) -> Sweep:
        if not self.store.reaper.take_lease(LEASE_NAME, self.owner, self.policy.lease_ttl_seconds):
            log.debug("reaper: another process holds the sweep")
            return Sweep(held=False)
        # the sweep's lines about executions (a command re-issued or failed, a timeout)
        # are kept with those executions' logs, without a command
        collector = self.logs.collector() if self.logs is not None else None
        try:
            with logcapture.capturing(collector):
                report = self._sweep()
        finally:
            self.store.reaper.release_lease(LEASE_NAME, self.owner)
        self.store.history.write_logs(LogSink.collected_rows(collector))
        # a sweep runs every few seconds: a line at INFO only when it did something
        log.log(logging.INFO if report else logging.DEBUG, "reaper: %s", report)
        return report

    def sweep_unless_swept(self) -> Sweep | None:
        """A worker's own sweep, run only when nobody swept within the lease's TTL: with
        beat sending `noetl.reap` every interval this does nothing but one read; a fleet
        without beat (or whose beat died, or whose reap messages were lost) still gets its
        lost commands re-issued and its parked ones released. None: not needed."""
        if self.store.reaper.held_within(LEASE_NAME, self.policy.lease_ttl_seconds):
            return None
        return self.sweep()

    def _sweep(self) -> Sweep:
        report = Sweep()
        dispatcher = self.orchestrator.dispatcher
        with self._guard(report, "republishing issued commands"):
            stale = self.store.reaper.republish_stale(self.policy.issued_grace_seconds)
            if stale:
                dispatcher.publish(stale)
                report.republished = len(stale)
        with self._guard(report, "issuing delayed commands"):
            due = self.store.reaper.release_delayed()
            if due:
                dispatcher.publish(due)
                report.released = len(due)
        wake: set[str] = set()
        for lost in self._listed(report, "lost commands", self.store.reaper.lost_commands):
            with self._guard(report, f"recovering command {lost.command_id}", lost.execution_id):
                new_id = self._recover(lost, report)
                if new_id is not None:
                    dispatcher.publish([new_id])
                else:
                    wake.add(lost.execution_id)
        timeout = self.policy.execution_timeout_seconds
        if timeout > 0:
            message = f"execution timed out after {timeout:g}s (NOETL_EXECUTION_TIMEOUT_SECONDS)"
            past = self._listed(
                report, "timed-out executions", self.store.reaper.executions_past, timeout
            )
            for execution_id in past:
                with self._guard(report, "ending a timed-out execution", execution_id):
                    if end_tree(self.store, dispatcher, execution_id, FAILED, message):
                        report.timed_out += 1
        self._check_deadlines(report)
        grace = self.policy.wake_grace_seconds
        wake.update(
            self._listed(report, "executions to wake", self.store.reaper.executions_to_wake, grace)
        )
        for execution_id in sorted(wake):
            with self._guard(report, "waking an execution", execution_id):
                self.orchestrator.drive(execution_id, wait=False)
                report.woken += 1
        return report

    def _check_deadlines(self, report: Sweep) -> None:
        playbooks = self.orchestrator.playbooks
        now = utcnow()
        candidates = self._listed(
            report, "executions with deadlines", self.store.notifications.deadline_candidates
        )
        for candidate in candidates:
            with self._guard(report, "checking a deadline", candidate.execution_id):
                if check_one(self.store, playbooks, candidate, now) is not None:
                    report.deadlines += 1

    @contextmanager
    def _guard(self, report: Sweep, what: str, execution_id: str | None = None) -> Iterator[None]:
        """Log what went wrong with one part of the sweep and go on with the next (a
        pass that crashes on one execution was recorded by the orchestrator already;
        what lands here is mostly the database being away for a moment)."""
        try:
            yield
        except Exception:
            report.errors += 1
            about = {"execution_id": execution_id} if execution_id else {}
            suffix = f" {execution_id}" if execution_id else ""
            log.warning("reaper: %s%s failed", what, suffix, exc_info=True, extra=about)

    def _listed(
        self, report: Sweep, what: str, query: Callable[..., list[_T]], *args: object
    ) -> list[_T]:
        """`query(*args)`, or nothing when it failed (logged)."""
        with self._guard(report, f"listing {what}"):
            return query(*args)
        return []

    def _recover(self, lost: LostCommand, report: Sweep) -> str | None:
        """The next attempt's id to publish, or None when the command failed for good."""
        if lost.deadline_at is not None and lost.deadline_at < utcnow():
            message = f"step '{lost.step}' timed out (its `spec.timeout` passed)"
            self._give_up(lost, "timeout", message, report)
            return None
        if lost.attempt >= self.policy.max_attempts:
            message = (
                f"command {lost.command_id} lost its worker (lease expired) on attempt "
                f"{lost.attempt} of {self.policy.max_attempts}; giving up"
            )
            self._give_up(lost, "worker_lost", message, report)
            return None
        new_id = self.store.reaper.reissue(lost)
        if new_id is not None:
            report.reissued += 1
            _trace_lost(lost, new_id)
            log.warning(
                "command %s lost its worker; issued again as %s",
                lost.command_id,
                new_id,
                extra=_about(lost, new_id),
            )
        return new_id

    def _give_up(self, lost: LostCommand, kind: ErrorKind, message: str, report: Sweep) -> None:
        if self.store.reaper.give_up(lost, kind, message):
            report.failed += 1
            _trace_lost(lost, None, kind)
            log.warning("command %s failed: %s", lost.command_id, message, extra=_about(lost))


def _trace_lost(lost: LostCommand, new_id: str | None, failed: str | None = None) -> None:
    """A `lease expired` mark under the lost command's step (tracing on only)."""
    if not tracing.enabled():
        return
    attributes: dict[str, tracing.AttributeValue] = {
        "command_id": lost.command_id,
        "attempt": lost.attempt,
    }
    if new_id is not None:
        attributes["reissued_as"] = new_id
    if failed is not None:
        attributes["failed"] = failed
    tracing.step_mark(lost.execution_id, lost.step, lost.epoch, "lease expired", attributes)


def _about(lost: LostCommand, command_id: str | None = None) -> dict[str, str]:
    """`extra=` naming a lost command (the sweep runs outside any command's context)."""
    return {
        "execution_id": lost.execution_id,
        "step": lost.step,
        "command_id": command_id or lost.command_id,
    }


class ReaperThread(Periodic):
    """Sweeps every `interval` seconds on a daemon thread (the embedded default); with
    `fallback`, only when nobody swept within the lease's TTL (a worker beside beat)."""

    def __init__(self, reaper: Reaper, interval: float, *, fallback: bool = False) -> None:
        call = reaper.sweep_unless_swept if fallback else reaper.sweep
        super().__init__("noetl-reaper", interval, call, log, "reaper sweep failed")
