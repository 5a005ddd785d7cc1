"""Malformed requests to a real `noetl-celery serve` (issue 30): every route answers each
one with its 4xx and one line (`{"detail": line}` from the API, an error page from the
pages), never a 500; and an engine database whose tables are gone answers 503 on every
route, as a database that is away does."""

from __future__ import annotations

import re
import types
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from fastapi.routing import iter_route_contexts

from noetl_celery.settings import Settings
from noetl_celery.web.app import create_app
from tests.support import services
from tests.support.api import ok, wait_end
from tests.support.bad_requests import Bad, cases
from tests.support.server import ServeProcess, embedded_env, serving

pytestmark = pytest.mark.integration
PLAYBOOK = (
    "apiVersion: noetl.io/v2\nkind: Playbook\n"
    "metadata: {name: requests, path: tests/bad/requests}\n"
    "workflow:\n  - step: start\n    tool: {kind: noop}\n"
)
ERROR_LINE = re.compile(r'id="error-message">([^<]*)</p>')


def serve_env(database: str, home: Path) -> dict[str, str]:
    return embedded_env(services.sqlalchemy_url(database), home)


@pytest.fixture(scope="module")
def database(template_db: str) -> Iterator[str]:
    with services.cloned_database(template_db) as name:
        yield name


@pytest.fixture(scope="module")
def server(database: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServeProcess]:
    with serving(serve_env(database, tmp_path_factory.mktemp("home"))) as served:
        yield served


@pytest.fixture(scope="module")
def execution_id(server: ServeProcess) -> str:
    """An ended execution of a registered playbook, for the routes that take one."""
    with httpx.Client(base_url=server.url, timeout=60) as client:
        ok(client.post("/api/v1/catalog", json={"content": PLAYBOOK}), 201)
        body = {"path": "tests/bad/requests"}
        started = ok(client.post("/api/v1/executions", json=body), 201)["execution_id"]
        wait_end(client, started)
    return str(started)


def served_routes() -> set[str]:
    """`METHOD /path` of every route the app serves (HEAD goes with GET)."""
    app = create_app(types.SimpleNamespace(), Settings())  # type: ignore[arg-type]
    return {
        f"{method} {context.path}"
        for context in iter_route_contexts(app.routes)
        for method in getattr(context, "methods", None) or ()
        if method != "HEAD"
    }


def one_line(response: httpx.Response) -> str | None:
    """The one line an error answer carries: `detail` of the JSON, the error page's
    message; None when there is no such single line."""
    if response.headers.get("content-type", "").startswith("application/json"):
        detail = response.json().get("detail")
        return detail if isinstance(detail, str) else None
    found = ERROR_LINE.findall(response.text)
    return found[0] if len(found) == 1 else None


def problem(client: httpx.Client, case: Bad) -> str | None:
    """What is wrong with the server's answer to `case`, or None."""
    headers = {"content-type": case.content_type} if case.body is not None else {}
    response = client.request(case.method, case.url, content=case.content(), headers=headers)
    line = one_line(response)
    if response.status_code != case.status:
        return f"{case.name}: {response.status_code} (not {case.status}): {response.text[:200]}"
    if line is None or not line.strip() or "\n" in line:
        return f"{case.name}: no one-line reason: {response.text[:200]}"
    pages = not case.url.startswith("/api") and case.status != 405
    if pages != response.headers.get("content-type", "").startswith("text/html"):
        return f"{case.name}: {response.headers.get('content-type')} answered"
    return None


def test_every_route_has_malformed_requests() -> None:
    """A new route without a case here fails: each must be shown to refuse bad input."""
    covered = {case.route for case in cases("1")}
    assert served_routes() - covered == set()
    assert covered - served_routes() == set()  # a case for a route that is gone


def test_malformed_requests_are_one_line_4xx(server: ServeProcess, execution_id: str) -> None:
    table = cases(execution_id)
    assert len(table) >= 100 and len({c.route for c in table}) == len(served_routes())
    with httpx.Client(base_url=server.url, timeout=60) as client:
        problems = [p for case in table if (p := problem(client, case)) is not None]
        assert problems == []
        # nothing malformed was written: one playbook, one execution, no schedule
        assert len(ok(client.get("/api/v1/catalog"))) == 1
        assert ok(client.get("/api/v1/executions"))["total"] == 1
        assert ok(client.get("/api/v1/schedules")) == []
    assert "Traceback" not in server.tail()


# routes that read the engine tables, with what they answer once the tables are gone
READS = [
    "/api/v1/executions",
    "/api/v1/executions/1",
    "/api/v1/catalog",
    "/api/v1/schedules",
    "/api/executions",
    "/api/executions/1/status",
    "/api/ehdb/executions",
    "/metrics",
    "/api/v1/rate-limits",
]
PAGES = ["/executions", "/executions/1", "/executions/1/events", "/schedules", "/rate-limits"]
POSTS = [
    ("/api/v1/executions", {"path": "tests/bad/requests"}),
    ("/api/v1/catalog", {"content": PLAYBOOK}),
    ("/api/execute", {"path": "tests/bad/requests"}),
    ("/api/catalog/list", {}),
]


def test_an_engine_database_without_tables_is_503_everywhere(
    template_db: str, tmp_path: Path
) -> None:
    """Tables dropped under a running server: the 503 of a database that is away, with
    the one line saying what to do, on the API and the pages alike."""
    with (
        services.cloned_database(template_db) as name,
        serving(serve_env(name, tmp_path / "home")) as server,
    ):
        with httpx.Client(base_url=server.url, timeout=60) as client:
            ok(client.get("/api/v1/executions"))  # opened, and working
            _drop_tables(name)
            answers = [client.get(url) for url in READS + PAGES]
            answers += [client.post(url, json=body) for url, body in POSTS]
        for response in answers:
            url = response.request.url.path
            assert response.status_code == 503, (url, response.text[:300])
            line = one_line(response)
            assert line is not None and "db upgrade" in line, (url, response.text[:300])
            assert response.headers["content-type"].startswith(
                "text/html" if url in PAGES else "application/json"
            ), url
        assert "Traceback" not in server.tail()


def _drop_tables(database: str) -> None:
    import psycopg

    with psycopg.connect(services.dsn_for(database), autocommit=True) as conn:
        conn.execute("DROP SCHEMA public CASCADE")
        conn.execute("CREATE SCHEMA public")
