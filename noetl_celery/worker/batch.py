"""`execute_commands`: one broker message carrying many command ids (issue 15).

A message per command made the broker round trip, the claim, the close and a pass cost
per item; a batch shares them. Every command still has its own row, claim, lease and
terminal event, so counts and exactly-once are what they were:

- the batch is claimed in one statement; ids another delivery already claimed or
  finished are skipped (duplicate deliveries), as a single claim drops them;
- the claimed commands' leases are renewed together (worker.heartbeat), the unstarted
  ones' too: a worker killed mid-batch leaves them `running` with leases that expire,
  and the reaper runs them again (the path a single command takes);
- after `budget_seconds` of running, the commands not started yet are handed back
  (`issued` again while still this worker's claim) and published again, in messages of
  as many as ran within the budget; as soon as one command has run for a tenth of the
  budget, while it still runs, the watchdog (worker.handback) takes the rest: a slow
  command that waits (on an API, a pacer: little CPU for its time) has the rest run
  beside it, in threads of this process, their closes grouped by the process's close
  window (worker.close_window: one transaction and one pass per execution for the
  closes of a few milliseconds); one that computes hands the rest back one per message,
  so a slow item never holds the others while other worker processes or threads idle.
  A broker message, a claim and a close per item was most of an HTTP body's CPU when
  the rest went back one per message (issue 34);
- the plain outcomes are closed in one transaction with one orchestration pass per
  execution (a pass folds any number of completions from the inbox). An outcome the
  database refuses is replaced by its `result_not_storable` failure alone: the others
  are recorded as they were;
- a command that cannot share the close (a sub-playbook parent that suspends, a cursor
  claim whose queue transaction is held until its outcome is recorded) is recorded
  alone right after it runs, as `execute_command` does.
"""

from __future__ import annotations

import functools
import logging
import os
import threading
import time
from collections.abc import Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field

from noetl_celery import logcapture, tracing
from noetl_celery.errors import ResultNotStorable
from noetl_celery.logcontext import about, of_command
from noetl_celery.models.outcome import Outcome
from noetl_celery.orchestrator.packing import pack
from noetl_celery.passes.logsink import LogSink
from noetl_celery.passes.orchestrate import PassResult, crash_message
from noetl_celery.passes.retry import again_if_interrupted
from noetl_celery.store.completion import Closed, CompletionTx
from noetl_celery.store.database import transient
from noetl_celery.store.rows import ClaimedCommand
from noetl_celery.tools.redaction import command_masks
from noetl_celery.worker.close_window import CloseWindow
from noetl_celery.worker.closing import PassCrashed, deferrable, worker_identity
from noetl_celery.worker.execute import CommandExecutor
from noetl_celery.worker.handback import WAITING_CPU_SHARE, Unstarted, Watchdog
from noetl_celery.worker.reports import DUPLICATE, CommandReport, report_of

log = logging.getLogger("noetl_celery.worker")

# command ids a hand-back's trace mark names (its count is always exact)
HAND_BACK_IDS_SHOWN = 10
# threads of a process that run the rest of slow batches beside their slow command
# (NOETL_BESIDE_THREADS); more wait for one (claimed, their leases renewed): they wait on
# I/O, so the process's CPU is not what bounds them. A process then runs up to this many
# commands past the one its pool slot runs (`-c` counts processes, not these)
BESIDE_THREADS = 64
# closes the close window records in one transaction at most
MOST_CLOSES = 50
# how long a close waits for others of its process (NOETL_CLOSE_WINDOW_SECONDS). On
# bench.pft_cursor --facilities 2 (two workers, 300 requests/s), 0.15 s against 0.05 s,
# interleaved: the drain's wall time 1.29-1.32x its rate bound instead of 1.41-1.43x,
# the workers' CPU per request a few percent lower (larger groups: fewer transactions
# and passes per close, fewer passes waiting for the execution's lock). A close that
# waits is a neighbour of a slow command: its result shows up at most that much later
DEFAULT_CLOSE_WINDOW_SECONDS = 0.15


@dataclass
class _Ran:
    """A command that ran to a plain outcome, waiting for the batch's close."""

    command: ClaimedCommand
    given: Outcome  # what it produced
    capture: logcapture.Capture | None


@dataclass
class _Beside:
    """The commands of one batch that run beside its slow command (their reports: a
    report, or the future of one from the close window), and whether the watchdog's
    decision about them is settled (it decides on its own thread)."""

    runs: list[Future[CommandReport | Future[CommandReport]]] = field(default_factory=list)
    settled: threading.Event = field(default_factory=threading.Event)


@dataclass(frozen=True)
class _Fold:
    """What to do for one execution once the batch's transaction committed."""

    execution_id: str
    publish: list[str] | None  # None: deferred (looked at again once committed)
    ran_pass: bool


class BatchExecutor:
    def __init__(
        self,
        executor: CommandExecutor,
        budget_seconds: float,
        close_window_seconds: float = DEFAULT_CLOSE_WINDOW_SECONDS,
        beside_threads: int = BESIDE_THREADS,
    ) -> None:
        self.executor = executor
        self.budget_seconds = budget_seconds
        # 0: nothing runs beside; the rest of a slow batch is handed back, one per message
        self.beside_threads = beside_threads
        # a command slower than this is not the cheap kind batches are for (a no-op, a
        # quick SQL statement: a few ms): one that waits on an API has the rest of its
        # batch run beside it at once, so a parallel loop's items run side by side
        self.slow_item = budget_seconds / 10
        self.watchdog = Watchdog(self.slow_item)
        self.window: CloseWindow[_Ran, CommandReport] = CloseWindow(
            self._record, close_window_seconds, MOST_CLOSES
        )
        self._pool: ThreadPoolExecutor | None = None
        self._pool_pid = 0
        self._pool_lock = threading.Lock()

    def execute(self, command_ids: Sequence[str]) -> list[CommandReport]:
        """Run one delivery of a batch; one report per command it claimed or skipped
        (commands handed back are reported by the batch that runs them)."""
        ex = self.executor
        claimed = ex.store.claim_batch(command_ids, worker_identity(), ex.lease_seconds)
        taken = {c.command_id for c in claimed}
        reports = [
            CommandReport(cid, DUPLICATE) for cid in dict.fromkeys(command_ids) if cid not in taken
        ]
        for report in reports:  # the words of execute_command's line (one per command)
            log.info(
                "command %s already claimed or finished: duplicate delivery dropped",
                report.command_id,
                extra=of_command(report.command_id),
            )
        ex.heartbeats.start_many(taken)
        ran: list[_Ran] = []
        queue = Unstarted(claimed)
        beside = _Beside()
        if len(claimed) > 1:
            self.watchdog.watch(queue, functools.partial(self._slow, queue, beside))
        try:
            reports.extend(self._run_all(queue, ran, beside))
        finally:
            # after unwatch no hand-back takes from the queue any more; one it took is
            # settled (handed back, or running beside) before we go on
            self.watchdog.unwatch(queue)
            if queue.watchdog_took:
                beside.settled.wait()
            # whatever ended the loop, no lease of this batch is renewed any more: a
            # command left `running` is the reaper's once its lease runs out. Those
            # handed back are not touched: another thread of this process may run them
            # by now, under heartbeats of its own
            for command in claimed:
                if command.command_id not in queue.handed_back:
                    ex.heartbeats.stop(command.command_id)
        if beside.runs:
            # the rest ran beside the slow command: its close and theirs share the window
            waiting = [self.window.submit(item) for item in ran]
            reports.extend(future.result() for future in waiting)
            reports.extend(_resolved(run) for run in beside.runs)
        elif ran:
            reports.extend(self._record(ran))
        return reports

    def _run_all(self, queue: Unstarted, ran: list[_Ran], beside: _Beside) -> list[CommandReport]:
        reports = []
        started = last = time.monotonic()
        count = 0
        waited = False  # the process used little CPU while the last ran (worker.handback)
        while True:
            now = time.monotonic()
            over_budget = now - started >= self.budget_seconds
            if count and (over_budget or now - last >= self.slow_item):
                # past the budget, or the last command was slow and ended between two
                # of the watchdog's ticks: the rest runs elsewhere, not one by one here
                rest = queue.take_rest()
                if rest and not over_budget and waited and self.beside_threads:
                    self._run_beside(rest, beside)
                elif rest:
                    log.info(
                        "batch %s: %d unstarted commands handed back",
                        f"ran past its {self.budget_seconds:g}s budget"
                        if over_budget
                        else f"command took over {self.slow_item:g}s",
                        len(rest),
                    )
                    self._hand_back(
                        rest,
                        per_message=count if over_budget else 1,
                        reason="budget" if over_budget else "slow command",
                    )
                break
            command = queue.next(now)
            if command is None:  # all ran, or the watchdog handed the rest back
                break
            last = now
            count += 1
            cpu = time.process_time()
            report = self._run_one(command, ran)
            used = time.process_time() - cpu
            waited = used < WAITING_CPU_SHARE * (time.monotonic() - now)
            if report is not None:
                reports.append(report)
        return reports

    def _run_one(self, command: ClaimedCommand, ran: list[_Ran]) -> CommandReport | None:
        ex = self.executor
        capture = ex.logs.command() if ex.logs is not None else None
        cid = command.command_id
        with about(**of_command(cid)), command_masks(), logcapture.capturing(capture):
            result = ex.run_claimed(command)
            if isinstance(result, Outcome):
                ran.append(_Ran(command, result, capture))
                return None
            # a suspended parent or a held cursor frame: recorded alone, now
            return ex.conclude(command, result, capture)

    def _slow(self, queue: Unstarted, beside: _Beside, rest: list[ClaimedCommand]) -> None:
        """The watchdog's call (its own thread) while a slow command still runs: the rest
        runs beside it when it waits, else is handed back."""
        try:
            if self.beside_threads and queue.running_waits(time.monotonic()):
                self._run_beside(rest, beside, queue.running)
            else:
                self._hand_back_slow(queue, rest)
        finally:
            beside.settled.set()

    def _run_beside(
        self, rest: list[ClaimedCommand], beside: _Beside, slow: ClaimedCommand | None = None
    ) -> None:
        """Run the rest of a batch in this process's threads, beside (or after) its slow
        command that waits; each close goes to the process's close window."""
        slow_id = slow.command_id if slow is not None else None
        log.info(
            "%s: the %d unstarted commands of its batch run beside it",
            f"command {slow_id} has run for over {self.slow_item:g}s waiting"
            if slow_id
            else f"a command waited over {self.slow_item:g}s",
            len(rest),
            extra=of_command(slow_id) if slow_id else {},
        )
        if slow_id is not None:
            tracing.command_event(
                slow_id, "batch.ran_beside", {"commands": len(rest), "slow_seconds": self.slow_item}
            )
        pool = self._threads()
        for command in rest:
            beside.runs.append(pool.submit(self._beside_one, command))

    def _threads(self) -> ThreadPoolExecutor:
        """This process's threads for commands run beside a slow one (made again in a
        forked child: a pool's threads do not survive the fork)."""
        with self._pool_lock:
            if self._pool is None or self._pool_pid != os.getpid():
                self._pool_pid = os.getpid()
                self._pool = ThreadPoolExecutor(
                    self.beside_threads, thread_name_prefix="noetl-beside"
                )
            return self._pool

    def _beside_one(self, command: ClaimedCommand) -> CommandReport | Future[CommandReport]:
        """Run one command beside a slow one: its plain outcome is closed by the window."""
        ex = self.executor
        capture = ex.logs.command() if ex.logs is not None else None
        cid = command.command_id
        with about(**of_command(cid)), command_masks(), logcapture.capturing(capture):
            result = ex.run_claimed(command)
            if isinstance(result, Outcome):
                return self.window.submit(_Ran(command, result, capture))
            return ex.conclude(command, result, capture)

    def _hand_back_slow(self, queue: Unstarted, rest: list[ClaimedCommand]) -> None:
        """Hand the rest back while a slow command that computes still runs; the log
        line names that command (the one an operator looks at)."""
        slow = queue.running
        slow_id = slow.command_id if slow is not None else "?"
        log.info(
            "command %s has run for over %gs: the %d unstarted commands of its batch are "
            "handed back to run elsewhere",
            slow_id,
            self.slow_item,
            len(rest),
            extra=of_command(slow_id) if slow is not None else {},
        )
        tracing.command_event(
            slow_id, "batch.handed_back", {"commands": len(rest), "slow_seconds": self.slow_item}
        )
        self._hand_back(rest, per_message=1, reason="slow command")

    def _hand_back(
        self, rest: list[ClaimedCommand], per_message: int, reason: str = "budget"
    ) -> None:
        """Release the unstarted commands (still ours) and publish them again, in
        messages of `per_message` (as many as this batch ran within its budget): slow
        items then spread over the pool's processes instead of hopping from one to the
        next as one batch. A lost publish is the reaper's: the rows say `issued`."""
        ex = self.executor
        ids = [c.command_id for c in rest]
        for cid in ids:
            ex.heartbeats.stop(cid)
        released = ex.store.release_claims(ids, worker_identity())
        log.debug("batch: %d of %d unstarted commands released", len(released), len(ids))
        if not released:
            return
        _trace_hand_back(rest, set(released), reason)
        try:
            for ids in pack(released, per_message):
                ex.orchestrator.dispatcher.publish(ids)
        except Exception:
            log.warning(
                "publishing %d handed-back commands failed; the reaper publishes them "
                "again (NOETL_ISSUED_GRACE_SECONDS)",
                len(released),
                exc_info=True,
            )

    def _record(self, ran: list[_Ran]) -> list[CommandReport]:
        """Close every outcome in one transaction with the passes, then publish what the
        passes issued and drive each execution (as Closer.finish does)."""
        ex = self.executor
        outcomes = [r.given for r in ran]
        fold = True
        together = len(ran) > 1  # one closing statement for all; one by one to find a refusal
        while True:
            at = [-1]  # the command being closed, should the database refuse its outcome
            work = functools.partial(self._record_once, ran, outcomes, fold, together, at)
            try:
                closed, folds = again_if_interrupted(
                    f"recording the outcomes of a batch of {len(ran)} commands", work
                )
            except ResultNotStorable as exc:
                if at[0] < 0:  # refused by the statement closing them all: but which?
                    together = False
                    continue
                item = ran[at[0]]
                if outcomes[at[0]] is not item.given:
                    raise  # not even the failure could be stored: a bug, not the data
                outcomes[at[0]] = ex.closer.not_storable(item.command, item.given, exc)
                continue
            except PassCrashed as exc:
                log.warning(
                    "the orchestration pass after a batch of %d commands crashed (%s); "
                    "their closes are stored alone",
                    len(ran),
                    crash_message(exc.__cause__ or exc),
                )
                fold = False
                continue
            break
        for done in folds:
            if done.publish is None:
                ex.orchestrator.after_deferral(done.execution_id)
                continue
            if done.publish:
                ex.orchestrator.dispatcher.publish(done.publish)
            ex.orchestrator.drive(done.execution_id, wait=False, recheck_first=done.ran_pass)
        return [
            report_of(r.command.command_id, outcomes[i], recorded=closed[i])
            for i, r in enumerate(ran)
        ]

    def _record_once(
        self, ran: list[_Ran], outcomes: list[Outcome], fold: bool, together: bool, at: list[int]
    ) -> tuple[list[bool], list[_Fold]]:
        """One transaction: every close (`together`: in one statement), the passes, then
        the captured output (last, so it holds what the passes logged too)."""
        ex = self.executor
        with ex.store.completion(ran[0].command) as first:
            commands = [item.command for item in ran]
            if together:
                closed = first.close_many(list(zip(commands, outcomes, strict=True)))
            else:
                closed = []
                for index, command in enumerate(commands):
                    at[0] = index
                    closed.append(first.of(command).close(outcomes[index]))
            closes = list(zip(commands, closed, strict=True))
            folds = self._folds(first, closes) if fold else _unfolded(closes)
            for item in ran:
                first.of(item.command).add_logs(LogSink.command_rows(item.capture, item.command))
        return [c.closed for _, c in closes], folds

    def _folds(
        self, first: CompletionTx, closes: list[tuple[ClaimedCommand, Closed]]
    ) -> list[_Fold]:
        """One pass per execution with a close, in the batch's transaction, unless every
        close of it may wait for a later pass (orchestrator.batching)."""
        ex = self.executor
        folds = []
        for execution_id, mine in _by_execution(closes).items():
            if all(deferrable(command, closed) for command, closed in mine):
                # enough of the window still runs: folded later
                folds.append(_Fold(execution_id, None, False))
                continue
            tx = first.of(mine[-1][0]).lock()
            if tx is None:  # another pass holds the lock: it folds ours, or drive does
                folds.append(_Fold(execution_id, [], False))
                continue
            try:
                passed: PassResult = ex.orchestrator.run_pass(tx)
            except Exception as exc:
                if transient(exc):
                    raise  # the database is away: nothing can be recorded now
                raise PassCrashed from exc
            folds.append(_Fold(execution_id, None if passed.deferred else passed.publish, True))
        return folds


def _trace_hand_back(rest: list[ClaimedCommand], released: set[str], reason: str) -> None:
    """A `hand back` mark under each step whose commands were handed back."""
    if not tracing.enabled():
        return
    steps: dict[tuple[str, str, int], list[str]] = {}
    for command in rest:
        if command.command_id in released:
            key = (command.execution_id, command.step, command.epoch)
            steps.setdefault(key, []).append(command.command_id)
    for (execution_id, step, epoch), ids in steps.items():
        attributes: tracing.Attributes = {
            "commands": len(ids),
            "reason": reason,
            "command_ids": ids[:HAND_BACK_IDS_SHOWN],
        }
        tracing.step_mark(execution_id, step, epoch, "hand back", attributes)


def _resolved(run: Future[CommandReport | Future[CommandReport]]) -> CommandReport:
    """The report of a command run beside: concluded in its thread, or by the window."""
    report = run.result()
    return report.result() if isinstance(report, Future) else report


def _by_execution(
    closes: list[tuple[ClaimedCommand, Closed]],
) -> dict[str, list[tuple[ClaimedCommand, Closed]]]:
    """The closes that took, by execution (a reaper's republish may mix executions)."""
    grouped: dict[str, list[tuple[ClaimedCommand, Closed]]] = {}
    for command, closed in closes:
        if closed.closed:
            grouped.setdefault(command.execution_id, []).append((command, closed))
    return grouped


def _unfolded(closes: list[tuple[ClaimedCommand, Closed]]) -> list[_Fold]:
    """After a crashed pass: the closes commit alone and each execution is driven."""
    return [_Fold(eid, [], False) for eid in _by_execution(closes)]
