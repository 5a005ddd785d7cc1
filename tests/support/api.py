"""A client of a real `noetl-celery serve` for API tests: start, wait, unique paths."""

from __future__ import annotations

import time
import uuid
from typing import Any

import httpx

V1 = "/api/v1"


def unique(prefix: str) -> str:
    """A catalog path no other test uses (the session database is shared)."""
    return f"tests/api/{prefix}_{uuid.uuid4().hex[:8]}"


def playbook(path: str, body: str, workload: str = "{}") -> str:
    """A playbook at catalog `path` with the workflow `body` (YAML, indented two)."""
    name = path.rsplit("/", 1)[-1]
    return (
        "apiVersion: noetl.io/v2\nkind: Playbook\n"
        f"metadata: {{name: {name}, path: {path}}}\nworkload: {workload}\nworkflow:\n{body}"
    )


def ok(response: httpx.Response, status: int = 200) -> Any:
    assert response.status_code == status, (response.status_code, response.text)
    return response.json()


def start(client: httpx.Client, text: str, payload: dict[str, Any] | None = None) -> str:
    body: dict[str, Any] = {"playbook": text}
    if payload is not None:
        body["payload"] = payload
    return str(ok(client.post(f"{V1}/executions", json=body), 201)["execution_id"])


def wait_end(client: httpx.Client, execution_id: str, timeout: float = 120) -> dict[str, Any]:
    """The execution's detail once it has ended (AssertionError after `timeout`)."""
    deadline = time.monotonic() + timeout
    while True:
        detail: dict[str, Any] = ok(client.get(f"{V1}/executions/{execution_id}"))
        if detail["status"] != "RUNNING":
            return detail
        assert time.monotonic() < deadline, f"{execution_id} still running: {detail}"
        time.sleep(0.2)


def wait_for(client: httpx.Client, execution_id: str, check: Any, timeout: float = 60) -> Any:
    """Poll the detail until `check(detail)` is truthy; returns the detail."""
    deadline = time.monotonic() + timeout
    while True:
        detail = ok(client.get(f"{V1}/executions/{execution_id}"))
        if check(detail):
            return detail
        assert time.monotonic() < deadline, f"{execution_id}: condition never met: {detail}"
        time.sleep(0.1)
