"""`noetl-celery serve` starts, answers its health route and refuses what it must."""

from __future__ import annotations

from typing import Any

import httpx
import pytest

from tests.support.workers import run_cli

pytestmark = pytest.mark.integration


def test_health_and_docs(served: Any) -> None:
    assert httpx.get(f"{served.url}/api/health").json() == {"status": "ok"}
    docs = httpx.get(f"{served.url}/openapi.json").json()
    assert "/api/v1/executions/{execution_id}" in docs["paths"]


def test_refuses_a_public_address_without_auth(distributed: dict[str, Any]) -> None:
    proc = run_cli(["serve", "--host", "0.0.0.0", "--port", "1"], distributed["env"], timeout=60)
    assert proc.returncode == 2
    assert "without authentication" in proc.stderr
    assert "Traceback" not in proc.stderr
