"""Immutable rows (contexts, step results) and the per-process cache of step results."""

from __future__ import annotations

from typing import Any

from sqlalchemy import Connection, select

from noetl_celery.store.cache import ImmutableCache
from noetl_celery.store.schema import contexts, results


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
