"""Closing a command: the per-iteration write, kept to one statement on Postgres.

The statement closes the command, appends its terminal event (the inbox entry) and
reads back, from the same snapshot, what the worker needs to decide whether to
orchestrate now: the execution's status, the progress of the command's loop epoch and
how many completions of that epoch wait in the inbox. If it orchestrates, it locks the
execution in the same transaction.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from sqlalchemy import Connection
from sqlalchemy.exc import DataError, SQLAlchemyError

from noetl_celery.errors import ResultNotStorable, StoreError
from noetl_celery.models.outcome import Outcome
from noetl_celery.store import queries
from noetl_celery.store.bodies import Ran
from noetl_celery.store.notifications import NotificationsManager
from noetl_celery.store.orchestration import OrchestrationTx
from noetl_celery.store.queries import ResultCache
from noetl_celery.store.queries.commands import FinishedBody
from noetl_celery.store.queries.history import add_logs
from noetl_celery.store.rows import ClaimedCommand, LogRow, LoopCounters
from noetl_celery.store.schema import utcnow

log = logging.getLogger("noetl_celery.completion")


@dataclass
class Closed:
    """What the closing statement saw (waiting includes this completion)."""

    closed: bool
    status: str | None = None
    loop: LoopCounters | None = None  # the command's loop epoch's row (None: no loop)
    waiting: int = 0


class CompletionTx:
    """Holds its connection, the command and the façade's result cache (for the pass it
    may run), not the Store."""

    def __init__(
        self,
        conn: Connection,
        command: ClaimedCommand,
        results: ResultCache,
        notify: NotificationsManager | None = None,
    ) -> None:
        self.conn = conn
        self.command = command
        self._results = results
        self._notify = notify

    def of(self, command: ClaimedCommand) -> CompletionTx:
        """The same transaction, closing another command (a batch's outcomes commit
        together: worker.batch)."""
        return CompletionTx(self.conn, command, self._results, self._notify)

    def close(self, outcome: Outcome) -> Closed:
        """Close the command with `outcome`; ResultNotStorable when the database refuses
        a value in it (Postgres: a NUL character in text, a lone surrogate). The
        transaction is then aborted: the caller closes again, in a new one."""
        try:
            return self._close(outcome)
        except DataError as exc:
            raise not_storable(exc) from exc

    def close_many(self, closing: Sequence[tuple[ClaimedCommand, Outcome]]) -> list[Closed]:
        """Close a batch's commands in this transaction, one Closed per command in order:
        on Postgres one statement for them all (a round trip per command was half of a
        per-row cursor drain's). ResultNotStorable when the database refuses a value in
        any of them, without saying which: the caller closes them one at a time (close)
        in a new transaction to find it."""
        if self.conn.dialect.name != "postgresql":
            return self._close_each(closing)
        try:
            rows = queries.close_many_and_read(self.conn, closing, utcnow())
        except DataError as exc:
            raise not_storable(exc) from exc
        return [closed_of(row) for row in rows]

    def close_and_lock(
        self, outcome: Outcome, body: FinishedBody | None = None
    ) -> tuple[Closed, OrchestrationTx | None]:
        """close, then the execution's lock, waiting for a pass that holds it (lock with
        `wait`): on Postgres in one statement, for a close that is followed by a pass of
        its own for certain (a cursor lane continuing locally). The lock is None when
        nothing was closed. `body`: a cursor frame's bodies its claim's worker ran (each
        with its outcome; the worker), written with the close, only if it closed."""
        if self.conn.dialect.name != "postgresql":
            if body is not None and not self.record_body(*body):
                return Closed(closed=False), None
            closed = self.close(outcome)
            return closed, self.lock(wait=True) if closed.closed else None
        try:
            now = utcnow()
            found = queries.close_lock_and_read(self.conn, self.command, outcome, now, body)
        except DataError as exc:
            raise not_storable(exc) from exc
        if found is None:
            return Closed(closed=False), None
        row, execution, inbox = found
        closed = closed_of(row, int(row.waiting) + 1)
        if not closed.closed:
            return closed, None
        return closed, OrchestrationTx(self.conn, execution, self._results, inbox, self._notify)

    def _close_each(self, closing: Sequence[tuple[ClaimedCommand, Outcome]]) -> list[Closed]:
        """SQLite: each command closed by statements of its own, then what a close reads
        (the epoch's waiting completions and loops row, the execution's status) read
        once per epoch and execution after the last close. The transaction holds the
        file's write lock, so that is what the last close alone would read, and, as the
        Postgres statement's, `waiting` counts the batch's own completions (deferral
        asks all of an execution's closes: the same answer). Read per command, those
        three statements were half of an embedded batch's close (issue 34)."""
        now = utcnow()
        try:
            took = [queries.close_command(self.conn, c, o, now) for c, o in closing]
        except DataError as exc:
            raise not_storable(exc) from exc
        epochs: dict[tuple[str, str, int], tuple[int, LoopCounters | None]] = {}
        statuses: dict[str, str | None] = {}
        closed = []
        for (command, _), ok in zip(closing, took, strict=True):
            if not ok:
                closed.append(Closed(closed=False))
                continue
            eid = command.execution_id
            key = (eid, command.step, command.epoch)
            if key not in epochs:
                epochs[key] = (
                    queries.waiting_in_epoch(self.conn, *key),
                    queries.loop_counters(self.conn, *key),
                )
            if eid not in statuses:
                statuses[eid] = queries.execution_status(self.conn, eid)
            waiting, loop = epochs[key]
            closed.append(Closed(True, statuses[eid], loop, waiting))
        return closed

    def _close(self, outcome: Outcome) -> Closed:
        cmd, now = self.command, utcnow()
        if self.conn.dialect.name == "postgresql":
            row = queries.close_and_read(self.conn, cmd, outcome, now)
            if row is None or not row.closed:
                return Closed(closed=False)
            # the subquery ran on the snapshot taken before our own insert
            return closed_of(row, int(row.waiting) + 1)
        if not queries.close_command(self.conn, cmd, outcome, now):
            return Closed(closed=False)
        eid = cmd.execution_id
        waiting = queries.waiting_in_epoch(self.conn, eid, cmd.step, cmd.epoch)
        loop = queries.loop_counters(self.conn, eid, cmd.step, cmd.epoch)
        return Closed(True, queries.execution_status(self.conn, eid), loop, waiting)

    def record_body(self, ran: Ran, worker: str) -> bool:
        """A frame's bodies its claim's worker ran (this transaction's command), written
        before the claim's close, if the claim still runs (then locked: the close finds
        it); the pass folds them from the claim's completion. False, nothing written:
        the claim no longer runs. ResultNotStorable as for close."""
        try:
            return queries.insert_finished_body(self.conn, self.command, ran, worker, utcnow())
        except DataError as exc:
            raise not_storable(exc) from exc

    def add_logs(self, rows: Sequence[LogRow]) -> None:
        """Store the command's captured output with its close (one commit: whoever sees
        the execution end also sees every log of it). Under a savepoint: whatever goes
        wrong with the logs, the close itself must commit."""
        if not rows:
            return
        try:
            with self.conn.begin_nested():
                add_logs(self.conn, rows)
        except (SQLAlchemyError, StoreError):
            log.warning(
                "could not store the output of command %s",
                self.command.command_id,
                exc_info=True,
                extra={"execution_id": self.command.execution_id},
            )

    def lock(self, *, wait: bool = False) -> OrchestrationTx | None:
        """Try the execution's lock in this transaction (None: another pass holds it);
        with `wait`, wait for the pass that holds it. A wait that deadlocks (that pass
        cancelling this very command) is cut short by Postgres: the transaction is done
        again (passes.retry)."""
        found = queries.lock_and_read(self.conn, self.command.execution_id, wait=wait)
        if found is None:
            return None
        row, inbox = found
        return OrchestrationTx(self.conn, row, self._results, inbox, self._notify)


def closed_of(row: Any, waiting: int | None = None) -> Closed:
    """A closing statement's row (close_and_read, close_many_and_read) as Closed."""
    if not row.closed:
        return Closed(closed=False)
    loop = None
    if row.loop_done is not None:
        loop = LoopCounters(row.loop_done, row.loop_window, row.loop_in_flight)
    return Closed(True, row.status, loop, int(row.waiting) if waiting is None else waiting)


def not_storable(exc: DataError) -> ResultNotStorable:
    """The database refused a value of an outcome: in the database's own words."""
    reason = str(exc.orig or exc).strip().splitlines()
    return ResultNotStorable(reason[0] if reason else type(exc).__name__)
