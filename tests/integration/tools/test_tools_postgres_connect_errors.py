"""A postgres step that cannot connect says where it tried: the database, the host and
the port stay readable, only the password is masked (a real Postgres, a real run)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest

from noetl_celery.engine.service import Engine
from tests.integration.tools.conftest import free_port
from tests.support.engines import embedded_engine

pytestmark = pytest.mark.integration
PASSWORD = "Kc-Pw-93f1-distinct"  # distinctive: a leak is found by a substring search
MISSING_DB = "keycloak_missing_h7"

STEP = """
apiVersion: noetl.io/v2
kind: Playbook
metadata: {name: connect_error}
workflow:
  - step: start
    tool: {kind: postgres, auth: "{{ alias }}", command: "SELECT 1"}
"""
LEAK = f"""
apiVersion: noetl.io/v2
kind: Playbook
metadata: {{name: leak}}
workflow:
  - step: start
    tool:
      kind: python
      code: |
        raise ValueError("cannot reach postgres@127.0.0.1:5432/keycloak with {PASSWORD}")
"""
MOVED_PORT = free_port()  # nothing listens there


@pytest.fixture
def engine(sqlite_url: str, tmp_path: Path) -> Iterator[Engine]:
    # `pg_keycloak`: an alias with "key" in its name, which used to make every value of
    # the credential a secret; `pg_same`: a password equal to the user name (compose's
    # noetl/noetl), which used to blank that word in every message
    server = {"db_host": "127.0.0.1", "db_port": "5432", "db_user": "postgres"}
    credentials = {
        "pg_keycloak": {**server, "db_password": PASSWORD, "db_name": MISSING_DB},
        "pg_keycloak_moved": {
            **server,
            "db_port": str(MOVED_PORT),
            "db_password": PASSWORD,
            "db_name": "keycloak",
        },
        "pg_same": {**server, "db_password": "postgres", "db_name": "postgres_missing_h7"},
    }
    path = tmp_path / "credentials.json"
    path.write_text(json.dumps(credentials))
    built = embedded_engine(sqlite_url, tmp_path / "home", path)
    yield built
    built.close()


def failed_run(engine: Engine, alias: str) -> tuple[str, str]:
    """The run's error, and everything the run left to read (summary, events, logs)."""
    execution_id = engine.start_text(STEP, {"alias": alias})
    engine.wait(execution_id, 60)
    summary = engine.summary(execution_id)
    assert summary["status"] == "FAILED"
    seen = json.dumps(
        [summary, engine.events(execution_id), engine.logs_page(execution_id, limit=0)],
        default=str,
    )
    return str(summary["error"]), seen


def test_a_missing_database_is_named_with_its_host(engine: Engine) -> None:
    error, seen = failed_run(engine, "pg_keycloak")
    assert f'database "{MISSING_DB}" does not exist' in error
    assert 'connection to server at "127.0.0.1", port 5432' in error
    assert f"credential 'pg_keycloak' (postgres@127.0.0.1:5432/{MISSING_DB})" in error
    assert PASSWORD not in seen


def test_a_wrong_port_is_named_with_its_host(engine: Engine) -> None:
    error, seen = failed_run(engine, "pg_keycloak_moved")
    assert f'connection to server at "127.0.0.1", port {MOVED_PORT} failed' in error
    assert "Connection refused" in error and f"127.0.0.1:{MOVED_PORT}/keycloak" in error
    assert PASSWORD not in seen


def test_a_password_equal_to_the_user_name_does_not_blank_the_names(engine: Engine) -> None:
    error, _ = failed_run(engine, "pg_same")
    assert 'database "postgres_missing_h7" does not exist' in error
    assert "credential 'pg_same' (postgres@127.0.0.1:5432/postgres_missing_h7)" in error


def test_the_password_is_still_masked_beside_the_names(engine: Engine) -> None:
    execution_id = engine.start_text(LEAK)
    engine.wait(execution_id, 60)
    error = str(engine.summary(execution_id)["error"])
    assert "cannot reach postgres@127.0.0.1:5432/keycloak with ***" in error
    assert PASSWORD not in error
