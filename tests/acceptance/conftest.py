"""The bundled example API and the sample credentials, for the example tests."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest
from psycopg.conninfo import conninfo_to_dict

from tests.support.example_api import ExampleApi

EXAMPLES = Path(__file__).resolve().parents[2] / "playbooks" / "examples"


@pytest.fixture
def example_api(embedded_env: dict[str, str]) -> Iterator[ExampleApi]:
    """`noetl-celery example-api` on a free port (fresh counters: page 2 fails once)."""
    api = ExampleApi(embedded_env, "--port", "0")
    yield api
    api.stop()


@pytest.fixture
def sample_credentials(data_db: str, tmp_path: Path) -> Path:
    """The sample credentials file, pointed at the test database (nothing else changed)."""
    sample = json.loads((EXAMPLES / "credentials.example.json").read_text())
    params = conninfo_to_dict(data_db)
    sample["pg_example"].update(
        db_host=params.get("host", "127.0.0.1"),
        db_port=str(params.get("port", 5432)),
        db_name=params["dbname"],
    )
    path = tmp_path / "credentials.json"
    path.write_text(json.dumps(sample))
    return path
