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
from typing import TYPE_CHECKING, Any

from sqlalchemy import Connection, bindparam, text
from sqlalchemy.dialects.postgresql import JSONB
from sqlalchemy.exc import DataError, SQLAlchemyError

from noetl_celery.constants import (
    CMD_COMPLETED,
    CMD_FAILED,
    EV_COMMAND_COMPLETED,
    EV_COMMAND_FAILED,
)
from noetl_celery.errors import ResultNotStorable, StoreError
from noetl_celery.models.outcome import Outcome
from noetl_celery.store.history import add_logs
from noetl_celery.store.rows import ClaimedCommand, LogRow
from noetl_celery.store.schema import utcnow
from noetl_celery.store.statements import WAITING_EPOCH

log = logging.getLogger("noetl_celery.completion")

if TYPE_CHECKING:
    from noetl_celery.store.orchestration import OrchestrationTx
    from noetl_celery.store.repository import Store

_CLOSE_PG = text(
    """
    WITH closed AS (
        UPDATE commands SET status = :b_status, finished_at = :b_now
        WHERE command_id = :b_cid AND status = 'running'
        RETURNING command_id, execution_id, step, epoch, iteration
    ), inserted AS (
        INSERT INTO events (execution_id, type, step, command_id, epoch, iteration,
                            payload, created_at)
        SELECT execution_id, :b_type, step, command_id, epoch, iteration, :b_payload, :b_now
        FROM closed
        ON CONFLICT DO NOTHING
        RETURNING event_id, execution_id, step, epoch, iteration
    ), queued AS (
        INSERT INTO inbox (event_id, execution_id, step, epoch, iteration)
        SELECT event_id, execution_id, step, epoch, iteration FROM inserted
    )
    SELECT
        (SELECT count(*) FROM closed) AS closed,
        (SELECT count(*) FROM inbox
          WHERE execution_id = :b_eid AND step = :b_step AND epoch = :b_epoch) AS waiting,
        x.status AS status,
        x.state -> 'steps' -> :b_step -> 'loop' AS loop
    FROM executions x WHERE x.execution_id = :b_eid
    """
).bindparams(bindparam("b_payload", type_=JSONB))


@dataclass
class Closed:
    """What the closing statement saw (waiting includes this completion)."""

    closed: bool
    status: str | None = None
    loop: dict[str, Any] | None = None
    waiting: int = 0


class CompletionTx:
    def __init__(self, store: Store, conn: Connection, command: ClaimedCommand) -> None:
        self.store = store
        self.conn = conn
        self.command = command

    def close(self, outcome: Outcome) -> Closed:
        """Close the command with `outcome`; ResultNotStorable when the database refuses
        a value in it (Postgres: a NUL character in text, a lone surrogate). The
        transaction is then aborted: the caller closes again, in a new one."""
        try:
            return self._close(outcome)
        except DataError as exc:
            reason = str(exc.orig or exc).strip().splitlines()
            raise ResultNotStorable(reason[0] if reason else type(exc).__name__) from exc

    def _close(self, outcome: Outcome) -> Closed:
        cmd, now = self.command, utcnow()
        ok = outcome.ok
        if self.conn.dialect.name == "postgresql":
            row = self.conn.execute(
                _CLOSE_PG,
                {
                    "b_cid": cmd.command_id,
                    "b_status": CMD_COMPLETED if ok else CMD_FAILED,
                    "b_now": now,
                    "b_type": EV_COMMAND_COMPLETED if ok else EV_COMMAND_FAILED,
                    "b_payload": outcome.to_json(),
                    "b_eid": cmd.execution_id,
                    "b_step": cmd.step,
                    "b_epoch": cmd.epoch,
                },
            ).first()
            if row is None or not row.closed:
                return Closed(closed=False)
            # the subquery ran on the snapshot taken before our own insert
            return Closed(True, row.status, row.loop, int(row.waiting) + 1)
        if not self.store.close_command(self.conn, cmd, outcome):
            return Closed(closed=False)
        waiting = self.conn.execute(
            WAITING_EPOCH, {"b_eid": cmd.execution_id, "b_step": cmd.step, "b_epoch": cmd.epoch}
        ).scalar_one()
        state = self.store.execution_state(self.conn, cmd.execution_id) or {}
        loop = ((state.get("steps") or {}).get(cmd.step) or {}).get("loop")
        return Closed(True, state.get("status"), loop, int(waiting))

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

    def lock(self) -> OrchestrationTx | None:
        """Try the execution's lock in this transaction (None: another pass holds it)."""
        return self.store.try_lock(self.conn, self.command.execution_id)
