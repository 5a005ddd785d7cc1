"""The door of a real `noetl-celery serve` (web.guard), route by route: every
state-changing route refuses what a page of another site can send (a cross-site Origin or
fetch metadata, text/plain and form bodies), answers only to its own Host names, refuses
framing on every answer, and refuses a 200 MB body without holding it in memory. The
routes come from the app itself, so a new route is covered the day it is added."""

from __future__ import annotations

import re
import socket
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from fastapi.routing import iter_route_contexts

from noetl_celery.engine.service import Engine
from noetl_celery.settings import Settings
from noetl_celery.store.database import SchemaMode
from noetl_celery.web.app import create_app
from noetl_celery.web.guard import UNSAFE_METHODS, accepted_types, is_api
from tests.conftest import _env
from tests.support.noetl_compat import hello, unique
from tests.support.server import ServeProcess, serving

pytestmark = pytest.mark.integration

EVIL = "http://127.0.0.2:8999"
# what a page of another site can send without a preflight
CROSS_SITE = [
    {"Origin": EVIL},
    {"Origin": "null"},
    {"Sec-Fetch-Site": "cross-site"},
    {"Sec-Fetch-Site": "same-site"},
    {"Origin": EVIL, "Sec-Fetch-Site": "cross-site", "Sec-Fetch-Mode": "no-cors"},
]
PARAMS = {"schedule_id": "1", "action": "trigger", "path": "x/y", "execution_id": "0"}


Routes = list[tuple[str, frozenset[str]]]


@pytest.fixture(scope="module")
def app_routes(tmp_path_factory: pytest.TempPathFactory) -> Routes:
    """(path template, methods) of every route of serve's app, included routers' too."""
    home = tmp_path_factory.mktemp("routes")
    settings = Settings(home=home, database_url=f"sqlite:///{home / 'noetl.sqlite3'}")
    engine = Engine(settings, schema=SchemaMode.MIGRATE)
    try:
        app = create_app(engine, settings)
        return [
            (r.path, frozenset(r.methods or ()))
            for r in iter_route_contexts(app.routes)
            if r.path is not None
        ]
    finally:
        engine.close()


def concrete(path: str) -> str:
    return re.sub(r"\{(\w+)(?::\w+)?\}", lambda m: PARAMS.get(m.group(1), "x"), path)


def unsafe(routes: Routes) -> list[tuple[str, str]]:
    return sorted(
        (method, concrete(path))
        for path, methods in routes
        for method in methods
        if method in UNSAFE_METHODS
    )


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServeProcess]:
    """The README's default: embedded, no credentials, loopback."""
    env = _env(NOETL_HOME=str(tmp_path_factory.mktemp("home")))
    with serving(env) as server:
        yield server


def counts(url: str) -> dict[str, Any]:
    """What a refused request must not have changed."""
    return {
        "executions": httpx.get(f"{url}/api/v1/executions?limit=1").json()["total"],
        "catalog": httpx.get(f"{url}/api/v1/catalog").json(),
        "schedules": httpx.get(f"{url}/api/v1/schedules").json(),
    }


def one_line(answer: httpx.Response) -> str:
    if is_api(answer.request.url.path):
        detail = answer.json()["detail"]
    else:
        found = re.search(r'id="error-message">([^<]*)<', answer.text)
        assert found, answer.text
        detail = found.group(1)
    assert isinstance(detail, str) and detail and "\n" not in detail
    return detail


def test_the_app_has_state_changing_routes_to_guard(app_routes: Routes) -> None:
    found = unsafe(app_routes)
    assert len(found) >= 15, found
    assert ("POST", "/api/execute") in found and ("POST", "/executions/0/cancel") in found


def test_every_state_changing_route_refuses_cross_site_requests(
    served: ServeProcess, app_routes: Routes
) -> None:
    path = unique("tests/xsite")
    before = counts(served.url)
    json_body = {"path": path, "content": hello(path), "cron": "* * * * *"}
    tried = 0
    for method, route in unsafe(app_routes):
        for headers in CROSS_SITE:
            for kind, body in (
                ("application/json", httpx.Request("POST", "/", json=json_body).content),
                ("text/plain", hello(path).encode()),
                ("application/x-www-form-urlencoded", b"from_step=a"),
                (None, b""),
            ):
                sent = dict(headers)
                if kind is not None:
                    sent["Content-Type"] = kind
                answer = httpx.request(method, served.url + route, headers=sent, content=body)
                assert answer.status_code == 403, (method, route, sent, answer.text)
                assert "cross-site request refused" in one_line(answer)
                tried += 1
    assert counts(served.url) == before
    assert tried >= 15 * len(CROSS_SITE) * 4


def test_every_state_changing_route_takes_only_what_it_reads(
    served: ServeProcess, app_routes: Routes
) -> None:
    path = unique("tests/ctype")
    before = counts(served.url)
    for method, route in unsafe(app_routes):
        accepted = accepted_types(route)
        for kind in (
            "text/plain",
            "application/x-www-form-urlencoded",
            "multipart/form-data; boundary=x",
            "application/json",
            "application/yaml",
        ):
            if kind.split(";")[0] in accepted:
                continue
            answer = httpx.request(
                method, served.url + route, headers={"Content-Type": kind}, content=hello(path)
            )
            assert answer.status_code == 415, (method, route, kind, answer.text)
            assert "send Content-Type" in one_line(answer)
        # a body with no type at all
        answer = httpx.request(method, served.url + route, content=b"{}")
        assert answer.status_code == 415, (method, route, answer.text)
    assert counts(served.url) == before


def test_clients_that_are_not_browsers_still_act(served: ServeProcess) -> None:
    """curl, NoETL's CLI and the Python client send no Origin: they pass (the contrast
    that shows the refusals above are the guard's, not a server that refuses all)."""
    path = unique("tests/allowed")
    registered = httpx.post(f"{served.url}/api/catalog/register", json={"content": hello(path)})
    assert registered.status_code == 200, registered.text
    started = httpx.post(f"{served.url}/api/execute", json={"path": path})
    assert started.status_code == 200, started.text
    # a page of this server posts with its own Origin and same-origin metadata
    own = httpx.post(
        f"{served.url}/api/v1/executions",
        json={"path": path},
        headers={"Origin": served.url, "Sec-Fetch-Site": "same-origin"},
    )
    assert own.status_code == 201, own.text
    # a body-less cancel is a POST like any other: it passes the door
    cancel = httpx.post(f"{served.url}/api/v1/executions/{own.json()['execution_id']}/cancel")
    assert cancel.status_code in (200, 409), cancel.text


def test_only_loopback_names_are_answered_without_credentials(served: ServeProcess) -> None:
    port = served.port
    for host in (f"127.0.0.1:{port}", f"localhost:{port}", f"[::1]:{port}", "127.0.0.1"):
        answer = httpx.get(f"{served.url}/api/v1/executions", headers={"Host": host})
        assert answer.status_code == 200, (host, answer.text)
    before = counts(served.url)
    for host in ("rebind.evil.example", f"rebind.evil.example:{port}", "10.1.2.3", ""):
        for method, route in (("GET", "/api/v1/executions"), ("GET", "/executions")):
            answer = httpx.request(method, served.url + route, headers={"Host": host})
            assert answer.status_code == 400, (host, route, answer.text)
            assert "unknown Host" in one_line(answer)
        posted = httpx.post(f"{served.url}/api/execute", json={"path": "x"}, headers={"Host": host})
        assert posted.status_code == 400
    assert counts(served.url) == before


def test_a_deployment_names_its_hosts(tmp_path: Path) -> None:
    env = _env(
        NOETL_HOME=str(tmp_path / "home"),
        NOETL_API_TOKEN="tok-guard-test",
        NOETL_API_ALLOWED_HOSTS="noetl.example.test, *.corp.example.test",
    )
    auth = {"Authorization": "Bearer tok-guard-test"}
    with serving(env) as server:
        for host, status in (
            ("noetl.example.test", 200),
            ("a.corp.example.test:8443", 200),
            (f"127.0.0.1:{server.port}", 200),
            ("corp.example.test", 400),
            ("evil.example.test", 400),
        ):
            answer = httpx.get(f"{server.url}/api/v1/executions", headers={**auth, "Host": host})
            assert answer.status_code == status, (host, answer.text)


def test_every_answer_refuses_framing(served: ServeProcess, app_routes: Routes) -> None:
    checked = []
    for path, methods in app_routes:
        if "GET" not in methods:
            continue
        answer = httpx.get(served.url + concrete(path))
        assert answer.headers.get("x-frame-options") == "DENY", path
        policy = answer.headers.get("content-security-policy", "")
        assert "frame-ancestors 'none'" in policy, path
        assert answer.headers.get("x-content-type-options") == "nosniff", path
        if answer.headers.get("content-type", "").startswith("text/html"):
            assert "script-src 'self'" in policy, path
            assert "'unsafe-inline'" not in policy.split("script-src")[1].split(";")[0]
        checked.append(path)
    assert {"/executions", "/schedules", "/docs", "/redoc", "/api/v1/executions"} <= set(checked)
    # refusals carry them too
    refused = httpx.get(f"{served.url}/executions", headers={"Host": "evil.example"})
    assert refused.headers["x-frame-options"] == "DENY"


def test_the_api_docs_load_nothing_from_another_site(served: ServeProcess) -> None:
    for page in ("/docs", "/redoc"):
        html = httpx.get(served.url + page).text
        sources = re.findall(r'(?:src|href)="([^"]+)"', html)
        assert sources and all(s.startswith("/") for s in sources), sources
        assert "<script>" not in html  # no inline script: the content policy refuses it
        for source in sources:
            asset = httpx.get(served.url + source)
            assert asset.status_code == 200 and len(asset.content) > 100, source
    assert httpx.get(f"{served.url}/docs-static/../app.py").status_code == 404
    assert httpx.get(f"{served.url}/docs-static/nothing.js").status_code == 404


def rss_kib(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    raise AssertionError("no VmRSS")


def test_a_200_mb_body_is_refused_without_being_held(served: ServeProcess) -> None:
    mib = 1024 * 1024
    before = rss_kib(served.proc.pid)

    def chunks() -> Iterator[bytes]:
        block = b"[" * mib
        for _ in range(200):
            yield block

    for route in ("/api/execute", "/api/v1/executions", "/api/v1/catalog"):
        streamed = httpx.post(
            served.url + route,
            content=chunks(),  # no Content-Length: cut off as it arrives
            headers={"Content-Type": "application/json"},
            timeout=60,
        )
        assert streamed.status_code == 413, (route, streamed.text)
        assert "request body larger than" in one_line(streamed)
    # a declared length is refused before a byte of the body is sent
    with socket.create_connection(("127.0.0.1", served.port), timeout=10) as conn:
        conn.sendall(
            f"POST /api/execute HTTP/1.1\r\nHost: 127.0.0.1:{served.port}\r\n"
            f"Content-Type: application/json\r\nContent-Length: {200 * mib}\r\n\r\n".encode()
        )
        head = conn.recv(4096).decode("latin-1")
    assert head.startswith("HTTP/1.1 413"), head
    grown_mib = (rss_kib(served.proc.pid) - before) / 1024
    print(f"serve RSS grew {grown_mib:.1f} MiB over three 200 MiB bodies")
    assert grown_mib < 50
    assert httpx.get(f"{served.url}/api/health").status_code == 200
