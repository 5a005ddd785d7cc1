"""Malformed requests for every route of `noetl-celery serve` (issue 30): integers past
their column's type, NUL characters and lone surrogates in every kind of text, deep JSON,
a cron that never fires, wrong types. Each names the route it aims at and the status it
must get; tests.integration.web.test_bad_requests sends them to a real server.

Requests carry no Origin or Sec-Fetch-Site header and JSON bodies say
`application/json`, as a script's requests do (the request guard lets them through)."""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

BIG = 2**63  # one past Postgres BIGINT
INT5 = 2**31  # one past Postgres INTEGER
HUGE = 10**30
NUL = "%00"
SURROGATE = "\ud800"  # json.dumps writes it as the escape `\ud800`
V1 = "/api/v1"
YAML_NUL = b"apiVersion: noetl.io/v2\nkind: Playbook\nmetadata: {name: a\x00, path: a}\n"


def deep(depth: int) -> bytes:
    return ('{"payload": {"a": ' + "[" * depth + "]" * depth + "}}").encode()


@dataclass(frozen=True)
class Bad:
    route: str  # "METHOD /path/{template}" as the app lists it
    url: str  # what is sent: percent-escapes as they are
    status: int
    body: Any = None  # JSON-encoded (surrogates as escapes); bytes are sent as they are
    content_type: str = "application/json"
    sent_as: str = ""  # another method than the route's (a route that reads no input)

    @property
    def method(self) -> str:
        return self.sent_as or self.route.split(" ", 1)[0]

    def content(self) -> bytes | None:
        if self.body is None:
            return None
        if isinstance(self.body, bytes):
            return self.body
        return json.dumps(self.body).encode()

    @property
    def name(self) -> str:
        shown = self.url if self.body is None else f"{self.url} {self.content()!r}"[:90]
        return f"{self.method} {shown}"


def _native(eid: str) -> list[Bad]:
    ex = f"{V1}/executions"
    one = f"{ex}/{eid}"
    cases = [
        Bad("GET /api/v1/executions", f"{ex}?offset={BIG}", 422),
        Bad("GET /api/v1/executions", f"{ex}?offset=-1", 422),
        Bad("GET /api/v1/executions", f"{ex}?offset=abc", 422),
        Bad("GET /api/v1/executions", f"{ex}?limit={HUGE}", 422),
        Bad("GET /api/v1/executions", f"{ex}?path={NUL}", 422),
        Bad("GET /api/v1/executions", f"{ex}?parent=a{NUL}b", 422),
        Bad("GET /api/v1/executions", f"{ex}?status={NUL}", 422),
        Bad("GET /api/v1/executions", f"{ex}?trigger={NUL}", 422),
        Bad("GET /api/v1/executions", f"{ex}?status=bogus", 422),
        Bad("GET /api/v1/executions/{execution_id}", f"{ex}/{NUL}", 422),
        Bad("GET /api/v1/executions/{execution_id}", f"{ex}/a{NUL}b", 422),
        Bad("GET /api/v1/executions/{execution_id}", f"{ex}/%ED%A0%80", 404),
        Bad("GET /api/v1/executions/{execution_id}", f"{ex}/{'9' * 5000}", 404),
        Bad("GET /api/v1/executions/{execution_id}/graph", f"{ex}/{NUL}/graph", 422),
        Bad("GET /api/v1/executions/{execution_id}/failed-items", f"{one}/failed-items", 422),
        Bad(
            "GET /api/v1/executions/{execution_id}/failed-items",
            f"{one}/failed-items?step={NUL}",
            422,
        ),
        Bad(
            "GET /api/v1/executions/{execution_id}/failed-items",
            f"{one}/failed-items?step=a&epoch={INT5}",
            422,
        ),
        Bad(
            "GET /api/v1/executions/{execution_id}/failed-items",
            f"{one}/failed-items?step=a&offset={BIG}",
            422,
        ),
        Bad(
            "GET /api/v1/executions/{execution_id}/failed-items",
            f"{ex}/{NUL}/failed-items?step=a",
            422,
        ),
        Bad(
            "GET /api/v1/executions/{execution_id}/quarantine",
            f"{one}/quarantine?step={NUL}",
            422,
        ),
        Bad(
            "GET /api/v1/executions/{execution_id}/quarantine",
            f"{one}/quarantine?kind=timeot",
            422,
        ),
        Bad("GET /api/v1/executions/{execution_id}/events", f"{one}/events?since={BIG}", 422),
        Bad("GET /api/v1/executions/{execution_id}/events", f"{one}/events?since=-1", 422),
        Bad("GET /api/v1/executions/{execution_id}/events", f"{one}/events?type={NUL}", 422),
        Bad("GET /api/v1/executions/{execution_id}/events", f"{one}/events?step={NUL}", 422),
        Bad("GET /api/v1/executions/{execution_id}/events", f"{one}/events?limit=0", 422),
        Bad("GET /api/v1/executions/{execution_id}/logs", f"{one}/logs?since={BIG}", 422),
        Bad("GET /api/v1/executions/{execution_id}/logs", f"{one}/logs?step={NUL}", 422),
        Bad("POST /api/v1/executions", ex, 422, {"path": "a\x00"}),
        Bad("POST /api/v1/executions", ex, 422, {"path": "a", "version": INT5}),
        Bad("POST /api/v1/executions", ex, 422, {"playbook": SURROGATE}),
        Bad("POST /api/v1/executions", ex, 422, deep(3000)),
        Bad("POST /api/v1/executions", ex, 422, deep(100)),
        Bad("POST /api/v1/executions", ex, 422, {"path": "a", "payload": {"k\x00": 1}}),
        Bad("POST /api/v1/executions", ex, 422, b'{"path": "a", "payload": {"x": NaN}}'),
        Bad("POST /api/v1/executions", ex, 422, b"{not json"),
        Bad("POST /api/v1/executions", ex, 422, [1, 2]),
        Bad("POST /api/v1/executions", ex, 422, {}),
        Bad("POST /api/v1/executions/{execution_id}/cancel", f"{ex}/{NUL}/cancel", 422),
        Bad("POST /api/v1/executions/{execution_id}/cancel", f"{ex}/nope/cancel", 404),
        Bad("POST /api/v1/executions/{execution_id}/rerun", f"{ex}/{NUL}/rerun", 422),
        Bad(
            "POST /api/v1/executions/{execution_id}/rerun",
            f"{one}/rerun",
            422,
            {"from_step": "\x00"},
        ),
        Bad("POST /api/v1/executions/{execution_id}/rerun", f"{one}/rerun", 422, deep(3000)),
        Bad("POST /api/v1/executions/{execution_id}/rerun", f"{one}/rerun", 422, {"payload": "x"}),
        Bad(
            "POST /api/v1/executions/{execution_id}/quarantine/redrive",
            f"{one}/quarantine/redrive",
            422,
            {"items": ["a\x00"]},
        ),
        Bad(
            "POST /api/v1/executions/{execution_id}/quarantine/redrive",
            f"{one}/quarantine/redrive",
            422,
            {"items": "each:1:3"},
        ),
        Bad(
            "POST /api/v1/executions/{execution_id}/quarantine/redrive",
            f"{one}/quarantine/redrive",
            422,
            {"kind": "timeot"},
        ),
    ]
    return cases


def _manage() -> list[Bad]:
    cat, sch = f"{V1}/catalog", f"{V1}/schedules"
    cron = {"path": "tests/bad/requests", "cron": "0 0 31 2 *"}
    return [
        Bad("GET /api/v1/catalog", f"{cat}?x={NUL}", 422),
        Bad("GET /api/v1/catalog/{path:path}", f"{cat}/a{NUL}b", 422),
        Bad("GET /api/v1/catalog/{path:path}", f"{cat}/tests/bad/requests?version={INT5}", 422),
        Bad("GET /api/v1/catalog/{path:path}", f"{cat}/tests/bad/requests?version=0", 422),
        Bad("GET /api/v1/catalog/{path:path}", f"{cat}/no/such/path", 404),
        Bad("POST /api/v1/catalog", cat, 422, {"content": "a\x00"}),
        Bad("POST /api/v1/catalog", cat, 422, {"content": SURROGATE}),
        Bad("POST /api/v1/catalog", cat, 422, {"content": 5}),
        Bad("POST /api/v1/catalog", cat, 422, deep(3000)),
        Bad("POST /api/v1/catalog", cat, 422, YAML_NUL, "application/yaml"),
        Bad("POST /api/v1/catalog", cat, 422, b"a: \xed\xa0\x80\n", "application/yaml"),
        Bad("POST /api/v1/catalog", cat, 415, b"a,b\n", "text/csv"),
        Bad("GET /api/v1/schedules", f"{sch}?x={NUL}", 422),
        Bad("POST /api/v1/schedules", sch, 422, cron),
        Bad("POST /api/v1/schedules", sch, 422, {**cron, "cron": "0 0 31 4,6 *"}),
        Bad("POST /api/v1/schedules", sch, 422, {**cron, "cron": "\x00"}),
        Bad("POST /api/v1/schedules", sch, 422, {**cron, "cron": "* * * * * * *"}),
        Bad("POST /api/v1/schedules", sch, 422, {**cron, "cron": "* * * * *", "timezone": "\x00"}),
        Bad("POST /api/v1/schedules", sch, 422, {**cron, "cron": "* * * * *", "path": "\x00"}),
        Bad("POST /api/v1/schedules", sch, 422, deep(3000)),
        Bad("DELETE /api/v1/schedules/{schedule_id}", f"{sch}/{BIG}", 422),
        Bad("DELETE /api/v1/schedules/{schedule_id}", f"{sch}/0", 422),
        Bad("DELETE /api/v1/schedules/{schedule_id}", f"{sch}/abc", 422),
        Bad("DELETE /api/v1/schedules/{schedule_id}", f"{sch}/{'9' * 5000}", 422),
        Bad("DELETE /api/v1/schedules/{schedule_id}", f"{sch}/123456", 404),
        Bad("POST /api/v1/schedules/{schedule_id}/pause", f"{sch}/{BIG}/pause", 422),
        Bad("POST /api/v1/schedules/{schedule_id}/pause", f"{sch}/-1/pause", 422),
        Bad("POST /api/v1/schedules/{schedule_id}/resume", f"{sch}/{BIG}/resume", 422),
        Bad("POST /api/v1/schedules/{schedule_id}/resume", f"{sch}/x/resume", 422),
        Bad("POST /api/v1/schedules/{schedule_id}/trigger", f"{sch}/{BIG}/trigger", 422),
        Bad("POST /api/v1/schedules/{schedule_id}/trigger", f"{sch}/123456/trigger", 404),
    ]


def _noetl(eid: str) -> list[Bad]:
    ex = "/api/executions"
    one = f"{ex}/{eid}"
    return [
        Bad("GET /api/health", f"/api/health?x={NUL}", 422),
        Bad("GET /api/ready", f"/api/ready?x={NUL}", 422),
        Bad("POST /api/catalog/register", "/api/catalog/register", 422, {"content": "a\x00"}),
        Bad("POST /api/catalog/register", "/api/catalog/register", 422, {"content": 1}),
        Bad("POST /api/catalog/register", "/api/catalog/register", 422, deep(3000)),
        Bad("POST /api/catalog/register", "/api/catalog/register", 422, YAML_NUL, "text/yaml"),
        Bad("POST /api/catalog/register", "/api/catalog/register", 422, b"\xff\xfe", "text/yaml"),
        # what a page of another site can post without asking: never read (web.guard)
        Bad("POST /api/catalog/register", "/api/catalog/register", 415, YAML_NUL, "text/plain"),
        Bad(
            "POST /api/catalog/register",
            "/api/catalog/register",
            422,
            {"content": "a", "resource_type": "\x00"},
        ),
        Bad("POST /api/catalog/register/batch", "/api/catalog/register/batch", 422, {"items": "x"}),
        Bad("POST /api/catalog/register/batch", "/api/catalog/register/batch", 422, deep(3000)),
        Bad(
            "POST /api/catalog/register/batch",
            "/api/catalog/register/batch",
            422,
            {"items": [{"content": "\x00"}]},
        ),
        Bad("POST /api/catalog/list", "/api/catalog/list", 422, {"path": "\x00"}),
        Bad("POST /api/catalog/list", "/api/catalog/list", 422, [1]),
        Bad("POST /api/catalog/list", "/api/catalog/list", 422, deep(3000)),
        Bad("POST /api/catalog/resource", "/api/catalog/resource", 422, {"catalog_id": BIG}),
        Bad("POST /api/catalog/resource", "/api/catalog/resource", 422, {"catalog_id": str(HUGE)}),
        Bad("POST /api/catalog/resource", "/api/catalog/resource", 422, {"catalog_id": "²"}),
        Bad("POST /api/catalog/resource", "/api/catalog/resource", 422, {"catalog_id": 0}),
        Bad(
            "POST /api/catalog/resource",
            "/api/catalog/resource",
            422,
            {"path": "a", "version": INT5},
        ),
        Bad("POST /api/catalog/resource", "/api/catalog/resource", 422, {"path": "\x00"}),
        Bad("POST /api/catalog/resource", "/api/catalog/resource", 422, {}),
        Bad("POST /api/execute", "/api/execute", 422, deep(3000)),
        Bad("POST /api/execute", "/api/execute", 422, {"path": "\x00"}),
        Bad("POST /api/execute", "/api/execute", 422, {"catalog_id": BIG}),
        Bad("POST /api/execute", "/api/execute", 422, {"path": "a", "version": str(INT5)}),
        Bad("POST /api/execute", "/api/execute", 422, {"path": "a", "workload": {"a": SURROGATE}}),
        Bad("POST /api/execute", "/api/execute", 422, {"path": "a", "workload": "x"}),
        Bad("POST /api/execute", "/api/execute", 422, b"\x00", "application/json"),
        Bad("POST /api/execute", "/api/execute", 415, b"{}", "text/plain"),
        Bad("GET /api/executions", f"{ex}?page={BIG}", 422),
        Bad("GET /api/executions", f"{ex}?page={2**60}", 422),
        Bad("GET /api/executions", f"{ex}?page_size=0", 422),
        Bad("GET /api/executions", f"{ex}?status={NUL}", 422),
        Bad("GET /api/executions/{execution_id}", f"{ex}/{NUL}", 422),
        Bad("GET /api/executions/{execution_id}", f"{one}?since_event_id={BIG}", 422),
        Bad("GET /api/executions/{execution_id}", f"{one}?event_type={NUL}", 422),
        Bad("GET /api/executions/{execution_id}", f"{one}?page={BIG}", 422),
        Bad("GET /api/executions/{execution_id}/events", f"{ex}/{NUL}/events", 422),
        Bad("GET /api/executions/{execution_id}/events", f"{one}/events?since_event_id={BIG}", 422),
        Bad("GET /api/executions/{execution_id}/events", f"{one}/events?event_type={NUL}", 422),
        Bad("GET /api/executions/{execution_id}/status", f"{ex}/{NUL}/status", 422),
        Bad("GET /api/executions/{execution_id}/status", f"{ex}/nope/status", 404),
        Bad("POST /api/executions/cleanup", f"{ex}/cleanup", 422, {"older_than_minutes": BIG}),
        Bad("POST /api/executions/cleanup", f"{ex}/cleanup", 422, {"older_than_minutes": 10**9}),
        Bad("POST /api/executions/cleanup", f"{ex}/cleanup", 422, {"older_than_minutes": "5"}),
        Bad("POST /api/executions/cleanup", f"{ex}/cleanup", 422, deep(3000)),
        Bad("POST /api/executions/{execution_id}/cancel", f"{ex}/{NUL}/cancel", 422),
        Bad("POST /api/executions/{execution_id}/cancel", f"{one}/cancel", 422, {"reason": "\x00"}),
        Bad("POST /api/executions/{execution_id}/rerun", f"{ex}/{NUL}/rerun", 422),
        Bad(
            "POST /api/executions/{execution_id}/rerun",
            f"{one}/rerun",
            422,
            {"workload": {"\x00": 1}},
        ),
        Bad("GET /api/ehdb/executions", f"/api/ehdb/executions?offset={BIG}", 422),
        Bad("GET /api/ehdb/executions", f"/api/ehdb/executions?status={NUL}", 422),
        Bad("GET /api/ehdb/executions/{execution_id}", f"/api/ehdb/executions/{NUL}", 422),
        Bad(
            "GET /api/ehdb/executions/{execution_id}/events",
            f"/api/ehdb/executions/{eid}/events?after={BIG}",
            422,
        ),
        Bad(
            "GET /api/ehdb/executions/{execution_id}/events",
            f"/api/ehdb/executions/{NUL}/events",
            422,
        ),
    ]


def _gui(eid: str) -> list[Bad]:
    """The routes NoETL's GUI calls beyond its CLI's (web.api_gui)."""
    schema = "GET /api/catalog/{path:path}/ui_schema"
    content = "/api/catalog/playbook/content"
    check = "/api/catalog/playbooks/validate"
    one = f"/api/executions/{eid}"
    return [
        Bad("POST /api/catalog/list", "/api/catalog/list", 422, {"versions": "yes"}),
        Bad(schema, "/api/catalog/a/ui_schema?version=x", 422),
        Bad(schema, f"/api/catalog/a/ui_schema?version={INT5}", 422),
        Bad(schema, f"/api/catalog/a{NUL}/ui_schema", 422),
        Bad(schema, "/api/catalog/nope/ui_schema", 404),
        Bad(f"GET {content}", content, 422),
        Bad(f"GET {content}", f"{content}?playbook_id={NUL}", 422),
        Bad(f"GET {content}", f"{content}?playbook_id={HUGE}", 422),
        Bad(f"GET {content}", f"{content}?playbook_id={'a' * 1001}", 422),
        Bad(f"PUT {content}", f"{content}?playbook_id=a", 422, {"content": 1}),
        Bad(f"PUT {content}", f"{content}?playbook_id=a", 422, {"content": "a\x00"}),
        Bad(f"PUT {content}", content, 422, {"content": "a"}),
        Bad(f"PUT {content}", f"{content}?playbook_id=a", 422, deep(3000)),
        Bad(f"PUT {content}", f"{content}?playbook_id=a", 415, b"{}", "text/plain"),
        Bad(f"POST {check}", check, 422, {}),
        Bad(f"POST {check}", check, 422, {"content": 1}),
        Bad(f"POST {check}", check, 422, [1]),
        Bad(f"POST {check}", check, 422, {"content": "a\x00"}),
        Bad(f"POST {check}", check, 415, b"{}", "text/plain"),
        Bad("POST /api/executions/{execution_id}/stop", f"/api/executions/{NUL}/stop", 422),
        Bad("POST /api/executions/{execution_id}/stop", f"{one}/stop", 422, {"reason": "\x00"}),
        Bad("POST /api/executions/{execution_id}/stop", "/api/executions/1/stop", 404),
        Bad("GET /api/credentials", f"/api/credentials?type={NUL}", 422),
        Bad("GET /api/credentials", f"/api/credentials?q={NUL}", 422),
        Bad("GET /api/credentials/{identifier}", f"/api/credentials/{NUL}", 422),
        Bad("GET /api/credentials/{identifier}", "/api/credentials/a?include_data=maybe", 422),
        Bad("GET /api/credentials/{identifier}", "/api/credentials/nope", 404),
        Bad("POST /api/credentials", "/api/credentials", 405, {"name": "a", "data": {}}),
        Bad("POST /api/credentials", "/api/credentials", 422, deep(3000)),
        Bad("POST /api/credentials", "/api/credentials", 415, b"{}", "text/plain"),
        Bad("DELETE /api/credentials/{identifier}", f"/api/credentials/{NUL}", 422),
        Bad("DELETE /api/credentials/{identifier}", "/api/credentials/a", 405),
        Bad("POST /api/auth/validate", "/api/auth/validate", 422, {"session_token": 1}),
        Bad("POST /api/auth/validate", "/api/auth/validate", 422, [1]),
        Bad("POST /api/auth/validate", "/api/auth/validate", 415, b"{}", "text/plain"),
        Bad("GET /api/dashboard/stats", "/api/dashboard/stats", 405, sent_as="DELETE"),
    ]


def _pages(eid: str) -> list[Bad]:
    return [
        Bad("GET /", f"/?x={NUL}", 422),
        Bad("GET /executions", f"/executions?path={NUL}", 422),
        Bad("GET /executions", f"/executions?status={NUL}", 422),
        Bad("GET /executions", f"/executions?parent=a{NUL}", 422),
        Bad("GET /executions", f"/executions?trigger={NUL}", 422),
        Bad("GET /executions/{execution_id}", f"/executions/{NUL}", 422),
        Bad("GET /executions/{execution_id}", f"/executions/{eid}?failed_step={NUL}", 422),
        Bad("GET /executions/{execution_id}", "/executions/nope", 404),
        Bad("GET /executions/{execution_id}/events", f"/executions/{NUL}/events", 422),
        Bad("GET /executions/{execution_id}/events", f"/executions/{eid}/events?after={NUL}", 422),
        Bad("GET /schedules", f"/schedules?x={NUL}", 422),
        Bad("GET /rate-limits", f"/rate-limits?x={NUL}", 422),
        Bad("GET /api/v1/rate-limits", f"{V1}/rate-limits?x={NUL}", 422),
        Bad("GET /api/v1/rate-limits", f"{V1}/rate-limits", 405, sent_as="POST"),
        Bad("POST /executions/{execution_id}/cancel", f"/executions/{NUL}/cancel", 422),
        Bad("POST /executions/{execution_id}/cancel", f"/executions/{eid}/cancel", 403),
        Bad("POST /executions/{execution_id}/rerun", f"/executions/{NUL}/rerun", 422),
        Bad(
            "POST /executions/{execution_id}/rerun",
            f"/executions/{eid}/rerun",
            422,
            b"from_step=%00",
            "application/x-www-form-urlencoded",
        ),
        Bad("POST /executions/{execution_id}/redrive", f"/executions/{NUL}/redrive", 422),
        Bad(
            "POST /executions/{execution_id}/redrive",
            f"/executions/{eid}/redrive",
            422,
            b"scope=checked&item=a%3A1%3A1&item=%00",  # the second of a repeated field
            "application/x-www-form-urlencoded",
        ),
        Bad("POST /executions/{execution_id}/redrive", f"/executions/{eid}/redrive", 403),
        Bad("POST /schedules/{schedule_id}/{action}", f"/schedules/{NUL}/pause", 422),
        Bad("POST /schedules/{schedule_id}/{action}", f"/schedules/{BIG}/pause", 403),
        Bad("GET /pages-static/{name}", f"/pages-static/{NUL}", 422),
    ]


def _other() -> list[Bad]:
    """Routes that read no input: a method they do not answer."""
    return [
        Bad("GET /metrics", "/metrics", 405, sent_as="DELETE"),
        Bad("GET /openapi.json", "/openapi.json", 405, sent_as="DELETE"),
        Bad("GET /docs", "/docs", 405, sent_as="DELETE"),
        Bad("GET /redoc", "/redoc", 405, sent_as="DELETE"),
        Bad("GET /docs-static/{name}", f"/docs-static/{NUL}", 404),
        Bad("GET /docs-static/{name}", "/docs-static/apidocs.py", 404),
    ]


def cases(execution_id: str) -> list[Bad]:
    """Every malformed request; `execution_id` is an ended execution of the server's."""
    return [
        *_native(execution_id),
        *_manage(),
        *_noetl(execution_id),
        *_gui(execution_id),
        *_pages(execution_id),
        *_other(),
    ]
