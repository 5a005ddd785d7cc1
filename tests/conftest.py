"""Shared fixtures: real Postgres (a migrated template database cloned per test), real
Redis, real Celery worker processes. A missing service fails the run loudly."""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.support import services
from tests.support.token_server import CLIENT_ID, CLIENT_SECRET
from tests.support.workers import WorkerProcess

ROOT = Path(__file__).resolve().parents[1]
TEMPLATE_DB = f"noetl_test_template_{os.getpid()}"
# where playbooks under test create their own tables (own one per concurrent test run)
DATA_DB = os.environ.get("NOETL_TEST_DATA_DB", "noetl_test_data")


@pytest.fixture(scope="session")
def template_db() -> Iterator[str]:
    """A database migrated once per session; tests clone it (fast, isolated)."""
    from noetl_celery.store.database import Database

    services.create_database(TEMPLATE_DB)
    database = Database(services.sqlalchemy_url(TEMPLATE_DB))
    database.upgrade()
    database.dispose()
    yield TEMPLATE_DB
    services.drop_database(TEMPLATE_DB)


@pytest.fixture
def pg_url(template_db: str) -> Iterator[str]:
    with services.cloned_database(template_db) as name:
        yield services.sqlalchemy_url(name)


@pytest.fixture
def sqlite_url(tmp_path: Path) -> str:
    return f"sqlite:///{tmp_path / 'noetl.sqlite3'}"


@pytest.fixture(params=["sqlite", "postgresql"])
def store_url(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    """The same test against both store backends (dramatiq style)."""
    if request.param == "sqlite":
        yield f"sqlite:///{tmp_path / 'noetl.sqlite3'}"
    else:
        yield request.getfixturevalue("pg_url")


@pytest.fixture(scope="session")
def data_db() -> str:
    with services.admin_connection() as conn:
        exists = conn.execute("SELECT 1 FROM pg_database WHERE datname = %s", (DATA_DB,)).fetchone()
        if not exists:
            conn.execute(f'CREATE DATABASE "{DATA_DB}"')
    return services.dsn_for(DATA_DB)


@pytest.fixture(scope="session")
def credentials_file(tmp_path_factory: pytest.TempPathFactory, data_db: str) -> Path:
    from psycopg.conninfo import conninfo_to_dict

    params = conninfo_to_dict(data_db)
    entry = {
        "db_host": params.get("host", "127.0.0.1"),
        "db_port": str(params.get("port", 5432)),
        "db_user": params.get("user", "postgres"),
        "db_password": params.get("password", ""),
        "db_name": DATA_DB,
    }
    # an alias no playbook uses, with a password tests look for where no secret may appear
    canary = {**entry, "db_password": "canary-pw-7d1e0b-never-shown"}
    path = tmp_path_factory.mktemp("creds") / "credentials.json"
    # the OAuth client of the local token endpoint (tests.support.token_server)
    client = {
        "type": "oauth_client",
        "data": {"client_id": CLIENT_ID, "client_secret": CLIENT_SECRET},
    }
    path.write_text(
        json.dumps(
            {
                "pg_test": entry,
                "pg_local": entry,
                "unused_canary": canary,
                "keychain_client": client,
            }
        )
    )
    return path


@pytest.fixture(scope="session")
def redis_url() -> str:
    services.redis_client().flushdb()
    return services.REDIS_URL


def _env(**values: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("NOETL_")}
    env.update(values)
    env["PYTHONPATH"] = str(ROOT) + os.pathsep + env.get("PYTHONPATH", "")
    return env


@pytest.fixture(scope="session")
def distributed(
    template_db: str,
    redis_url: str,
    credentials_file: Path,
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[dict[str, Any]]:
    """A session database, Redis, and two real `noetl-celery worker` processes."""
    with services.cloned_database(template_db, prefix="noetl_dist") as name:
        url = services.sqlalchemy_url(name)
        env = _env(
            NOETL_DATABASE_URL=url,
            NOETL_BROKER_URL=redis_url,
            NOETL_CREDENTIALS_FILE=str(credentials_file),
            NOETL_HOME=str(tmp_path_factory.mktemp("home")),
        )
        workers = [WorkerProcess(f"w{i}", env) for i in (1, 2)]
        try:
            for worker in workers:
                worker.wait_ready()
            yield {"url": url, "env": env, "workers": workers, "redis_url": redis_url}
        finally:
            for worker in workers:
                worker.stop()


@pytest.fixture
def embedded_env(tmp_path: Path, credentials_file: Path) -> dict[str, str]:
    return _env(NOETL_HOME=str(tmp_path / "home"), NOETL_CREDENTIALS_FILE=str(credentials_file))


# The marker every test gets from the directory it lives in, so `-m unit` (or `-m "not
# browser"`) selects by kind without each file having to say it.
_DIRECTORY_MARKERS = {
    "unit": "unit",
    "integration": "integration",
    "acceptance": "acceptance",
    "chaos": "chaos",
    "browser": "browser",
}


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    tests_dir = Path(__file__).resolve().parent
    for item in items:
        try:
            kind = item.path.resolve().relative_to(tests_dir).parts[0]
        except ValueError:  # collected from outside tests/
            continue
        marker = _DIRECTORY_MARKERS.get(kind)
        if marker is not None and item.get_closest_marker(marker) is None:
            item.add_marker(marker)
