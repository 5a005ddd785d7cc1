"""The worker side of a command: the claim, the close with its terminal event and
inbox entry (also as one Postgres statement), the lease, the deadline."""

from __future__ import annotations

import datetime as dt
from collections.abc import Sequence
from typing import Any

from sqlalchemy import Connection, bindparam, column, func, select, text, update

from noetl_celery.constants import (
    CMD_COMPLETED,
    CMD_DELAYED,
    CMD_FAILED,
    CMD_RUNNING,
    EV_COMMAND_COMPLETED,
    EV_COMMAND_FAILED,
)
from noetl_celery.models.outcome import Outcome
from noetl_celery.orchestrator.decisions import Completion
from noetl_celery.store.bodies import ParkedBody, Ran
from noetl_celery.store.database import json_dumps
from noetl_celery.store.dialect import insert_ignore
from noetl_celery.store.queries.inbox import completion_of
from noetl_celery.store.rows import ClaimedCommand, ExecutionRow, LoopCounters
from noetl_celery.store.schema import Json, commands, events, inbox, loops
from noetl_celery.store.statements import CLAIM, CLOSE_COMMAND, EXECUTION_COLUMNS, WAITING_EPOCH


def claim(
    conn: Connection, command_id: str, worker: str, now: dt.datetime, lease_until: dt.datetime
) -> Any:
    """The claimed command's COMMAND_COLUMNS, or None when it is not issued (any more)."""
    params = {"b_cid": command_id, "b_worker": worker, "b_now": now, "b_lease": lease_until}
    return conn.execute(CLAIM, params).first()


def append_terminal(
    conn: Connection,
    execution_id: str,
    step: str,
    command_id: str,
    epoch: int,
    iteration: int | None,
    event_type: str,
    outcome: dict[str, Any],
    now: dt.datetime,
) -> None:
    """A command's terminal event and its inbox entry (the unique index on the event
    keeps a second terminal of the same command out)."""
    event_id = conn.execute(
        _terminal_insert(conn.dialect.name, conn),
        {
            "execution_id": execution_id,
            "type": event_type,
            "step": step,
            "command_id": command_id,
            "epoch": epoch,
            "iteration": iteration,
            "payload": outcome,
            "created_at": now,
        },
    ).scalar()
    if event_id is not None:
        conn.execute(
            _INBOX_INSERT,
            {
                "event_id": event_id,
                "execution_id": execution_id,
                "step": step,
                "epoch": epoch,
                "iteration": iteration,
            },
        )


# built once (per dialect): a statement built per call costs its construction and cache
# key each time, a third of an embedded close (issue 34)
_INBOX_INSERT = inbox.insert()
_TERMINAL_INSERTS: dict[str, Any] = {}


def _terminal_insert(dialect: str, conn: Connection) -> Any:
    statement = _TERMINAL_INSERTS.get(dialect)
    if statement is None:
        statement = insert_ignore(conn, events).returning(events.c.event_id)
        _TERMINAL_INSERTS[dialect] = statement
    return statement


def close_command(
    conn: Connection, command: ClaimedCommand, outcome: Outcome, now: dt.datetime
) -> bool:
    """Close a running command and append its terminal event; False when it is no
    longer running (cancelled, re-issued)."""
    ok = outcome.ok
    closed = conn.execute(
        CLOSE_COMMAND,
        {
            "b_cid": command.command_id,
            "b_status": CMD_COMPLETED if ok else CMD_FAILED,
            "b_now": now,
        },
    ).first()
    if closed is None:
        return False
    append_terminal(
        conn,
        command.execution_id,
        command.step,
        command.command_id,
        command.epoch,
        command.iteration,
        EV_COMMAND_COMPLETED if ok else EV_COMMAND_FAILED,
        outcome.to_json(),
        now,
    )
    return True


# closes one command, appends its terminal event and inbox entry; the SELECT after it
# reads the execution `x` and the epoch's loops row `l` from the snapshot before the insert
# (the closing CTE of every close: the command, if it still runs)
CLOSED_CTE = """
    WITH closed AS (
        UPDATE commands SET status = :b_status, finished_at = :b_now
        WHERE command_id = :b_cid AND status = 'running'
        RETURNING command_id, execution_id, step, epoch, iteration
    )"""
_CLOSE_ONE = (
    CLOSED_CTE.replace("{", "{{").replace("}", "}}")
    + """, inserted AS (
        INSERT INTO events (execution_id, type, step, command_id, epoch, iteration,
                            payload, created_at)
        SELECT execution_id, :b_type, step, command_id, epoch, iteration, :b_payload, :b_now
        FROM closed
        ON CONFLICT DO NOTHING
        RETURNING event_id, execution_id, step, command_id, epoch, iteration, payload, type
    ), queued AS (
        INSERT INTO inbox (event_id, execution_id, step, epoch, iteration)
        SELECT event_id, execution_id, step, epoch, iteration FROM inserted
    ){extra}
    SELECT
        (SELECT count(*) FROM closed) AS closed,
        (SELECT count(*) FROM inbox
          WHERE execution_id = :b_eid AND step = :b_step AND epoch = :b_epoch) AS waiting,
        l.done AS loop_done,
        l.window_size AS loop_window,
        l.in_flight AS loop_in_flight,
        {columns}
    FROM executions x
    LEFT JOIN loops l
        ON l.execution_id = x.execution_id AND l.step = :b_step AND l.epoch = :b_epoch
    WHERE x.execution_id = :b_eid
"""
)

_CLOSE_PG = text(_CLOSE_ONE.format(columns="x.status AS status", extra="")).bindparams(
    bindparam("b_payload", type_=Json)
)


# the same, taking the orchestration lock on the execution in the same statement (and
# waiting for it): a pass that follows for certain saves the lock's round trip. The
# execution's columns are those of the row as locked (the latest, should the statement
# have waited for another pass), typed as the lock's own statement types them.
#
# It also reads the inbox the pass folds (saving that round trip too), its own
# completion added from the insert (which the statement's reads cannot see). That read
# is the statement's snapshot, taken before the lock: valid only if no pass committed in
# between. Every pass that folds completions counts itself (a pass of an ended
# execution only consumes them: folding one twice there changes nothing), so the
# snapshot's count is compared with the locked row's (the latest, read again after a
# wait); when they differ the inbox is not read at all (an InitPlan runs when first
# used) and the pass reads it itself.
def _close_lock(extra: str, *json_params: str) -> Any:
    return (
        text(
            _CLOSE_ONE.format(
                extra=extra,
                columns=", ".join(f"x.{c.name}" for c in EXECUTION_COLUMNS)
                + """,
        (SELECT count(*) FROM inserted) AS own_event,
        CASE WHEN x.passes = (SELECT s.passes FROM executions s WHERE s.execution_id = :b_eid)
        THEN (SELECT coalesce(json_agg(w ORDER BY w.event_id), '[]')
           FROM ((SELECT e.event_id, e.command_id, e.step, e.epoch, e.iteration, e.payload,
                         e.type
                    FROM inbox i JOIN events e ON e.event_id = i.event_id
                   WHERE i.execution_id = :b_eid
                   ORDER BY i.event_id LIMIT :b_limit)
                 UNION ALL
                 SELECT event_id, command_id, step, epoch, iteration, payload, type
                   FROM inserted) w) END AS inbox_rows""",
            )
            + "    FOR UPDATE OF x\n"
        )
        .bindparams(*(bindparam(name, type_=Json) for name in ("b_payload", *json_params)))
        .columns(  # matched by position: every column of the SELECT, in order
            column("closed"),
            column("waiting"),
            column("loop_done"),
            column("loop_window"),
            column("loop_in_flight"),
            *EXECUTION_COLUMNS,
            column("own_event"),
            column("inbox_rows"),
        )
    )


_CLOSE_LOCK_PG = _close_lock("")
# a frame's bodies (_bodies_json) as rows `b`
BODIES = """jsonb_to_recordset(CAST(:b_bodies AS jsonb)) AS b(
            cid text, kind text, iteration int, attempt int, status text, ctx int,
            item jsonb, meta jsonb, type text, payload jsonb, due timestamp, resume jsonb)"""
# a body's row: finished by the worker that ran it, or parked (`due`: delayed until
# then with its run state in `resume`, no worker, no lease; as worker.parking leaves it)
BODY_ROW = """b.cid, {eid}, {step}, b.kind, {epoch}, b.iteration, b.attempt, b.status,
               b.ctx, b.item, b.meta,
               CASE WHEN b.due IS NULL THEN CAST(:b_body_worker AS text) END,
               COALESCE(b.due, :b_now), CASE WHEN b.due IS NULL THEN :b_now END,
               CASE WHEN b.due IS NULL THEN :b_now END, b.resume"""
BODY_COLUMNS = """command_id, execution_id, step, kind, epoch, iteration,
                              attempt, status, ctx_version, item, meta, worker, issued_at,
                              started_at, finished_at, resume"""
# CTEs writing, with a close (only if it closed: `closed c`), a cursor frame's bodies its
# claim's worker ran (worker.frames): their command rows and the finished ones' terminal
# events, no inbox entry (the claim's completion carries them to the pass)
BODY_CTES = (
    """, body AS (
        INSERT INTO commands ("""
    + BODY_COLUMNS
    + """)
        SELECT """
    + BODY_ROW.format(eid="c.execution_id", step="c.step", epoch="c.epoch")
    + """
        FROM closed c, """
    + BODIES
    + """
        ON CONFLICT DO NOTHING
        RETURNING command_id, execution_id, step, epoch, iteration
    ), body_event AS (
        INSERT INTO events (execution_id, type, step, command_id, epoch, iteration,
                            payload, created_at)
        SELECT d.execution_id, b.type, d.step, d.command_id, d.epoch, d.iteration,
               b.payload, :b_now
        FROM body d JOIN """
    + BODIES
    + """ ON b.cid = d.command_id
        WHERE b.type IS NOT NULL
        ON CONFLICT DO NOTHING
    )"""
)
# the locking close, writing the frame's bodies with it
_CLOSE_LOCK_BODY_PG = _close_lock(BODY_CTES)
# completions the locking close reads for its pass at most (a pass that would fold more
# reads them itself)
PREFETCH_LIMIT = 1000


def close_and_read(
    conn: Connection, command: ClaimedCommand, outcome: Outcome, now: dt.datetime
) -> Any:
    """Postgres only, one statement: close the command, append its terminal event and
    inbox entry, and read (closed, waiting, status, the epoch's loops row counters:
    loop_done, loop_window, loop_in_flight, null without a row) from the snapshot taken
    before that insert (waiting does not count this completion)."""
    return conn.execute(_CLOSE_PG, _close_params(command, outcome, now)).first()


def _close_params(command: ClaimedCommand, outcome: Outcome, now: dt.datetime) -> dict[str, Any]:
    ok = outcome.ok
    return {
        "b_cid": command.command_id,
        "b_status": CMD_COMPLETED if ok else CMD_FAILED,
        "b_now": now,
        "b_type": EV_COMMAND_COMPLETED if ok else EV_COMMAND_FAILED,
        "b_payload": outcome.to_json(),
        "b_eid": command.execution_id,
        "b_step": command.step,
        "b_epoch": command.epoch,
    }


_CLOSE_MANY_PG = text(
    """
    WITH given AS (
        SELECT * FROM ROWS FROM (
            unnest(CAST(:b_cids AS varchar[])), unnest(CAST(:b_statuses AS varchar[])),
            unnest(CAST(:b_types AS varchar[])),
            jsonb_array_elements(CAST(:b_payloads AS jsonb))
        ) WITH ORDINALITY AS g(cid, status, type, payload, ord)
    ), closed AS (
        UPDATE commands c SET status = g.status, finished_at = :b_now
        FROM given g
        WHERE c.command_id = g.cid AND c.status = 'running'
        RETURNING c.command_id, c.execution_id, c.step, c.epoch, c.iteration, g.type,
                  g.payload, g.ord
    ), inserted AS (
        INSERT INTO events (execution_id, type, step, command_id, epoch, iteration,
                            payload, created_at)
        SELECT execution_id, type, step, command_id, epoch, iteration,
               CAST(payload AS jsonb), :b_now
        FROM closed ORDER BY ord
        ON CONFLICT DO NOTHING
        RETURNING event_id, execution_id, step, epoch, iteration
    ), queued AS (
        INSERT INTO inbox (event_id, execution_id, step, epoch, iteration)
        SELECT event_id, execution_id, step, epoch, iteration FROM inserted
    ), epochs AS (
        SELECT execution_id, step, epoch, count(*) AS ours,
               (SELECT count(*) FROM inbox q
                 WHERE q.execution_id = e.execution_id AND q.step = e.step
                   AND q.epoch = e.epoch) AS before
        FROM closed e GROUP BY execution_id, step, epoch
    )
    SELECT g.ord, c.command_id IS NOT NULL AS closed, x.status AS status,
           p.before + p.ours AS waiting, l.done AS loop_done,
           l.window_size AS loop_window, l.in_flight AS loop_in_flight
    FROM given g
    LEFT JOIN closed c ON c.ord = g.ord
    LEFT JOIN epochs p
        ON p.execution_id = c.execution_id AND p.step = c.step AND p.epoch = c.epoch
    LEFT JOIN executions x ON x.execution_id = c.execution_id
    LEFT JOIN loops l
        ON l.execution_id = c.execution_id AND l.step = c.step AND l.epoch = c.epoch
    ORDER BY g.ord
    """
)


def close_lock_and_read(
    conn: Connection,
    command: ClaimedCommand,
    outcome: Outcome,
    now: dt.datetime,
    body: FinishedBody | None = None,
) -> tuple[Any, ExecutionRow, list[Completion] | None] | None:
    """close_and_read, also locking the execution (waiting for a pass that holds it):
    (closed, waiting, the loop counters; the execution as locked; the inbox as the pass
    reads it, this completion included, or None when it must read it itself), waiting
    counting the epoch's inbox before this completion. None: no such execution. With
    `body`, the cursor frame's body its claim's worker ran is written if it closed."""
    params = {**_close_params(command, outcome, now), "b_limit": PREFETCH_LIMIT}
    statement = _CLOSE_LOCK_PG
    if body is not None:
        statement = _CLOSE_LOCK_BODY_PG
        params.update(_body_params(*body))
    row = conn.execute(statement, params).first()
    if row is None:  # no such execution: nothing closed either
        return None
    execution = ExecutionRow(**{c.name: row._mapping[c.name] for c in EXECUTION_COLUMNS})
    inbox = None
    rows = row.inbox_rows  # None: a pass committed since the statement's snapshot
    if row.closed and row.own_event and rows is not None and len(rows) <= PREFETCH_LIMIT:
        inbox = [completion_of(r) for r in rows]  # (more: the pass reads them)
    return row, execution, inbox


# a cursor frame's bodies its claim's worker ran: (each body with what it came to, the
# worker)
FinishedBody = tuple[Ran, str]


def _bodies_json(ran: Ran) -> str:
    """The bodies as one JSON text of records (BODIES reads it): one parameter for a
    frame's bodies however many, as close_many's arrays are for a batch."""
    records = []
    for body, run in ran:
        record: dict[str, Any] = {
            "cid": body.command_id,
            "kind": body.kind,
            "iteration": body.iteration,
            "attempt": body.attempt,
            "ctx": body.ctx_version,
            "item": body.item,
            "meta": dict(body.meta or {}),
        }
        if isinstance(run, ParkedBody):
            record.update(status=CMD_DELAYED, due=run.due.isoformat(), resume=run.resume)
        else:
            ok = run.ok
            record.update(
                status=CMD_COMPLETED if ok else CMD_FAILED,
                type=EV_COMMAND_COMPLETED if ok else EV_COMMAND_FAILED,
                payload=run.to_json(),
            )
        records.append(record)
    return json_dumps(records)


def _body_params(ran: Ran, worker: str) -> dict[str, Any]:
    return {"b_bodies": _bodies_json(ran), "b_body_worker": worker}


def close_many_and_read(
    conn: Connection, closing: Sequence[tuple[ClaimedCommand, Outcome]], now: dt.datetime
) -> list[Any]:
    """Postgres only, one statement for a batch's outcomes: close each command that is
    still running, append its terminal event and inbox entry, and read per command
    (closed, status, waiting, loop_done, loop_window, loop_in_flight) in the given order.
    `waiting` counts the epoch's completions in the inbox before the statement plus the
    batch's own of that epoch: what the last of them would read closing one at a time,
    and deferral asks all of an execution's closes (worker.batch), so the answer is the
    same."""
    oks = [outcome.ok for _, outcome in closing]
    rows = conn.execute(
        _CLOSE_MANY_PG,
        {
            "b_cids": [command.command_id for command, _ in closing],
            "b_statuses": [CMD_COMPLETED if ok else CMD_FAILED for ok in oks],
            "b_types": [EV_COMMAND_COMPLETED if ok else EV_COMMAND_FAILED for ok in oks],
            # one JSON array, not a text[] of JSON texts: psycopg escapes each `"` of a text
            # array's elements with a Python callback per match, 5 % of a worker's CPU on
            # an API-bound flow (py-spy on bench.pft_cursor: results carry JSON bodies)
            "b_payloads": json_dumps([outcome.to_json() for _, outcome in closing]),
            "b_now": now,
        },
    ).all()
    return list(rows)


def loop_counters(
    conn: Connection, execution_id: str, step: str, epoch: int
) -> LoopCounters | None:
    """What the close reads of a loop epoch's row (None: no row, not a loop epoch)."""
    row = conn.execute(
        select(loops.c.done, loops.c.window_size, loops.c.in_flight).where(
            loops.c.execution_id == execution_id, loops.c.step == step, loops.c.epoch == epoch
        )
    ).first()
    return None if row is None else LoopCounters(bool(row[0]), int(row[1]), int(row[2]))


def waiting_in_epoch(conn: Connection, execution_id: str, step: str, epoch: int) -> int:
    """Completions of one loop epoch waiting in the inbox."""
    params = {"b_eid": execution_id, "b_step": step, "b_epoch": epoch}
    return int(conn.execute(WAITING_EPOCH, params).scalar_one())


def renew_lease(conn: Connection, command_id: str, until: dt.datetime) -> bool:
    row = conn.execute(
        update(commands)
        .where(commands.c.command_id == command_id, commands.c.status == CMD_RUNNING)
        .values(lease_until=until)
        .returning(commands.c.command_id)
    ).first()
    return row is not None


def any_claimed(conn: Connection, execution_id: str) -> bool:
    row = conn.execute(
        select(commands.c.command_id)
        .where(commands.c.execution_id == execution_id, commands.c.started_at.is_not(None))
        .limit(1)
    ).first()
    return row is not None


def command_status(conn: Connection, command_id: str) -> str | None:
    value = conn.execute(
        select(commands.c.status).where(commands.c.command_id == command_id)
    ).scalar()
    return None if value is None else str(value)


def set_deadline(
    conn: Connection, command_id: str, deadline: dt.datetime, keep: bool = False
) -> dt.datetime:
    """Set the command's step deadline; the deadline in force. With `keep`, one the
    command already has stays (a parked run resumed: its `spec.timeout` counts from the
    first start, not from each resumption)."""
    value = func.coalesce(commands.c.deadline_at, deadline) if keep else deadline
    row = conn.execute(
        update(commands)
        .where(commands.c.command_id == command_id)
        .values(deadline_at=value)
        .returning(commands.c.deadline_at)
    ).first()
    return row[0] if row is not None and row[0] is not None else deadline
