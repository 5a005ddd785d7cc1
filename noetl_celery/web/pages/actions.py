"""What the pages' buttons do, through the `Engine` facade, and the guard every one of
them passes first: a POST must come from a page of the same origin.

Both servers put the pages behind their login (basic auth in a browser is sent with
every request, a cross-site form post included), so the guard is what keeps another
site from pressing a button: the browser's `Sec-Fetch-Site`, else `Origin`, else
`Referer` must name this host; a request with none of them is refused.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping
from urllib.parse import urlsplit

from noetl_celery.engine.service import Engine
from noetl_celery.errors import InputInvalid

SCHEDULE_ACTIONS = ("pause", "resume", "trigger")
# a redrive's checked boxes: a page shows at most QUARANTINE_LIMIT, so more is not ours
MAX_REDRIVE_ITEMS = 1000
REDRIVE_SCOPES = ("checked", "all")


class Form(Mapping[str, str]):
    """A posted form: every (name, value) pair in order. As a mapping a name reads its
    last value (what `dict(parse_qsl(...))` gave the single-value forms); `all(name)`
    reads every value of a repeated field (the redrive's checked boxes)."""

    def __init__(self, pairs: Iterable[tuple[str, str]] = ()) -> None:
        self.pairs = list(pairs)
        self._last = dict(self.pairs)

    def __getitem__(self, name: str) -> str:
        return self._last[name]

    def __iter__(self) -> Iterator[str]:
        return iter(self._last)

    def __len__(self) -> int:
        return len(self._last)

    def all(self, name: str) -> list[str]:
        return [value for key, value in self.pairs if key == name]


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


def redrive(engine: Engine, execution_id: str, form: Form) -> str:
    """A redrive (engine.reruns) from the execution page's quarantine form: `scope`
    `checked` runs the checked `item` ids, `all` every item of the form's `step` and
    `kind` not yet redriven. Its new execution's id. InputInvalid (one line) for a form
    the page never sends."""
    scope = (form.get("scope") or "").strip()
    if scope not in REDRIVE_SCOPES:
        raise InputInvalid("form field 'scope'", f"{scope!r} is not a redrive: use checked or all")
    step = (form.get("step") or "").strip() or None
    kind = (form.get("kind") or "").strip() or None
    if scope == "all":
        return engine.redrive(execution_id, step=step, kind=kind)
    items = list(dict.fromkeys(v.strip() for v in form.all("item") if v.strip()))
    if not items:
        raise InputInvalid(
            "form field 'item'", "no quarantined item checked: check the items to redrive"
        )
    if len(items) > MAX_REDRIVE_ITEMS:
        raise InputInvalid(
            "form field 'item'",
            f"{len(items)} items checked, at most {MAX_REDRIVE_ITEMS}: redrive all of a step",
        )
    return engine.redrive(execution_id, items=items)
