"""Which rows a listing shows, declared once and passed down as one value from where a
request is read (the HTTP routes, the pages, the CLI, the Python API) through the
engine's reads to the SQL (`store.queries`), instead of the same keywords repeated in
every signature between them."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class ExecutionFilter:
    """Executions newest first: those matching every field given (None: any), one page
    of `limit` from `offset`. Status and trigger match in any case (`completed` finds
    COMPLETED); the path is a catalog path, exact; `parent` lists one execution's
    children."""

    status: str | None = None  # RUNNING, COMPLETED, FAILED, CANCELLED
    path: str | None = None
    trigger: str | None = None  # constants.TRIGGERS: manual, schedule, rerun, parent
    parent: str | None = None  # an execution id
    limit: int = 50
    offset: int = 0


# `executions`' default (the CLI's list, the Python API): the 20 newest, any
RECENT = ExecutionFilter(limit=20)
# `executions_page`'s default (the HTTP API's page, the pages'): the 50 newest, any
PAGE = ExecutionFilter()
