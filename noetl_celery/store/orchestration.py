"""The orchestration transaction: lock one execution, read its inbox, persist a decision.

Everything a pass writes (commands, results, contexts, engine events, the handled marks
of the inbox and the new state) commits together; the command ids it returns are the
ones *this* transaction inserted or issued, and only those get published, after commit.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import json
from collections.abc import Sequence
from dataclasses import replace
from typing import TYPE_CHECKING, Any

from sqlalchemy import Connection, select, text, update

from noetl_celery.constants import (
    CMD_DELAYED,
    CMD_ISSUED,
    COMMAND_TERMINAL_EVENTS,
    EV_COMMAND_FAILED,
    KIND_ITERATION,
    KIND_STEP,
)
from noetl_celery.orchestrator.decisions import Completion, Decision, Terminal
from noetl_celery.orchestrator.ids import iteration_command_id, parse_claim
from noetl_celery.store.children import resume_parent
from noetl_celery.store.dialect import insert_ignore, upsert
from noetl_celery.store.rows import ExecutionRow
from noetl_celery.store.schema import (
    commands,
    contexts,
    cursor_rows,
    events,
    executions,
    loops,
    results,
    utcnow,
)
from noetl_celery.store.statements import (
    INBOX,
    ISSUE_RANGE,
    MARK_HANDLED,
    SAVE_STATE,
    WAITING,
)

if TYPE_CHECKING:
    from noetl_celery.store.repository import Store

_PLAN_CHUNK = 5000
SYNC_COMMIT = text(
    "SET LOCAL synchronous_commit TO on"
)  # rows per multi-row INSERT when planning a large loop


class OrchestrationTx:
    def __init__(self, store: Store, conn: Connection, execution: ExecutionRow) -> None:
        self.store = store
        self.conn = conn
        self.execution = execution
        self.execution_id = execution.execution_id

    # ---- Facts (read-only history) ----------------------------------------------------------
    def result(self, step: str, epoch: int) -> Any:
        return self.store.result(self.execution_id, step, epoch, conn=self.conn)

    def iteration_results(self, step: str, epoch: int, limit: int) -> list[Any]:
        query = (
            select(events.c.iteration, events.c.type, events.c.payload)
            .where(
                events.c.execution_id == self.execution_id,
                events.c.step == step,
                events.c.epoch == epoch,
                events.c.iteration.is_not(None),
                events.c.type.in_(COMMAND_TERMINAL_EVENTS),
            )
            .order_by(events.c.iteration)
            .limit(limit)
        )
        out: list[Any] = []
        for _, type_, payload in self.conn.execute(query):
            payload = payload or {}
            if type_ == EV_COMMAND_FAILED:
                out.append({"status": "error", "error": payload.get("error")})
            else:
                out.append(payload.get("result"))
        return out

    # ---- inbox ------------------------------------------------------------------------------
    def inbox(self, limit: int) -> list[Completion]:
        rows = self.conn.execute(INBOX, {"b_eid": self.execution_id, "b_limit": limit})
        return [
            Completion(
                event_id=row.event_id,
                command_id=row.command_id or "",
                step=row.step or "",
                epoch=row.epoch or 0,
                iteration=row.iteration,
                outcome=row.payload or {},
            )
            for row in rows
        ]

    def first_claims(self, completions: list[Completion]) -> list[Completion]:
        """Cursor claims keep only rows their epoch has not claimed before (a claim that
        was recorded but not committed put its rows back in the queue; see
        schema.cursor_rows). Rows are told apart by content: claim SQL should return
        the row's key."""
        out = []
        for completion in completions:
            rows = claimed_rows(completion)
            if rows:
                fresh = self._fresh(completion, rows)
                if len(fresh) != len(rows):
                    result = {**completion.outcome["result"], "rows": fresh}
                    result["row_count"] = len(fresh)
                    result["duplicates"] = len(rows) - len(fresh)
                    completion = replace(
                        completion, outcome={**completion.outcome, "result": result}
                    )
            out.append(completion)
        return out

    def _fresh(self, completion: Completion, rows: list[Any]) -> list[Any]:
        keyed: dict[str, Any] = {}
        for row in rows:
            keyed.setdefault(row_key(row), row)
        base = {
            "execution_id": self.execution_id,
            "step": completion.step,
            "epoch": completion.epoch,
        }
        new = self.conn.execute(
            insert_ignore(self.conn, cursor_rows).returning(cursor_rows.c.row_key),
            [{**base, "row_key": key} for key in keyed],
        ).scalars()
        fresh = set(new)
        return [row for key, row in keyed.items() if key in fresh]

    def waiting(self) -> list[tuple[str, int, int, bool]]:
        """The inbox grouped by (step, epoch): count, and whether any entry is not a loop
        iteration (the inbox is small: it holds only what no pass folded yet)."""
        rows = self.conn.execute(WAITING, {"b_eid": self.execution_id}).all()
        return [(r[0] or "", r[1] or 0, int(r[2]), bool(r[3])) for r in rows]

    def mark_handled(self, event_ids: Sequence[int]) -> None:
        if event_ids:
            self.conn.execute(MARK_HANDLED, {"b_ids": list(event_ids)})

    # ---- persisting a decision --------------------------------------------------------------
    def apply(self, decision: Decision, handled: Sequence[int]) -> list[str]:
        """Write the decision; return the command ids to publish after commit. One helper
        per kind of row; the order is the one every pass used (the terminal write last)."""
        now = utcnow()
        self._write_results(decision, now)
        self._write_contexts(decision, now)
        self._write_plans(decision)
        publish = self._write_commands(decision, now)
        publish += self._issue_ranges(decision, now)
        self._write_events(decision, now)
        self._write_loops(decision, now)
        self.mark_handled(handled)
        if decision.terminal is None:
            self._save_state(decision, now)
        else:
            publish += self._end(decision, decision.terminal, now)
        return publish

    def _write_results(self, decision: Decision, now: dt.datetime) -> None:
        if not decision.results:
            return
        self.conn.execute(
            insert_ignore(self.conn, results),
            [
                {
                    "execution_id": self.execution_id,
                    "step": r.step,
                    "epoch": r.epoch,
                    "status": r.status,
                    "data": r.data,
                    "created_at": now,
                }
                for r in decision.results
            ],
        )

    def _write_contexts(self, decision: Decision, now: dt.datetime) -> None:
        if not decision.contexts:
            return
        self.conn.execute(
            insert_ignore(self.conn, contexts),
            [
                {"execution_id": self.execution_id, "version": v, "data": data, "created_at": now}
                for v, data in decision.contexts.items()
            ],
        )

    def _write_plans(self, decision: Decision) -> None:
        """Planned (not yet issued) iteration commands of the loops this pass started."""
        conn, eid = self.conn, self.execution_id
        for plan in decision.plans:
            # rows are built one chunk at a time: a 100k-item loop must not hold 100k row
            # dicts (and one giant INSERT) in memory at once
            for start in range(0, len(plan.items), _PLAN_CHUNK):
                chunk = plan.items[start : start + _PLAN_CHUNK]
                conn.execute(
                    insert_ignore(conn, commands),
                    [
                        {
                            "command_id": iteration_command_id(eid, plan.step, plan.epoch, i),
                            "execution_id": eid,
                            "step": plan.step,
                            "kind": KIND_ITERATION,
                            "epoch": plan.epoch,
                            "iteration": i,
                            "attempt": 1,
                            "status": "planned",
                            "ctx_version": plan.ctx_version,
                            "item": item,
                            "meta": plan.meta,
                        }
                        for i, item in enumerate(chunk, plan.start + start)
                    ],
                )

    def _write_commands(self, decision: Decision, now: dt.datetime) -> list[str]:
        """Insert the decision's commands; the ids this transaction inserted and that are
        due now are the ones to publish."""
        if not decision.commands:
            return []
        stmt = insert_ignore(self.conn, commands).returning(commands.c.command_id)
        rows = [
            {
                "command_id": c.command_id,
                "execution_id": self.execution_id,
                "step": c.step,
                "kind": c.kind or KIND_STEP,
                "epoch": c.epoch,
                "iteration": c.iteration,
                "attempt": c.attempt,
                # a delayed command is parked with its due time; the reaper's sweep
                # issues and publishes it then (no worker sleeps through a backoff)
                "status": CMD_DELAYED if c.delay_seconds > 0 else CMD_ISSUED,
                "ctx_version": c.ctx_version,
                "item": c.item,
                "meta": c.meta,
                "issued_at": now + dt.timedelta(seconds=c.delay_seconds),
            }
            for c in decision.commands
        ]
        delayed = {c.command_id for c in decision.commands if c.delay_seconds > 0}
        inserted = [r[0] for r in self.conn.execute(stmt, rows).all()]
        return [cid for cid in inserted if cid not in delayed]

    def _issue_ranges(self, decision: Decision, now: dt.datetime) -> list[str]:
        """Issue planned iterations [start, stop); the ids this transaction issued, in
        iteration order, are the ones to publish."""
        publish: list[str] = []
        for issue in decision.issues:
            params = {
                "b_eid": self.execution_id,
                "b_step": issue.step,
                "b_epoch": issue.epoch,
                "b_start": issue.start,
                "b_stop": issue.stop,
                "b_now": now,
                "b_ctx": issue.ctx_version,
            }
            issued = sorted(self.conn.execute(ISSUE_RANGE, params).all(), key=lambda r: r[1])
            publish += [r[0] for r in issued]
        return publish

    def _write_events(self, decision: Decision, now: dt.datetime) -> None:
        if not decision.events:
            return
        self.conn.execute(
            insert_ignore(self.conn, events),
            [
                {
                    "execution_id": self.execution_id,
                    "type": e.type,
                    "step": e.step,
                    "epoch": e.epoch,
                    "payload": e.payload,
                    "created_at": now,
                }
                for e in decision.events
            ],
        )

    def _write_loops(self, decision: Decision, now: dt.datetime) -> None:
        """The loops table mirrors each loop's counters (what reads and the reaper see)."""
        for mirror in decision.loops:
            self.conn.execute(
                upsert(
                    self.conn,
                    loops,
                    ["execution_id", "step", "epoch"],
                    {
                        "execution_id": self.execution_id,
                        "step": mirror.step,
                        "epoch": mirror.epoch,
                        "mode": mirror.mode,
                        "total": mirror.total,
                        "issued": mirror.issued,
                        "succeeded": mirror.succeeded,
                        "failed": mirror.failed,
                        "done": mirror.done,
                        "updated_at": now,
                        "started_at": now,  # the epoch's first write is its start
                    },
                    insert_only=["started_at"],
                )
            )

    def _save_state(self, decision: Decision, now: dt.datetime) -> None:
        self.conn.execute(
            SAVE_STATE,
            {"b_eid": self.execution_id, "b_state": decision.state.to_json(), "b_now": now},
        )

    def _end(self, decision: Decision, terminal: Terminal, now: dt.datetime) -> list[str]:
        """The terminal write: the execution's status, result and state in one UPDATE;
        a child's end also resumes its parent's waiting command (returned to publish)."""
        conn = self.conn
        if conn.dialect.name == "postgresql":
            # a terminal status is what clients act on: make it (and, WAL being
            # sequential, everything committed before it) durable before we say it
            conn.execute(SYNC_COMMIT)
        conn.execute(
            update(executions)
            .where(executions.c.execution_id == self.execution_id)
            .values(
                state=decision.state.to_json(),
                passes=executions.c.passes + 1,
                updated_at=now,
                status=terminal.status,
                result=terminal.result,
                error=terminal.error,
                finished_at=now,
            )
        )
        if not self.execution.parent_command_id:
            return []
        # a child's end resumes the parent command waiting for it, atomically
        ended = replace(
            self.execution,
            status=terminal.status,
            result=terminal.result,
            error=terminal.error,
            state=decision.state.to_json(),
        )
        parent = resume_parent(self.store, conn, ended)
        return [] if parent is None else [parent]


def row_key(row: Any) -> str:
    return hashlib.sha256(json.dumps(row, sort_keys=True, default=str).encode()).hexdigest()


def claimed_rows(completion: Completion) -> list[Any]:
    """The rows a cursor claim's completion carries (none for anything else)."""
    if parse_claim(completion.command_id) is None or not completion.ok:
        return []
    result = completion.outcome.get("result")
    rows = result.get("rows") if isinstance(result, dict) else None
    return rows if isinstance(rows, list) else []
