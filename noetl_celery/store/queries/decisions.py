"""Writing a decision: results, contexts, planned and issued commands, engine events,
the loops mirror, the state snapshot, the terminal write."""

from __future__ import annotations

import datetime as dt
from collections.abc import Sequence
from typing import Any

from sqlalchemy import Connection, bindparam, text, update

from noetl_celery.constants import (
    CMD_DELAYED,
    CMD_ISSUED,
    CMD_PLANNED,
    CMD_RUNNING,
    KIND_ITERATION,
    KIND_STEP,
)
from noetl_celery.orchestrator.decisions import (
    EngineEvent,
    IssueRange,
    LoopMirror,
    LoopPlan,
    NewCommand,
    ResultWrite,
    Terminal,
)
from noetl_celery.orchestrator.ids import iteration_command_id
from noetl_celery.store.database import json_dumps
from noetl_celery.store.dialect import insert_ignore, upsert
from noetl_celery.store.queries._common import SYNC_COMMIT
from noetl_celery.store.queries.inbox import mark_handled
from noetl_celery.store.schema import Json, commands, contexts, events, executions, loops, results
from noetl_celery.store.statements import ISSUE_RANGE, SAVE_STATE, SAVE_STATE_HANDLED

# rows per multi-row INSERT when planning a large loop: the rows of one chunk (and their
# bound parameters) are what planning holds beyond the items themselves, ~1 KB a row
PLAN_CHUNK = 1000


def insert_results(
    conn: Connection, execution_id: str, records: Sequence[ResultWrite], now: dt.datetime
) -> None:
    conn.execute(
        insert_ignore(conn, results),
        [
            {
                "execution_id": execution_id,
                "step": r.step,
                "epoch": r.epoch,
                "status": r.status,
                "data": r.data,
                "created_at": now,
            }
            for r in records
        ],
    )


def insert_contexts(
    conn: Connection, execution_id: str, versions: dict[int, dict[str, Any]], now: dt.datetime
) -> None:
    conn.execute(
        insert_ignore(conn, contexts),
        [
            {"execution_id": execution_id, "version": v, "data": data, "created_at": now}
            for v, data in versions.items()
        ],
    )


# Postgres: a chunk of planned iterations in one INSERT from arrays. An executemany sent
# one INSERT per row (pipelined, but parsed, planned and run once per row by the server,
# and bound row by row here): a cursor frame's 50 bodies were a twelfth of the worker's
# CPU in a per-row drain.
_PLAN_PG = text(
    """
    INSERT INTO commands (command_id, execution_id, step, kind, epoch, iteration, attempt,
                          status, ctx_version, item, meta)
    SELECT p.command_id, :b_eid, :b_step, :b_kind, :b_epoch, p.iteration, 1, :b_status,
           :b_ctx, CAST(p.item AS jsonb), CAST(:b_meta AS jsonb)
    FROM ROWS FROM (unnest(CAST(:b_ids AS varchar[])), unnest(CAST(:b_iterations AS integer[])),
                    jsonb_array_elements(CAST(:b_items AS jsonb))) AS p(command_id, iteration, item)
    ON CONFLICT DO NOTHING
    """
)


def insert_planned(conn: Connection, execution_id: str, plan: LoopPlan) -> None:
    """A loop's planned (not yet issued) iteration commands."""
    # rows are built one chunk at a time: a 100k-item loop must not hold 100k row dicts
    # (and one giant INSERT) in memory at once
    postgres = conn.dialect.name == "postgresql"
    for start in range(0, len(plan.items), PLAN_CHUNK):
        chunk = plan.items[start : start + PLAN_CHUNK]
        if postgres:
            conn.execute(_PLAN_PG, _plan_arrays(execution_id, plan, chunk, plan.start + start))
            continue
        rows = _plan_rows(execution_id, plan, chunk, plan.start + start)
        conn.execute(insert_ignore(conn, commands), rows)


def _plan_arrays(
    execution_id: str, plan: LoopPlan, items: Sequence[Any], first: int
) -> dict[str, Any]:
    """_PLAN_PG's parameters: what _plan_rows says row by row, as columns (JSON as the
    store writes it: a None item or meta is JSON null, as the Json column stores it)."""
    iterations = list(range(first, first + len(items)))
    return {
        "b_ids": [iteration_command_id(execution_id, plan.step, plan.epoch, i) for i in iterations],
        "b_iterations": iterations,
        # one JSON array: a text[] of JSON texts costs psycopg a Python call per `"`
        "b_items": json_dumps(list(items)),
        "b_eid": execution_id,
        "b_step": plan.step,
        "b_kind": KIND_ITERATION,
        "b_epoch": plan.epoch,
        "b_status": CMD_PLANNED,
        "b_ctx": plan.ctx_version,
        "b_meta": json_dumps(plan.meta),
    }


def insert_issued(
    conn: Connection, execution_id: str, plan: LoopPlan, ctx_version: int, now: dt.datetime
) -> list[str]:
    """A small loop plan issued whole by the pass that plans it (a cursor frame with
    `frame.process: frame`, a loop no wider than its window): its rows are inserted
    issued, one statement instead of a planned INSERT and an issuing UPDATE. The ids this
    statement inserted, in iteration order (a row already there is left as it is)."""
    assert len(plan.items) <= PLAN_CHUNK
    rows = _plan_rows(execution_id, plan, plan.items, plan.start)
    for row in rows:
        row.update(status=CMD_ISSUED, ctx_version=ctx_version, issued_at=now)
    stmt = insert_ignore(conn, commands).returning(commands.c.command_id, commands.c.iteration)
    return [r[0] for r in sorted(conn.execute(stmt, rows).all(), key=lambda r: r[1])]


def _plan_rows(
    execution_id: str, plan: LoopPlan, items: Sequence[Any], first: int
) -> list[dict[str, Any]]:
    return [
        {
            "command_id": iteration_command_id(execution_id, plan.step, plan.epoch, i),
            "execution_id": execution_id,
            "step": plan.step,
            "kind": KIND_ITERATION,
            "epoch": plan.epoch,
            "iteration": i,
            "attempt": 1,
            "status": CMD_PLANNED,
            "ctx_version": plan.ctx_version,
            "item": item,
            "meta": plan.meta,
        }
        for i, item in enumerate(items, first)
    ]


def insert_commands(
    conn: Connection, execution_id: str, new: Sequence[NewCommand], now: dt.datetime
) -> list[str]:
    """Insert commands; the ids this statement inserted (a command already there is
    left as it is)."""
    stmt = insert_ignore(conn, commands).returning(commands.c.command_id)
    rows = [_command_row(execution_id, c, now) for c in new]
    return [r[0] for r in conn.execute(stmt, rows).all()]


def _command_row(execution_id: str, c: NewCommand, now: dt.datetime) -> dict[str, Any]:
    return {
        "command_id": c.command_id,
        "execution_id": execution_id,
        "step": c.step,
        "kind": c.kind or KIND_STEP,
        "epoch": c.epoch,
        "iteration": c.iteration,
        "attempt": c.attempt,
        # a delayed command is parked with its due time; the reaper's sweep issues
        # and publishes it then (no worker sleeps through a backoff)
        "status": CMD_DELAYED if c.delay_seconds > 0 else CMD_ISSUED,
        "ctx_version": c.ctx_version,
        "item": c.item,
        "meta": c.meta,
        "issued_at": now + dt.timedelta(seconds=c.delay_seconds),
    }


# Postgres: a pass's new commands (a loop plan issued whole among them), its inbox marks
# and its state in one statement, one of the commands inserted claimed (`b_follow`: the
# command the closing process runs next, worker.execute's local continuation). These
# were three round trips made while holding the execution's lock, which every other pass
# of the execution waits for: half of a per-frame cursor lane's time in the lock. The
# rows come as one JSON document; the recordset reads a JSON null item as NULL, stored
# as JSON null as the Json column stores None.
_ISSUE_AND_SAVE_PG = text(
    """
    WITH handled AS (
        DELETE FROM inbox
        WHERE execution_id = :b_eid AND event_id = ANY(CAST(:b_handled AS bigint[]))
    ), saved AS (
        UPDATE executions SET state = :b_state, passes = passes + 1, updated_at = :b_now
        WHERE execution_id = :b_eid
    ), given AS (
        SELECT * FROM jsonb_to_recordset(CAST(:b_rows AS jsonb))
            AS g(command_id varchar, step varchar, kind varchar, epoch integer,
                 iteration integer, attempt integer, status varchar, ctx_version integer,
                 item jsonb, meta jsonb, issued_at timestamp)
    ), claimed AS (
        SELECT g.*, g.command_id = CAST(:b_follow AS varchar) AS here FROM given g
    )
    INSERT INTO commands (command_id, execution_id, step, kind, epoch, iteration, attempt,
                          status, ctx_version, item, meta, issued_at, worker, started_at,
                          lease_until)
    SELECT c.command_id, :b_eid, c.step, c.kind, c.epoch, c.iteration, c.attempt,
           CASE WHEN c.here THEN CAST(:b_running AS varchar) ELSE c.status END,
           c.ctx_version, COALESCE(c.item, 'null'), COALESCE(c.meta, 'null'), c.issued_at,
           CASE WHEN c.here THEN CAST(:b_worker AS varchar) END,
           CASE WHEN c.here THEN CAST(:b_now AS timestamp) END,
           CASE WHEN c.here THEN CAST(:b_lease AS timestamp) END
    FROM claimed c
    ON CONFLICT DO NOTHING
    RETURNING command_id, worker IS NOT NULL AS here, execution_id, step, kind, epoch,
              iteration, attempt, ctx_version,
              CASE WHEN worker IS NOT NULL THEN item END AS item,
              CASE WHEN worker IS NOT NULL THEN meta END AS meta, resume
    """
).bindparams(bindparam("b_state", type_=Json))


def issue_and_save(
    conn: Connection,
    execution_id: str,
    new: Sequence[NewCommand],
    plans: Sequence[tuple[LoopPlan, int]],
    state: dict[str, Any],
    handled: Sequence[int],
    now: dt.datetime,
    follow: tuple[str, str, dt.datetime] | None = None,
) -> tuple[list[str], Any]:
    """Postgres only, one statement: insert `new` and the loop plans issued whole
    (`plans`: each with the context version it is issued at), mark `handled` and save
    `state`. `follow` (command id, worker, lease end): insert that command claimed by the
    worker instead of issued. The ids inserted, in the given order (commands first, then
    each plan's in iteration order; a command already there is left as it is), and the
    follow's COMMAND_COLUMNS as a claim returns them (None: not inserted)."""
    rows = [_command_row(execution_id, c, now) for c in new]
    for plan, ctx_version in plans:
        for row in _plan_rows(execution_id, plan, plan.items, plan.start):
            row.update(status=CMD_ISSUED, ctx_version=ctx_version, issued_at=now)
            rows.append(row)
    follow_id, worker, lease_until = follow or (None, None, None)
    returned = conn.execute(
        _ISSUE_AND_SAVE_PG,
        {
            "b_eid": execution_id,
            "b_handled": list(handled),
            "b_state": state,
            "b_now": now,
            # one JSON document, not an array per column: psycopg dumps arrays item by
            # item in Python (most of this statement's time), JSON in one call
            "b_rows": json_dumps([{**r, "issued_at": r["issued_at"].isoformat()} for r in rows]),
            "b_follow": follow_id,
            "b_running": CMD_RUNNING,
            "b_worker": worker,
            "b_lease": lease_until,
        },
    ).all()
    inserted = {r.command_id for r in returned}
    claimed = next((r for r in returned if r.here), None)
    return [r["command_id"] for r in rows if r["command_id"] in inserted], claimed


def issue_range(
    conn: Connection, execution_id: str, issue: IssueRange, now: dt.datetime
) -> list[str]:
    """Issue planned iterations [start, stop); the ids issued, in iteration order."""
    params = {
        "b_eid": execution_id,
        "b_step": issue.step,
        "b_epoch": issue.epoch,
        "b_start": issue.start,
        "b_stop": issue.stop,
        "b_now": now,
        "b_ctx": issue.ctx_version,
    }
    issued = sorted(conn.execute(ISSUE_RANGE, params).all(), key=lambda r: r[1])
    return [r[0] for r in issued]


def insert_events(
    conn: Connection, execution_id: str, new: Sequence[EngineEvent], now: dt.datetime
) -> None:
    conn.execute(
        insert_ignore(conn, events),
        [
            {
                "execution_id": execution_id,
                "type": e.type,
                "step": e.step,
                "epoch": e.epoch,
                "iteration": e.iteration,
                "command_id": e.command_id,
                "payload": e.payload,
                "created_at": now,
            }
            for e in new
        ],
    )


def upsert_loop(conn: Connection, execution_id: str, mirror: LoopMirror, now: dt.datetime) -> None:
    """The loops table's row of one loop epoch (what reads and the reaper see)."""
    conn.execute(
        upsert(
            conn,
            loops,
            ["execution_id", "step", "epoch"],
            {
                "execution_id": execution_id,
                "step": mirror.step,
                "epoch": mirror.epoch,
                "mode": mirror.mode,
                "total": mirror.total,
                "issued": mirror.issued,
                "succeeded": mirror.succeeded,
                "failed": mirror.failed,
                "quarantined": mirror.quarantined,
                "done": mirror.done,
                "window_size": mirror.window,
                "in_flight": mirror.in_flight,
                "updated_at": now,
                "started_at": now,  # the epoch's first write is its start
            },
            insert_only=["started_at"],
        )
    )


def save_state(
    conn: Connection,
    execution_id: str,
    state: dict[str, Any],
    now: dt.datetime,
    handled: Sequence[int] = (),
) -> None:
    """The pass's new state, and the inbox entries it folded marked handled (on Postgres
    in the same statement; SQLite has no data-modifying CTEs)."""
    params = {"b_eid": execution_id, "b_state": state, "b_now": now}
    if handled and conn.dialect.name == "postgresql":
        conn.execute(SAVE_STATE_HANDLED, {**params, "b_ids": list(handled)})
        return
    mark_handled(conn, execution_id, handled)
    conn.execute(SAVE_STATE, params)


def end_execution_row(
    conn: Connection,
    execution_id: str,
    terminal: Terminal,
    state: dict[str, Any],
    now: dt.datetime,
) -> None:
    """The terminal write: status, result, error and state in one UPDATE, made durable
    on Postgres before it commits (a terminal status is what clients act on; WAL being
    sequential, everything committed before it is durable too)."""
    if conn.dialect.name == "postgresql":
        conn.execute(SYNC_COMMIT)
    conn.execute(
        update(executions)
        .where(executions.c.execution_id == execution_id)
        .values(
            state=state,
            passes=executions.c.passes + 1,
            updated_at=now,
            status=terminal.status,
            result=terminal.result,
            error=terminal.error,
            finished_at=now,
        )
    )
