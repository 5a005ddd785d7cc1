"""What the pages' buttons do, through the `Engine` facade, and the guard every one of
them passes first: a POST must come from a page of the same origin.

Both servers put the pages behind their login (basic auth in a browser is sent with
every request, a cross-site form post included), so the guard is what keeps another
site from pressing a button: the browser's `Sec-Fetch-Site`, else `Origin`, else
`Referer` must name this host; a request with none of them is refused.
"""

from __future__ import annotations

from collections.abc import Mapping
from urllib.parse import urlsplit

from noetl_celery.engine.service import Engine

SCHEDULE_ACTIONS = ("pause", "resume", "trigger")


def same_origin(headers: Mapping[str, str], host: str) -> bool:
    """Whether a POST came from a page of `host` (`Host` header: name and port).
    `headers` keys are lower case."""
    site = headers.get("sec-fetch-site")
    if site:
        return site == "same-origin"
    for name in ("origin", "referer"):
        value = headers.get(name)
        if value:
            return value != "null" and urlsplit(value).netloc.rpartition("@")[2] == host
    return False


def cancel(engine: Engine, execution_id: str) -> None:
    engine.cancel(execution_id, "cancelled from the executions page")


def rerun(engine: Engine, execution_id: str, form: Mapping[str, str]) -> str:
    """A new execution repeating `execution_id`: from the start, from `from_step`, or
    over its failed items (`failed_items` set). Its id."""
    return engine.rerun(
        execution_id,
        from_step=(form.get("from_step") or "").strip() or None,
        failed_items=bool(form.get("failed_items")),
    )


def schedule(engine: Engine, schedule_id: int, action: str) -> str | None:
    """Pause, resume or trigger a schedule; a trigger answers the execution it started."""
    if action == "pause":
        engine.schedules.pause(schedule_id)
    elif action == "resume":
        engine.schedules.resume(schedule_id)
    elif action == "trigger":
        return engine.trigger_schedule(schedule_id)
    else:
        raise ValueError(f"unknown schedule action {action!r}")
    return None
