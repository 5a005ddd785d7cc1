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
        [line] = client.executions(playbook="examples/hello_world", trigger="manual", limit=1)
        assert line["execution_id"] == eid and line["trigger"] == "manual"
        assert client.executions(playbook="examples/hello_world", trigger="schedule") == []
