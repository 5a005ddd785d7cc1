"""Named queries (procrastinate style): every statement of the façade (`Store`) and of its
transaction objects (`OrchestrationTx`, `CompletionTx`) and of the children's
spawn/resume, as one function `(conn, ...)` each.

A function runs on the connection it is given and never opens or commits a transaction:
the caller (the façade) decides what commits together. Functions return plain rows
(`store.rows`) or scalars, never SQLAlchemy objects. The hot-path statements are built
once, in `store.statements`.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterable, Sequence
from typing import Any

from sqlalchemy import Connection, and_, bindparam, delete, func, or_, select, text, update
from sqlalchemy.dialects.postgresql import JSONB

from noetl_celery.constants import (
    CMD_CANCELLED,
    CMD_COMPLETED,
    CMD_DELAYED,
    CMD_FAILED,
    CMD_ISSUED,
    CMD_PLANNED,
    CMD_RUNNING,
    CMD_WAITING,
    COMMAND_TERMINAL_EVENTS,
    EV_COMMAND_COMPLETED,
    EV_COMMAND_FAILED,
    EV_CURSOR_UNFINISHED,
    EV_EXECUTION_STARTED,
    EV_PASS_FAILED,
    KIND_ITERATION,
    KIND_STEP,
    RUNNING,
    TRIGGER_PARENT,
)
from noetl_celery.models.outcome import Outcome
from noetl_celery.orchestrator.decisions import (
    Completion,
    EngineEvent,
    IssueRange,
    LoopMirror,
    LoopPlan,
    NewCommand,
    ResultWrite,
    Terminal,
)
from noetl_celery.orchestrator.ids import iteration_command_id
from noetl_celery.store.cache import ImmutableCache
from noetl_celery.store.dialect import add_to_counter, insert_ignore, upsert
from noetl_celery.store.rows import (
    CatalogEntry,
    ClaimedCommand,
    CommandCounts,
    EventRow,
    ExecutionRow,
    InFlight,
    LoopCounters,
    LoopRow,
    LostCommand,
    ScheduleRow,
    SpawnRequest,
)
from noetl_celery.store.schema import (
    catalog,
    commands,
    contexts,
    counters,
    cursor_rows,
    events,
    executions,
    inbox,
    leases,
    loops,
    results,
    schedule_firings,
    schedules,
)
from noetl_celery.store.statements import (
    CATALOG_OF,
    CLAIM,
    CLOSE_COMMAND,
    COMMAND_COLUMNS,
    EXECUTION_COLUMNS,
    HAS_UNHANDLED,
    INBOX,
    ISSUE_RANGE,
    LOCK_TRY,
    LOCK_WAIT,
    MARK_HANDLED,
    SAVE_STATE,
    STATE_OF,
    STATUS_OF,
    WAITING,
    WAITING_EPOCH,
)

# rows per multi-row INSERT when planning a large loop
PLAN_CHUNK = 5000
# a command parked by a parent waiting for its child execution
WAITING_FOR_CHILD = CMD_WAITING
SYNC_COMMIT = text("SET LOCAL synchronous_commit TO on")
# commands an ended execution cancels, and those of them that had started (a body in
# these: its row's work may be done, or half done)
UNFINISHED = (CMD_PLANNED, CMD_DELAYED, CMD_ISSUED, CMD_RUNNING, WAITING_FOR_CHILD)
STARTED = (CMD_RUNNING, WAITING_FOR_CHILD)


def _execution(row: Any) -> ExecutionRow:
    return ExecutionRow(**row._mapping)


# ---- catalog ------------------------------------------------------------------------------
def latest_catalog_version(conn: Connection, path: str) -> Any:
    """(catalog_id, version, content_sha256) of the newest version at `path`, or None."""
    return conn.execute(
        select(catalog.c.catalog_id, catalog.c.version, catalog.c.content_sha256)
        .where(catalog.c.path == path)
        .order_by(catalog.c.version.desc())
        .limit(1)
    ).first()


def insert_catalog_version(
    conn: Connection,
    path: str,
    version: int,
    name: str,
    content: str,
    digest: str,
    scripts: dict[str, Any] | None,
    now: dt.datetime,
) -> int:
    """The new version's catalog_id (IntegrityError when another registration took it)."""
    row = conn.execute(
        catalog.insert()
        .values(
            path=path,
            version=version,
            name=name,
            content=content,
            content_sha256=digest,
            created_at=now,
            scripts=scripts,
        )
        .returning(catalog.c.catalog_id)
    ).one()
    return int(row[0])


def resolve_catalog(conn: Connection, path: str, version: int | None) -> CatalogEntry | None:
    query = select(catalog.c.catalog_id, catalog.c.version, catalog.c.name).where(
        catalog.c.path == path
    )
    if version is not None:
        query = query.where(catalog.c.version == version)
    row = conn.execute(query.order_by(catalog.c.version.desc()).limit(1)).first()
    return None if row is None else CatalogEntry(row.catalog_id, path, row.version, row.name)


def catalog_entry(conn: Connection, catalog_id: int) -> CatalogEntry | None:
    row = conn.execute(
        select(catalog.c.path, catalog.c.version, catalog.c.name).where(
            catalog.c.catalog_id == catalog_id
        )
    ).first()
    return None if row is None else CatalogEntry(catalog_id, row.path, row.version, row.name)


def catalog_content(conn: Connection, catalog_id: int) -> str:
    value = conn.execute(
        select(catalog.c.content).where(catalog.c.catalog_id == catalog_id)
    ).scalar_one()
    return str(value)


def catalog_scripts(conn: Connection, catalog_id: int) -> dict[str, Any] | None:
    value = conn.execute(
        select(catalog.c.scripts).where(catalog.c.catalog_id == catalog_id)
    ).scalar_one_or_none()
    return value if isinstance(value, dict) else None


def catalog_of(conn: Connection, execution_id: str) -> int:
    return int(conn.execute(CATALOG_OF, {"b_eid": execution_id}).scalar_one())


# ---- executions ---------------------------------------------------------------------------
def insert_execution(
    conn: Connection,
    execution_id: str,
    entry: CatalogEntry,
    payload: dict[str, Any] | None,
    *,
    parent_execution_id: str | None,
    parent_command_id: str | None,
    trigger: str,
    rerun_of: str | None,
    trigger_detail: dict[str, Any] | None,
    owner: str | None,
    now: dt.datetime,
) -> None:
    """A RUNNING execution and its `execution.started` event."""
    conn.execute(
        executions.insert().values(
            execution_id=execution_id,
            catalog_id=entry.catalog_id,
            path=entry.path,
            status=RUNNING,
            parent_execution_id=parent_execution_id,
            parent_command_id=parent_command_id,
            trigger=trigger,
            rerun_of=rerun_of,
            trigger_detail=trigger_detail,
            owner=owner,
            payload=payload or {},
            state=None,
            passes=0,
            created_at=now,
            updated_at=now,
        )
    )
    conn.execute(
        events.insert().values(
            execution_id=execution_id,
            type=EV_EXECUTION_STARTED,
            payload={
                "path": entry.path,
                "version": entry.version,
                "catalog_id": entry.catalog_id,
            },
            created_at=now,
        )
    )


def execution(conn: Connection, execution_id: str) -> ExecutionRow | None:
    row = conn.execute(
        select(*EXECUTION_COLUMNS).where(executions.c.execution_id == execution_id)
    ).first()
    return None if row is None else _execution(row)


def execution_status(conn: Connection, execution_id: str) -> str | None:
    status = conn.execute(STATUS_OF, {"b_eid": execution_id}).scalar()
    return None if status is None else str(status)


def execution_state(conn: Connection, execution_id: str) -> dict[str, Any] | None:
    value = conn.execute(STATE_OF, {"b_eid": execution_id}).scalar()
    return dict(value) if value else None


def lock_execution(conn: Connection, execution_id: str, *, wait: bool) -> ExecutionRow | None:
    """The orchestration lock on the execution's row; None when another pass holds it
    (without `wait`)."""
    row = conn.execute(LOCK_WAIT if wait else LOCK_TRY, {"b_eid": execution_id}).first()
    return None if row is None else _execution(row)


def list_executions(
    conn: Connection,
    *,
    status: str | None,
    path: str | None,
    trigger: str | None,
    limit: int,
) -> list[ExecutionRow]:
    """Recent executions, newest first (the state snapshot is left out)."""
    columns = [c for c in EXECUTION_COLUMNS if c.name != "state"]
    query = select(*columns).order_by(executions.c.created_at.desc()).limit(limit)
    if status is not None:
        query = query.where(executions.c.status == status.upper())
    if path is not None:
        query = query.where(executions.c.path == path)
    if trigger is not None:
        query = query.where(executions.c.trigger == trigger.lower())
    return [ExecutionRow(state=None, **r._mapping) for r in conn.execute(query).all()]


# ---- commands (worker side) ---------------------------------------------------------------
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
        insert_ignore(conn, events).returning(events.c.event_id),
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
            inbox.insert().values(
                event_id=event_id,
                execution_id=execution_id,
                step=step,
                epoch=epoch,
                iteration=iteration,
            )
        )


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
        l.done AS loop_done,
        l.window_size AS loop_window,
        l.in_flight AS loop_in_flight
    FROM executions x
    LEFT JOIN loops l
        ON l.execution_id = x.execution_id AND l.step = :b_step AND l.epoch = :b_epoch
    WHERE x.execution_id = :b_eid
    """
).bindparams(bindparam("b_payload", type_=JSONB))


def close_and_read(
    conn: Connection, command: ClaimedCommand, outcome: Outcome, now: dt.datetime
) -> Any:
    """Postgres only, one statement: close the command, append its terminal event and
    inbox entry, and read (closed, waiting, status, the epoch's loops row counters:
    loop_done, loop_window, loop_in_flight, null without a row) from the snapshot taken
    before that insert (waiting does not count this completion)."""
    ok = outcome.ok
    return conn.execute(
        _CLOSE_PG,
        {
            "b_cid": command.command_id,
            "b_status": CMD_COMPLETED if ok else CMD_FAILED,
            "b_now": now,
            "b_type": EV_COMMAND_COMPLETED if ok else EV_COMMAND_FAILED,
            "b_payload": outcome.to_json(),
            "b_eid": command.execution_id,
            "b_step": command.step,
            "b_epoch": command.epoch,
        },
    ).first()


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


def set_deadline(conn: Connection, command_id: str, deadline: dt.datetime) -> None:
    conn.execute(
        update(commands).where(commands.c.command_id == command_id).values(deadline_at=deadline)
    )


# ---- immutable rows -----------------------------------------------------------------------
def context(conn: Connection, execution_id: str, version: int) -> dict[str, Any]:
    value = conn.execute(
        select(contexts.c.data).where(
            contexts.c.execution_id == execution_id, contexts.c.version == version
        )
    ).scalar_one()
    return dict(value)


def result(conn: Connection, execution_id: str, step: str, epoch: int) -> Any:
    return conn.execute(
        select(results.c.data).where(
            results.c.execution_id == execution_id,
            results.c.step == step,
            results.c.epoch == epoch,
        )
    ).scalar_one()


# step results never change once written: the façade's cache, shared by its transactions
ResultCache = ImmutableCache[tuple[str, str, int], Any]


def cached_result(
    conn: Connection, cache: ResultCache, execution_id: str, step: str, epoch: int
) -> Any:
    """A step result, read once per process."""
    return cache.get_or_load(
        (execution_id, step, epoch), lambda: result(conn, execution_id, step, epoch)
    )


# ---- orchestration: the inbox and the facts a pass reads ----------------------------------
def has_unhandled(conn: Connection, execution_id: str) -> bool:
    return conn.execute(HAS_UNHANDLED, {"b_eid": execution_id}).first() is not None


def inbox_completions(conn: Connection, execution_id: str, limit: int) -> list[Completion]:
    rows = conn.execute(INBOX, {"b_eid": execution_id, "b_limit": limit})
    return [
        Completion(
            event_id=row.event_id,
            command_id=row.command_id or "",
            step=row.step or "",
            epoch=row.epoch or 0,
            iteration=row.iteration,
            outcome=Outcome.from_json(row.payload or {}),
        )
        for row in rows
    ]


def waiting(conn: Connection, execution_id: str) -> list[tuple[str, int, int, bool]]:
    """The inbox grouped by (step, epoch): count, and whether any entry is not a loop
    iteration."""
    rows = conn.execute(WAITING, {"b_eid": execution_id}).all()
    return [(r[0] or "", r[1] or 0, int(r[2]), bool(r[3])) for r in rows]


def mark_handled(conn: Connection, event_ids: Sequence[int]) -> None:
    if event_ids:
        conn.execute(MARK_HANDLED, {"b_ids": list(event_ids)})


def iteration_results(
    conn: Connection, execution_id: str, step: str, epoch: int, limit: int
) -> list[Any]:
    """Each iteration's result (a failed one: `{status: error, error}`), in order."""
    query = (
        select(events.c.iteration, events.c.type, events.c.payload)
        .where(
            events.c.execution_id == execution_id,
            events.c.step == step,
            events.c.epoch == epoch,
            events.c.iteration.is_not(None),
            events.c.type.in_(COMMAND_TERMINAL_EVENTS),
        )
        .order_by(events.c.iteration)
        .limit(limit)
    )
    out: list[Any] = []
    for _, type_, payload in conn.execute(query):
        payload = payload or {}
        if type_ == EV_COMMAND_FAILED:
            out.append({"status": "error", "error": payload.get("error")})
        else:
            out.append(payload.get("result"))
    return out


def first_claimed_keys(
    conn: Connection, execution_id: str, step: str, epoch: int, keys: Iterable[str]
) -> set[str]:
    """Record cursor row keys as claimed in their epoch; the keys not claimed before."""
    base = {"execution_id": execution_id, "step": step, "epoch": epoch}
    new = conn.execute(
        insert_ignore(conn, cursor_rows).returning(cursor_rows.c.row_key),
        [{**base, "row_key": key} for key in keys],
    ).scalars()
    return set(new)


# ---- orchestration: writing a decision ----------------------------------------------------
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


def insert_planned(conn: Connection, execution_id: str, plan: LoopPlan) -> None:
    """A loop's planned (not yet issued) iteration commands."""
    # rows are built one chunk at a time: a 100k-item loop must not hold 100k row dicts
    # (and one giant INSERT) in memory at once
    for start in range(0, len(plan.items), PLAN_CHUNK):
        chunk = plan.items[start : start + PLAN_CHUNK]
        conn.execute(
            insert_ignore(conn, commands),
            [
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
                for i, item in enumerate(chunk, plan.start + start)
            ],
        )


def insert_commands(
    conn: Connection, execution_id: str, new: Sequence[NewCommand], now: dt.datetime
) -> list[str]:
    """Insert commands; the ids this statement inserted (a command already there is
    left as it is)."""
    stmt = insert_ignore(conn, commands).returning(commands.c.command_id)
    rows = [
        {
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
        for c in new
    ]
    return [r[0] for r in conn.execute(stmt, rows).all()]


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
    conn: Connection, execution_id: str, state: dict[str, Any], now: dt.datetime
) -> None:
    conn.execute(SAVE_STATE, {"b_eid": execution_id, "b_state": state, "b_now": now})


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


# ---- children (sub-playbooks) -------------------------------------------------------------
def park_for_child(
    conn: Connection, command_id: str, continuation: dict[str, Any], spawn_key: str
) -> bool:
    """A running parent command starts waiting for its child; False when it is no
    longer running."""
    parked = conn.execute(
        update(commands)
        .where(commands.c.command_id == command_id, commands.c.status == CMD_RUNNING)
        .values(status=WAITING_FOR_CHILD, resume={"continuation": continuation, "spawn": spawn_key})
        .returning(commands.c.command_id)
    ).first()
    return parked is not None


def insert_child(
    conn: Connection,
    child_id: str,
    entry: CatalogEntry,
    request: SpawnRequest,
    parent: ClaimedCommand,
    now: dt.datetime,
) -> str:
    """Insert the child execution (or find the one this key already made); its id."""
    inserted = conn.execute(
        insert_ignore(conn, executions).returning(executions.c.execution_id),
        {
            "execution_id": child_id,
            "catalog_id": entry.catalog_id,
            "path": entry.path,
            "status": RUNNING,
            "parent_execution_id": parent.execution_id,
            "parent_command_id": parent.command_id,
            "spawn_key": request.key,
            "trigger": TRIGGER_PARENT,
            "payload": request.payload,
            "state": None,
            "passes": 0,
            "created_at": now,
            "updated_at": now,
        },
    ).first()
    if inserted is None:
        existing = conn.execute(
            select(executions.c.execution_id).where(executions.c.spawn_key == request.key)
        ).scalar_one()
        return str(existing)
    conn.execute(
        insert_ignore(conn, events),
        {
            "execution_id": child_id,
            "type": EV_EXECUTION_STARTED,
            "payload": {
                "path": entry.path,
                "version": entry.version,
                "parent_execution_id": parent.execution_id,
                "parent_command_id": parent.command_id,
            },
            "created_at": now,
        },
    )
    return child_id


def waiting_parent_resume(conn: Connection, parent_command_id: str) -> dict[str, Any] | None:
    """The `resume` of a parent command waiting for a child, locked; None when the
    command does not wait."""
    parent = conn.execute(
        select(commands.c.resume)
        .where(commands.c.command_id == parent_command_id, commands.c.status == WAITING_FOR_CHILD)
        .with_for_update()
    ).first()
    return None if parent is None else dict(parent.resume or {})


def reissue_parent(
    conn: Connection, parent_command_id: str, resume: dict[str, Any], now: dt.datetime
) -> None:
    conn.execute(
        update(commands)
        .where(commands.c.command_id == parent_command_id)
        .values(status=CMD_ISSUED, resume=resume, issued_at=now)
    )


# ---- reads for operators ------------------------------------------------------------------
def events_of(conn: Connection, execution_id: str) -> list[EventRow]:
    rows = conn.execute(
        select(events).where(events.c.execution_id == execution_id).order_by(events.c.event_id)
    ).all()
    return [EventRow(**r._mapping) for r in rows]


def command_counts(conn: Connection, execution_id: str) -> CommandCounts:
    rows = conn.execute(
        select(commands.c.status, func.count())
        .where(commands.c.execution_id == execution_id)
        .group_by(commands.c.status)
    ).all()
    return CommandCounts(**{status: count for status, count in rows})


def loops_of(conn: Connection, execution_id: str) -> list[LoopRow]:
    rows = conn.execute(
        select(
            loops.c.step,
            loops.c.epoch,
            loops.c.mode,
            loops.c.total,
            loops.c.issued,
            loops.c.succeeded,
            loops.c.failed,
            loops.c.done,
            loops.c.started_at,
            loops.c.updated_at,
        )
        .where(loops.c.execution_id == execution_id)
        .order_by(loops.c.step, loops.c.epoch)
    ).all()
    return [LoopRow(**r._mapping) for r in rows]


def in_flight(conn: Connection, execution_id: str) -> list[InFlight]:
    """Per step: commands issued (waiting for a worker) and running (claimed)."""
    rows = conn.execute(
        select(
            commands.c.step,
            commands.c.status,
            func.count(),
            func.min(commands.c.issued_at),
        )
        .where(
            commands.c.execution_id == execution_id,
            commands.c.status.in_((CMD_ISSUED, CMD_RUNNING)),
        )
        .group_by(commands.c.step, commands.c.status)
    ).all()
    return [InFlight(r[0], r[1], r[2], r[3]) for r in rows]


# ---- schedules ----------------------------------------------------------------------------
def _schedule(row: Any) -> ScheduleRow:
    return ScheduleRow(**row._mapping)


def schedule(conn: Connection, schedule_id: int) -> ScheduleRow | None:
    row = conn.execute(select(schedules).where(schedules.c.schedule_id == schedule_id)).first()
    return None if row is None else _schedule(row)


def schedule_named(conn: Connection, name: str) -> Any:
    """(schedule_id, enabled) of the schedule called `name`, or None."""
    return conn.execute(
        select(schedules.c.schedule_id, schedules.c.enabled).where(schedules.c.name == name)
    ).first()


def insert_schedule(
    conn: Connection, name: str | None, values: dict[str, Any], now: dt.datetime
) -> int:
    return int(
        conn.execute(
            schedules.insert()
            .values(name=name, created_at=now, **values)
            .returning(schedules.c.schedule_id)
        ).scalar_one()
    )


def update_schedule(conn: Connection, schedule_id: int, values: dict[str, Any]) -> None:
    conn.execute(update(schedules).where(schedules.c.schedule_id == schedule_id).values(**values))


def switch_schedule(
    conn: Connection, schedule_id: int, enabled: bool, values: dict[str, Any]
) -> bool:
    """Write `values` when the schedule is not already `enabled`; whether it changed."""
    changed = conn.execute(
        update(schedules)
        .where(schedules.c.schedule_id == schedule_id, schedules.c.enabled.is_(not enabled))
        .values(**values)
        .returning(schedules.c.schedule_id)
    ).first()
    return changed is not None


def delete_schedule(conn: Connection, schedule_id: int) -> bool:
    gone = conn.execute(
        delete(schedules)
        .where(schedules.c.schedule_id == schedule_id)
        .returning(schedules.c.schedule_id)
    ).first()
    return gone is not None


def schedules_all(conn: Connection) -> list[ScheduleRow]:
    rows = conn.execute(select(schedules).order_by(schedules.c.schedule_id)).all()
    return [_schedule(r) for r in rows]


def due_schedules(conn: Connection, now: dt.datetime, limit: int) -> list[ScheduleRow]:
    rows = conn.execute(
        select(schedules)
        .where(schedules.c.enabled.is_(True), schedules.c.next_fire_at <= now)
        .order_by(schedules.c.next_fire_at)
        .limit(limit)
    ).all()
    return [_schedule(r) for r in rows]


def lock_schedule_enabled(conn: Connection, schedule_id: int) -> bool:
    """Lock the schedule's row; whether it exists and is enabled."""
    enabled = conn.execute(
        select(schedules.c.enabled).where(schedules.c.schedule_id == schedule_id).with_for_update()
    ).scalar()
    return bool(enabled)


def insert_firing(
    conn: Connection,
    schedule_id: int,
    fire_time: dt.datetime,
    execution_id: str,
    now: dt.datetime,
) -> bool:
    """The firing row of (schedule, fire time); False when another firer has it."""
    won = conn.execute(
        insert_ignore(conn, schedule_firings).returning(schedule_firings.c.schedule_id),
        {
            "schedule_id": schedule_id,
            "fire_time": fire_time,
            "execution_id": execution_id,
            "created_at": now,
        },
    ).first()
    return won is not None


def move_schedule_on(
    conn: Connection, schedule_id: int, fire_time: dt.datetime, next_fire_at: dt.datetime
) -> None:
    conn.execute(
        update(schedules)
        .where(
            schedules.c.schedule_id == schedule_id,
            schedules.c.next_fire_at < next_fire_at,  # never backwards (a slower firer)
        )
        .values(next_fire_at=next_fire_at, last_fire_at=fire_time)
    )


def schedule_firings_of(conn: Connection, schedule_id: int) -> list[tuple[dt.datetime, str | None]]:
    rows = conn.execute(
        select(schedule_firings.c.fire_time, schedule_firings.c.execution_id)
        .where(schedule_firings.c.schedule_id == schedule_id)
        .order_by(schedule_firings.c.fire_time)
    ).all()
    return [(r[0], r[1]) for r in rows]


# ---- termination (an execution ended from outside a pass) ---------------------------------
def set_ended(
    conn: Connection, execution_id: str, status: str, error: dict[str, Any], now: dt.datetime
) -> None:
    conn.execute(
        update(executions)
        .where(executions.c.execution_id == execution_id)
        .values(status=status, error=error, finished_at=now, updated_at=now)
    )


def lock_live_commands(conn: Connection, execution_id: str) -> None:
    """Row locks on the execution's issued, running and waiting commands: a claim or a
    close of one of them waits for this transaction."""
    conn.execute(
        select(commands.c.command_id)
        .where(
            commands.c.execution_id == execution_id,
            commands.c.status.in_((CMD_ISSUED, CMD_RUNNING, WAITING_FOR_CHILD)),
        )
        .with_for_update()
    ).all()


def unfinished_cursor_bodies(conn: Connection, execution_id: str) -> list[Any]:
    """(step, epoch, status, item, meta) of the unfinished body commands of cursor epochs
    (`loops.mode`), in claim order."""
    return list(
        conn.execute(
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
    )


def unfolded_completions(conn: Connection, execution_id: str) -> list[Any]:
    """(event_id, command_id, step, epoch, payload) of the successful completions in the
    inbox, in order."""
    return list(
        conn.execute(
            select(events.c.event_id, events.c.command_id, events.c.step, events.c.epoch)
            .add_columns(events.c.payload)
            .select_from(inbox.join(events, events.c.event_id == inbox.c.event_id))
            .where(inbox.c.execution_id == execution_id, events.c.type == EV_COMMAND_COMPLETED)
            .order_by(events.c.event_id)
        )
    )


def claimed_row_keys(
    conn: Connection, execution_id: str, step: str, epoch: int, keys: list[str]
) -> set[str]:
    """Which of `keys` the epoch's claims recorded before."""
    return set(
        conn.execute(
            select(cursor_rows.c.row_key).where(
                cursor_rows.c.execution_id == execution_id,
                cursor_rows.c.step == step,
                cursor_rows.c.epoch == epoch,
                cursor_rows.c.row_key.in_(keys),
            )
        ).scalars()
    )


def cancel_unfinished(conn: Connection, execution_id: str, now: dt.datetime) -> None:
    conn.execute(
        update(commands)
        .where(commands.c.execution_id == execution_id, commands.c.status.in_(UNFINISHED))
        .values(status=CMD_CANCELLED, finished_at=now)
    )


def clear_inbox(conn: Connection, execution_id: str) -> None:
    conn.execute(delete(inbox).where(inbox.c.execution_id == execution_id))


def running_children(conn: Connection, execution_id: str) -> list[str]:
    rows = conn.execute(
        select(executions.c.execution_id).where(
            executions.c.parent_execution_id == execution_id,
            executions.c.status == RUNNING,
        )
    ).scalars()
    return [str(c) for c in rows]


def cursor_unfinished_reports(conn: Connection, execution_id: str) -> dict[str, dict[str, Any]]:
    """The `cursor.unfinished` reports of an execution, by step."""
    rows = conn.execute(
        select(events.c.step, events.c.payload)
        .where(events.c.execution_id == execution_id, events.c.type == EV_CURSOR_UNFINISHED)
        .order_by(events.c.event_id)
    ).all()
    return {str(step): payload or {} for step, payload in rows}


def status_and_passes(conn: Connection, execution_id: str) -> Any:
    """(status, passes) of the execution, or None."""
    return conn.execute(
        select(executions.c.status, executions.c.passes).where(
            executions.c.execution_id == execution_id
        )
    ).first()


def insert_pass_failed(
    conn: Connection, execution_id: str, payload: dict[str, Any], now: dt.datetime
) -> None:
    conn.execute(
        events.insert().values(
            execution_id=execution_id, type=EV_PASS_FAILED, payload=payload, created_at=now
        )
    )


def pass_failed_payloads(conn: Connection, execution_id: str) -> list[Any]:
    return list(
        conn.execute(
            select(events.c.payload).where(
                events.c.execution_id == execution_id, events.c.type == EV_PASS_FAILED
            )
        ).scalars()
    )


# ---- the reaper ---------------------------------------------------------------------------
# Only RUNNING executions are looked at, through their commands' index (there is no
# index on `commands.status`: it would make every claim and close a non-HOT update).
_of_execution = executions.c.execution_id == commands.c.execution_id


def add_counter(conn: Connection, name: str, amount: int) -> None:
    """Add to an engine-wide counter (store.counters), in the caller's transaction."""
    add_to_counter(conn, counters, name, amount)


def take_lease(
    conn: Connection, name: str, owner: str, expires_at: dt.datetime, now: dt.datetime
) -> None:
    """Take or renew the lease `name` unless another owner holds it unexpired."""
    conn.execute(
        upsert(
            conn,
            leases,
            ["name"],
            {"name": name, "owner": owner, "expires_at": expires_at},
            where=or_(leases.c.expires_at < now, leases.c.owner == owner),
        )
    )


def lease_holder(conn: Connection, name: str) -> str | None:
    holder = conn.execute(select(leases.c.owner).where(leases.c.name == name)).scalar()
    return None if holder is None else str(holder)


def release_lease(conn: Connection, name: str, owner: str, now: dt.datetime) -> None:
    conn.execute(
        update(leases).where(leases.c.name == name, leases.c.owner == owner).values(expires_at=now)
    )


def _running_commands(status: str) -> Any:
    return (
        select(
            commands.c.command_id,
            *COMMAND_COLUMNS,
            commands.c.lease_until,
            commands.c.deadline_at,
        )
        .select_from(commands.join(executions, _of_execution))
        .where(executions.c.status == RUNNING, commands.c.status == status)
    )


def stale_issued(conn: Connection, before: dt.datetime, limit: int) -> list[Any]:
    """Issued commands of RUNNING executions issued before `before`, with their issue
    time and republish count."""
    return list(
        conn.execute(
            _running_commands(CMD_ISSUED)
            .add_columns(commands.c.issued_at, commands.c.republished)
            .where(commands.c.issued_at < before)
            .limit(limit)
        ).all()
    )


def mark_republished(conn: Connection, command_ids: list[str], now: dt.datetime) -> None:
    conn.execute(
        update(commands)
        .where(commands.c.command_id.in_(command_ids), commands.c.status == CMD_ISSUED)
        .values(issued_at=now, republished=commands.c.republished + 1)
    )


def due_delayed(conn: Connection, now: dt.datetime, limit: int) -> list[str]:
    rows = conn.execute(
        select(commands.c.command_id)
        .select_from(commands.join(executions, _of_execution))
        .where(
            executions.c.status == RUNNING,
            commands.c.status == CMD_DELAYED,
            commands.c.issued_at <= now,
        )
        .limit(limit)
    ).scalars()
    return [str(r) for r in rows]


def issue_delayed(conn: Connection, command_ids: list[str], now: dt.datetime) -> list[str]:
    """Issue those of `command_ids` still delayed; the ids this statement issued."""
    issued = conn.execute(
        update(commands)
        .where(commands.c.command_id.in_(command_ids), commands.c.status == CMD_DELAYED)
        .values(status=CMD_ISSUED, issued_at=now)
        .returning(commands.c.command_id)
    ).all()
    return [str(r[0]) for r in issued]


def lost_runs(conn: Connection, now: dt.datetime, limit: int) -> list[LostCommand]:
    """Running commands whose lease expired or whose deadline passed."""
    rows = conn.execute(
        _running_commands(CMD_RUNNING)
        .where(or_(commands.c.lease_until < now, commands.c.deadline_at < now))
        .limit(limit)
    ).all()
    return [LostCommand(**r._mapping) for r in rows]


def expire_run(conn: Connection, command_id: str, status: str, now: dt.datetime) -> bool:
    """End a running command whose lease expired or deadline passed with `status`;
    False when it is no longer such a command."""
    done = conn.execute(
        update(commands)
        .where(
            commands.c.command_id == command_id,
            commands.c.status == CMD_RUNNING,
            or_(commands.c.lease_until < now, commands.c.deadline_at < now),
        )
        .values(status=status, finished_at=now)
        .returning(commands.c.command_id)
    ).first()
    return done is not None


def insert_next_attempt(
    conn: Connection, lost: LostCommand, new_id: str, status: str, now: dt.datetime
) -> None:
    """The next attempt of a lost run: same coordinate, item, context and resume."""
    conn.execute(
        insert_ignore(conn, commands),
        {
            "command_id": new_id,
            "execution_id": lost.execution_id,
            "step": lost.step,
            "kind": lost.kind,
            "epoch": lost.epoch,
            "iteration": lost.iteration,
            "attempt": lost.attempt + 1,
            "status": status,
            "ctx_version": lost.ctx_version,
            "item": lost.item,
            "meta": lost.meta,
            "resume": lost.resume,
            "issued_at": now,
        },
    )


def inbox_waiting_since(conn: Connection, cutoff: dt.datetime, limit: int) -> list[str]:
    """Executions with a completion in the inbox since before `cutoff`."""
    rows = conn.execute(
        select(inbox.c.execution_id)
        .select_from(inbox.join(events, events.c.event_id == inbox.c.event_id))
        .where(events.c.created_at < cutoff)
        .group_by(inbox.c.execution_id)
        .limit(limit)
    ).scalars()
    return [str(r) for r in rows]


def unstarted_since(conn: Connection, cutoff: dt.datetime, limit: int) -> list[str]:
    """RUNNING executions created before `cutoff` that no pass has run yet."""
    rows = conn.execute(
        select(executions.c.execution_id)
        .where(
            and_(
                executions.c.status == RUNNING,
                executions.c.passes == 0,
                executions.c.created_at < cutoff,
            )
        )
        .limit(limit)
    ).scalars()
    return [str(r) for r in rows]


def running_since(conn: Connection, cutoff: dt.datetime, limit: int) -> list[str]:
    """RUNNING executions created before `cutoff`."""
    rows = conn.execute(
        select(executions.c.execution_id)
        .where(executions.c.status == RUNNING, executions.c.created_at < cutoff)
        .limit(limit)
    ).scalars()
    return [str(r) for r in rows]


# ---- batches ------------------------------------------------------------------------------
# One broker message may carry many command ids (worker.batch): they are claimed, renewed
# and handed back with one statement each, never one per command.
def claim_batch(
    conn: Connection,
    command_ids: Sequence[str],
    worker: str,
    now: dt.datetime,
    lease_until: dt.datetime,
) -> list[Any]:
    """Claim those of `command_ids` still issued (the others were claimed or finished
    by another delivery: skipped); their command_id and COMMAND_COLUMNS."""
    return list(
        conn.execute(
            update(commands)
            .where(commands.c.command_id.in_(list(command_ids)), commands.c.status == CMD_ISSUED)
            .values(status=CMD_RUNNING, worker=worker, started_at=now, lease_until=lease_until)
            .returning(commands.c.command_id, *COMMAND_COLUMNS)
        ).all()
    )


def renew_leases(conn: Connection, command_ids: Sequence[str], until: dt.datetime) -> list[str]:
    """Extend the leases of those of `command_ids` still running; the ids renewed."""
    rows = conn.execute(
        update(commands)
        .where(commands.c.command_id.in_(list(command_ids)), commands.c.status == CMD_RUNNING)
        .values(lease_until=until)
        .returning(commands.c.command_id)
    ).all()
    return [str(r[0]) for r in rows]


def release_claims(
    conn: Connection, command_ids: Sequence[str], worker: str, now: dt.datetime
) -> list[str]:
    """Put claimed commands that never started back to `issued` (a batch past its
    budget), only while they are still `worker`'s claim; the ids released. `issued_at`
    is now: the reaper republishes them only if this hand-back's message is lost."""
    rows = conn.execute(
        update(commands)
        .where(
            commands.c.command_id.in_(list(command_ids)),
            commands.c.status == CMD_RUNNING,
            commands.c.worker == worker,
        )
        .values(status=CMD_ISSUED, worker=None, started_at=None, lease_until=None, issued_at=now)
        .returning(commands.c.command_id)
    ).all()
    return [str(r[0]) for r in rows]
