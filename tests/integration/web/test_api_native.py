"""`/api/v1/executions...` on a real `noetl-celery serve` with real workers: listing and
paging, detail, graph, failed items, events and logs by cursor, start, cancel, rerun."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.support.api import V1, ok, playbook, start, unique, wait_end, wait_for

pytestmark = pytest.mark.integration
PLAYBOOKS = Path(__file__).resolve().parents[2] / "playbooks"

# `n` items, every third (0, 3, ...) fails unless `fix` is set; then a final step
THIRDS = """  - step: start
    tool: {kind: noop}
    next: {arcs: [{step: each}]}
  - step: each
    loop: {in: "{{ range(n) | list }}", iterator: x, spec: {mode: parallel, max_in_flight: 8}}
    tool:
      kind: python
      input: {x: "{{ iter.x }}", fix: "{{ fix }}"}
      code: |
        print(f"item {x}")
        assert fix or x % 3 != 0, f"item {x} is a multiple of three"
        result = x
    next: {arcs: [{step: end, when: "{{ event.name == 'loop.done' }}"}]}
  - step: end
    tool: {kind: noop}
"""

SLOW = """  - step: slow
    loop: {in: "{{ range(200) | list }}", iterator: i, spec: {mode: parallel, max_in_flight: 2}}
    tool: {kind: python, code: "import time; time.sleep(0.2); result = 1"}
"""


@pytest.fixture(scope="module")
def client(served: Any) -> Iterator[httpx.Client]:
    with httpx.Client(base_url=served.url, timeout=30) as http:
        yield http


@pytest.fixture(scope="module")
def thirds(client: httpx.Client) -> dict[str, Any]:
    """An ended execution of 45 items, 15 of them failed."""
    path = unique("thirds")
    text = playbook(path, THIRDS, "{n: 45, fix: false}")
    eid = start(client, text)
    return {"id": eid, "path": path, "text": text, "detail": wait_end(client, eid)}


def test_listing_pages_and_filters(client: httpx.Client) -> None:
    path = unique("listed")
    text = playbook(path, "  - step: only\n    tool: {kind: noop}\n")
    ids = [start(client, text) for _ in range(5)]
    for eid in ids:
        assert wait_end(client, eid)["status"] == "COMPLETED"
    first = ok(client.get(f"{V1}/executions", params={"path": path, "limit": 2}))
    assert (first["total"], first["limit"], first["offset"]) == (5, 2, 0)
    seen = [e["execution_id"] for e in first["executions"]]
    for offset in (2, 4):
        page = ok(
            client.get(f"{V1}/executions", params={"path": path, "limit": 2, "offset": offset})
        )
        assert page["total"] == 5
        seen += [e["execution_id"] for e in page["executions"]]
    assert seen == list(reversed(ids))  # newest first, no gap, no repeat
    line = first["executions"][0]
    assert line["path"] == path and line["items_done"] == 0 and line["items_failed"] == 0
    assert line["trigger"] == "manual" and line["status"] == "COMPLETED"
    filtered = {"path": path, "status": "completed", "trigger": "MANUAL"}
    assert ok(client.get(f"{V1}/executions", params=filtered))["total"] == 5
    assert (
        ok(client.get(f"{V1}/executions", params={"path": path, "status": "FAILED"}))["total"] == 0
    )
    assert ok(client.get(f"{V1}/executions", params={"parent": ids[0]}))["total"] == 0
    for bad in ({"limit": 501}, {"limit": 0}, {"offset": -1}, {"status": "nope"}, {"trigger": "x"}):
        answer = client.get(f"{V1}/executions", params=bad)
        assert answer.status_code == 422, bad
        assert isinstance(answer.json()["detail"], str) and "\n" not in answer.json()["detail"]
    assert "limit" in client.get(f"{V1}/executions", params={"limit": 501}).json()["detail"]


def test_detail_graph_and_items_of_a_failed_loop(
    client: httpx.Client, thirds: dict[str, Any]
) -> None:
    eid, detail = thirds["id"], thirds["detail"]
    assert detail["status"] == "FAILED"
    assert [e["item"] for e in detail["errors"]] == list(range(0, 45, 3))[:15]
    assert detail["failures"][0]["step"] == "each"
    assert detail["children"] == [] and detail["children_total"] == 0
    (loop,) = detail["loops"]
    assert (loop["total"], loop["done"], loop["failed"], loop["finished"]) == (45, 45, 15, True)
    assert loop["started_at"] and loop["rate_per_second"] > 0 and loop["eta_seconds"] == 0.0
    [line] = ok(client.get(f"{V1}/executions", params={"path": thirds["path"]}))["executions"]
    assert (line["items_done"], line["items_failed"]) == (45, 15)

    graph = ok(client.get(f"{V1}/executions/{eid}/graph"))
    assert [(n["step"], n["status"], n["tool"]) for n in graph["nodes"]] == [
        ("start", "completed", "noop"),
        ("each", "failed", "python"),
        ("end", "completed", "noop"),
    ]
    assert graph["edges"][1] == {
        "from": "each",
        "to": "end",
        "when": "{{ event.name == 'loop.done' }}",
    }

    url = f"{V1}/executions/{eid}/failed-items"
    pages = [
        ok(client.get(url, params={"step": "each", "limit": 4, "offset": o})) for o in (0, 4, 8, 12)
    ]
    assert {p["total"] for p in pages} == {15}
    iterations = [i["iteration"] for p in pages for i in p["items"]]
    assert iterations == list(range(0, 45, 3))  # in order, no gap, no repeat
    item = pages[0]["items"][1]
    assert item["value"] == "3" and item["kind"] == "python_error" and item["epoch"] == 1
    assert "multiple of three" in item["message"]
    assert ok(client.get(url, params={"step": "each", "epoch": 2}))["total"] == 0
    assert client.get(url, params={"step": "nope"}).status_code == 422
    assert client.get(url).status_code == 422  # step is required
    assert client.get(url, params={"step": "each", "limit": 501}).status_code == 422

    for suffix in ("", "/graph", "/failed-items?step=each", "/quarantine", "/events", "/logs"):
        missing = client.get(f"{V1}/executions/4242{suffix}")
        assert missing.status_code == 404, suffix
        assert missing.json() == {"detail": "no execution with id 4242"}


def test_events_and_logs_by_cursor(client: httpx.Client, thirds: dict[str, Any]) -> None:
    url = f"{V1}/executions/{thirds['id']}/events"
    everything = ok(client.get(url, params={"limit": 1000}))
    assert everything["left_out"] == 0
    every = [e["event_id"] for e in everything["events"]]
    assert every == sorted(every) and len(every) > 45  # 45 iterations, start, end, ...
    paged: list[int] = []
    since = 0
    while True:
        page = ok(client.get(url, params={"since": since, "limit": 7}))
        paged += [e["event_id"] for e in page["events"]]
        assert page["left_out"] == len(every) - len(paged)
        if not page["events"]:
            assert page["next_since"] == since
            break
        since = page["next_since"]
    assert paged == every  # no gap, no duplicate

    failed = ok(client.get(url, params={"failed": "true", "limit": 1000}))["events"]
    assert {e["type"] for e in failed} <= {"command.failed", "step.failed", "execution.failed"}
    assert sorted(e["iteration"] for e in failed if e["type"] == "command.failed") == list(
        range(0, 45, 3)
    )
    both = ok(client.get(url, params=[("type", "loop.done"), ("type", "execution.failed")]))
    assert [e["type"] for e in both["events"]] == ["loop.done", "execution.failed"]
    assert ok(client.get(url, params={"type": "loop.done", "failed": "true"}))["events"] == []
    steps = ok(client.get(url, params={"step": "start"}))["events"]
    assert steps and {e["step"] for e in steps} == {"start"}
    assert client.get(url, params={"type": "bogus"}).status_code == 422
    assert client.get(url, params={"step": "nope"}).status_code == 422
    assert client.get(url, params={"limit": 1001}).status_code == 422
    assert client.get(url, params={"since": -1}).status_code == 422

    logs_url = f"{V1}/executions/{thirds['id']}/logs"
    blocks = ok(client.get(logs_url, params={"step": "each", "limit": 1000}))["logs"]
    assert sorted(b["iteration"] for b in blocks) == list(range(45))
    assert all(b["text"].startswith(f"item {b['iteration']}") for b in blocks)
    every_block = ok(client.get(logs_url, params={"limit": 1000}))["logs"]
    assert len(every_block) >= len(blocks)  # plus the engine's lines about the execution
    first = ok(client.get(logs_url, params={"limit": 10}))
    assert len(first["logs"]) == 10 and first["left_out"] == len(every_block) - 10
    rest = ok(client.get(logs_url, params={"since": first["next_since"], "limit": 1000}))
    assert first["logs"] + rest["logs"] == every_block
    assert client.get(logs_url, params={"step": "nope"}).status_code == 422


def test_cancel_a_running_loop(client: httpx.Client) -> None:
    eid = start(client, playbook(unique("slow"), SLOW))
    wait_for(client, eid, lambda d: d["loops"] and d["loops"][0]["done"] >= 2)
    running = ok(client.get(f"{V1}/executions/{eid}"))
    (loop,) = running["loops"]
    if not loop["finished"]:
        assert loop["rate_per_second"] and loop["eta_seconds"] and loop["eta_seconds"] > 0
    line = ok(client.get(f"{V1}/executions", params={"status": "RUNNING", "limit": 500}))
    assert eid in [e["execution_id"] for e in line["executions"]]
    answer = ok(client.post(f"{V1}/executions/{eid}/cancel"))
    assert answer["cancelled"] is True and answer["unfinished_rows"] == {}
    assert wait_end(client, eid)["status"] == "CANCELLED"
    again = client.post(f"{V1}/executions/{eid}/cancel")
    assert again.status_code == 409 and "had already ended: CANCELLED" in again.json()["detail"]
    assert client.post(f"{V1}/executions/4242/cancel").status_code == 404


def test_start_by_path_and_by_text(client: httpx.Client) -> None:
    path = unique("started")
    text = playbook(
        path,
        '  - step: only\n    tool: {kind: python, input: {v: "{{ v }}"}, code: "result = v"}\n',
        "{v: 1}",
    )
    eid = start(client, text, {"v": 2})
    assert wait_end(client, eid)["status"] == "COMPLETED"
    by_path = ok(client.post(f"{V1}/executions", json={"path": path, "version": 1}), 201)
    assert wait_end(client, by_path["execution_id"])["path"] == path
    assert client.post(f"{V1}/executions", json={"path": path, "version": 9}).status_code == 404
    assert client.post(f"{V1}/executions", json={"path": "tests/api/none"}).status_code == 404
    for bad in (
        {},
        {"path": path, "playbook": text},
        {"playbook": text, "version": 1},
        {"path": path, "surprise": 1},
        {"path": path, "payload": [1]},
        {"path": path, "payload": {"a": "\u0000"}},
        {"playbook": "kind: nope"},
    ):
        answer = client.post(f"{V1}/executions", json=bad)
        assert answer.status_code == 422, (bad, answer.text)
        assert isinstance(answer.json()["detail"], str)
    invalid = client.post(f"{V1}/executions", json={"playbook": "kind: nope"}).json()
    assert invalid["problems"] and "apiVersion" in invalid["detail"]


def test_reruns(client: httpx.Client, thirds: dict[str, Any]) -> None:
    url = f"{V1}/executions/{thirds['id']}/rerun"
    plain = ok(client.post(url), 201)
    assert plain["rerun_of"] == thirds["id"]
    assert wait_end(client, plain["execution_id"])["status"] == "FAILED"  # same payload

    fixed = ok(client.post(url, json={"failed_items": True, "payload": {"fix": True}}), 201)
    detail = wait_end(client, fixed["execution_id"])
    assert detail["status"] == "COMPLETED" and detail["trigger"] == "rerun"
    assert detail["rerun_of"] == thirds["id"]
    assert [lp["total"] for lp in detail["loops"]] == [15]  # only the failed items ran

    later = ok(client.post(url, json={"from_step": "end"}), 201)
    detail = wait_end(client, later["execution_id"])
    assert detail["status"] == "COMPLETED"
    assert detail["loops"] == [] and detail["commands"]["completed"] == 1  # `end` alone

    assert client.post(url, json={"from_step": "nope"}).status_code == 409
    assert client.post(url, json={"surprise": True}).status_code == 422
    assert client.post(url, json={"payload": "x"}).status_code == 422
    assert client.post(f"{V1}/executions/4242/rerun").status_code == 404
    running = start(client, playbook(unique("slow"), SLOW))
    still = client.post(f"{V1}/executions/{running}/rerun")
    assert still.status_code == 409 and "still RUNNING" in still.json()["detail"]
    ok(client.post(f"{V1}/executions/{running}/cancel"))


def test_children_of_a_parent(client: httpx.Client) -> None:
    child = (PLAYBOOKS / "child_double.yaml").read_text()
    registered = client.post(f"{V1}/catalog", json={"content": child})
    assert registered.status_code in (200, 201)  # 200: this session registered it before
    parent = (PLAYBOOKS / "parent_fanout.yaml").read_text()
    eid = start(client, parent, {"n": 4, "window": 4})
    detail = wait_end(client, eid)
    assert detail["status"] == "COMPLETED", detail
    assert detail["children_total"] == 4
    children = {c["execution_id"] for c in detail["children"]}
    assert all(
        c["trigger"] == "parent" and c["parent_execution_id"] == eid for c in detail["children"]
    )
    listed = ok(client.get(f"{V1}/executions", params={"parent": eid, "trigger": "parent"}))
    assert listed["total"] == 4 and {e["execution_id"] for e in listed["executions"]} == children


def test_every_endpoint_is_documented(client: httpx.Client) -> None:
    paths = ok(client.get("/openapi.json"))["paths"]
    documented = {(m.upper(), p) for p, ops in paths.items() for m in ops}
    base = f"{V1}/executions/{{execution_id}}"
    wanted = {
        ("GET", f"{V1}/executions"),
        ("POST", f"{V1}/executions"),
        ("GET", base),
        ("GET", f"{base}/graph"),
        ("GET", f"{base}/failed-items"),
        ("GET", f"{base}/quarantine"),
        ("POST", f"{base}/quarantine/redrive"),
        ("GET", f"{base}/events"),
        ("GET", f"{base}/logs"),
        ("POST", f"{base}/cancel"),
        ("POST", f"{base}/rerun"),
        ("GET", f"{V1}/catalog"),
        ("POST", f"{V1}/catalog"),
        ("GET", f"{V1}/catalog/{{path}}"),
        ("GET", f"{V1}/schedules"),
        ("POST", f"{V1}/schedules"),
        ("DELETE", f"{V1}/schedules/{{schedule_id}}"),
        *(("POST", f"{V1}/schedules/{{schedule_id}}/{a}") for a in ("pause", "resume", "trigger")),
    }
    assert wanted <= documented, wanted - documented
    assert all(ops[m].get("summary") for p, ops in paths.items() if p.startswith(V1) for m in ops)


def test_quarantined_items(client: httpx.Client, thirds: dict[str, Any]) -> None:
    # the multiples of three quarantined instead of failed: the run completes
    body = THIRDS.replace(
        "spec: {mode: parallel, max_in_flight: 8}",
        "spec: {mode: parallel, max_in_flight: 8, on_item_error: quarantine}",
    )
    eid = start(client, playbook(unique("quarantined"), body, "{n: 9, fix: false}"))
    detail = wait_end(client, eid)
    assert detail["status"] == "COMPLETED" and detail["quarantined"] == 3
    url = f"{V1}/executions/{eid}/quarantine"
    page = ok(client.get(url))
    assert (page["execution_id"], page["total"]) == (eid, 3)
    assert [i["id"] for i in page["items"]] == ["each:1:0", "each:1:3", "each:1:6"]
    assert page["items"][1]["item"] == 3 and page["items"][1]["kind"] == "python_error"
    assert ok(client.get(url, params={"step": "each", "kind": "python_error"}))["total"] == 3
    assert ok(client.get(url, params={"kind": "timeout"}))["total"] == 0
    assert client.get(url, params={"step": "nope"}).status_code == 422
    assert client.get(url, params={"kind": "nope"}).status_code == 422
    # a run whose failures were not quarantined has none
    assert ok(client.get(f"{V1}/executions/{thirds['id']}/quarantine"))["total"] == 0
    # fixed by the payload, redriven: exactly those items run, linked, marked
    redrive = f"{V1}/executions/{eid}/quarantine/redrive"
    started = ok(client.post(redrive, json={"items": ["each:1:3"], "payload": {"fix": True}}), 201)
    assert started["rerun_of"] == eid
    done = wait_end(client, started["execution_id"])
    assert done["status"] == "COMPLETED" and done["rerun_of"] == eid
    marked = {i["id"]: i["redriven_by"] for i in ok(client.get(url))["items"]}
    assert marked == {"each:1:0": None, "each:1:3": started["execution_id"], "each:1:6": None}
    again = client.post(redrive, json={"items": ["each:1:3"]})
    assert again.status_code == 409 and "already redriven" in again.json()["detail"]
    assert client.post(f"{V1}/executions/{thirds['id']}/quarantine/redrive").status_code == 409
