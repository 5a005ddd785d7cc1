"""Reads NoETL's server API needs (web.api_noetl) and the engine's own reads do not:
catalog rows with their content, events by offset (NoETL pages by number), per-execution
progress and event counts in one query per page, stuck executions (`store.compat` opens
their transactions).
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Collection, Sequence

from sqlalchemy import Connection, case, func, select

from noetl_celery.constants import CMD_TERMINAL, RUNNING
from noetl_celery.store.rows import CatalogRow, EventRow
from noetl_celery.store.schema import catalog, commands, events, executions

_CATALOG_COLUMNS = (
    catalog.c.catalog_id,
    catalog.c.path,
    catalog.c.version,
    catalog.c.name,
    catalog.c.content,
    catalog.c.content_sha256,
    catalog.c.created_at,
)


def catalog_rows(conn: Connection, path: str | None) -> list[CatalogRow]:
    """Every registered version (of `path`), newest first (as NoETL lists them)."""
    query = select(*_CATALOG_COLUMNS).order_by(
        catalog.c.created_at.desc(), catalog.c.catalog_id.desc()
    )
    if path is not None:
        query = query.where(catalog.c.path == path)
    rows = conn.execute(query).all()
    return [CatalogRow(**r._mapping) for r in rows]


def latest_catalog_rows(conn: Connection) -> list[CatalogRow]:
    """Each path's latest version, the most recently registered first."""
    latest = (
        select(catalog.c.path, func.max(catalog.c.version).label("version"))
        .group_by(catalog.c.path)
        .subquery()
    )
    query = (
        select(*_CATALOG_COLUMNS)
        .join(
            latest,
            (catalog.c.path == latest.c.path) & (catalog.c.version == latest.c.version),
        )
        .order_by(catalog.c.created_at.desc(), catalog.c.catalog_id.desc())
    )
    return [CatalogRow(**r._mapping) for r in conn.execute(query).all()]


def status_counts(conn: Connection) -> dict[str, int]:
    """How many executions (children included) are in each status."""
    query = select(executions.c.status, func.count()).group_by(executions.c.status)
    return {str(status): int(count) for status, count in conn.execute(query).all()}


def catalog_counts(conn: Connection) -> tuple[int, int]:
    """(catalog paths, registered versions)."""
    query = select(func.count(func.distinct(catalog.c.path)), func.count())
    paths, versions = conn.execute(query.select_from(catalog)).one()
    return int(paths), int(versions)


def catalog_row(
    conn: Connection, *, path: str | None, version: int | None, catalog_id: int | None
) -> CatalogRow | None:
    """The version `catalog_id`, or `path`'s `version` (latest when None); None: absent."""
    query = select(*_CATALOG_COLUMNS)
    if catalog_id is not None:
        query = query.where(catalog.c.catalog_id == catalog_id)
    if path is not None:
        query = query.where(catalog.c.path == path)
    if version is not None:
        query = query.where(catalog.c.version == version)
    row = conn.execute(query.order_by(catalog.c.version.desc()).limit(1)).first()
    return None if row is None else CatalogRow(**row._mapping)


def catalog_versions(conn: Connection, catalog_ids: Collection[int]) -> dict[int, int]:
    """catalog_id -> version, for the ids given."""
    rows = conn.execute(
        select(catalog.c.catalog_id, catalog.c.version).where(
            catalog.c.catalog_id.in_(sorted(set(catalog_ids)))
        )
    ).all()
    return {r.catalog_id: r.version for r in rows}


def command_progress(conn: Connection, execution_ids: Sequence[str]) -> dict[str, tuple[int, int]]:
    """execution_id -> (commands ended, commands made), for the ids given."""
    ended = func.sum(case((commands.c.status.in_(sorted(CMD_TERMINAL)), 1), else_=0))
    rows = conn.execute(
        select(commands.c.execution_id, ended, func.count())
        .where(commands.c.execution_id.in_(list(execution_ids)))
        .group_by(commands.c.execution_id)
    ).all()
    return {r[0]: (int(r[1] or 0), int(r[2])) for r in rows}


def event_counts(conn: Connection, execution_ids: Sequence[str]) -> dict[str, int]:
    rows = conn.execute(
        select(events.c.execution_id, func.count())
        .where(events.c.execution_id.in_(list(execution_ids)))
        .group_by(events.c.execution_id)
    ).all()
    return {r[0]: int(r[1]) for r in rows}


def events_slice(
    conn: Connection,
    execution_id: str,
    *,
    types: Collection[str],
    after: int | None,
    offset: int,
    limit: int,
    newest_first: bool = False,
) -> tuple[list[EventRow], int]:
    """Events oldest first (newest first with `newest_first`) of `types` when given,
    newer than event id `after`, `limit` of them after skipping `offset`, and how many
    match in all."""
    where = [events.c.execution_id == execution_id]
    if types:
        where.append(events.c.type.in_(sorted(types)))
    if after is not None:
        where.append(events.c.event_id > after)
    rows = conn.execute(
        select(events)
        .where(*where)
        .order_by(events.c.event_id.desc() if newest_first else events.c.event_id)
        .offset(offset)
        .limit(limit)
    ).all()
    total = conn.execute(select(func.count()).select_from(events).where(*where)).scalar_one()
    return [EventRow(**r._mapping) for r in rows], int(total)


def stuck_executions(conn: Connection, started_before: dt.datetime, limit: int) -> list[str]:
    """Top-level executions still RUNNING that started before `started_before`, oldest
    first (children end with their parent)."""
    rows = conn.execute(
        select(executions.c.execution_id)
        .where(
            executions.c.status == RUNNING,
            executions.c.parent_execution_id.is_(None),
            executions.c.created_at < started_before,
        )
        .order_by(executions.c.created_at)
        .limit(limit)
    ).all()
    return [r[0] for r in rows]
