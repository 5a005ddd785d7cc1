"""The executions, schedules and rate limits pages inside Flower, on its port and behind
its login.

Flower is a Tornado application whose routes are the module-level list
`flower.urls.handlers` and whose application settings are the dict `flower.urls.settings`;
`Flower.__init__` reads both when the app is built. `install_pages` therefore, before
Flower starts (cli.flower):

- inserts the pages' routes ahead of Flower's catch-all 404: the same paths and the same
  Jinja templates as `serve` (web.pages.site), each handler a subclass of Flower's own
  `BaseHandler` with `tornado.web.authenticated` methods, so Flower's basic auth or OAuth
  decides who gets in, and its fetch-metadata check applies to the POSTs on top of the
  pages' own same-origin guard (web.pages.actions), and its forms carry Flower's `_xsrf`
  token (checked when Flower's OAuth login is on);
- replaces the template loader with `FlowerTemplates`, a Tornado `Loader` over Flower's
  own template directory that patches three templates as they are read: `navbar.html`
  gains "Executions", "Schedules" and "Rate limits" entries, `task.html` an "Execution"
  row linking a `noetl.execute_command` task to its execution, and `base.html` a script
  that adds the same link to each such row of the task list (drawn in the browser by
  DataTables, without the arguments: the script asks `/executions/of-tasks` for the
  rows' executions, read from Flower's own task state). The patches are insertions at
  anchors; an anchor that a Flower release no longer has
  leaves that template as it is (a unit test pins them). `noetl_page.html` is the
  pages' body inside Flower's layout and navigation.

The engine's reads block, so handlers run them on Flower's executor, never on its loop.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import Any

import tornado.httputil
import tornado.template
import tornado.web
from flower import urls
from flower.views import BaseHandler
from tornado.ioloop import IOLoop
from tornado.web import url

from noetl_celery.constants import TASK_EXECUTE_COMMAND, TASK_EXECUTE_COMMANDS
from noetl_celery.engine.service import Engine
from noetl_celery.web.guard import FORM, SECURITY_HEADERS, media_type
from noetl_celery.web.pages import render
from noetl_celery.web.pages.actions import Form, same_origin
from noetl_celery.web.pages.presenters import execution_id_of
from noetl_celery.web.pages.site import Answer, Site

PAGE_TEMPLATE = "noetl_page.html"
PAGE_SOURCE = """{% extends "base.html" %}
{% block title %}{{ noetl_title }} · Flower{% end %}
{% block navbar %}{% module Template("navbar.html", active_tab=noetl_active) %}{% end %}
{% block container %}{% raw noetl_body %}{% end %}
"""

NAV_ANCHOR = "</ul>"  # the end of the first list: Flower's primary navigation
NAV_ITEMS = """  <li class="nav-item">
          <a class="nav-link{% if active_tab == 'executions' %} active{% end %}"
            href="{{ reverse_url('noetl_executions') }}">Executions</a>
        </li>
        <li class="nav-item">
          <a class="nav-link{% if active_tab == 'schedules' %} active{% end %}"
            href="{{ reverse_url('noetl_schedules') }}">Schedules</a>
        </li>
        <li class="nav-item">
          <a class="nav-link{% if active_tab == 'rate-limits' %} active{% end %}"
            href="{{ reverse_url('noetl_rate_limits') }}">Rate limits</a>
        </li>
      """
TASK_ANCHOR = '<dl class="detail-list">'
TASK_ROW = """
      {% if task.name == 'noetl.execute_command' and noetl_execution_id(task.args) %}
      <div class="detail-row task-data-row">
        <dt>Execution</dt>
        {% set noetl_id = noetl_execution_id(task.args) %}
        <dd><a class="noetl-execution-link" id="noetl-execution-link"
          href="{{ reverse_url('noetl_executions') }}/{{ url_escape(noetl_id) }}"
          >{{ noetl_id }}</a></dd>
      </div>
      {% end %}"""
BASE_ANCHOR = "</body>"
BASE_SCRIPT = "<script src=\"{{ url_prefix or '' }}/pages-static/flower_links.js\"></script>\n  "


def insert_before(text: str, anchor: str, addition: str) -> str:
    """`addition` before the first `anchor` (text unchanged when there is none)."""
    at = text.find(anchor)
    return text if at < 0 else text[:at] + addition + text[at:]


def insert_after(text: str, anchor: str, addition: str) -> str:
    at = text.find(anchor)
    return text if at < 0 else text[: at + len(anchor)] + addition + text[at + len(anchor) :]


PATCHES: dict[str, Callable[[str], str]] = {
    "navbar.html": lambda t: insert_before(t, NAV_ANCHOR, NAV_ITEMS),
    "task.html": lambda t: insert_after(t, TASK_ANCHOR, TASK_ROW),
    "base.html": lambda t: insert_before(t, BASE_ANCHOR, BASE_SCRIPT),
}


# Flower's own pages run inline scripts, so only framing is refused on them; the pages
# added here carry no inline script and get the same content policy as on `serve`
FRAMING_POLICY = "frame-ancestors 'none'"


class NoFraming(tornado.web.OutputTransform):
    """Every answer of Flower (its pages, API and static files, and ours) says that no
    other site may frame it, and the rest of `serve`'s security headers it does not set
    itself: a click inside a cross-origin frame cannot press a button of ours."""

    def transform_first_chunk(
        self,
        status_code: int,
        headers: tornado.httputil.HTTPHeaders,
        chunk: bytes,
        finishing: bool,
    ) -> tuple[int, tornado.httputil.HTTPHeaders, bytes]:
        for name, value in SECURITY_HEADERS:
            if name.decode() not in headers:
                headers[name.decode()] = value.decode()
        if "Content-Security-Policy" not in headers:
            headers["Content-Security-Policy"] = FRAMING_POLICY
        return status_code, headers, chunk


class FlowerTemplates(tornado.template.Loader):
    """Flower's templates, three of them patched as they are read (module docstring)."""

    def _create_template(self, name: str) -> tornado.template.Template:
        if name == PAGE_TEMPLATE:
            return tornado.template.Template(PAGE_SOURCE, name=name, loader=self)
        with open(os.path.join(self.root, name), "rb") as f:
            text = f.read().decode("utf-8")
        patch = PATCHES.get(name)
        return tornado.template.Template(patch(text) if patch else text, name=name, loader=self)


def url_base(prefix: str | None) -> str:
    """Flower's `--url_prefix` as the pages' link base: `flower/` -> `/flower`."""
    prefix = (prefix or "").strip("/")
    return f"/{prefix}" if prefix else ""


def _execution_id(handler: Any, args: Any) -> str:
    return execution_id_of(str(args)) or ""


class PagesHandler(BaseHandler):  # type: ignore[misc]  # flower is untyped
    """One of the pages (`view` names the `Site` method), GET and POST."""

    def initialize(self, engine: Engine, view: str) -> None:
        self.engine = engine
        self.view = view

    def _site(self) -> Site:
        token = self.xsrf_token  # sets Flower's `_xsrf` cookie, as its own pages do
        return Site(
            self.engine,
            base=url_base(self.application.options.url_prefix),
            xsrf=token.decode() if isinstance(token, bytes) else str(token),
        )

    async def _run(self, call: Callable[[], Answer]) -> None:
        answer = await IOLoop.current().run_in_executor(None, call)
        self.set_header("Cache-Control", "no-store")
        if answer.location is not None:
            self.redirect(answer.location, status=303)
            return
        self.set_status(answer.status)
        if answer.fragment:
            self.finish(answer.body)
            return
        self.render(
            PAGE_TEMPLATE,
            noetl_title=answer.title,
            noetl_body=answer.body,
            noetl_active=answer.active,
        )

    def _params(self) -> dict[str, str]:
        return {k: self.get_query_argument(k, "", strip=True) for k in self.request.query_arguments}

    @tornado.web.authenticated
    async def get(self, *parts: str) -> None:
        site, params = self._site(), self._params()
        if self.view == "executions":
            await self._run(lambda: site.executions(params))
        elif self.view == "execution":
            await self._run(lambda: site.execution(parts[0], params))
        elif self.view == "events":
            await self._run(lambda: site.events(parts[0], params))
        elif self.view == "schedules":
            await self._run(lambda: site.schedules(params))
        elif self.view == "rate-limits":
            await self._run(lambda: site.rate_limits(params))
        else:
            raise tornado.web.HTTPError(405)

    @tornado.web.authenticated
    async def post(self, *parts: str) -> None:
        site = self._site()
        headers = {k.lower(): v for k, v in self.request.headers.get_all()}
        if not same_origin(headers, self.request.host):
            await self._run(site.forbidden)
            return
        kind = media_type(headers.get("content-type", ""))
        if self.request.body and kind != FORM:
            await self._run(lambda: site.refused(415, f"send Content-Type {FORM}, not {kind}"))
            return
        # every value of a repeated field (the redrive's checked boxes), in order
        form = Form(
            (name, value.strip())
            for name in self.request.body_arguments
            for value in self.get_body_arguments(name, strip=True)
        )
        if self.view == "cancel":
            await self._run(lambda: site.cancel(parts[0]))
        elif self.view == "rerun":
            await self._run(lambda: site.rerun(parts[0], form))
        elif self.view == "redrive":
            await self._run(lambda: site.redrive(parts[0], form))
        elif self.view == "schedule":
            await self._run(lambda: site.schedule(parts[0], parts[1]))
        else:
            raise tornado.web.HTTPError(405)


class TaskExecutions(BaseHandler):  # type: ignore[misc]  # flower is untyped
    """`?ids=UUID,UUID...` -> `{uuid: execution_id}` for the `noetl.execute_command(s)`
    tasks among them, from Flower's in-memory task state (the task list's links)."""

    MAX_IDS = 100

    @tornado.web.authenticated
    def get(self) -> None:
        ids = self.get_query_argument("ids", "").split(",")[: self.MAX_IDS]
        tasks = self.application.events.state.tasks
        found: dict[str, str] = {}
        for uuid in ids:
            task = tasks.get(uuid.strip())
            if task is not None and task.name in (TASK_EXECUTE_COMMAND, TASK_EXECUTE_COMMANDS):
                execution_id = execution_id_of(str(task.args))
                if execution_id:
                    found[uuid] = execution_id
        self.set_header("Cache-Control", "no-store")
        self.finish(found)


class PagesStatic(tornado.web.RequestHandler):
    """The pages' stylesheet and scripts (public, like Flower's own /static)."""

    def get(self, name: str) -> None:
        found = render.static_file(name)
        if found is None:
            raise tornado.web.HTTPError(404)
        content, media = found
        self.set_header("Content-Type", media)
        self.set_header("Cache-Control", "max-age=300")
        self.finish(content)


def routes(engine: Engine) -> list[Any]:
    def page(pattern: str, view: str, name: str | None = None) -> Any:
        return url(pattern, PagesHandler, {"engine": engine, "view": view}, name=name)

    return [
        page(r"/executions", "executions", "noetl_executions"),
        (r"/executions/of-tasks", TaskExecutions),
        page(r"/executions/([^/]+)", "execution"),
        page(r"/executions/([^/]+)/events", "events"),
        page(r"/executions/([^/]+)/cancel", "cancel"),
        page(r"/executions/([^/]+)/rerun", "rerun"),
        page(r"/executions/([^/]+)/redrive", "redrive"),
        page(r"/schedules", "schedules", "noetl_schedules"),
        page(r"/rate-limits", "rate-limits", "noetl_rate_limits"),
        page(r"/schedules/([^/]+)/([a-z]+)", "schedule"),
        (r"/pages-static/([A-Za-z0-9_.\-]+)", PagesStatic),
    ]


def install_pages(
    engine: Engine, handlers: list[Any] | None = None, settings: dict[str, Any] | None = None
) -> None:
    """Add the pages to Flower's routes (before its catch-all) and its templates (module
    docstring). Calling it again changes nothing."""
    routes_list = urls.handlers if handlers is None else handlers
    app_settings = urls.settings if settings is None else settings
    if any(getattr(r, "name", None) == "noetl_executions" for r in routes_list):
        return
    at = len(routes_list)
    for index, route in enumerate(routes_list):
        if isinstance(route, tuple) and route[0] == r".*":
            at = index
            break
    routes_list[at:at] = routes(engine)
    app_settings["template_loader"] = FlowerTemplates(app_settings["template_path"])
    # Flower builds its Application with these settings: `transforms` replaces Tornado's
    # default list, which holds only gzip (when `compress_response` is set)
    transforms: list[Any] = [NoFraming]
    if app_settings.get("compress_response") or app_settings.get("gzip"):
        transforms.append(tornado.web.GZipContentEncoding)
    app_settings["transforms"] = transforms
    ui_methods = dict(app_settings.get("ui_methods") or {})
    ui_methods["noetl_execution_id"] = _execution_id
    app_settings["ui_methods"] = ui_methods
