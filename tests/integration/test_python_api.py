"""The Python API: run() and Client, embedded and on real workers."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

import noetl_celery
from noetl_celery.settings import Settings

HELLO = Path(__file__).resolve().parents[2] / "playbooks" / "examples" / "hello_world.yaml"


def test_run_embedded(tmp_path: Path) -> None:
    out = noetl_celery.run(HELLO, {"names": ["Mo"]}, settings=Settings(home=tmp_path))
    assert out["status"] == "COMPLETED"
    assert out["result"]["lines"] == ["Hello World, Mo!"]


def test_run_accepts_yaml_text(tmp_path: Path) -> None:
    text = (
        "apiVersion: noetl.io/v2\nkind: Playbook\nmetadata: {name: t}\nworkflow:\n"
        "  - step: a\n    tool: {kind: python, code: 'result = {\"n\": 2}'}\n"
    )
    assert noetl_celery.run(text, settings=Settings(home=tmp_path))["result"] == {"n": 2}


@pytest.mark.integration
def test_client_on_workers(distributed: dict[str, Any], tmp_path: Path) -> None:
    settings = Settings(
        home=tmp_path, database_url=distributed["url"], broker_url=distributed["redis_url"]
    )
    with noetl_celery.Client(settings) as client:
        registered = client.register(HELLO)
        assert registered["path"] == "examples/hello_world"
        eid = client.submit_path("examples/hello_world", {"names": ["A", "B"]})
        summary = client.wait(eid, timeout=60)
        assert summary["status"] == "COMPLETED" and summary["result"]["greeted"] == 2
        assert client.status(eid)["status"] == "COMPLETED"
        assert client.events(eid)[-1]["type"] == "execution.completed"


FLAKY = """apiVersion: noetl.io/v2
kind: Playbook
metadata: {name: api_flaky, path: tests/api_flaky}
workload: {items: [1, 2, 3, 4], fail_on: [2]}
workflow:
  - step: each
    loop: {in: "{{ items }}", iterator: it}
    tool:
      kind: python
      input: {it: "{{ iter.it }}", fail_on: "{{ fail_on }}"}
      code: |
        print("item", it)
        assert it not in fail_on, f"item {it} fails"
        result = it
"""


def test_client_rerun_logs_and_filtered_events(tmp_path: Path) -> None:
    from noetl_celery.engine.rerun import RerunError
    from noetl_celery.errors import ExecutionNotFound

    with noetl_celery.Client(Settings(home=tmp_path)) as client:
        eid = client.submit(FLAKY)
        client.wait(eid, timeout=60)
        [failed] = client.events(eid, types=["command.failed"])
        assert failed["iteration"] == 1
        assert [e["type"] for e in client.events(eid, limit=1)] == [client.events(eid)[-1]["type"]]
        logs = client.logs(eid, step="each")
        assert [(b["iteration"], b["text"]) for b in logs] == [
            (0, "item 1\n"),
            (1, "item 2\n"),
            (2, "item 3\n"),
            (3, "item 4\n"),
        ]
        again = client.rerun(eid, failed_items=True, overrides={"fail_on": []})
        summary = client.wait(again, timeout=60)
        assert summary["status"] == "COMPLETED"
        assert summary["steps"]["each"]["stats"] == {"total": 1, "success": 1, "failed": 0}
        assert [b["text"] for b in client.logs(again)] == ["item 2\n"]
        status = client.status(again)
        assert (status["trigger"], status["rerun_of"]) == ("rerun", eid)
        with pytest.raises(RerunError, match="no step 'nope'"):
            client.rerun(eid, from_step="nope")
        with pytest.raises(ExecutionNotFound):
            client.rerun("1")
