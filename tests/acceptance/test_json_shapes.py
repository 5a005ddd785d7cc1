"""Issue 33, typed responses: what the CLI's `--json` prints is exactly the read model the
HTTP API declares for the same data (the TypedDicts of engine.summaries,
engine.readmodels, engine.catalog, store.rows, web.api_manage): no key more, none less,
no value of another type (tests.support.shapes.exact)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from noetl_celery.engine.catalog import CatalogShow
from noetl_celery.engine.summaries import ExecutionLine, RunSummary, StatusView
from noetl_celery.store.rows import CatalogSummaryJSON, EventJSON, LogJSON, ScheduleJSON
from noetl_celery.web.api_manage import ScheduleChanged, ScheduleRemoved
from tests.support.shapes import exact
from tests.support.workers import run_cli

ROOT = Path(__file__).resolve().parents[2]
HELLO = ROOT / "playbooks" / "examples" / "hello_world.yaml"
pytestmark = pytest.mark.acceptance

# a loop whose second item fails: errors with an item, loops, a raw failure, output
FAILING = """apiVersion: noetl.io/v2
kind: Playbook
metadata: {name: shapes, path: tests/json_shapes}
workflow:
  - step: start
    tool: {kind: noop}
    next: {arcs: [{step: each}]}
  - step: each
    loop: {in: "{{ [1, 2, 3] }}", iterator: x}
    tool:
      kind: python
      input: {x: "{{ iter.x }}"}
      code: |
        print(f"item {x}")
        assert x != 2, "two is bad"
        result = x
"""


def run_json(args: list[str], env: dict[str, str], code: int = 0) -> Any:
    proc = run_cli(args, env)
    assert proc.returncode == code, proc.stderr
    return json.loads(proc.stdout)


def test_json_outputs_are_the_api_read_models(embedded_env: dict[str, str], tmp_path: Path) -> None:
    failing = tmp_path / "failing.yaml"
    failing.write_text(FAILING)
    done = run_json(["run", str(HELLO), "--json"], embedded_env)
    failed = run_json(["run", str(failing), "--json"], embedded_env, code=1)
    exact(RunSummary, done)
    exact(RunSummary, failed)
    assert done["steps"] and failed["errors"][0]["item"] == 1  # the shapes were filled

    lines = run_json(["executions", "--json"], embedded_env)
    exact(list[ExecutionLine], lines)
    assert len(lines) == 2

    for summary in (done, failed):
        view = run_json(["status", summary["execution_id"], "--json"], embedded_env)
        exact(StatusView, view)
    assert view["loops"] and view["errors"] and view["commands"]["failed"] == 1

    events = run_json(["events", failed["execution_id"], "--json"], embedded_env)
    exact(list[EventJSON], events)
    logs = run_json(["logs", failed["execution_id"], "--json"], embedded_env)
    exact(list[LogJSON], logs)
    assert events and logs

    exact(list[CatalogSummaryJSON], run_json(["catalog", "list", "--json"], embedded_env))
    shown = run_json(["catalog", "show", "examples/hello_world", "--json"], embedded_env)
    exact(CatalogShow, shown)

    added = run_json(
        ["schedule", "add", "examples/hello_world", "--cron", "0 6 * * *", "--json"],
        embedded_env,
    )
    exact(ScheduleJSON, added)
    exact(list[ScheduleJSON], run_json(["schedule", "list", "--json"], embedded_env))
    number = str(added["schedule_id"])
    exact(ScheduleChanged, run_json(["schedule", "pause", number, "--json"], embedded_env))
    exact(ScheduleRemoved, run_json(["schedule", "remove", number, "--json"], embedded_env))
