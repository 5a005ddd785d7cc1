"""What the engine answers about executions: the CLI's `run --json` summary and `status`,
and the read models of the HTTP API and the pages (engine.readmodels), as methods of
`Engine` (engine.service), kept apart from the engine's writes."""

from __future__ import annotations

from collections.abc import Collection
from typing import TypeVar, cast

from noetl_celery.constants import COMPLETED
from noetl_celery.engine import readmodels
from noetl_celery.engine.readmodels import (
    EventsPage,
    ExecutionDetail,
    ExecutionGraph,
    ExecutionsPage,
    FailedItemsPage,
    LogsPage,
    QuarantinedItemView,
    QuarantinePage,
)
from noetl_celery.engine.routing import routed_steps
from noetl_celery.engine.summaries import (
    ExecutionLine,
    RunSummary,
    StatusView,
    execution_line,
    quarantined_items,
    run_errors,
    run_summary,
    status_view,
)
from noetl_celery.errors import InputInvalid
from noetl_celery.models.filters import PAGE, RECENT, ExecutionFilter
from noetl_celery.models.items import parse_item_id
from noetl_celery.passes.playbooks import PlaybookCache
from noetl_celery.settings import Settings
from noetl_celery.store.repository import Store
from noetl_celery.store.rows import EventJSON, LogJSON
from noetl_celery.tools.services import ToolServices

View = TypeVar("View")


class EngineReads:
    """Mixed into `Engine`, which provides the store, the playbook cache and the tools'
    services (their redactor masks what leaves the machine)."""

    store: Store
    playbooks: PlaybookCache
    services: ToolServices
    settings: Settings

    def summary(self, execution_id: str) -> RunSummary:
        """The `run --json` object: execution_id, status, result, error, errors,
        duration, steps. Only a COMPLETED execution has a result; a FAILED or CANCELLED
        one lists what failed in `errors` (`{step, item, kind, message}`, first 20)."""
        row = self.store.execution(execution_id)
        summary = run_summary(self.store, row)
        if row.status != COMPLETED:
            summary["result"] = None
        # models.summary's fields (RunSummary declares them) plus `errors` and the count
        # of quarantined items
        return cast(
            RunSummary,
            {
                **summary,
                "errors": run_errors(self.store, row),
                "quarantined": quarantined_items(self.store, row),
            },
        )

    def status(self, execution_id: str) -> StatusView:
        """`status`'s view; its steps in the playbook's workflow order."""
        row = self.store.execution(execution_id)
        return status_view(
            self.store,
            row,
            self.workflow_order(row.catalog_id),
            self.routed_queues(row.catalog_id),
        )

    def workflow_order(self, catalog_id: int) -> list[str]:
        """The steps of catalog version `catalog_id` as its workflow declares them."""
        return [s.step for s in self.playbooks.get(catalog_id).workflow]

    def routed_queues(self, catalog_id: int) -> dict[str, str]:
        """The steps of catalog version `catalog_id` that workers take from a named queue,
        as this environment routes them (spec.queue, NOETL_QUEUE_BY_KIND); none in the
        embedded mode, whose threads run every command."""
        if self.settings.embedded:
            return {}
        return routed_steps(self.playbooks.get(catalog_id), dict(self.settings.queue_by_kind))

    def executions(self, match: ExecutionFilter = RECENT) -> list[ExecutionLine]:
        """Recent executions, newest first, optionally by status, catalog path and how
        they were started (`constants.TRIGGERS`)."""
        return [execution_line(r) for r in self.store.overview.list_executions(match)]

    # ---- read models of the HTTP API and the pages (engine.readmodels) --------------------
    # Each answer goes through the tools' redactor once more: messages are masked where
    # they are made, but a step's result, a rerun's overrides or a payload echoed in an
    # error may hold a credential's secret, and these answers leave the machine.
    def _masked(self, view: View) -> View:
        # the redactor replaces secret text inside strings: the shape stays the same
        masked: View = self.services.redactor.redact_value(view)
        return masked

    def executions_page(self, match: ExecutionFilter = PAGE) -> ExecutionsPage:
        """`{"executions": [...], "total", "limit", "offset"}` newest first; each line is
        `execution_line` plus `items_done` (loop iterations finished, failed included)
        and `items_failed`, over all its loop epochs (open ones live)."""
        return self._masked(readmodels.executions_page(self.store, match))

    def detail(self, execution_id: str) -> ExecutionDetail:
        """`status` plus `children` (lines, `children_total`), `errors` as `run --json`
        lists them (the state's raw step failures under `failures`), and per loop
        `started_at`, `rate_per_second`, `eta_seconds`."""
        row = self.store.execution(execution_id)
        order = self.workflow_order(row.catalog_id)
        queues = self.routed_queues(row.catalog_id)
        return self._masked(readmodels.detail(self.store, row, order, queues))

    def failed_items(
        self,
        execution_id: str,
        step: str,
        *,
        epoch: int | None = None,
        offset: int = 0,
        limit: int = 50,
    ) -> FailedItemsPage:
        """`{"items": [{epoch, iteration, value, kind, message}], "total"}`: a page of the
        failed iterations of loop step `step`, in iteration order. InputInvalid for a
        step the playbook does not have."""
        row = self.store.execution(execution_id)
        readmodels.check_step(self.playbooks.get(row.catalog_id), row, step)
        return self._masked(
            readmodels.failed_items(self.store, row, step, epoch=epoch, offset=offset, limit=limit)
        )

    def quarantine(
        self, execution_id: str, *, step: str | None = None, kind: str | None = None
    ) -> QuarantinePage:
        """The execution's quarantined loop items (of `step`, of error `kind`).
        InputInvalid for a step the playbook does not have or an unknown kind."""
        row = self.store.execution(execution_id)
        if step is not None:
            readmodels.check_step(self.playbooks.get(row.catalog_id), row, step)
        readmodels.check_kind(kind)
        return self._masked(readmodels.quarantine(self.store, row, step=step, kind=kind))

    def quarantined_item(self, execution_id: str, item: str) -> QuarantinedItemView:
        """One quarantined item by its id (`step:epoch:iteration`); InputInvalid when
        the execution has no such quarantined item."""
        step, epoch, iteration = parse_item_id(item)
        row = self.store.execution(execution_id)
        for found in readmodels.quarantine(self.store, row, step=step)["items"]:
            if (found["epoch"], found["iteration"]) == (epoch, iteration):
                return self._masked(found)
        raise InputInvalid("item", f"execution {execution_id} has no quarantined item {item}")

    def events_since(
        self,
        execution_id: str,
        *,
        types: Collection[str] = (),
        failed: bool = False,
        step: str | None = None,
        since: int = 0,
        limit: int = 200,
    ) -> EventsPage:
        """`{"events", "next_since", "left_out"}`: events after event id `since`, oldest
        first, of any of `types` (failures only with `failed`, as `events --failed`) and
        of `step`. InputInvalid for an unknown type or step."""
        row = self.store.execution(execution_id)
        chosen = readmodels.event_types(types, failed)
        if step is not None:
            readmodels.check_step(self.playbooks.get(row.catalog_id), row, step)
        return self._masked(
            readmodels.events_since(
                self.store, row, types=chosen, step=step, since=since, limit=limit
            )
        )

    def logs_since(
        self, execution_id: str, *, step: str | None = None, since: int = 0, limit: int = 200
    ) -> LogsPage:
        """`{"logs", "next_since", "left_out"}`: captured output after log id `since`."""
        row = self.store.execution(execution_id)
        if step is not None:
            readmodels.check_step(self.playbooks.get(row.catalog_id), row, step)
        return self._masked(
            readmodels.logs_since(self.store, row, step=step, since=since, limit=limit)
        )

    def graph(self, execution_id: str) -> ExecutionGraph:
        """`{"nodes": [{step, status, tool}], "edges": [{from, to, when}]}`: the
        playbook's `next` arcs with each step's status in this execution."""
        row = self.store.execution(execution_id)
        return readmodels.graph(self.playbooks.get(row.catalog_id), row)

    def events(
        self,
        execution_id: str,
        *,
        types: Collection[str] = (),
        step: str | None = None,
        after: int | None = None,
        limit: int | None = None,
    ) -> list[EventJSON]:
        """Events oldest first: of any of `types` and of `step` when given, newer than
        event id `after`, the newest `limit` (all by default)."""
        return self.events_page(execution_id, types=types, step=step, after=after, limit=limit)[0]

    def events_page(
        self,
        execution_id: str,
        *,
        types: Collection[str] = (),
        step: str | None = None,
        after: int | None = None,
        limit: int | None = None,
    ) -> tuple[list[EventJSON], int]:
        """`events` plus how many matching events the limit left out."""
        if after is None:
            self.store.execution(execution_id)  # raises ExecutionNotFound
        page = self.store.history.events_page(
            execution_id, types=types, step=step, after=after, limit=limit
        )
        return [e.to_json() for e in page.rows], page.left_out

    def logs_page(
        self,
        execution_id: str,
        *,
        step: str | None = None,
        after: int | None = None,
        limit: int | None = None,
    ) -> tuple[list[LogJSON], int]:
        """Captured command output, in the order it was stored (see `events_page`)."""
        if after is None:
            self.store.execution(execution_id)  # raises ExecutionNotFound
        page = self.store.history.logs_page(execution_id, step=step, after=after, limit=limit)
        return [r.to_json() for r in page.rows], page.left_out
