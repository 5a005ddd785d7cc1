"""Registering playbook versions and resolving them (the façade's catalog)."""

from __future__ import annotations

import datetime as dt
from typing import Any

from sqlalchemy import Connection, select

from noetl_celery.store.rows import CatalogEntry
from noetl_celery.store.schema import catalog
from noetl_celery.store.statements import CATALOG_OF


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
