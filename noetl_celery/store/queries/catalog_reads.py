"""Reads of the playbook catalog for operators (`catalog list | show`, `run PATH`;
`store.catalog_reads` opens their transactions). Registration is `queries.catalog`."""

from __future__ import annotations

from sqlalchemy import Connection, and_, func, select

from noetl_celery.store.rows import CatalogSummary, CatalogVersion
from noetl_celery.store.schema import catalog


def listing(conn: Connection) -> list[CatalogSummary]:
    """Every path, sorted, with its latest version (one query: the catalog can hold
    thousands of versions, so no per-path round trips)."""
    per_path = (
        select(
            catalog.c.path,
            func.max(catalog.c.version).label("latest"),
            func.count().label("versions"),
            func.min(catalog.c.created_at).label("first"),
        )
        .group_by(catalog.c.path)
        .subquery()
    )
    query = (
        select(
            catalog.c.path,
            catalog.c.name,
            catalog.c.version,
            catalog.c.catalog_id,
            catalog.c.created_at,
            per_path.c.versions,
            per_path.c.first,
        )
        .join(
            per_path,
            and_(catalog.c.path == per_path.c.path, catalog.c.version == per_path.c.latest),
        )
        .order_by(catalog.c.path)
    )
    rows = conn.execute(query).all()
    return [
        CatalogSummary(
            path=r.path,
            name=r.name,
            latest_version=r.version,
            versions=r.versions,
            catalog_id=r.catalog_id,
            registered_at=r.created_at,
            first_registered_at=r.first,
        )
        for r in rows
    ]


def versions(conn: Connection, path: str) -> list[CatalogVersion]:
    """The versions of `path`, oldest first; empty when nothing is registered there."""
    rows = conn.execute(
        select(
            catalog.c.catalog_id,
            catalog.c.path,
            catalog.c.version,
            catalog.c.name,
            catalog.c.content_sha256,
            catalog.c.created_at,
        )
        .where(catalog.c.path == path)
        .order_by(catalog.c.version)
    ).all()
    return [CatalogVersion(**r._mapping) for r in rows]
