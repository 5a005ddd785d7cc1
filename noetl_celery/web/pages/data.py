"""What the pages read, through the `Engine` facade's read models (engine.service): one
call per section, each paged (a page never loads every event, item or log)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from noetl_celery import tracing
from noetl_celery.engine import ratelimits
from noetl_celery.engine.service import Engine
from noetl_celery.engine.summaries import preview
from noetl_celery.models.filters import ExecutionFilter
from noetl_celery.store.schema import utcnow
from noetl_celery.web.pages.presenters import (
    TERMINAL,
    Pager,
    bounded,
    execution_row,
    graph_layout,
    item_totals,
    loop_row,
    message_line,
    schedule_row,
    status_class,
    time_text,
)

LIST_LIMIT, LIST_MAX = 50, 200
FAILED_LIMIT = 20
QUARANTINE_LIMIT = 50  # quarantined items per page (each with its checkbox)
LOGS_LIMIT, LOGS_MAX = 50, 1000
EVENTS_LIMIT, EVENTS_MAX = 100, 500
FILTERS = ("status", "path", "trigger", "parent")


def executions(engine: Engine, params: Mapping[str, str]) -> dict[str, Any]:
    """The executions list: filters, one page of rows and the pager."""
    filters = {k: (params.get(k) or "").strip() for k in FILTERS}
    limit = bounded(params.get("limit"), LIST_LIMIT, LIST_MAX, 1)
    offset = bounded(params.get("offset"), 0, 10**9)
    page = engine.executions_page(
        ExecutionFilter(
            status=filters["status"].upper() or None,
            path=filters["path"] or None,
            trigger=filters["trigger"] or None,
            parent=filters["parent"] or None,
            limit=limit,
            offset=offset,
        )
    )
    return {
        "filters": filters,
        "rows": [execution_row(line) for line in page["executions"]],
        "pager": Pager(int(page["total"]), limit, offset),
        "limit": limit,
    }


def execution(engine: Engine, execution_id: str, params: Mapping[str, str]) -> dict[str, Any]:
    """One execution: head, graph, loops with progress, failed items (a page per loop),
    errors, children and the newest logs."""
    view = engine.detail(execution_id)
    ended = view.get("status") in TERMINAL
    loops = [loop_row(lp, ended=ended) for lp in view.get("loops") or []]
    failed_step = params.get("failed_step") or ""
    failed_epoch = bounded(params.get("failed_epoch"), 0, 10**9)
    for lp in loops:
        if not lp.get("failed"):
            continue
        chosen = lp["step"] == failed_step and lp["epoch"] == failed_epoch
        offset = bounded(params.get("failed_offset"), 0, 10**9) if chosen else 0
        page = engine.failed_items(
            execution_id, lp["step"], epoch=lp["epoch"], offset=offset, limit=FAILED_LIMIT
        )
        lp["failed_items"] = [
            {**item, "message_line": message_line(item.get("message"))} for item in page["items"]
        ]
        lp["failed_pager"] = Pager(int(page["total"]), FAILED_LIMIT, offset)
    logs_limit = bounded(params.get("logs"), LOGS_LIMIT, LOGS_MAX, 1)
    logs, logs_left = engine.logs_page(execution_id, limit=logs_limit)
    children = [
        {
            **c,
            "status_class": status_class(c.get("status")),
            "started": time_text(c.get("created_at")),
        }
        for c in view.get("children") or []
    ]
    done, failed = item_totals(loops)
    quarantined = int(view.get("quarantined") or 0)
    head = {
        **view,
        "items_done": done,
        "items_succeeded": done - failed - quarantined,
        "items_failed": failed,
        "items_quarantined": quarantined,
    }
    return {
        "x": {**execution_row(head), "finished": time_text(view.get("finished_at"))},
        "view": view,
        "graph": graph_layout(engine.graph(execution_id), ended=ended),
        "loops": loops,
        "errors": view.get("errors") or [],
        "children": children,
        "logs": logs,
        "logs_left": logs_left,
        "logs_limit": logs_limit,
        "logs_more": min(LOGS_MAX, logs_limit * 2) if logs_left and logs_limit < LOGS_MAX else None,
        "terminal": ended,
        "quarantine": quarantine(engine, execution_id, loops, params),
        # to find its trace in Jaeger/Tempo (noetl_celery.tracing: derived from the id)
        "trace_id": tracing.trace_id_of(execution_id),
    }


def quarantine(
    engine: Engine, execution_id: str, loops: list[dict[str, Any]], params: Mapping[str, str]
) -> dict[str, Any] | None:
    """The quarantined items section: a page of them (of the step `q_step` and error
    kind `q_kind` chosen), the choices, and the counts; None when there are none. Not
    read for the live refresh, which does not swap this section (its checked boxes
    would be lost)."""
    steps = sorted({lp["step"] for lp in loops if lp.get("quarantined")})
    if not steps or params.get("fragment"):
        return None
    step = params.get("q_step") or ""
    step = step if step in steps else ""
    kind = params.get("q_kind") or ""
    found = engine.quarantine(execution_id, step=step or None)["items"]
    kinds = sorted({q["kind"] for q in found})
    chosen = [q for q in found if not kind or q["kind"] == kind]
    offset = bounded(params.get("q_offset"), 0, 10**9)
    shown = chosen[offset : offset + QUARANTINE_LIMIT]
    return {
        "steps": steps,
        "kinds": kinds,
        "step": step,
        "kind": kind,
        "total": len(chosen),
        "waiting": sum(1 for q in chosen if not q["redriven_by"]),
        "pager": Pager(len(chosen), QUARANTINE_LIMIT, offset),
        "items": [
            {
                **q,
                "value": preview(q["item"]),
                "message_line": message_line(q["message"]),
                # its span in the execution's trace (noetl_celery.tracing)
                "trace_id": tracing.trace_id_of(execution_id),
            }
            for q in shown
        ],
    }


def events(engine: Engine, execution_id: str, params: Mapping[str, str]) -> dict[str, Any]:
    """A page of events, oldest first, after event id `after` (keyset paging)."""
    after = bounded(params.get("after"), 0, 2**62)
    limit = bounded(params.get("limit"), EVENTS_LIMIT, EVENTS_MAX, 1)
    rows, _ = engine.events_page(execution_id, after=after, limit=limit)
    return {
        "execution_id": execution_id,
        "events": [{**e, "at": time_text(e.get("created_at"))} for e in rows],
        "after": after,
        "limit": limit,
        "next_after": rows[-1]["event_id"] if len(rows) == limit else None,
    }


def schedules(engine: Engine) -> dict[str, Any]:
    return {"schedules": [schedule_row(s.to_json()) for s in engine.schedules.all()]}


def rate_limits(engine: Engine) -> dict[str, Any]:
    """The keyed rate limits (engine.ratelimits), most active first."""
    found = ratelimits.read(engine.store, utcnow())["rate_limits"]
    return {"rate_limits": ratelimits.bounded(found, top=len(found))}
