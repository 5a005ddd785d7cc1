"""The pages, independent of the server: a request (path arguments, query, form) in, an
`Answer` out. `serve` (web.pages.routes) and Flower (tasks.flower_pages) are thin
adapters around the same `Site`, so both serve the same paths and templates:

    GET  /executions                    list: filters, paging; ?fragment=1 for its refresh
    GET  /executions/{id}               graph, loops, failed items, errors, children, logs
    GET  /executions/{id}/events        events, oldest first, keyset-paged (?after=)
    POST /executions/{id}/cancel        -> back to the execution
    POST /executions/{id}/rerun         (from_step, failed_items) -> the new execution
    POST /executions/{id}/redrive       (scope=checked: item ids; scope=all: step, kind)
                                        -> the redrive's new execution
    GET  /schedules                     next / last firing, pause / resume / trigger
    GET  /rate-limits                   keyed rate limits: rate, limit, in flight, waiting
    POST /schedules/{id}/{action}       pause | resume | trigger
    GET  /pages-static/{name}           pages.css, pages.js, flower_links.js

A `fragment` answer is the page body alone: the pages' script fetches it every two
seconds and swaps the parts marked `data-live`, so nothing reloads.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from urllib.parse import quote, urlencode

from noetl_celery.engine.service import Engine
from noetl_celery.errors import (
    BrokerUnavailable,
    ExecutionNotFound,
    InputInvalid,
    NoetlError,
    ScheduleNotFound,
    StoreError,
)
from noetl_celery.passes.rerun import RerunError
from noetl_celery.web.inputs import BIGINT_MAX, check_text, digits
from noetl_celery.web.pages import actions, data
from noetl_celery.web.pages.render import render

log = logging.getLogger("noetl_celery.pages")

REFRESH_MS = 2000


@dataclass(frozen=True)
class Answer:
    status: int = 200
    title: str = ""
    body: str = ""  # the page body: each server puts its own navigation around it
    fragment: bool = False  # the body alone, for the live refresh
    location: str | None = None  # a redirect (303) after an action
    active: str = "executions"  # the navigation entry to highlight


def _status_of(exc: NoetlError) -> int:
    if isinstance(exc, BrokerUnavailable):
        return 503  # nothing was created: try again when the broker is back
    if isinstance(exc, ExecutionNotFound | ScheduleNotFound):
        return 404
    if isinstance(exc, RerunError):
        return 409
    if isinstance(exc, InputInvalid):
        return 422
    if isinstance(exc, StoreError):  # the engine database is away: as the API says it
        return 503
    return 400


def error_answer(exc: NoetlError, base: str = "", active: str = "executions") -> Answer:
    """The error page of `exc`: its status and its one line."""
    status = _status_of(exc)
    message = " ".join(str(exc).split()) or type(exc).__name__
    body = render("error.html", base=base, status=status, message=message)
    return Answer(status=status, title="Error", body=body, active=active)


class Site:
    def __init__(self, engine: Engine, base: str = "", xsrf: str = "") -> None:
        self.engine = engine
        self.base = base.rstrip("/")  # Flower's --url_prefix, "" on serve
        # Flower's `_xsrf` form token (its OAuth login checks it on every POST)
        self.xsrf = xsrf

    def _page(
        self, template: str, title: str, params: Mapping[str, str], active: str, **ctx: object
    ) -> Answer:
        fragment = bool(params.get("fragment"))
        body = render(template, base=self.base, xsrf=self.xsrf, refresh_ms=REFRESH_MS, **ctx)
        return Answer(title=title, body=body, fragment=fragment, active=active)

    def _error(self, exc: NoetlError, active: str = "executions") -> Answer:
        return error_answer(exc, self.base, active)

    def forbidden(self) -> Answer:
        return self.refused(403, "refused: the request did not come from this site's pages")

    def refused(self, status: int, message: str) -> Answer:
        body = render("error.html", base=self.base, status=status, message=message)
        return Answer(status=status, title="Refused", body=body)

    def _refused(
        self, params: Mapping[str, str], kind: str = "query parameter", **path: str
    ) -> Answer | None:
        """The error page for text Postgres cannot store (web.inputs), or None. serve's
        routes check before they get here (web.inputs.CheckedRoute); Flower's do not."""
        try:
            for name, value in path.items():
                check_text(value, f"path parameter '{name}'")
            pairs = params.pairs if isinstance(params, actions.Form) else params.items()
            for name, value in pairs:
                check_text(value, f"{kind} '{name}'")
        except InputInvalid as exc:
            return self._error(exc)
        return None

    # ---- pages ------------------------------------------------------------------------------
    def executions(self, params: Mapping[str, str]) -> Answer:
        if (refused := self._refused(params)) is not None:
            return refused
        try:
            ctx = data.executions(self.engine, params)
        except NoetlError as exc:
            return self._error(exc)
        query = {k: v for k, v in ctx["filters"].items() if v}
        ctx["query"] = query
        ctx["refresh_url"] = self._url("/executions", {**params, "fragment": "1"})
        ctx["page_url"] = lambda offset: self._url(
            "/executions", {**query, "limit": str(ctx["limit"]), "offset": str(offset)}
        )
        return self._page("executions.html", "Executions", params, "executions", **ctx)

    def execution(self, execution_id: str, params: Mapping[str, str]) -> Answer:
        if (refused := self._refused(params, execution_id=execution_id)) is not None:
            return refused
        try:
            ctx = data.execution(self.engine, execution_id, params)
        except NoetlError as exc:
            return self._error(exc)
        here = f"/executions/{quote(execution_id)}"
        keep = {k: v for k, v in params.items() if k != "fragment"}
        ctx["here"] = self.base + here
        ctx["refresh_url"] = self._url(here, {**keep, "fragment": "1"})
        ctx["failed_url"] = lambda step, epoch, offset: self._url(
            here, {"failed_step": step, "failed_epoch": str(epoch), "failed_offset": str(offset)}
        )
        quarantine = ctx["quarantine"] or {}
        ctx["quarantine_url"] = lambda offset: self._url(
            here,
            {
                "q_step": quarantine.get("step", ""),
                "q_kind": quarantine.get("kind", ""),
                "q_offset": str(offset),
            },
        )
        ctx["logs_url"] = lambda limit: self._url(here, {"logs": str(limit)}) + "#logs"
        return self._page(
            "execution.html", f"Execution {execution_id}", params, "executions", **ctx
        )

    def events(self, execution_id: str, params: Mapping[str, str]) -> Answer:
        if (refused := self._refused(params, execution_id=execution_id)) is not None:
            return refused
        try:
            ctx = data.events(self.engine, execution_id, params)
        except NoetlError as exc:
            return self._error(exc)
        ctx["next_url"] = (
            None
            if ctx["next_after"] is None
            else self._url(
                f"/executions/{quote(execution_id)}/events",
                {"after": str(ctx["next_after"]), "limit": str(ctx["limit"])},
            )
        )
        return self._page("events.html", f"Events of {execution_id}", params, "executions", **ctx)

    def schedules(self, params: Mapping[str, str]) -> Answer:
        if (refused := self._refused(params)) is not None:
            return refused
        try:
            ctx = data.schedules(self.engine)
        except NoetlError as exc:
            return self._error(exc, "schedules")
        return self._page("schedules.html", "Schedules", params, "schedules", **ctx)

    def rate_limits(self, params: Mapping[str, str]) -> Answer:
        if (refused := self._refused(params)) is not None:
            return refused
        try:
            ctx = data.rate_limits(self.engine)
        except NoetlError as exc:
            return self._error(exc, "rate-limits")
        return self._page("rate_limits.html", "Rate limits", params, "rate-limits", **ctx)

    # ---- actions (the caller has checked `actions.same_origin`) ---------------------------
    def cancel(self, execution_id: str) -> Answer:
        if (refused := self._refused({}, execution_id=execution_id)) is not None:
            return refused
        try:
            actions.cancel(self.engine, execution_id)
        except NoetlError as exc:
            return self._error(exc)
        return self._redirect(f"/executions/{quote(execution_id)}")

    def rerun(self, execution_id: str, form: Mapping[str, str]) -> Answer:
        return self._start(
            execution_id, form, lambda: actions.rerun(self.engine, execution_id, form)
        )

    def redrive(self, execution_id: str, form: actions.Form) -> Answer:
        """The execution page's quarantine form: a redrive, then its new execution."""
        return self._start(
            execution_id, form, lambda: actions.redrive(self.engine, execution_id, form)
        )

    def _start(
        self, execution_id: str, form: Mapping[str, str], action: Callable[[], str]
    ) -> Answer:
        """An action that starts an execution from `execution_id`'s page: then its page."""
        if (refused := self._refused(form, "form field", execution_id=execution_id)) is not None:
            return refused
        try:
            new_id = action()
        except BrokerUnavailable as exc:
            if exc.execution_id is None:
                return self._error(exc)
            new_id = exc.execution_id  # recorded: published when the broker is back
        except NoetlError as exc:
            return self._error(exc)
        return self._redirect(f"/executions/{quote(new_id)}")

    def schedule(self, schedule_id: str, action: str) -> Answer:
        number = digits(schedule_id)
        if action not in actions.SCHEDULE_ACTIONS or number is None or number > BIGINT_MAX:
            return self._error(ScheduleNotFound(f"no schedule action {action} of {schedule_id}"))
        try:
            started = actions.schedule(self.engine, number, action)
        except BrokerUnavailable as exc:
            if exc.execution_id is None:
                return self._error(exc, "schedules")
            started = exc.execution_id  # recorded: published when the broker is back
        except NoetlError as exc:
            return self._error(exc, "schedules")
        return self._redirect(f"/executions/{quote(started)}" if started else "/schedules")

    # ---- helpers ------------------------------------------------------------------------------
    def _redirect(self, path: str) -> Answer:
        return Answer(status=303, location=self.base + path)

    def _url(self, path: str, query: Mapping[str, str]) -> str:
        shown = {k: v for k, v in query.items() if v not in (None, "")}
        return self.base + path + (f"?{urlencode(shown)}" if shown else "")
