"""Ending an execution from outside its own flow: cancellation, execution timeouts, and
orchestration passes that keep crashing (`record_pass_crash` counts them).

One transaction, under the execution's lock: the terminal status and event, every
unfinished command cancelled (a worker's close of a running one then finds it gone and
drops the result; nothing cancelled can be claimed), the inbox emptied, and a parent
command waiting for this execution resumed with its summary. The caller gets the running
children to end the same way (cascade).

Cursor loops leave something behind that the engine cannot undo: rows its claims took
from the user's queue (marked `claimed` there by the user's SQL) whose bodies will now
never run. Only the playbook knows what "pending" means in its queue, so the engine does
not release them; it records them, in the same transaction, as one `cursor.unfinished`
event per step (`unfinished_rows`): the rows of body commands cancelled before they ran,
those of bodies cancelled while running (`interrupted`: their work may have been done,
or half done), and those of claims that had committed but were not folded yet (the
inbox). Claims still running are rolled back by their worker (the close finds the
command cancelled), so their rows stay pending and are not listed, unless the worker
recorded them on the claim to run the frame's body itself (worker.frames): those are
listed as interrupted, as are the rows of such a claim's completion that carries no
body (its worker died in the body; no body command has them yet).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from sqlalchemy import Connection

from noetl_celery.constants import (
    CANCELLED,
    CMD_DELAYED,
    EV_CURSOR_UNFINISHED,
    EV_EXECUTION_CANCELLED,
    EV_EXECUTION_FAILED,
    RUNNING,
    ExecutionStatus,
)
from noetl_celery.models.outcome import ErrorKind, Outcome, StepError
from noetl_celery.orchestrator.decisions import Completion, EngineEvent
from noetl_celery.orchestrator.ids import parse_claim
from noetl_celery.store import queries
from noetl_celery.store.children import resume_parent
from noetl_celery.store.database import Database
from noetl_celery.store.notifications import NotificationsManager
from noetl_celery.store.orchestration import claimed_rows, row_key, trace_end
from noetl_celery.store.queries import STARTED, ResultCache
from noetl_celery.store.rows import FrameRows
from noetl_celery.store.schema import utcnow

# rows kept in each list of a `cursor.unfinished` report (`count` is always exact):
# a drain of 100 lanes x 1,000-row frames must not write one event of 100,000 rows
UNFINISHED_ROWS_CAP = 1000


@dataclass
class Ended:
    ended: bool  # False when it had already ended
    children: list[str] = field(default_factory=list)  # running children to end too
    publish: list[str] = field(default_factory=list)  # a resumed parent command
    # per cursor step: the claimed rows it leaves unprocessed (`cursor.unfinished`)
    unfinished_rows: dict[str, dict[str, Any]] = field(default_factory=dict)


@dataclass
class _Unfinished:
    epoch: int = 0
    rows: dict[str, Any] = field(default_factory=dict)  # by row key: never started
    interrupted: dict[str, Any] = field(default_factory=dict)  # by row key: were running

    def add(self, epoch: int, row: Any, started: bool) -> None:
        self.epoch = max(self.epoch, epoch)
        key = row_key(row)
        if key not in self.rows and key not in self.interrupted:
            (self.interrupted if started else self.rows)[key] = row

    def report(self) -> dict[str, Any]:
        rows, interrupted = list(self.rows.values()), list(self.interrupted.values())
        cap = UNFINISHED_ROWS_CAP
        return {
            "epoch": self.epoch,
            "count": len(rows) + len(interrupted),
            "rows": rows[:cap],
            "interrupted": interrupted[:cap],
            "truncated": len(rows) > cap or len(interrupted) > cap,
        }


def _unfinished_cursor_rows(conn: Connection, execution_id: str) -> dict[str, dict[str, Any]]:
    """Per cursor step, the rows its claims took that no body will now process."""
    found: dict[str, _Unfinished] = {}
    for step, epoch, status, item, meta in queries.unfinished_cursor_bodies(conn, execution_id):
        # `frame.process: frame`: one body holds the frame's list of rows
        rows = item if (meta or {}).get("process") == "frame" and isinstance(item, list) else [item]
        # a parked body (`delayed`: waiting out a retry delay) had started its pipeline
        started = status in STARTED or status == CMD_DELAYED
        for row in rows:
            found.setdefault(step, _Unfinished()).add(epoch, row, started)
    # claims running their frame's body in their own worker (or run again after it died)
    for step, epoch, resume in queries.unfinished_recorded_claims(conn, execution_id):
        frame = FrameRows.of(resume)
        for row in frame.rows if frame is not None else []:
            found.setdefault(step, _Unfinished()).add(epoch, row, started=True)
    # claims recorded but not folded yet: their rows are committed as claimed in the
    # queue and have no body; rows their epoch had claimed before are someone's body
    for event_id, command_id, step, epoch, payload in queries.unfolded_completions(
        conn, execution_id
    ):
        if parse_claim(command_id or "") is None:
            continue
        outcome = Outcome.from_json(payload or {})
        result = outcome.result
        if isinstance(result, dict) and result.get("recorded"):
            # rows its worker recorded; with a body they ran, without one their body
            # had started in a worker that died
            for row in [] if "body" in result else result.get("rows") or []:
                found.setdefault(step, _Unfinished()).add(epoch, row, started=True)
            continue
        completion = Completion(event_id, command_id, step, epoch, None, outcome)
        keyed = {row_key(row): row for row in claimed_rows(completion)}
        if not keyed:
            continue
        seen = queries.claimed_row_keys(conn, execution_id, step, epoch, list(keyed))
        for key, row in keyed.items():
            if key not in seen:
                found.setdefault(step, _Unfinished()).add(epoch, row, started=False)
    return {step: rows.report() for step, rows in sorted(found.items())}


class TerminationManager:
    """`store.termination`: ending executions from outside a pass (cancel, the crash
    limit), recording crashed passes, and the reports of what an end left unfinished."""

    def __init__(
        self, db: Database, results: ResultCache, notifications: NotificationsManager
    ) -> None:
        self.db = db
        self.results = results  # the façade's step results (a cancelled child's summary)
        self.notifications = notifications  # the end's notifications, same transaction

    def end_execution(
        self,
        execution_id: str,
        status: ExecutionStatus,
        message: str,
        kind: ErrorKind | None = None,
    ) -> Ended:
        now = utcnow()
        with self.db.write() as conn:
            row = queries.lock_execution(conn, execution_id, wait=True)
            if row is None or row.status != RUNNING:
                return Ended(ended=False)
            if conn.dialect.name == "postgresql":
                conn.execute(queries.SYNC_COMMIT)  # what `cancel` reports must survive a crash
            error = {"message": message} if kind is None else {"kind": kind, "message": message}
            queries.set_ended(conn, execution_id, status, error, now)
            trace_end(conn, row, str(status), now)
            ended = EV_EXECUTION_CANCELLED if status == CANCELLED else EV_EXECUTION_FAILED
            payload = {"status": status, "error": error}
            queries.insert_events(conn, execution_id, [EngineEvent(ended, payload=payload)], now)
            self.notifications.enqueue_in(
                conn,
                execution_id,
                row.catalog_id,
                row.parent_execution_id,
                str(status).lower(),
                now,
            )
            # Freeze what workers could change while we read: the claim of an issued
            # command (its row would run though we saw it not started) and the close of a
            # running one (its completion would land in the inbox after we read it, and be
            # dropped unread). Both wait for our commit, then find the command cancelled.
            # Planned commands move only under the execution's lock, which this
            # transaction holds.
            queries.lock_live_commands(conn, execution_id)
            # read before the commands are cancelled and the inbox emptied
            unfinished = _unfinished_cursor_rows(conn, execution_id)
            if unfinished:
                reports = [
                    EngineEvent(EV_CURSOR_UNFINISHED, step, report["epoch"], report)
                    for step, report in unfinished.items()
                ]
                queries.insert_events(conn, execution_id, reports, now)
            queries.cancel_unfinished(conn, execution_id, now)
            queries.clear_inbox(conn, execution_id)
            ended_row = queries.execution(conn, execution_id)
            assert ended_row is not None  # locked above
            parent = resume_parent(conn, ended_row, self.results)
            children = queries.running_children(conn, execution_id)
        return Ended(True, children, [parent] if parent else [], unfinished)

    def recorded_unfinished_rows(self, execution_id: str) -> dict[str, dict[str, Any]]:
        """The `cursor.unfinished` reports of an ended execution, by step."""
        with self.db.read() as conn:
            return queries.cursor_unfinished_reports(conn, execution_id)

    def record_pass_crash(self, execution_id: str, error: StepError) -> int:
        """Record that an orchestration pass of `execution_id` crashed (a `pass.failed`
        event with `error`, kept in its history) and return how many passes crashed in a
        row at this point of its history, i.e. since its last committed pass
        (`executions.passes` is stored with each crash); 0 when the execution is no
        longer RUNNING."""
        with self.db.write() as conn:
            row = queries.status_and_passes(conn, execution_id)
            if row is None or row.status != RUNNING:
                return 0
            payload = {"passes": row.passes, "error": error.to_json()}
            queries.insert_pass_failed(conn, execution_id, payload, utcnow())
            crashes = queries.pass_failed_payloads(conn, execution_id)
            return sum(1 for payload in crashes if (payload or {}).get("passes") == row.passes)
