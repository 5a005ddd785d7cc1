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
command cancelled), so their rows stay pending and are not listed.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from sqlalchemy import Connection, and_, delete, select, update

from noetl_celery.constants import (
    CANCELLED,
    CMD_CANCELLED,
    CMD_DELAYED,
    CMD_ISSUED,
    CMD_RUNNING,
    EV_COMMAND_COMPLETED,
    EV_CURSOR_UNFINISHED,
    EV_EXECUTION_CANCELLED,
    EV_EXECUTION_FAILED,
    EV_PASS_FAILED,
    KIND_ITERATION,
    RUNNING,
)
from noetl_celery.orchestrator.decisions import Completion
from noetl_celery.orchestrator.ids import parse_claim
from noetl_celery.store.children import WAITING, resume_parent
from noetl_celery.store.database import Database
from noetl_celery.store.dialect import insert_ignore
from noetl_celery.store.orchestration import claimed_rows, row_key
from noetl_celery.store.queries import SYNC_COMMIT, ResultCache
from noetl_celery.store.rows import ExecutionRow
from noetl_celery.store.schema import (
    commands,
    cursor_rows,
    events,
    executions,
    inbox,
    loops,
    utcnow,
)
from noetl_celery.store.statements import EXECUTION_COLUMNS, LOCK_WAIT

UNFINISHED = ("planned", CMD_DELAYED, "issued", "running", WAITING)
# a body in these had started: its row's work may be done, or half done
STARTED = (CMD_RUNNING, WAITING)
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
    # bodies of cursor epochs (`loops.mode`), not yet finished: at most the frames the
    # lanes had claimed (lanes x frame rows), in claim order
    bodies = conn.execute(
        select(commands.c.step, commands.c.epoch, commands.c.status, commands.c.item)
        .add_columns(commands.c.meta)
        .select_from(
            commands.join(
                loops,
                and_(
                    loops.c.execution_id == commands.c.execution_id,
                    loops.c.step == commands.c.step,
                    loops.c.epoch == commands.c.epoch,
                ),
            )
        )
        .where(
            commands.c.execution_id == execution_id,
            commands.c.kind == KIND_ITERATION,
            commands.c.status.in_(UNFINISHED),
            loops.c.mode == "cursor",
        )
        .order_by(commands.c.step, commands.c.epoch, commands.c.iteration)
    )
    for step, epoch, status, item, meta in bodies:
        # `frame.process: frame`: one body holds the frame's list of rows
        rows = item if (meta or {}).get("process") == "frame" and isinstance(item, list) else [item]
        for row in rows:
            found.setdefault(step, _Unfinished()).add(epoch, row, status in STARTED)
    # claims recorded but not folded yet: their rows are committed as claimed in the
    # queue and have no body; rows their epoch had claimed before are someone's body
    pending = conn.execute(
        select(events.c.event_id, events.c.command_id, events.c.step, events.c.epoch)
        .add_columns(events.c.payload)
        .select_from(inbox.join(events, events.c.event_id == inbox.c.event_id))
        .where(inbox.c.execution_id == execution_id, events.c.type == EV_COMMAND_COMPLETED)
        .order_by(events.c.event_id)
    )
    for event_id, command_id, step, epoch, payload in pending:
        if parse_claim(command_id or "") is None:
            continue
        completion = Completion(event_id, command_id, step, epoch, None, payload or {})
        keyed = {row_key(row): row for row in claimed_rows(completion)}
        if not keyed:
            continue
        seen = set(
            conn.execute(
                select(cursor_rows.c.row_key).where(
                    cursor_rows.c.execution_id == execution_id,
                    cursor_rows.c.step == step,
                    cursor_rows.c.epoch == epoch,
                    cursor_rows.c.row_key.in_(list(keyed)),
                )
            ).scalars()
        )
        for key, row in keyed.items():
            if key not in seen:
                found.setdefault(step, _Unfinished()).add(epoch, row, started=False)
    return {step: rows.report() for step, rows in sorted(found.items())}


class TerminationManager:
    """`store.termination`: ending executions from outside a pass (cancel, the crash
    limit), recording crashed passes, and the reports of what an end left unfinished."""

    def __init__(self, db: Database, results: ResultCache) -> None:
        self.db = db
        self.results = results  # the façade's step results (a cancelled child's summary)

    def end_execution(
        self, execution_id: str, status: str, message: str, kind: str | None = None
    ) -> Ended:
        now = utcnow()
        with self.db.write() as conn:
            row = conn.execute(LOCK_WAIT, {"b_eid": execution_id}).first()
            if row is None or row.status != RUNNING:
                return Ended(ended=False)
            if conn.dialect.name == "postgresql":
                conn.execute(SYNC_COMMIT)  # what `cancel` reports must survive a crash
            error = {"message": message} if kind is None else {"kind": kind, "message": message}
            conn.execute(
                update(executions)
                .where(executions.c.execution_id == execution_id)
                .values(status=status, error=error, finished_at=now, updated_at=now)
            )
            conn.execute(
                insert_ignore(conn, events),
                {
                    "execution_id": execution_id,
                    "type": EV_EXECUTION_CANCELLED if status == CANCELLED else EV_EXECUTION_FAILED,
                    "payload": {"status": status, "error": error},
                    "created_at": now,
                },
            )
            # Freeze what workers could change while we read: the claim of an issued command
            # (its row would run though we saw it not started) and the close of a running
            # one (its completion would land in the inbox after we read it, and be dropped
            # unread). Both wait for our commit, then find the command cancelled. Planned
            # commands move only under the execution's lock, which this transaction holds.
            conn.execute(
                select(commands.c.command_id)
                .where(
                    commands.c.execution_id == execution_id,
                    commands.c.status.in_((CMD_ISSUED, CMD_RUNNING, WAITING)),
                )
                .with_for_update()
            ).all()
            # read before the commands are cancelled and the inbox emptied
            unfinished = _unfinished_cursor_rows(conn, execution_id)
            if unfinished:
                conn.execute(
                    insert_ignore(conn, events),
                    [
                        {
                            "execution_id": execution_id,
                            "type": EV_CURSOR_UNFINISHED,
                            "step": step,
                            "epoch": report["epoch"],
                            "payload": report,
                            "created_at": now,
                        }
                        for step, report in unfinished.items()
                    ],
                )
            conn.execute(
                update(commands)
                .where(commands.c.execution_id == execution_id, commands.c.status.in_(UNFINISHED))
                .values(status=CMD_CANCELLED, finished_at=now)
            )
            conn.execute(delete(inbox).where(inbox.c.execution_id == execution_id))
            ended_row = conn.execute(
                select(*EXECUTION_COLUMNS).where(executions.c.execution_id == execution_id)
            ).one()
            parent = resume_parent(conn, ExecutionRow(**ended_row._mapping), self.results)
            children = (
                conn.execute(
                    select(executions.c.execution_id).where(
                        executions.c.parent_execution_id == execution_id,
                        executions.c.status == RUNNING,
                    )
                )
                .scalars()
                .all()
            )
        return Ended(True, [str(c) for c in children], [parent] if parent else [], unfinished)

    def recorded_unfinished_rows(self, execution_id: str) -> dict[str, dict[str, Any]]:
        """The `cursor.unfinished` reports of an ended execution, by step."""
        with self.db.read() as conn:
            rows = conn.execute(
                select(events.c.step, events.c.payload)
                .where(
                    events.c.execution_id == execution_id,
                    events.c.type == EV_CURSOR_UNFINISHED,
                )
                .order_by(events.c.event_id)
            ).all()
        return {str(step): payload or {} for step, payload in rows}

    def record_pass_crash(self, execution_id: str, error: dict[str, Any]) -> int:
        """Record that an orchestration pass of `execution_id` crashed (a `pass.failed`
        event with `error`, kept in its history) and return how many passes crashed in a row
        at this point of its history, i.e. since its last committed pass (`executions.passes`
        is stored with each crash); 0 when the execution is no longer RUNNING."""
        with self.db.write() as conn:
            row = conn.execute(
                select(executions.c.status, executions.c.passes).where(
                    executions.c.execution_id == execution_id
                )
            ).first()
            if row is None or row.status != RUNNING:
                return 0
            conn.execute(
                events.insert().values(
                    execution_id=execution_id,
                    type=EV_PASS_FAILED,
                    payload={"passes": row.passes, "error": error},
                    created_at=utcnow(),
                )
            )
            crashes = conn.execute(
                select(events.c.payload).where(
                    events.c.execution_id == execution_id, events.c.type == EV_PASS_FAILED
                )
            ).scalars()
            return sum(1 for payload in crashes if (payload or {}).get("passes") == row.passes)
