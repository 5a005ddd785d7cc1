"""No secret leaves the API: a run that uses a credential and whose steps print, log,
fail with and return a credential's password shows `***` wherever it went, on every
read endpoint (the canary password of tests/conftest.py's credentials file)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.support.api import V1, ok, playbook, start, unique, wait_end

pytestmark = pytest.mark.integration

CANARY = "canary-pw-7d1e0b-never-shown"

LEAKY = """  - step: db
    tool: {kind: postgres, auth: pg_test, command: "SELECT 1 AS one"}
    next: {arcs: [{step: each}]}
  - step: each
    loop: {in: "{{ [1, 2, 3] }}", iterator: it}
    tool:
      kind: python
      input: {it: "{{ iter.it }}", pw: "{{ pw }}"}
      code: |
        import logging
        print(f"item {it} sees the secret {pw}")
        logging.warning("logged secret %s", pw)
        if it == 2:
            raise ValueError(f"item {it} failed holding {pw}")
        result = {"it": it, "echo": pw}
    next: {arcs: [{step: sql, when: "{{ event.name == 'loop.done' }}"}]}
  - step: sql
    tool: {kind: postgres, auth: pg_test, command: "SELECT '{{ pw }}'::int AS n"}
"""


def secrets(credentials_file: Path) -> list[str]:
    """The canary and the real data password (when the test database has one)."""
    records = json.loads(credentials_file.read_text())
    found = {CANARY, *(r.get("db_password", "") for r in records.values())}
    return sorted(s for s in found if len(s) >= 3)


def test_no_endpoint_shows_a_secret(served: Any, credentials_file: Path) -> None:
    path = unique("leaky")
    hidden = secrets(credentials_file)
    assert CANARY in hidden
    with httpx.Client(base_url=served.url, timeout=30) as client:
        eid = start(client, playbook(path, LEAKY, "{pw: none}"), {"pw": CANARY})
        detail = wait_end(client, eid)
        assert detail["status"] == "FAILED", detail
        rerun = ok(
            client.post(
                f"{V1}/executions/{eid}/rerun", json={"from_step": "sql", "payload": {"pw": CANARY}}
            ),
            201,
        )["execution_id"]
        wait_end(client, rerun)
        shown: dict[str, Any] = {}
        for run in (eid, rerun):
            base = f"{V1}/executions/{run}"
            shown[run] = {
                "detail": ok(client.get(base)),
                "graph": ok(client.get(f"{base}/graph")),
                "events": ok(client.get(f"{base}/events", params={"limit": 1000})),
                "failed": ok(client.get(f"{base}/events", params={"failed": "true"})),
                "logs": ok(client.get(f"{base}/logs", params={"limit": 1000})),
                "items": ok(client.get(f"{base}/failed-items", params={"step": "each"})),
            }
        shown["list"] = ok(client.get(f"{V1}/executions", params={"limit": 500}))
        shown["children"] = ok(client.get(f"{V1}/executions", params={"parent": eid}))
        shown["catalog"] = ok(client.get(f"{V1}/catalog"))
        shown["show"] = ok(client.get(f"{V1}/catalog/{path}"))
        shown["schedules"] = ok(client.get(f"{V1}/schedules"))
    text = json.dumps(shown)
    for secret in hidden:
        assert secret not in text
    # the secret did go everywhere it could: masked, not missing
    runs = shown[eid]
    assert "item 1 sees the secret ***" in json.dumps(runs["logs"])
    assert runs["items"]["total"] == 1 and "***" in runs["items"]["items"][0]["message"]
    assert "***" in json.dumps(runs["detail"]["errors"])
    assert "***" in json.dumps(runs["events"])
