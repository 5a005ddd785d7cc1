"""One command per cursor frame (worker.frames): recording a claim's rows on the claim
before its queue transaction commits, and writing the frame's body that its claim's
worker ran with the claim's close."""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass
from typing import Any

from sqlalchemy import Connection, bindparam, column, select, text, update

from noetl_celery.constants import (
    CMD_COMPLETED,
    CMD_DELAYED,
    CMD_FAILED,
    CMD_RUNNING,
    EV_COMMAND_COMPLETED,
    EV_COMMAND_FAILED,
)
from noetl_celery.models.outcome import Outcome
from noetl_celery.store.bodies import BodyRun, ParkedBody, Ran
from noetl_celery.store.database import json_dumps
from noetl_celery.store.dialect import insert_ignore
from noetl_celery.store.queries.commands import (
    BODIES,
    BODY_COLUMNS,
    BODY_CTES,
    BODY_ROW,
    CLOSED_CTE,
    _bodies_json,
    _body_params,
    _close_params,
    _terminal_insert,
)
from noetl_celery.store.queries.inbox import first_claimed_keys
from noetl_celery.store.rows import ClaimedCommand, FrameRows
from noetl_celery.store.schema import Json, commands

# A cursor claim's queue transaction as its driver saw it on its own server (backend pid,
# transaction id: cursors.base.HeldClaim.witness).
Witness = tuple[int, int]

# What a held queue transaction waits for (the record of its rows, a held claim's close)
# must be durable before the queue's commit is: this commits synchronously, unless that
# queue transaction runs on this very server. Its lock on its own transaction id (the
# witness) is then in this server's pg_locks, its commit will follow ours in the same
# WAL, and whatever makes that commit durable makes ours durable first (a crash loses a
# suffix of the WAL: never our record while keeping the queue's claim). The session's
# setting (NOETL_SYNCHRONOUS_COMMIT) then stands. A witness of no live transaction here
# (another server, NULL) changes nothing: synchronous.
_DURABLE_UNLESS_SAME_WAL = """set_config('synchronous_commit', CASE WHEN EXISTS (
        SELECT 1 FROM pg_locks w
        WHERE w.locktype = 'transactionid' AND w.mode = 'ExclusiveLock' AND w.granted
          AND w.pid = CAST(:b_qpid AS integer)
          AND w.transactionid = CAST(CAST(CAST(:b_qxid AS bigint) % 4294967296 AS text) AS xid))
        THEN current_setting('synchronous_commit') ELSE 'on' END, true)"""
DURABLE_UNLESS_SAME_WAL = text("SELECT " + _DURABLE_UNLESS_SAME_WAL)


def witness_params(witness: Witness | None) -> dict[str, Any]:
    pid, xid = witness if witness is not None else (None, None)
    return {"b_qpid": pid, "b_qxid": xid}


# Postgres, one statement (autocommit): lock the claim if it still runs and has no rows
# recorded yet, write the keys of the rows its epoch had not claimed before, and store
# those rows on it; the rows on it either way. Nothing is written for a claim no longer
# running (the row lock makes a concurrent re-issue either wait for this statement or be
# seen by it), nor twice (a statement tried again after its commit's answer was lost
# finds the rows it stored, not duplicates of them). It commits synchronously whatever
# the session's `synchronous_commit` (set_config(..., true) lasts to the end of this
# statement's own transaction, whose commit reads it): the queue transaction commits
# right after, and a record an engine crash could still lose would leave rows claimed
# there that the engine never heard of (docs/design.md §4). Unless the queue runs on
# this server (_DURABLE_UNLESS_SAME_WAL): its commit then makes ours durable.
_RECORD_FRAME_PG = text(
    """
    WITH cmd AS (
        SELECT command_id, resume FROM commands
        WHERE command_id = :b_cid AND status = 'running' FOR UPDATE
    ), todo AS (
        SELECT command_id FROM cmd WHERE resume IS NULL OR NOT (resume ? 'frame')
    ), given AS (
        SELECT e.value->>0 AS k, e.value->1 AS r, e.o
        FROM jsonb_array_elements(CAST(:b_given AS jsonb)) WITH ORDINALITY AS e(value, o)
    ), fresh AS (
        INSERT INTO cursor_rows (execution_id, step, epoch, row_key)
        SELECT :b_eid, :b_step, :b_epoch, k FROM given WHERE EXISTS (SELECT 1 FROM todo)
        ON CONFLICT DO NOTHING
        RETURNING row_key
    ), recorded AS (
        UPDATE commands SET resume = jsonb_build_object('frame', jsonb_build_object(
            'rows', coalesce((SELECT jsonb_agg(g.r ORDER BY g.o) FROM given g
                              WHERE g.k IN (SELECT row_key FROM fresh)), '[]'::jsonb),
            'duplicates', :b_total - (SELECT count(*) FROM fresh)))
        WHERE command_id IN (SELECT command_id FROM todo)
        RETURNING resume
    )
    SELECT (SELECT count(*) FROM cmd) AS running,
           coalesce((SELECT resume FROM recorded), (SELECT resume FROM cmd)) AS resume,
           """
    + _DURABLE_UNLESS_SAME_WAL
    + """ AS durable
    """
).columns(column("running"), column("resume", Json), column("durable"))


def record_frame(
    conn: Connection,
    command: ClaimedCommand,
    keyed: dict[str, Any],
    total: int,
    witness: Witness | None = None,
) -> FrameRows | None:
    """Store on a running cursor claim the rows (`keyed` by row key; `total`: the rows it
    took) its epoch had not claimed before, writing their keys as claimed, unless rows
    are recorded on it already: the rows on it, or None (nothing written) when the
    command is no longer running. A run of it after its worker died hands the rows over
    instead of claiming again. `witness`: the claim's queue transaction (see
    _DURABLE_UNLESS_SAME_WAL)."""
    eid, step, epoch = command.execution_id, command.step, command.epoch
    if conn.dialect.name == "postgresql":
        params = {
            "b_cid": command.command_id,
            # one JSON text of [key, row] pairs: a parameter of two arrays cost more
            # to send than the statement's own work
            "b_given": json_dumps([[key, row] for key, row in keyed.items()]),
            "b_eid": eid,
            "b_step": step,
            "b_epoch": epoch,
            "b_total": total,
            **witness_params(witness),
        }
        row = conn.execute(_RECORD_FRAME_PG, params).one()
        return FrameRows.of(row.resume) if row.running else None
    found = conn.execute(
        select(commands.c.resume).where(
            commands.c.command_id == command.command_id, commands.c.status == CMD_RUNNING
        )
    ).first()
    if found is None:  # (SQLite: the transaction holds the database's write lock)
        return None
    recorded = FrameRows.of(found[0])
    if recorded is not None:
        return recorded
    fresh = first_claimed_keys(conn, eid, step, epoch, keyed)
    frame = FrameRows([row for key, row in keyed.items() if key in fresh])
    frame = FrameRows(frame.rows, total - len(frame.rows))
    conn.execute(
        update(commands)
        .where(commands.c.command_id == command.command_id)
        .values(resume={"frame": frame.to_json()})
    )
    return frame


# Postgres, one statement: lock the claim if it still runs (until the transaction ends:
# its close follows, certain to find it), then the bodies' finished rows and their events
_BODY_PG = text(
    """
    WITH claim AS (
        SELECT command_id FROM commands
        WHERE command_id = :b_claim AND status = 'running' FOR UPDATE
    ), body AS (
        INSERT INTO commands ("""
    + BODY_COLUMNS
    + """)
        SELECT """
    + BODY_ROW.format(eid=":b_eid", step=":b_step", epoch=":b_epoch")
    + """
        FROM """
    + BODIES
    + """
        WHERE EXISTS (SELECT 1 FROM claim)
        ON CONFLICT DO NOTHING
        RETURNING command_id, iteration
    ), event AS (
        INSERT INTO events (execution_id, type, step, command_id, epoch, iteration,
                            payload, created_at)
        SELECT :b_eid, b.type, :b_step, d.command_id, :b_epoch, d.iteration, b.payload,
               :b_now
        FROM body d JOIN """
    + BODIES
    + """ ON b.cid = d.command_id
        WHERE b.type IS NOT NULL
        ON CONFLICT DO NOTHING
    )
    SELECT count(*) AS running FROM claim
    """
)


def insert_finished_body(
    conn: Connection,
    claim: ClaimedCommand,
    ran: Ran,
    worker: str,
    now: dt.datetime,
) -> bool:
    """A frame's bodies that its claim's worker ran (worker.frames: the frame's one body
    or one per row), written before the claim's close in its transaction, if the claim
    still runs (locking it: the close is then certain to find it): each body's command
    row, finished, and its terminal event, as the body's own close writes them (a
    parked body: its parked row, as its own park leaves it), but no inbox entry (the
    claim's completion carries the outcomes to the pass). False,
    nothing written: the claim no longer runs."""
    if conn.dialect.name == "postgresql":
        found = conn.execute(
            _BODY_PG,
            {
                "b_claim": claim.command_id,
                "b_eid": claim.execution_id,
                "b_step": claim.step,
                "b_epoch": claim.epoch,
                "b_body_worker": worker,
                "b_now": now,
                "b_bodies": _bodies_json(ran),
            },
        ).one()
        return bool(found.running)
    running = conn.execute(
        select(commands.c.command_id).where(
            commands.c.command_id == claim.command_id, commands.c.status == CMD_RUNNING
        )
    ).first()
    if running is None:  # (SQLite: the transaction holds the database's write lock)
        return False
    for body, run in ran:
        _insert_body(conn, body, run, worker, now)
    return True


def _insert_body(
    conn: Connection, body: ClaimedCommand, run: BodyRun, worker: str, now: dt.datetime
) -> None:
    """SQLite: one body's finished row and terminal event, or its parked row (none if
    its row is there already: never both a body command and a body run here)."""
    row: dict[str, Any] = {
        "command_id": body.command_id,
        "execution_id": body.execution_id,
        "step": body.step,
        "kind": body.kind,
        "epoch": body.epoch,
        "iteration": body.iteration,
        "attempt": body.attempt,
        "ctx_version": body.ctx_version,
        "item": body.item,
        "meta": dict(body.meta or {}),
    }
    if isinstance(run, ParkedBody):
        row.update(status=CMD_DELAYED, issued_at=run.due, resume=run.resume)
        row.update(worker=None, started_at=None, finished_at=None)
        conn.execute(insert_ignore(conn, commands), row)
        return
    ok = run.ok
    row.update(status=CMD_COMPLETED if ok else CMD_FAILED, worker=worker, resume=None)
    row.update(issued_at=now, started_at=now, finished_at=now)
    returning = insert_ignore(conn, commands).returning(commands.c.command_id)
    inserted = conn.execute(returning, row).first()
    if inserted is None:
        return
    conn.execute(
        _terminal_insert(conn.dialect.name, conn),
        {
            "execution_id": body.execution_id,
            "type": EV_COMMAND_COMPLETED if ok else EV_COMMAND_FAILED,
            "step": body.step,
            "command_id": body.command_id,
            "epoch": body.epoch,
            "iteration": body.iteration,
            "payload": run.to_json(),
            "created_at": now,
        },
    )


# Postgres, one statement: a chained close (orchestrator.cursor, worker.frames). It closes
# a per-frame claim whose body its worker ran, writes that body's finished row and event
# (as _CLOSE_LOCK_BODY_PG), and inserts the lane's next claim, running, claimed by this
# worker (it runs it next), while the execution runs, the loop epoch is not done and no
# such command exists. The claim's terminal event says whether it did
# (`result.chained`): the pass that folds it takes that claim as issued. It takes no lock
# and runs no pass: the chain's last close does, or any other close's pass folds it.
# Nothing is written if the claim no longer runs.
#
# With the next claim's rows (`b_given`: the worker claimed its frame ahead, its queue
# transaction held), they are recorded on it as record_frame does (their keys claimed in
# the epoch, `resume.frame` the rows not claimed before), only if it is inserted, and
# then the statement is durable before the queue commits (_DURABLE_UNLESS_SAME_WAL).
_CLOSE_CHAIN_PG = (
    text(
        CLOSED_CTE
        + """, go AS (
        SELECT c.execution_id, c.step, c.epoch FROM closed c
        JOIN executions x ON x.execution_id = c.execution_id AND x.status = 'RUNNING'
        JOIN loops l ON l.execution_id = c.execution_id AND l.step = c.step
                    AND l.epoch = c.epoch AND NOT l.done
        WHERE NOT EXISTS (SELECT 1 FROM commands n WHERE n.command_id = :b_next)
    ), given AS (
        SELECT e.value->>0 AS k, e.value->1 AS r, e.o
        FROM jsonb_array_elements(coalesce(CAST(:b_given AS jsonb), '[]'))
             WITH ORDINALITY AS e(value, o)
    ), fresh AS (
        INSERT INTO cursor_rows (execution_id, step, epoch, row_key)
        SELECT g.execution_id, g.step, g.epoch, v.k FROM go g, given v
        ON CONFLICT DO NOTHING
        RETURNING row_key
    ), chained AS (
        INSERT INTO commands (command_id, execution_id, step, kind, epoch, iteration,
                              attempt, status, ctx_version, item, meta, issued_at, worker,
                              started_at, lease_until, resume)
        SELECT :b_next, g.execution_id, g.step, :b_kind, g.epoch, NULL, 1, 'running',
               :b_ctx, CAST(:b_next_item AS jsonb), CAST(:b_next_meta AS jsonb), :b_now,
               :b_body_worker, :b_now, :b_lease,
               CASE WHEN CAST(:b_given AS jsonb) IS NOT NULL THEN
                   jsonb_build_object('frame', jsonb_build_object(
                       'rows', coalesce((SELECT jsonb_agg(v.r ORDER BY v.o) FROM given v
                                         WHERE v.k IN (SELECT row_key FROM fresh)), '[]'),
                       'duplicates', :b_total - (SELECT count(*) FROM fresh)))
               END
        FROM go g
        ON CONFLICT DO NOTHING
        RETURNING command_id, resume
    ), inserted AS (
        INSERT INTO events (execution_id, type, step, command_id, epoch, iteration,
                            payload, created_at)
        SELECT execution_id, :b_type, step, command_id, epoch, iteration,
               CASE WHEN EXISTS (SELECT 1 FROM chained)
                    THEN jsonb_set(CAST(:b_payload AS jsonb), '{result,chained}', 'true')
                    ELSE CAST(:b_payload AS jsonb) END,
               :b_now
        FROM closed
        ON CONFLICT DO NOTHING
        RETURNING event_id, execution_id, step, epoch, iteration
    ), queued AS (
        INSERT INTO inbox (event_id, execution_id, step, epoch, iteration)
        SELECT event_id, execution_id, step, epoch, iteration FROM inserted
    )"""
        + BODY_CTES
        + """
    SELECT (SELECT count(*) FROM closed) AS closed,
           (SELECT count(*) FROM chained) AS chained,
           (SELECT resume FROM chained) AS resume,
           (SELECT count(*) FROM inbox
             WHERE execution_id = :b_eid AND step = :b_step AND epoch = :b_epoch) AS waiting,
           l.done AS loop_done, l.window_size AS loop_window, l.in_flight AS loop_in_flight,
           x.status AS status,
           CASE WHEN CAST(:b_given AS jsonb) IS NULL THEN NULL ELSE """
        + _DURABLE_UNLESS_SAME_WAL
        + """ END AS durable
    FROM executions x
    LEFT JOIN loops l
        ON l.execution_id = x.execution_id AND l.step = :b_step AND l.epoch = :b_epoch
    WHERE x.execution_id = :b_eid
    """
    )
    .bindparams(bindparam("b_payload", type_=Json))
    .columns(
        column("closed"),
        column("chained"),
        column("resume", Json),
        column("waiting"),
        column("loop_done"),
        column("loop_window"),
        column("loop_in_flight"),
        column("status"),
        column("durable"),
    )
)


@dataclass(frozen=True)
class NextClaim:
    """A cursor lane's next claim, as its chain's worker issues it (worker.frames), with
    the rows the worker claimed for it ahead (`rows`, their queue transaction held and
    `witness`ed as cursors.base says), recorded on it if it is issued."""

    command: ClaimedCommand
    lease_seconds: int
    rows: list[Any] | None = None
    witness: Witness | None = None


def close_and_chain(
    conn: Connection,
    claim: ClaimedCommand,
    outcome: Outcome,
    ran: Ran,
    worker: str,
    following: NextClaim,
    now: dt.datetime,
    keyed: dict[str, Any] | None = None,
) -> Any:
    """Postgres only (_CLOSE_CHAIN_PG): the row (closed, chained, resume: the rows
    recorded on the next claim, waiting, loop_done, loop_window, loop_in_flight,
    status), None for no such execution; `waiting` counts the epoch's inbox before this
    completion. `keyed`: the next claim's rows claimed ahead (`following.rows`) by key."""
    nxt = following.command
    params = {**_close_params(claim, outcome, now), **_body_params(ran, worker)}
    given = None if keyed is None else json_dumps([[key, row] for key, row in keyed.items()])
    params.update(
        b_next=nxt.command_id,
        b_kind=nxt.kind,
        b_ctx=nxt.ctx_version,
        b_next_item=json_dumps(nxt.item),
        b_next_meta=json_dumps(dict(nxt.meta or {})),
        b_lease=now + dt.timedelta(seconds=following.lease_seconds),
        b_given=given,
        b_total=len(following.rows or ()),
        **witness_params(following.witness),
    )
    return conn.execute(_CLOSE_CHAIN_PG, params).first()


def cluster_id(conn: Connection) -> str | None:
    """Postgres: the server's system identifier (pg_control_system), which the cursor
    driver compares with its queue server's before it asks a claim for a witness."""
    value = conn.execute(
        text("SELECT CAST(system_identifier AS text) FROM pg_control_system()")
    ).scalar()
    return None if value is None else str(value)
