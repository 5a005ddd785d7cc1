"""`GET /api/ready`, serve's readiness route (issue 32): 200 when the engine database
and the broker answer, 503 naming the one that does not, in one line without a password;
`/api/health` stays the liveness route (200 while the process answers)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from tests.support import services
from tests.support.private_services import free_port
from tests.support.server import embedded_env, serving

pytestmark = pytest.mark.integration
PASSWORD = "ready-pw-3f9c1a-never-shown"


@pytest.fixture
def database(template_db: str) -> Iterator[str]:
    with services.cloned_database(template_db) as name:
        yield name


def _ready(url: str) -> httpx.Response:
    return httpx.get(f"{url}/api/ready", timeout=60)


def _drop_tables(database: str) -> None:
    import psycopg

    with psycopg.connect(services.dsn_for(database), autocommit=True) as conn:
        conn.execute("DROP SCHEMA public CASCADE")
        conn.execute("CREATE SCHEMA public")


def test_embedded_ready_then_not_once_the_tables_are_gone(database: str, tmp_path: Path) -> None:
    env = embedded_env(services.sqlalchemy_url(database), tmp_path / "home")
    with serving(env) as server:
        response = _ready(server.url)
        assert response.status_code == 200, response.text
        assert response.json() == {"status": "ready", "database": "ok", "broker": "embedded"}
        _drop_tables(database)
        response = _ready(server.url)
        assert response.status_code == 503, response.text
        body = response.json()
        assert body["status"] == "not ready" and body["broker"] == "embedded"
        assert body["database"].startswith("unavailable: ")
        assert "db upgrade" in body["database"] and "\n" not in body["database"]
        # liveness is not readiness: the process still answers
        assert httpx.get(f"{server.url}/api/health").json() == {"status": "ok"}
        assert "Traceback" not in server.tail()


def test_with_a_broker_ready_and_open_to_probes(
    database: str, redis_url: str, tmp_path: Path
) -> None:
    """A kubelet's probe sends no credentials: the route answers without them, when
    every other API route wants the token."""
    env = embedded_env(services.sqlalchemy_url(database), tmp_path / "home")
    env.update(NOETL_BROKER_URL=redis_url, NOETL_API_TOKEN="ready-token")
    with serving(env) as server:
        response = _ready(server.url)
        assert response.status_code == 200, response.text
        assert response.json() == {"status": "ready", "database": "ok", "broker": "ok"}
        assert httpx.get(f"{server.url}/api/v1/executions").status_code == 401


def test_a_broker_at_a_closed_port_is_503_naming_it(database: str, tmp_path: Path) -> None:
    env = embedded_env(services.sqlalchemy_url(database), tmp_path / "home")
    port = free_port()  # bound once and released: nothing listens there
    env["NOETL_BROKER_URL"] = f"redis://:{PASSWORD}@127.0.0.1:{port}/0"
    with serving(env) as server:
        response = _ready(server.url)
        assert response.status_code == 503, response.text
        body = response.json()
        assert body["status"] == "not ready" and body["database"] == "ok"
        assert body["broker"].startswith(f"unreachable: redis://:***@127.0.0.1:{port}/0 (")
        assert "\n" not in body["broker"]
        assert PASSWORD not in response.text
        assert httpx.get(f"{server.url}/api/health").status_code == 200
        assert PASSWORD not in server.tail() and "Traceback" not in server.tail()
