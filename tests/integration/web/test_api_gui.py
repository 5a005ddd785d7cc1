"""The routes NoETL's GUI (v1.11) calls beyond its CLI's, on a real `noetl-celery serve`
with real workers: the run dialog's form, the editor's content, save and validate, Stop,
the secrets page (never a secret), token sign-in, the dashboard, one card per path."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.support.noetl_compat import INVALID, hello, slow_loop, unique, wait_status
from tests.support.server import serving
from tests.support.token_server import CLIENT_SECRET

pytestmark = pytest.mark.integration

CANARY = "canary-pw-7d1e0b-never-shown"
TOKEN = "tok-9b2e4d-gui-test"


def register(url: str, text: str) -> dict[str, Any]:
    answer = httpx.post(f"{url}/api/catalog/register", json={"content": text})
    assert answer.status_code == 200, answer.text
    body: dict[str, Any] = answer.json()
    return body


def typed(path: str) -> str:
    return f"""\
apiVersion: noetl.io/v2
kind: Playbook
metadata: {{name: typed, path: {path}, description: Every kind of default.}}
workload:
  who: world
  count: 3
  ratio: 0.5
  loud: false
  nothing: null
  tags: [a, b]
  db: {{host: h, port: 5432}}
  api_token: x
workflow:
  - step: start
    tool: {{kind: noop}}
"""


def test_ui_schema_infers_the_workload_form(served: Any) -> None:
    path = unique("tests/gui/form")
    register(served.url, typed(path))
    register(served.url, hello(path))  # version 2: only `who`
    answer = httpx.get(f"{served.url}/api/catalog/{path}/ui_schema", params={"version": 1})
    assert answer.status_code == 200, answer.text
    body = answer.json()
    assert (body["path"], body["version"], body["kind"]) == (path, 1, "playbook")
    assert body["title"] == "typed" and body["description_markdown"] == "Every kind of default."
    assert body["generated_at"].endswith("Z")
    kinds = {f["name"]: (f["kind"], f["default"]) for f in body["fields"]}
    assert kinds == {
        "who": ("string", "world"),
        "count": ("integer", 3),
        "ratio": ("number", 0.5),
        "loud": ("boolean", False),
        "nothing": ("null", None),
        "tags": ("array", ["a", "b"]),
        "db": ("object", {"host": "h", "port": 5432}),
        "api_token": ("string", "x"),
    }
    db = next(f for f in body["fields"] if f["name"] == "db")
    assert [(c["name"], c["kind"]) for c in db["children"]] == [
        ("host", "string"),
        ("port", "integer"),
    ]
    assert next(f for f in body["fields"] if f["name"] == "api_token")["secret"] is True
    latest = httpx.get(f"{served.url}/api/catalog/{path}/ui_schema").json()
    assert latest["version"] == 2
    assert [(f["name"], f["kind"]) for f in latest["fields"]] == [("who", "string")]
    missing = httpx.get(f"{served.url}/api/catalog/tests/nope/ui_schema")
    assert missing.status_code == 404
    assert missing.json() == {"detail": "Playbook not found in catalog: tests/nope"}


def test_playbook_content_read_save_and_validate(served: Any) -> None:
    path = unique("tests/gui/edit")
    first = register(served.url, hello(path))
    url = f"{served.url}/api/catalog/playbook/content"
    by_id = httpx.get(url, params={"playbook_id": first["catalog_id"]})
    assert by_id.status_code == 200, by_id.text
    assert by_id.json()["content"] == hello(path)
    # the editor saves by path: a new version
    saved = httpx.put(url, params={"playbook_id": path}, json={"content": hello(path, "hi")})
    assert saved.status_code == 200, saved.text
    assert (saved.json()["path"], saved.json()["version"]) == (path, 2)
    assert httpx.get(url, params={"playbook_id": path}).json()["content"] == hello(path, "hi")
    # content naming another playbook, an invalid one, an unknown id
    other = httpx.put(url, params={"playbook_id": path}, json={"content": hello(path + "x")})
    assert other.status_code == 422
    assert f"'{path}x'" in other.json()["detail"]
    invalid = httpx.put(url, params={"playbook_id": path}, json={"content": INVALID})
    assert invalid.status_code == 422 and "teleport" in invalid.json()["detail"]
    assert httpx.get(url, params={"playbook_id": "987654321"}).status_code == 404
    assert httpx.get(url, params={"playbook_id": "tests/nope"}).status_code == 404

    check = f"{served.url}/api/catalog/playbooks/validate"
    good = httpx.post(check, json={"content": hello(path)})
    assert good.status_code == 200 and good.json()["valid"] is True
    assert good.json()["errors"] == []
    bad = httpx.post(check, json={"content": INVALID})
    assert bad.status_code == 200
    assert bad.json()["valid"] is False
    errors = bad.json()["errors"]
    assert errors and all(isinstance(e, str) and "\n" not in e for e in errors)
    assert any("teleport" in e for e in errors)
    # `auth:` aliases are checked against NOETL_CREDENTIALS_FILE, as `validate` does
    unknown_alias = hello(path).replace("kind: python\n", "kind: postgres\n      auth: nope\n", 1)
    answer = httpx.post(check, json={"content": unknown_alias}).json()
    assert answer["valid"] is False and any("credential `nope`" in e for e in answer["errors"])


def test_stop_is_cancel(served: Any) -> None:
    path = unique("tests/gui/stop")
    register(served.url, slow_loop(path))
    started = httpx.post(f"{served.url}/api/execute", json={"path": path}).json()
    eid = started["execution_id"]
    wait_status(served.url, eid, {"RUNNING"})
    stopped = httpx.post(f"{served.url}/api/executions/{eid}/stop")  # the GUI sends no body
    assert stopped.status_code == 200, stopped.text
    assert stopped.json()["status"] == "cancelled"
    assert stopped.json()["cancelled_executions"] == [eid]
    assert wait_status(served.url, eid)["status"] == "CANCELLED"
    again = httpx.post(f"{served.url}/api/executions/{eid}/stop")
    assert again.status_code == 409 and again.json()["status"] == "already_completed"
    assert httpx.post(f"{served.url}/api/executions/1/stop").status_code == 404


def test_credentials_list_without_secrets(served: Any, credentials_file: Path) -> None:
    listed = httpx.get(f"{served.url}/api/credentials")
    assert listed.status_code == 200, listed.text
    items = {c["id"]: c for c in listed.json()["items"]}
    assert set(items) == {"pg_test", "pg_local", "unused_canary", "keychain_client"}
    canary = items["unused_canary"]
    assert (canary["name"], canary["type"], canary["data"]) == ("unused_canary", "postgres", None)
    assert canary["meta"]["fields"]["db_name"]
    assert "db_password" in canary["meta"]["hidden_fields"]
    assert canary["created_at"].endswith("Z")
    assert items["keychain_client"]["type"] == "oauth_client"
    assert "client_secret" in items["keychain_client"]["meta"]["hidden_fields"]
    seen = [listed.text]
    for alias in items:
        for include in ("true", "false"):
            one = httpx.get(f"{served.url}/api/credentials/{alias}?include_data={include}")
            assert one.status_code == 200, one.text
            seen.append(one.text)
    shown = httpx.get(f"{served.url}/api/credentials/unused_canary?include_data=true").json()
    assert shown["data"]["db_name"] and "db_password" not in shown["data"]
    for text in seen:
        assert CANARY not in text and CLIENT_SECRET not in text
    filtered = httpx.get(f"{served.url}/api/credentials", params={"type": "oauth_client"})
    assert [c["id"] for c in filtered.json()["items"]] == ["keychain_client"]
    searched = httpx.get(f"{served.url}/api/credentials", params={"q": "CANARY"})
    assert [c["id"] for c in searched.json()["items"]] == ["unused_canary"]
    missing = httpx.get(f"{served.url}/api/credentials/nope")
    assert missing.status_code == 404
    assert missing.json()["detail"] == "no credential 'nope' in NOETL_CREDENTIALS_FILE"
    # writes are refused: the file is where credentials are kept
    before = credentials_file.read_text()
    for answer in (
        httpx.post(f"{served.url}/api/credentials", json={"name": "x", "data": {}}),
        httpx.delete(f"{served.url}/api/credentials/pg_test"),
    ):
        assert answer.status_code == 405
        assert "NOETL_CREDENTIALS_FILE" in answer.json()["detail"]
        assert answer.headers["allow"] == "GET"
    assert credentials_file.read_text() == before


def test_token_sign_in(distributed: dict[str, Any], served: Any) -> None:
    # without credentials configured, any token signs in (as any request gets in)
    open_answer = httpx.post(f"{served.url}/api/auth/validate", json={"session_token": "x"})
    assert open_answer.status_code == 200
    assert open_answer.json()["valid"] is True
    assert open_answer.json()["user"]["roles"] == ["admin"]

    env = {**distributed["env"], "NOETL_API_TOKEN": TOKEN}
    with serving(env) as server:
        url = f"{server.url}/api/auth/validate"
        right = httpx.post(url, json={"session_token": TOKEN})
        assert right.status_code == 200, right.text
        assert right.json()["valid"] is True
        assert right.json()["user"]["roles"] == ["admin"]
        for body in ({"session_token": "wrong"}, {"session_token": TOKEN[:-1]}, {}):
            wrong = httpx.post(url, json=body)
            assert wrong.status_code == 401, body
            assert wrong.json() == {"valid": False, "detail": "the token is not valid"}
        # the GUI then sends the token on every call; the rest of /api still needs it
        listing = f"{server.url}/api/catalog/list"
        assert httpx.post(listing, json={}).status_code == 401
        signed = httpx.post(listing, json={}, headers={"X-Session-Token": TOKEN})
        assert signed.status_code == 200
        assert httpx.get(f"{server.url}/api/credentials").status_code == 401


def test_dashboard_stats(served: Any) -> None:
    path = unique("tests/gui/dash")
    register(served.url, hello(path))
    eid = httpx.post(f"{served.url}/api/execute", json={"path": path}).json()["execution_id"]
    wait_status(served.url, eid)
    answer = httpx.get(f"{served.url}/api/dashboard/stats")
    assert answer.status_code == 200, answer.text
    body = answer.json()
    assert body["total_playbooks"] >= 1 and body["total_executions"] >= 1
    assert body["executions_by_status"]["COMPLETED"] >= 1
    assert body["total_executions"] == sum(body["executions_by_status"].values())
    assert 0 <= body["success_rate"] <= 100
    assert body["catalog"]["versions"] >= body["catalog"]["paths"] == body["total_playbooks"]
    assert set(body["schedules"]) == {"total", "enabled"}
    assert body["stats"]["successful_executions"] == body["executions_by_status"]["COMPLETED"]
    assert any(e["execution_id"] == eid for e in body["recent_executions"])


def test_catalog_list_one_card_per_path(served: Any) -> None:
    path = unique("tests/gui/cards")
    for greeting in ("hello", "hi", "hey"):
        register(served.url, hello(path, greeting))
    cards = httpx.post(f"{served.url}/api/catalog/list", json={"resource_type": "Playbook"})
    mine = [e for e in cards.json()["entries"] if e["path"] == path]
    assert [e["version"] for e in mine] == [3]
    assert mine[0]["content"] == hello(path, "hey")
    every = httpx.post(
        f"{served.url}/api/catalog/list", json={"resource_type": "Playbook", "versions": True}
    )
    assert [e["version"] for e in every.json()["entries"] if e["path"] == path] == [3, 2, 1]
    one_path = httpx.post(f"{served.url}/api/catalog/list", json={"path": path})
    assert [e["version"] for e in one_path.json()["entries"]] == [3, 2, 1]
    bad = httpx.post(f"{served.url}/api/catalog/list", json={"versions": "yes"})
    assert bad.status_code == 422
