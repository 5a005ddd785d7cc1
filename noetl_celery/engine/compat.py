"""What NoETL's server API (web.api_noetl) asks of the engine beyond the `Engine`
facade: catalog rows with content, executions and events by page, progress, cleanup of
stuck executions. Plain rows out; the shapes are web.noetl_shapes'."""

from __future__ import annotations

import datetime as dt
from collections.abc import Collection
from dataclasses import dataclass
from typing import TYPE_CHECKING

from noetl_celery.engine.catalog import suggest
from noetl_celery.engine.summaries import RunError, StatusView, run_errors, status_view
from noetl_celery.errors import CatalogNotFound
from noetl_celery.models.filters import ExecutionFilter
from noetl_celery.store.rows import CatalogRow, EventRow, ExecutionRow
from noetl_celery.store.schema import utcnow

if TYPE_CHECKING:
    from noetl_celery.engine.service import Engine

__all__ = [
    "CatalogRow",
    "DashboardCounts",
    "ExecutionPageRow",
    "StatusParts",
    "catalog_entry",
    "catalog_rows",
    "cleanup",
    "commands_made",
    "dashboard_counts",
    "event_count",
    "events_slice",
    "executions_page",
    "status_parts",
    "version_of",
]


@dataclass(frozen=True)
class ExecutionPageRow:
    row: ExecutionRow
    version: int | None
    progress: tuple[int, int]  # (commands ended, commands made)
    event_count: int


def catalog_rows(
    engine: Engine, path: str | None = None, *, latest_only: bool = False
) -> list[CatalogRow]:
    """Every version (of `path`), newest first; with `latest_only` (and no `path`) each
    path's latest version only."""
    if latest_only and path is None:
        return engine.store.compat.latest_catalog_rows()
    return engine.store.compat.catalog_rows(path)


@dataclass(frozen=True)
class DashboardCounts:
    by_status: dict[str, int]  # executions per status, children included
    catalog_paths: int
    catalog_versions: int
    schedules: int
    schedules_enabled: int
    recent: list[ExecutionPageRow]


def dashboard_counts(engine: Engine, recent: int = 5) -> DashboardCounts:
    paths, versions = engine.store.compat.catalog_counts()
    schedules = engine.schedules.all()
    return DashboardCounts(
        by_status=engine.store.compat.status_counts(),
        catalog_paths=paths,
        catalog_versions=versions,
        schedules=len(schedules),
        schedules_enabled=sum(1 for s in schedules if s.enabled),
        recent=executions_page(engine, ExecutionFilter(limit=recent)),
    )


def catalog_entry(
    engine: Engine,
    *,
    path: str | None = None,
    version: int | None = None,
    catalog_id: int | None = None,
) -> CatalogRow:
    """One version; CatalogNotFound names what was asked for."""
    found = engine.store.compat.catalog_row(path=path, version=version, catalog_id=catalog_id)
    if found is not None:
        return found
    asked = path if path is not None else f"catalog_id {catalog_id}"
    suffix = f" version {version}" if version is not None else ""
    hint = ""
    if path is not None and catalog_id is None and not engine.catalog.versions(path):
        # `noetl run some/file.yaml -r distributed` sends the file's stem as the path
        close = suggest(path, [s.path for s in engine.catalog.listing()])
        hint = "; did you mean " + " or ".join(f"'{p}'" for p in close) + "?" if close else ""
    raise CatalogNotFound(f"Playbook not found in catalog: {asked}{suffix}{hint}")


def version_of(engine: Engine, catalog_id: int) -> int:
    return engine.store.catalog_entry(catalog_id).version


def executions_page(engine: Engine, match: ExecutionFilter) -> list[ExecutionPageRow]:
    rows, _ = engine.store.overview.executions_page(match)
    ids = [r.execution_id for r in rows]
    versions = engine.store.compat.catalog_versions({r.catalog_id for r in rows})
    progress = engine.store.compat.command_progress(ids)
    counts = engine.store.compat.event_counts(ids)
    return [
        ExecutionPageRow(
            row=r,
            version=versions.get(r.catalog_id),
            progress=progress.get(r.execution_id, (0, 0)),
            event_count=counts.get(r.execution_id, 0),
        )
        for r in rows
    ]


@dataclass(frozen=True)
class StatusParts:
    view: StatusView  # Engine.status
    errors: list[RunError]  # what failed (engine.summaries.run_errors), empty when COMPLETED
    order: list[str]  # the playbook's steps in declaration order
    last_step: str | None  # the last step that completed


def status_parts(engine: Engine, execution_id: str) -> StatusParts:
    """What NoETL's status shows, from one read of the execution (no step results)."""
    row = engine.store.execution(execution_id)  # ExecutionNotFound
    playbook = engine.playbooks.get(row.catalog_id)
    last = (row.state or {}).get("last_step")
    order = [s.step for s in playbook.workflow]
    return StatusParts(
        view=status_view(engine.store, row, order),
        errors=run_errors(engine.store, row),
        order=order,
        last_step=str(last) if last else None,
    )


def commands_made(engine: Engine, execution_id: str) -> int:
    """How many commands the execution has issued so far (NoETL's `commands_generated`)."""
    return engine.store.compat.command_progress([execution_id]).get(execution_id, (0, 0))[1]


def progress(engine: Engine, execution_id: str) -> tuple[int, int]:
    return engine.store.compat.command_progress([execution_id]).get(execution_id, (0, 0))


def event_count(engine: Engine, execution_id: str) -> int:
    return engine.store.compat.event_counts([execution_id]).get(execution_id, 0)


def events_slice(
    engine: Engine,
    execution_id: str,
    *,
    types: Collection[str] = (),
    after: int | None = None,
    offset: int = 0,
    limit: int = 100,
    newest_first: bool = False,
) -> tuple[list[EventRow], int]:
    """Events oldest first, or newest first; newest first from a cursor (`after`) is
    the `limit` oldest past it, reversed: a poller that keeps the largest id it saw
    skips none when more than `limit` came since (NoETL's GUI does that)."""
    if newest_first and after is not None:
        rows, total = engine.store.compat.events_slice(
            execution_id, types=types, after=after, offset=offset, limit=limit
        )
        return rows[::-1], total
    return engine.store.compat.events_slice(
        execution_id,
        types=types,
        after=after,
        offset=offset,
        limit=limit,
        newest_first=newest_first,
    )


def cleanup(engine: Engine, older_than_minutes: int, *, dry_run: bool) -> list[str]:
    """Cancel (unless `dry_run`) top-level executions RUNNING for longer than
    `older_than_minutes`; their ids (those that were still running when cancelled)."""
    cutoff = utcnow() - dt.timedelta(minutes=older_than_minutes)
    stuck = engine.store.compat.stuck_executions(cutoff)
    if dry_run:
        return stuck
    reason = f"cleanup: running for more than {older_than_minutes} minute(s)"
    return [eid for eid in stuck if engine.cancel_tree(eid, reason) is not None]
