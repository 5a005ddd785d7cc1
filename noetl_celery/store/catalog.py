"""Reads of the playbook catalog for operators (`catalog list | show`, `run PATH`).

Registration itself is `Store.register`; catalog rows never change once written, a new
content is a new version of its path.
"""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from sqlalchemy import and_, func, select

from noetl_celery.store.schema import catalog

if TYPE_CHECKING:
    from noetl_celery.store.repository import Store


def _iso(value: dt.datetime) -> str:
    return value.isoformat() + "Z"


@dataclass(frozen=True)
class CatalogVersion:
    """One registered version of a path."""

    catalog_id: int
    path: str
    version: int
    name: str
    content_sha256: str
    created_at: dt.datetime

    def to_json(self) -> dict[str, Any]:
        return {
            "catalog_id": self.catalog_id,
            "version": self.version,
            "name": self.name,
            "content_sha256": self.content_sha256,
            "registered_at": _iso(self.created_at),
        }


@dataclass(frozen=True)
class CatalogSummary:
    """A catalog path with its latest version."""

    path: str
    name: str  # the latest version's `metadata.name`
    latest_version: int
    versions: int
    catalog_id: int  # of the latest version
    registered_at: dt.datetime  # when the latest version was registered
    first_registered_at: dt.datetime

    def to_json(self) -> dict[str, Any]:
        return {
            "path": self.path,
            "name": self.name,
            "latest_version": self.latest_version,
            "versions": self.versions,
            "catalog_id": self.catalog_id,
            "registered_at": _iso(self.registered_at),
            "first_registered_at": _iso(self.first_registered_at),
        }


def listing(store: Store) -> list[CatalogSummary]:
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
    with store.db.read() as conn:
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


def versions(store: Store, path: str) -> list[CatalogVersion]:
    """The versions of `path`, oldest first; empty when nothing is registered there."""
    with store.db.read() as conn:
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
