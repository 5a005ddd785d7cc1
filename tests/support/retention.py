"""Rows for retention tests and the bench: executions with a row in every table that
belongs to an execution, written with direct INSERTs (thousands in a second or two), and
counts of rows per table for a set of executions."""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterable, Sequence
from typing import Any

from sqlalchemy import Connection, func, insert, select, update

from noetl_celery.store.database import Database
from noetl_celery.store.retention import EXECUTION_TABLES, KEPT_TABLES
from noetl_celery.store.schema import (
    catalog,
    events,
    executions,
    inbox,
    metadata,
    schedules,
)

# every table that holds rows of executions (the executions table included)
OWNED = (*EXECUTION_TABLES, "executions")
_firing = [0]  # fire times must be unique per schedule across calls


def catalog_id(conn: Connection) -> int:
    found = conn.execute(select(catalog.c.catalog_id).limit(1)).scalar()
    if found is not None:
        return int(found)
    now = dt.datetime(2026, 1, 1)
    return int(
        conn.execute(
            insert(catalog).returning(catalog.c.catalog_id),
            {
                "path": "tests/seeded",
                "version": 1,
                "name": "seeded",
                "content": "x",
                "content_sha256": "0" * 64,
                "created_at": now,
            },
        ).scalar_one()
    )


def schedule_id(conn: Connection) -> int:
    found = conn.execute(select(schedules.c.schedule_id).limit(1)).scalar()
    if found is not None:
        return int(found)
    return int(
        conn.execute(
            insert(schedules).returning(schedules.c.schedule_id),
            {
                "name": "seeded",
                "path": "tests/seeded",
                "cron": "* * * * *",
                "timezone": "UTC",
                "payload": {},
                "enabled": False,
                "next_fire_at": dt.datetime(2030, 1, 1),
                "created_at": dt.datetime(2026, 1, 1),
            },
        ).scalar_one()
    )


def seed(
    db: Database,
    ids: Sequence[str],
    *,
    status: str,
    created_at: dt.datetime,
    finished_at: dt.datetime | None,
    parent: str | None = None,
    rerun_of: str | None = None,
    items: int = 2,
) -> None:
    """Executions `ids` with `items` loop commands each and a row in every table that
    belongs to an execution."""
    rows: dict[str, list[dict[str, Any]]] = {t: [] for t in OWNED}
    with db.write() as conn:
        cat = catalog_id(conn)
        sched = schedule_id(conn)
        for eid in ids:
            rows["executions"].append(
                {
                    "execution_id": eid,
                    "catalog_id": cat,
                    "path": "tests/seeded",
                    "status": status,
                    "parent_execution_id": parent,
                    "rerun_of": rerun_of,
                    "trigger": "rerun" if rerun_of else ("parent" if parent else "schedule"),
                    "payload": {"n": 1},
                    "state": {"vars": {"a": 1}},
                    "passes": 3,
                    "created_at": created_at,
                    "updated_at": finished_at or created_at,
                    "finished_at": finished_at,
                }
            )
            for i in range(items):
                cid = f"{eid}:work:1:{i}"
                rows["commands"].append(
                    {
                        "command_id": cid,
                        "execution_id": eid,
                        "step": "work",
                        "kind": "python",
                        "epoch": 1,
                        "iteration": i,
                        "attempt": 1,
                        "status": "completed",
                        "ctx_version": 1,
                        "item": {"i": i},
                    }
                )
                rows["events"].append(
                    {
                        "execution_id": eid,
                        "type": "command.completed",
                        "step": "work",
                        "command_id": cid,
                        "epoch": 1,
                        "iteration": i,
                        "payload": {"status": "ok", "data": {"i": i}},
                        "created_at": created_at,
                    }
                )
                rows["cursor_rows"].append(
                    {"execution_id": eid, "step": "work", "epoch": 1, "row_key": f"k{i}"}
                )
                rows["command_logs"].append(
                    {
                        "execution_id": eid,
                        "command_id": cid,
                        "step": "work",
                        "iteration": i,
                        "text": f"item {i}\n",
                        "truncated": False,
                        "created_at": created_at,
                    }
                )
            rows["results"].append(
                {"execution_id": eid, "step": "work", "epoch": 1, "status": "ok", "data": {}}
            )
            rows["contexts"].append({"execution_id": eid, "version": 1, "data": {"vars": {}}})
            rows["loops"].append(
                {"execution_id": eid, "step": "work", "epoch": 1, "mode": "parallel"}
            )
            rows["publish_outbox"].append(
                {"item_id": eid, "kind": "wake", "execution_id": eid, "held_at": created_at}
            )
            rows["notifications"].append(
                {
                    "notification_id": f"{eid}.failed.engine",
                    "execution_id": eid,
                    "event": "failed",
                    "target": "engine",
                    "created_at": created_at,
                    "next_at": created_at,
                    "delivered_at": created_at,
                }
            )
            _firing[0] += 1
            rows["schedule_firings"].append(
                {
                    "schedule_id": sched,
                    "fire_time": dt.datetime(2000, 1, 1) + dt.timedelta(minutes=_firing[0]),
                    "execution_id": eid,
                }
            )
        tables = metadata.tables
        for name in ("executions", "commands", "events", "results", "contexts", "loops"):
            conn.execute(insert(tables[name]), rows[name])
        for name in (
            "cursor_rows",
            "command_logs",
            "publish_outbox",
            "schedule_firings",
            "notifications",
        ):
            conn.execute(insert(tables[name]), rows[name])
        # one completion not folded yet per execution: the inbox names its event
        first = (
            select(func.min(events.c.event_id).label("event_id"), events.c.execution_id)
            .where(events.c.execution_id.in_(list(ids)))
            .group_by(events.c.execution_id)
        )
        conn.execute(
            insert(inbox).from_select(["event_id", "execution_id"], first),
        )


def backdate(db: Database, ids: Iterable[str], created_at: dt.datetime, ended: dt.datetime) -> None:
    """Move executions (and their rows' times, which a prune ignores) into the past."""
    with db.write() as conn:
        conn.execute(
            update(executions)
            .where(executions.c.execution_id.in_(list(ids)))
            .values(created_at=created_at, updated_at=ended, finished_at=ended)
        )


def counts(db: Database, ids: Iterable[str]) -> dict[str, int]:
    """Rows per table that belong to `ids`."""
    wanted = list(ids)
    out = dict.fromkeys(OWNED, 0)
    with db.read() as conn:
        for name in OWNED:
            table = metadata.tables[name]
            for i in range(0, len(wanted), 500):
                part = wanted[i : i + 500]
                out[name] += int(
                    conn.execute(
                        select(func.count())
                        .select_from(table)
                        .where(table.c.execution_id.in_(part))
                    ).scalar_one()
                )
    return out


def totals(db: Database) -> dict[str, int]:
    """Rows in every engine table."""
    with db.read() as conn:
        return {
            name: int(conn.execute(select(func.count()).select_from(table)).scalar_one())
            for name, table in metadata.tables.items()
        }


def kept_rows(db: Database) -> dict[str, list[tuple[Any, ...]]]:
    """Every row of the tables a prune never touches (the prune's own lease rows left
    out: taking them is how it runs one at a time)."""
    with db.read() as conn:
        out = {}
        for name in KEPT_TABLES:
            table = metadata.tables[name]
            rows = [tuple(r) for r in conn.execute(select(table)).all()]
            if name == "leases":
                rows = [r for r in rows if not str(r[0]).startswith("retention")]
            out[name] = sorted(rows, key=repr)
        return out
