"""Read models of the HTTP API and the operator pages: the executions listing with loop
totals, one execution in detail, a loop's failed items, the flow graph. Queries are
`store.overview`'s; this module shapes them (pure folding where a decision is made)."""

from __future__ import annotations

import datetime as dt
import difflib
from collections.abc import Collection, Mapping, Sequence
from typing import Any

from typing_extensions import TypedDict

from noetl_celery.constants import EVENT_TYPES, FAILURE_EVENTS
from noetl_celery.engine.graph import GraphEdge, GraphNode, build_graph
from noetl_celery.engine.summaries import (
    ExecutionLine,
    ExecutionView,
    RunError,
    error_kind,
    error_text,
    execution_line,
    live_loops,
    preview,
    run_errors,
    status_view,
)
from noetl_celery.errors import InputInvalid
from noetl_celery.models.filters import ExecutionFilter
from noetl_celery.models.items import item_id
from noetl_celery.models.outcome import ERROR_KINDS
from noetl_celery.models.playbook import Playbook
from noetl_celery.store.overview import LoopTotals
from noetl_celery.store.repository import Store
from noetl_celery.store.rows import EventJSON, ExecutionRow, LogJSON


class ExecutionListLine(ExecutionLine):
    """An execution as `/api/v1/executions` lists it: `executions`' line plus its loop
    items (`items_done` = succeeded + failed, kept for API clients)."""

    items_done: int
    items_succeeded: int
    items_failed: int


class ExecutionsPage(TypedDict):
    executions: list[ExecutionListLine]
    total: int
    limit: int
    offset: int


class ExecutionDetail(ExecutionView):
    """`/api/v1/executions/{id}`: the status view with `errors` as `run --json` lists
    them, the state's raw step failures under `failures`, and the children."""

    failures: list[dict[str, Any]]
    errors: list[RunError]
    children: list[ExecutionListLine]
    children_total: int


class FailedItem(TypedDict):
    epoch: int | None
    iteration: int
    value: str  # a short preview of the item
    kind: str
    message: str


class FailedItemsPage(TypedDict):
    items: list[FailedItem]
    total: int
    offset: int
    limit: int


class EventsPage(TypedDict):
    events: list[EventJSON]
    next_since: int
    left_out: int


class LogsPage(TypedDict):
    logs: list[LogJSON]
    next_since: int
    left_out: int


class ExecutionGraph(TypedDict):
    """`FlowGraph` of an execution (the same fields, after its id)."""

    execution_id: str
    entry: str
    nodes: list[GraphNode]
    edges: list[GraphEdge]


# child executions a detail lists (a loop of sub-playbooks can start thousands: the
# listing filtered by `parent` pages through all of them)
CHILDREN_LIMIT = 100


def loop_items(totals: LoopTotals, steps: Mapping[str, Any]) -> tuple[int, int]:
    """(iterations done, of which failed) of an execution: its finished epochs' totals
    plus its open epochs' live counters from the state snapshot's `steps`."""
    done = totals.succeeded + totals.failed
    failed = totals.failed
    for lp in live_loops(dict(steps)).values():
        done += int(lp.get("succeeded") or 0) + int(lp.get("failed") or 0)
        failed += int(lp.get("failed") or 0)
    return done, failed


def executions_page(store: Store, match: ExecutionFilter) -> ExecutionsPage:
    """`{"executions": [line + items_done, items_succeeded, items_failed], "total",
    "limit", "offset"}` (`items_done` = succeeded + failed, kept for API clients),
    newest first. Three queries whatever the page size: the page (with its count), the
    loop totals of its ids, and the live counters of those with an open loop epoch."""
    rows, total = store.overview.executions_page(match)
    totals = store.overview.loop_totals([r.execution_id for r in rows])
    open_ids = [eid for eid, t in totals.items() if t.open_epochs]
    steps = store.overview.step_states(open_ids)
    lines: list[ExecutionListLine] = []
    for row in rows:
        done, failed = loop_items(
            totals.get(row.execution_id, LoopTotals()), steps.get(row.execution_id, {})
        )
        lines.append(
            {
                **execution_line(row),
                "items_done": done,
                "items_succeeded": done - failed,
                "items_failed": failed,
            }
        )
    return {"executions": lines, "total": total, "limit": match.limit, "offset": match.offset}


def detail(
    store: Store,
    row: ExecutionRow,
    order: Sequence[str] = (),
    queues: Mapping[str, str] | None = None,
) -> ExecutionDetail:
    """`status_view` plus the child executions (first `CHILDREN_LIMIT`, newest first,
    and how many there are), `errors` as `run --json` lists them, and the state's raw
    step failures under `failures`. Loops carry start, rate and ETA (engine.summaries.loop_pace)."""
    view = status_view(store, row, order, queues)
    children = executions_page(
        store, ExecutionFilter(parent=row.execution_id, limit=CHILDREN_LIMIT)
    )
    return {
        **view,
        "failures": view["errors"],
        "errors": run_errors(store, row),
        "children": children["executions"],
        "children_total": children["total"],
    }


def check_step(playbook: Playbook, row: ExecutionRow, step: str) -> None:
    if not playbook.has_step(step):
        names = ", ".join(s.step for s in playbook.workflow)
        raise InputInvalid("step", f"no step '{step}' in {row.path} (steps: {names})")


def failed_items(
    store: Store,
    row: ExecutionRow,
    step: str,
    *,
    epoch: int | None = None,
    offset: int = 0,
    limit: int = 50,
) -> FailedItemsPage:
    """`{"items": [{epoch, iteration, value, kind, message}], "total", "offset",
    "limit"}`: failed iterations of `step` (of `epoch`, or every epoch) in iteration
    order, `value` a short preview of the item."""
    found = store.overview.failed_iterations(
        row.execution_id, step, epoch=epoch, offset=offset, limit=limit
    )
    return {
        "items": [
            {
                "epoch": f.epoch,
                "iteration": f.iteration,
                "value": preview(f.item),
                "kind": error_kind(f.error),
                "message": error_text(f.error) or "failed",
            }
            for f in found
        ],
        "total": store.overview.count_failed_iterations(row.execution_id, step, epoch=epoch),
        "offset": offset,
        "limit": limit,
    }


def event_types(types: Collection[str], failed: bool) -> tuple[str, ...] | None:
    """The types to filter on, as `events` reads its `--type`/`--failed`: () for every
    type (including ones this version does not know yet), None when the filters exclude
    each other (`loop.done` and failed-only). InputInvalid names an unknown type."""
    unknown = sorted(set(types) - EVENT_TYPES)
    if unknown:
        known = ", ".join(sorted(EVENT_TYPES))
        raise InputInvalid("type", f"unknown event type {unknown[0]!r} (one of: {known})")
    wanted = set(types) or set(EVENT_TYPES)
    if failed:
        wanted &= FAILURE_EVENTS
    if not wanted:
        return None
    return () if wanted == set(EVENT_TYPES) else tuple(sorted(wanted))


def events_since(
    store: Store,
    row: ExecutionRow,
    *,
    types: tuple[str, ...] | None,
    step: str | None,
    since: int,
    limit: int,
) -> EventsPage:
    """`{"events": [...], "next_since", "left_out"}`: the first `limit` matching events
    after event id `since`, oldest first; `next_since` continues after the last one
    (unchanged when there was none), `left_out` counts the matching events past it."""
    if types is None:
        return {"events": [], "next_since": since, "left_out": 0}
    page = store.history.events_after(
        row.execution_id, types=types, step=step, after=since, limit=limit
    )
    rows = [e.to_json() for e in page.rows]
    next_since = rows[-1]["event_id"] if rows else since
    return {"events": rows, "next_since": next_since, "left_out": page.left_out}


def logs_since(
    store: Store, row: ExecutionRow, *, step: str | None, since: int, limit: int
) -> LogsPage:
    """`{"logs": [...], "next_since", "left_out"}` as `events_since`, over log ids."""
    page = store.history.logs_after(row.execution_id, step=step, after=since, limit=limit)
    rows = [r.to_json() for r in page.rows]
    next_since = rows[-1]["log_id"] if rows else since
    return {"logs": rows, "next_since": next_since, "left_out": page.left_out}


def graph(playbook: Playbook, row: ExecutionRow) -> ExecutionGraph:
    flow = build_graph(playbook, (row.state or {}).get("steps") or {})
    return {"execution_id": row.execution_id, **flow}


class QuarantinedItemView(TypedDict):
    """One quarantined loop item (`noetl-celery quarantine list|show`, the API's
    `/executions/{id}/quarantine`): `id` is `step:epoch:iteration`, what `show` and a
    redrive name it by; `item` the loop item itself, `error` its command's whole error;
    `runs` how often its body ran (retries included)."""

    id: str
    step: str
    epoch: int
    iteration: int
    kind: str
    message: str
    runs: int | None
    attempt: int | None
    item: Any
    error: Any
    quarantined_at: str | None
    redriven_by: str | None  # the redrive's execution id (None: not redriven)


class QuarantinePage(TypedDict):
    execution_id: str
    items: list[QuarantinedItemView]
    total: int


def check_kind(kind: str | None) -> None:
    if kind is not None and kind not in (*ERROR_KINDS, "error"):
        near = difflib.get_close_matches(kind, ERROR_KINDS, n=1, cutoff=0.7)
        hint = f"; did you mean {near[0]!r}?" if near else f" (one of: {', '.join(ERROR_KINDS)})"
        raise InputInvalid("kind", f"unknown error kind {kind!r}{hint}")


def _iso(value: dt.datetime | None) -> str | None:
    return None if value is None else value.isoformat() + "Z"


def quarantine(
    store: Store, row: ExecutionRow, *, step: str | None = None, kind: str | None = None
) -> QuarantinePage:
    """The execution's quarantined items in (step, epoch, iteration) order."""
    found = store.quarantine.items(row.execution_id, step=step, kind=kind)
    items: list[QuarantinedItemView] = [
        {
            "id": item_id(q.step, q.epoch, q.iteration),
            "step": q.step,
            "epoch": q.epoch,
            "iteration": q.iteration,
            "kind": q.kind,
            "message": q.message,
            "runs": q.runs,
            "attempt": q.attempt,
            "item": q.item,
            "error": q.error,
            "quarantined_at": _iso(q.quarantined_at),
            "redriven_by": q.redriven_by,
        }
        for q in found
    ]
    return {"execution_id": row.execution_id, "items": items, "total": len(items)}
