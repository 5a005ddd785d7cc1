"""NoETL's routes (`/api/...`) on a real `noetl-celery serve` with real workers: every
route, the shapes NoETL's CLI and GUI read, and the answers its CLI acts on."""

from __future__ import annotations

import base64
from typing import Any

import httpx
import pytest

from tests.support.noetl_compat import INVALID, failing, hello, slow_loop, unique, wait_status

pytestmark = pytest.mark.integration


def b64(text: str) -> str:
    return base64.b64encode(text.encode()).decode()


def register(url: str, text: str) -> dict[str, Any]:
    answer = httpx.post(
        f"{url}/api/catalog/register", json={"content": b64(text), "resource_type": "Playbook"}
    )
    assert answer.status_code == 200, answer.text
    body: dict[str, Any] = answer.json()
    return body


def execute(url: str, **body: Any) -> str:
    answer = httpx.post(f"{url}/api/execute", json={"resource_kind": "playbook", **body})
    assert answer.status_code == 200, answer.text
    started = answer.json()
    assert started["status"] == "started"
    assert isinstance(started["execution_id"], str) and started["execution_id"].isdigit()
    assert started["commands_generated"] >= 1
    return str(started["execution_id"])


def test_register_base64_raw_json_and_raw_body(served: Any) -> None:
    path = unique("tests/reg")
    first = register(served.url, hello(path))
    assert first == {
        "status": "success",
        "message": f"Resource '{path}' version '1' registered.",
        "path": path,
        "version": 1,
        "catalog_id": first["catalog_id"],
        "kind": "Playbook",
    }
    assert isinstance(first["catalog_id"], str) and first["catalog_id"].isdigit()
    # the same content again: the same version
    assert register(served.url, hello(path))["version"] == 1
    # the GUI sends the YAML as text in `content`
    gui = httpx.post(f"{served.url}/api/catalog/register", json={"content": hello(path, "hi")})
    assert gui.status_code == 200, gui.text
    assert gui.json()["version"] == 2
    # or the YAML is the whole body
    raw = httpx.post(
        f"{served.url}/api/catalog/register",
        content=hello(path, "hey").encode(),
        headers={"content-type": "application/x-yaml"},
    )
    assert raw.status_code == 200, raw.text
    assert (raw.json()["path"], raw.json()["version"]) == (path, 3)


def test_register_refuses_an_invalid_playbook_naming_the_problem(served: Any) -> None:
    answer = httpx.post(f"{served.url}/api/catalog/register", json={"content": b64(INVALID)})
    assert answer.status_code == 422
    assert "kind: teleport" in answer.json()["detail"]
    assert any("teleport" in p for p in answer.json()["problems"])
    other = httpx.post(
        f"{served.url}/api/catalog/register",
        json={"content": b64(hello(unique("tests/x"))), "resource_type": "Credential"},
    )
    assert other.status_code == 422
    assert "Credential" in other.json()["detail"]
    not_json = httpx.post(
        f"{served.url}/api/catalog/register",
        content=b"{not json",
        headers={"content-type": "application/json"},
    )
    assert not_json.status_code == 422


def test_register_batch_with_one_invalid_item(served: Any) -> None:
    good = unique("tests/batch")
    answer = httpx.post(
        f"{served.url}/api/catalog/register/batch",
        json={
            "items": [
                {"content": b64(hello(good)), "resource_type": "Playbook"},
                {"content": b64(INVALID), "resource_type": "Playbook"},
                {"nothing": 1},
            ]
        },
    )
    assert answer.status_code == 200, answer.text
    body = answer.json()
    assert (body["registered"], body["failed"]) == (1, 2)
    ok, bad, empty = body["results"]
    assert ok["index"] == 0 and ok["status"] == "registered"
    assert (ok["path"], ok["version"], ok["error"]) == (good, 1, None)
    assert ok["catalog_id"].isdigit()
    assert bad["index"] == 1 and bad["status"] == "failed"
    assert "items[1]" in bad["error"] and "teleport" in bad["error"]
    assert empty["status"] == "failed" and "content" in empty["error"]


def test_catalog_list_and_resource(served: Any) -> None:
    path = unique("tests/cat")
    one = register(served.url, hello(path))
    two = register(served.url, hello(path, "hi"))
    listed = httpx.post(
        f"{served.url}/api/catalog/list", json={"resource_type": "Playbook", "path": path}
    ).json()["entries"]
    # every version, newest first (as NoETL lists them)
    assert [(e["path"], e["version"]) for e in listed] == [(path, 2), (path, 1)]
    entry = listed[0]
    assert set(entry) >= {
        "catalog_id",
        "path",
        "version",
        "kind",
        "content",
        "payload",
        "meta",
        "created_at",
    }
    assert entry["catalog_id"] == two["catalog_id"]
    assert entry["payload"]["metadata"]["description"] == "Say hi to who."
    assert entry["content"] == hello(path, "hi")
    everything = httpx.post(f"{served.url}/api/catalog/list", json={"resource_type": "Playbook"})
    assert path in {e["path"] for e in everything.json()["entries"]}
    creds = httpx.post(f"{served.url}/api/catalog/list", json={"resource_type": "Credential"})
    assert creds.json() == {"entries": []}

    def resource(**body: Any) -> httpx.Response:
        return httpx.post(f"{served.url}/api/catalog/resource", json=body)

    assert resource(path=path).json()["version"] == 2
    assert resource(path=path, version="latest").json()["catalog_id"] == two["catalog_id"]
    assert resource(path=path, version=1).json()["content"] == hello(path)
    assert resource(catalog_id=one["catalog_id"]).json()["version"] == 1
    missing = resource(path="tests/nope")
    assert missing.status_code == 404
    assert missing.json() == {"detail": "Playbook not found in catalog: tests/nope"}
    assert resource(path=path, version=9).status_code == 404
    assert resource().status_code == 422


def test_execute_and_status_until_completed(served: Any) -> None:
    path = unique("tests/hello")
    registered = register(served.url, hello(path))
    eid = execute(served.url, path=path, workload={"who": "celery"})
    status = wait_status(served.url, eid)
    assert status["status"] == "COMPLETED"
    assert (status["completed"], status["failed"], status["error"]) == (True, False, None)
    assert status["completed_steps"] == ["start", "end"]
    assert status["current_step"] == "end"
    assert status["execution_id"] == eid
    assert status["start_time"].endswith("Z") and status["end_time"].endswith("Z")
    assert status["duration_human"].endswith("s")
    assert status["variables"] == {}
    # the payload reached the execution: the result echoes it
    detail = httpx.get(f"{served.url}/api/executions/{eid}").json()
    assert detail["result"] == {"line": "hello celery", "who": "celery"}

    # the GUI's forms: catalog_id, "payload", version "latest", unknown keys ignored
    by_id = execute(
        served.url, catalog_id=registered["catalog_id"], payload={"who": "gui"}, merge=True
    )
    by_latest = execute(served.url, path=path, version="latest", workload={"who": "v"})
    by_number = execute(served.url, path=path, version=1)
    for eid2, who in ((by_id, "gui"), (by_latest, "v"), (by_number, "world")):
        assert wait_status(served.url, eid2)["status"] == "COMPLETED"
        result = httpx.get(f"{served.url}/api/executions/{eid2}").json()["result"]
        assert result["who"] == who


def test_execute_unknown_playbook_is_404(served: Any) -> None:
    answer = httpx.post(
        f"{served.url}/api/execute",
        json={"path": "tests/nope", "workload": {}, "resource_kind": "playbook"},
    )
    assert answer.status_code == 404
    assert answer.json() == {"detail": "Playbook not found in catalog: tests/nope"}
    path = unique("tests/v")
    register(served.url, hello(path))
    wrong_version = httpx.post(f"{served.url}/api/execute", json={"path": path, "version": 5})
    assert wrong_version.status_code == 404
    assert wrong_version.json()["detail"] == f"Playbook not found in catalog: {path} version 5"
    # `noetl run dir/FILE.yaml -r distributed` sends the file's stem as the path
    stem = httpx.post(f"{served.url}/api/execute", json={"path": path.rsplit("/", 1)[-1]})
    assert stem.status_code == 404
    assert stem.json()["detail"].endswith(f"; did you mean '{path}'?")
    bad = httpx.post(f"{served.url}/api/execute", json={"path": path, "workload": [1]})
    assert bad.status_code == 422
    assert httpx.post(f"{served.url}/api/execute", json={}).status_code == 422


def test_failed_run_reads_completed_and_failed(served: Any) -> None:
    path = unique("tests/failing")
    register(served.url, failing(path))
    eid = execute(served.url, path=path)
    status = wait_status(served.url, eid)
    assert status["status"] == "FAILED"
    assert (status["completed"], status["failed"]) == (True, True)
    assert "step 'divide'" in status["error"] and "ZeroDivisionError" in status["error"]
    assert status["completed_steps"] == ["start"]
    entry = httpx.get(f"{served.url}/api/executions/{eid}").json()
    assert entry["status"] == "FAILED" and entry["result"] is None
    assert entry["progress"] == 100
    names = [e["event_type"] for e in entry["events"]]  # newest first
    assert names[-1] == "playbook.initialized"
    assert names[0] == "playbook.failed"
    assert "call.error" in names and "step.failed" in names
    failed_call = next(e for e in entry["events"] if e["event_type"] == "call.error")
    assert failed_call["node_name"] == "divide" and "ZeroDivisionError" in failed_call["error"]


def test_cancel_then_cancel_again_is_409(served: Any) -> None:
    path = unique("tests/slow")
    register(served.url, slow_loop(path))
    eid = execute(served.url, path=path)
    running = wait_status(served.url, eid, {"RUNNING"})
    assert (running["completed"], running["failed"]) == (False, False)
    answer = httpx.post(
        f"{served.url}/api/executions/{eid}/cancel", json={"cascade": True, "reason": "stop it"}
    )
    assert answer.status_code == 200, answer.text
    assert answer.json() == {
        "status": "cancelled",
        "execution_id": eid,
        "cancelled_executions": [eid],
        "message": "Cancelled 1 execution(s): stop it",
    }
    status = wait_status(served.url, eid)
    assert status["status"] == "CANCELLED"
    assert (status["completed"], status["failed"]) == (True, False)
    again = httpx.post(f"{served.url}/api/executions/{eid}/cancel", json={"cascade": False})
    assert again.status_code == 409
    assert again.json()["status"] == "already_completed"
    assert "CANCELLED" in again.json()["message"]
    unknown = httpx.post(f"{served.url}/api/executions/1/cancel", json={})
    assert unknown.status_code == 404


def test_rerun_overrides_the_payload(served: Any) -> None:
    path = unique("tests/rerun")
    register(served.url, hello(path))
    first = execute(served.url, path=path, workload={"who": "one"})
    wait_status(served.url, first)
    answer = httpx.post(
        f"{served.url}/api/executions/{first}/rerun",
        json={"workload": {"who": "two"}, "resource_kind": "playbook"},
    )
    assert answer.status_code == 200, answer.text
    body = answer.json()
    assert (body["source_execution_id"], body["status"]) == (first, "started")
    second = body["execution_id"]
    assert second != first
    assert wait_status(served.url, second)["status"] == "COMPLETED"
    result = httpx.get(f"{served.url}/api/executions/{second}").json()["result"]
    assert result == {"line": "hello two", "who": "two"}
    assert httpx.post(f"{served.url}/api/executions/1/rerun", json={}).status_code == 404


def test_unknown_execution_is_404_everywhere(served: Any) -> None:
    for route in ("/status", "", "/events"):
        answer = httpx.get(f"{served.url}/api/executions/123{route}")
        assert answer.status_code == 404, route
        assert "123" in answer.json()["detail"]


def test_execution_list_detail_events_and_pages(served: Any) -> None:
    path = unique("tests/pages")
    register(served.url, hello(path))
    eid = execute(served.url, path=path)
    wait_status(served.url, eid)
    listed = httpx.get(f"{served.url}/api/executions", params={"page_size": 500}).json()
    assert isinstance(listed, list)
    mine = next(e for e in listed if e["execution_id"] == eid)
    assert set(mine) >= {
        "execution_id",
        "path",
        "version",
        "status",
        "start_time",
        "end_time",
        "duration_seconds",
        "duration_human",
        "progress",
        "result",
        "error",
        "parent_execution_id",
    }
    assert (mine["path"], mine["version"], mine["status"], mine["progress"]) == (
        path,
        1,
        "COMPLETED",
        100,
    )
    first_page = httpx.get(f"{served.url}/api/executions", params={"page_size": 1}).json()
    assert len(first_page) == 1

    detail = httpx.get(f"{served.url}/api/executions/{eid}", params={"page": 1, "page_size": 10})
    body = detail.json()
    assert (body["execution_id"], body["status"], body["path"]) == (eid, "COMPLETED", path)
    names = [e["event_type"] for e in body["events"]]  # newest first: the GUI's order
    assert names == ["playbook.completed", "step.exit", "step.exit", "playbook.initialized"]
    assert body["pagination"] == {
        "page": 1,
        "page_size": 10,
        "total_events": 4,
        "total_pages": 1,
        "has_next": False,
        "has_prev": False,
    }
    ids = [e["event_id"] for e in body["events"]]
    assert ids == sorted(ids, reverse=True)
    # the GUI polls from the largest id it holds and prepends what comes: newest first
    later = httpx.get(
        f"{served.url}/api/executions/{eid}", params={"since_event_id": ids[2], "page_size": 50}
    ).json()
    assert [e["event_id"] for e in later["events"]] == ids[:2]
    # more than a page past the cursor: the oldest of them come first, none skipped
    step = httpx.get(
        f"{served.url}/api/executions/{eid}", params={"since_event_id": ids[3], "page_size": 1}
    ).json()
    assert [e["event_id"] for e in step["events"]] == [ids[2]]
    second_page = httpx.get(
        f"{served.url}/api/executions/{eid}", params={"page": 2, "page_size": 3}
    ).json()
    assert [e["event_id"] for e in second_page["events"]] == ids[3:]
    assert second_page["pagination"]["has_prev"] is True
    exits = httpx.get(
        f"{served.url}/api/executions/{eid}", params={"event_type": "step.exit"}
    ).json()
    assert [e["node_name"] for e in exits["events"]] == ["end", "start"]
    native = httpx.get(
        f"{served.url}/api/executions/{eid}/events", params={"event_type": "command.completed"}
    ).json()
    assert [e["event_type"] for e in native["events"]] == ["step.exit", "step.exit"]
    assert native["status"] == "COMPLETED"


def test_ehdb_queries(served: Any) -> None:
    path = unique("tests/ehdb")
    register(served.url, hello(path))
    eid = execute(served.url, path=path)
    wait_status(served.url, eid)
    listed = httpx.get(
        f"{served.url}/api/ehdb/executions", params={"status": "COMPLETED", "limit": 500}
    ).json()["executions"]
    mine = next(e for e in listed if e["execution_id"] == eid)
    assert (mine["status"], mine["path"], mine["event_count"]) == ("COMPLETED", path, 4)
    assert mine["started_at"].endswith("Z")
    one = httpx.get(f"{served.url}/api/ehdb/executions/{eid}").json()
    assert one["exists"] is True
    assert one["state"]["terminal"] is True and one["state"]["current_node"] == "end"
    assert httpx.get(f"{served.url}/api/ehdb/executions/5").json()["exists"] is False
    events = httpx.get(f"{served.url}/api/ehdb/executions/{eid}/events", params={"limit": 2}).json()
    assert [e["event_type"] for e in events["events"]] == ["playbook.initialized", "step.exit"]
    rest = httpx.get(
        f"{served.url}/api/ehdb/executions/{eid}/events",
        params={"after": events["next_cursor"]},
    ).json()
    assert [e["event_type"] for e in rest["events"]] == ["step.exit", "playbook.completed"]
    assert rest["next_cursor"] is None


def test_cleanup_dry_run(served: Any) -> None:
    answer = httpx.post(
        f"{served.url}/api/executions/cleanup", json={"dry_run": True, "older_than_minutes": 60}
    )
    assert answer.status_code == 200, answer.text
    assert answer.json()["cancelled_count"] == 0
    assert isinstance(answer.json()["execution_ids"], list)
    bad = httpx.post(f"{served.url}/api/executions/cleanup", json={"older_than_minutes": 0})
    assert bad.status_code == 422
