"""What an orchestration pass reads: the inbox of completions and the facts of a loop
or cursor epoch."""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from sqlalchemy import Connection, select, text

from noetl_celery.constants import COMMAND_TERMINAL_EVENTS, EV_COMMAND_FAILED, EV_ITEM_THROTTLED
from noetl_celery.models.outcome import Outcome
from noetl_celery.orchestrator.batching import EpochBacklog
from noetl_celery.orchestrator.decisions import Completion
from noetl_celery.store.dialect import insert_ignore
from noetl_celery.store.schema import cursor_rows, events
from noetl_celery.store.statements import BACKLOG, HAS_UNHANDLED, INBOX, MARK_HANDLED, WAITING

_FIRST_CLAIMS_PG = text(
    "INSERT INTO cursor_rows (execution_id, step, epoch, row_key) "
    "SELECT :b_eid, :b_step, :b_epoch, k FROM unnest(CAST(:b_keys AS varchar[])) AS k "
    "ON CONFLICT DO NOTHING RETURNING row_key"
)


def has_unhandled(conn: Connection, execution_id: str) -> bool:
    return conn.execute(HAS_UNHANDLED, {"b_eid": execution_id}).first() is not None


def inbox_completions(conn: Connection, execution_id: str, limit: int) -> list[Completion]:
    rows = conn.execute(INBOX, {"b_eid": execution_id, "b_limit": limit})
    return [completion_of(row._mapping) for row in rows]


def completion_of(row: Mapping[Any, Any]) -> Completion:
    """An inbox entry (INBOX's columns) as the pass folds it: a command's terminal
    event, or a loop item's `item.throttled` (its `parked_for`: how far its turn is)."""
    payload = row["payload"] or {}
    throttled = row.get("type") == EV_ITEM_THROTTLED
    return Completion(
        event_id=row["event_id"],
        command_id=row["command_id"] or "",
        step=row["step"] or "",
        epoch=row["epoch"] or 0,
        iteration=row["iteration"],
        outcome=Outcome("ok", None) if throttled else Outcome.from_json(payload),
        parked_for=float(payload.get("delay") or 0.0) if throttled else None,
    )


def waiting(conn: Connection, execution_id: str) -> list[tuple[str, int, int, bool]]:
    """The inbox grouped by (step, epoch): count, and whether any entry is not a loop
    iteration."""
    rows = conn.execute(WAITING, {"b_eid": execution_id}).all()
    return [(r[0] or "", r[1] or 0, int(r[2]), bool(r[3])) for r in rows]


def backlog(conn: Connection, execution_id: str) -> list[EpochBacklog]:
    """The committed inbox per (step, epoch) with the epoch's deferral counters."""
    return [
        EpochBacklog(
            status=r[4],
            waiting=int(r[2]),
            other=bool(r[3]),
            done=bool(r[5]),
            window=None if r[6] is None else int(r[6]),
            in_flight=int(r[7] or 0),
        )
        for r in conn.execute(BACKLOG, {"b_eid": execution_id}).all()
    ]


def mark_handled(conn: Connection, execution_id: str, event_ids: Sequence[int]) -> None:
    if event_ids:
        conn.execute(MARK_HANDLED, {"b_eid": execution_id, "b_ids": list(event_ids)})


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
    if conn.dialect.name == "postgresql":
        # a frame's keys as one array: one constant statement (prepared by psycopg after
        # a few frames), not a VALUES list compiled per frame size
        params = {"b_eid": execution_id, "b_step": step, "b_epoch": epoch, "b_keys": list(keys)}
        return set(conn.execute(_FIRST_CLAIMS_PG, params).scalars())
    base = {"execution_id": execution_id, "step": step, "epoch": epoch}
    new = conn.execute(
        insert_ignore(conn, cursor_rows).returning(cursor_rows.c.row_key),
        [{**base, "row_key": key} for key in keys],
    ).scalars()
    return set(new)
