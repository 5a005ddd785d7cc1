"""`/api/v1/catalog` and `/api/v1/schedules` on a real `noetl-celery serve` with workers."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from tests.support.api import V1, ok, playbook, unique, wait_end

pytestmark = pytest.mark.integration

STEP = '  - step: only\n    tool: {kind: python, input: {v: "{{ v }}"}, code: "result = v"}\n'


@pytest.fixture(scope="module")
def client(served: Any) -> Iterator[httpx.Client]:
    with httpx.Client(base_url=served.url, timeout=30) as http:
        yield http


def test_register_list_show_and_start(client: httpx.Client) -> None:
    path = unique("catalogued")
    first = playbook(path, STEP, "{v: 1}")
    created = ok(client.post(f"{V1}/catalog", json={"content": first}), 201)
    assert created == {
        "path": path,
        "version": 1,
        "catalog_id": created["catalog_id"],
        "name": path.rsplit("/", 1)[-1],
        "created": True,
    }
    # the same content again: the same version (200); other content as YAML: version 2
    again = ok(client.post(f"{V1}/catalog", json={"content": first}))
    assert (again["version"], again["created"]) == (1, False)
    second = first.replace("{v: 1}", "{v: 2}")
    raw = client.post(f"{V1}/catalog", content=second, headers={"content-type": "application/yaml"})
    assert ok(raw, 201)["version"] == 2

    [listed] = [c for c in ok(client.get(f"{V1}/catalog")) if c["path"] == path]
    assert (listed["latest_version"], listed["versions"]) == (2, 2)
    shown = ok(client.get(f"{V1}/catalog/{path}"))
    assert shown["version"] == 2 and shown["content"] == second
    assert [v["version"] for v in shown["versions"]] == [1, 2]
    assert ok(client.get(f"{V1}/catalog/{path}", params={"version": 1}))["content"] == first
    missing = client.get(f"{V1}/catalog/{path}", params={"version": 7})
    assert missing.status_code == 404 and "registered: 1, 2" in missing.json()["detail"]
    assert client.get(f"{V1}/catalog/tests/api/none").status_code == 404

    for version, value in ((None, 2), (1, 1)):
        body: dict[str, Any] = {"path": path, "payload": {}}
        if version is not None:
            body["version"] = version
        eid = ok(client.post(f"{V1}/executions", json=body), 201)["execution_id"]
        detail = wait_end(client, eid)
        assert detail["status"] == "COMPLETED", detail
        events = ok(
            client.get(f"{V1}/executions/{eid}/events", params={"type": "command.completed"})
        )
        assert events["events"][0]["payload"]["result"] == value


def test_register_refuses_what_is_not_a_playbook(client: httpx.Client) -> None:
    invalid = client.post(f"{V1}/catalog", json={"content": "kind: nope"})
    assert invalid.status_code == 422
    body = invalid.json()
    assert any("apiVersion" in p for p in body["problems"]) and isinstance(body["detail"], str)
    yaml_broken = client.post(
        f"{V1}/catalog", content="a: [", headers={"content-type": "application/yaml"}
    )
    assert yaml_broken.status_code == 422 and yaml_broken.json()["problems"]
    # text/plain is what a page of another site may post without asking: never read
    plain = client.post(f"{V1}/catalog", content="a: 1", headers={"content-type": "text/plain"})
    assert plain.status_code == 415 and "application/yaml" in plain.json()["detail"]
    assert client.post(f"{V1}/catalog", json={"text": "x"}).status_code == 422
    assert (
        client.post(
            f"{V1}/catalog", content=b"{", headers={"content-type": "application/json"}
        ).status_code
        == 422
    )
    odd = client.post(f"{V1}/catalog", content=b"x", headers={"content-type": "image/png"})
    assert odd.status_code == 415 and "application/yaml" in odd.json()["detail"]


def test_schedules_add_pause_resume_trigger_remove(client: httpx.Client) -> None:
    path = unique("scheduled")
    ok(client.post(f"{V1}/catalog", json={"content": playbook(path, STEP, "{v: 1}")}), 201)
    added = ok(
        client.post(
            f"{V1}/schedules",
            json={
                "path": path,
                "cron": "0 3 * * *",
                "timezone": "Europe/Paris",
                "payload": {"v": 5},
            },
        ),
        201,
    )
    sid = added["schedule_id"]
    assert (added["path"], added["enabled"], added["payload"]) == (path, True, {"v": 5})
    assert added["timezone"] == "Europe/Paris" and added["next_fire_at"]
    assert sid in [s["schedule_id"] for s in ok(client.get(f"{V1}/schedules"))]

    paused = ok(client.post(f"{V1}/schedules/{sid}/pause"))
    assert (paused["enabled"], paused["changed"], paused["next_fire_at"]) == (False, True, None)
    assert ok(client.post(f"{V1}/schedules/{sid}/pause"))["changed"] is False
    resumed = ok(client.post(f"{V1}/schedules/{sid}/resume"))
    assert resumed["enabled"] is True and resumed["next_fire_at"]

    fired = ok(client.post(f"{V1}/schedules/{sid}/trigger"), 201)
    detail = wait_end(client, fired["execution_id"])
    assert detail["status"] == "COMPLETED" and detail["trigger"] == "schedule"
    assert detail["trigger_detail"]["schedule_id"] == sid
    runs = ok(client.get(f"{V1}/executions", params={"path": path, "trigger": "schedule"}))
    assert [e["execution_id"] for e in runs["executions"]] == [fired["execution_id"]]

    assert ok(client.delete(f"{V1}/schedules/{sid}")) == {"schedule_id": sid, "removed": True}
    for method, suffix in (
        ("DELETE", ""),
        ("POST", "/pause"),
        ("POST", "/resume"),
        ("POST", "/trigger"),
    ):
        gone = client.request(method, f"{V1}/schedules/{sid}{suffix}")
        assert gone.status_code == 404, suffix
        assert gone.json()["detail"].startswith(f"no schedule {sid}")

    # a schedule given as a playbook's text registers it on the way
    other = unique("scheduled_text")
    by_text = ok(
        client.post(
            f"{V1}/schedules",
            json={"playbook": playbook(other, STEP, "{v: 1}"), "cron": "*/5 * * * *"},
        ),
        201,
    )
    assert by_text["path"] == other and ok(client.get(f"{V1}/catalog/{other}"))["version"] == 1
    ok(client.delete(f"{V1}/schedules/{by_text['schedule_id']}"))


def test_schedules_refuse_bad_input_writing_nothing(client: httpx.Client) -> None:
    path = unique("never_scheduled")
    ok(client.post(f"{V1}/catalog", json={"content": playbook(path, STEP, "{v: 1}")}), 201)
    before = ok(client.get(f"{V1}/schedules"))
    for bad in (
        {"path": path, "cron": "nope"},
        {"path": path, "cron": "* * * * *", "timezone": "Mars/Olympus"},
        {"path": path, "cron": "* * * * *", "payload": {"a": "\u0000"}},
        {"path": path},
        {"cron": "* * * * *"},
        {"path": path, "playbook": "x", "cron": "* * * * *"},
        {"playbook": "kind: nope", "cron": "* * * * *"},
    ):
        answer = client.post(f"{V1}/schedules", json=bad)
        assert answer.status_code == 422, (bad, answer.text)
        assert isinstance(answer.json()["detail"], str) and "\n" not in answer.json()["detail"]
    unknown = client.post(f"{V1}/schedules", json={"path": "tests/api/none", "cron": "* * * * *"})
    assert unknown.status_code == 404
    assert ok(client.get(f"{V1}/schedules")) == before
    assert client.post(f"{V1}/schedules/abc/pause").status_code == 422
