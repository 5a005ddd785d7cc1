"""`noetl-celery quarantine list|show|redrive` on the embedded engine: the items a
quarantine set aside, filtered by step and error kind, one shown in full, redriven in a
linked execution once fixed; bad input exits 2 with one line; `run` says how many were
quarantined."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from tests.support.workers import run_cli

pytestmark = pytest.mark.acceptance

# two loops: `each` quarantines 3 and 7 (python errors) at once, `slow` quarantines 2
# after its retry ran out (a timeout kind would need a real timeout: a python error with
# a retry is enough to show `runs`)
POISONED = """apiVersion: noetl.io/v2
kind: Playbook
metadata: {name: poisoned, path: tests/quarantine_cli}
workload: {bad: [3, 7]}
workflow:
  - step: each
    loop: {in: "{{ range(10) | list }}", iterator: x, spec: {mode: parallel, max_in_flight: 3}}
    tool:
      kind: python
      input: {x: "{{ iter.x }}", bad: "{{ bad }}"}
      code: |
        assert x not in bad, f"item {x} is poisoned"
        result = x
      spec:
        policy:
          rules:
            - when: "{{ output.status == 'error' }}"
              then: {do: quarantine}
    next: {arcs: [{step: other}]}
  - step: other
    loop:
      in: [{id: 1}, {id: 2}]
      iterator: row
      spec: {on_item_error: quarantine}
    tool:
      kind: python
      input: {row: "{{ iter.row }}"}
      code: |
        assert row["id"] != 2, "row 2 is poisoned"
        result = row
      spec:
        policy:
          rules:
            - when: "{{ output.status == 'error' }}"
              then: {do: retry, attempts: 2, delay: 0}
"""


def run_json(args: list[str], env: dict[str, str], code: int = 0) -> Any:
    proc = run_cli(args, env)
    assert proc.returncode == code, proc.stderr
    return json.loads(proc.stdout)


@pytest.fixture
def poisoned(tmp_path: Path, embedded_env: dict[str, str]) -> str:
    path = tmp_path / "poisoned.yaml"
    path.write_text(POISONED)
    proc = run_cli(["run", str(path)], embedded_env)
    assert proc.returncode == 0, proc.stderr  # COMPLETED: only quarantined items failed
    assert "3 loop items quarantined" in proc.stderr
    summary = run_json(["run", str(path), "--json"], embedded_env)
    assert summary["status"] == "COMPLETED" and summary["quarantined"] == 3
    return str(summary["execution_id"])


def test_list_filters_and_show(poisoned: str, embedded_env: dict[str, str]) -> None:
    eid = poisoned
    page = run_json(["quarantine", "list", eid, "--json"], embedded_env)
    assert page["total"] == 3
    assert [i["id"] for i in page["items"]] == ["each:1:3", "each:1:7", "other:1:1"]
    first = page["items"][0]
    assert (first["item"], first["kind"], first["runs"]) == (3, "python_error", 1)
    assert "item 3 is poisoned" in first["message"]
    assert first["error"]["kind"] == "python_error"
    other = page["items"][2]
    assert other["item"] == {"id": 2} and other["runs"] == 2  # its retry ran out
    only = run_json(["quarantine", "list", eid, "--step", "other", "--json"], embedded_env)
    assert [i["id"] for i in only["items"]] == ["other:1:1"]
    kind = run_json(["quarantine", "list", eid, "--kind", "timeout", "--json"], embedded_env)
    assert kind["total"] == 0
    shown = run_json(["quarantine", "show", eid, "each:1:7", "--json"], embedded_env)
    assert shown["item"] == 7 and "item 7 is poisoned" in shown["error"]["message"]
    text = run_cli(["quarantine", "list", eid], embedded_env)
    assert text.returncode == 0 and "each:1:3" in text.stdout and "python_error" in text.stdout
    text = run_cli(["quarantine", "show", eid, "other:1:1"], embedded_env)
    assert text.returncode == 0 and '"id": 2' in text.stdout and "runs: 2" in text.stdout
    # `status` says how many, in its text and its JSON (the loops' column too)
    status = run_cli(["status", eid], embedded_env)
    assert status.returncode == 0 and "3 quarantined" in status.stdout, status.stdout
    view = run_json(["status", eid, "--json"], embedded_env)
    assert view["quarantined"] == 3
    assert {lp["step"]: lp["quarantined"] for lp in view["loops"]} == {"each": 2, "other": 1}


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["list", "{eid}", "--step", "nope"], "no step 'nope'"),
        (["list", "{eid}", "--kind", "timeot"], "unknown error kind 'timeot'; did you mean"),
        (["show", "{eid}", "each-3"], "is not a quarantined item id: use step:epoch:iteration"),
        (["show", "{eid}", "each:1:4"], "has no quarantined item each:1:4"),
        (["list", "4242"], "no execution with id 4242"),
        (["redrive", "{eid}", "each:1:4"], "has no quarantined item each:1:4"),
        (["redrive", "{eid}", "--kind", "timeout"], "no quarantined items of that step and kind"),
        (["redrive", "4242"], "no execution with id 4242"),
        (["redrive", "{eid}"], "are of several steps (each, other): redrive one step at a"),
    ],
)
def test_bad_input_exits_2_with_one_line(
    poisoned: str, embedded_env: dict[str, str], args: list[str], message: str
) -> None:
    proc = run_cli(["quarantine", *(a.format(eid=poisoned) for a in args)], embedded_env)
    assert proc.returncode == 2, proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and message in lines[0], proc.stderr


def test_redrive_after_a_fix_runs_the_items_once(
    poisoned: str, embedded_env: dict[str, str]
) -> None:
    eid = poisoned
    summary = run_json(
        ["quarantine", "redrive", eid, "--step", "each", "--set", "bad=[]", "--json"],
        embedded_env,
    )
    assert summary["status"] == "COMPLETED" and summary["quarantined"] == 0
    assert summary["steps"]["each"]["stats"] == {"total": 2, "success": 2, "failed": 0}
    assert list(summary["steps"]) == ["each"]  # exactly those items: `other` did not run
    new = summary["execution_id"]
    page = run_json(["quarantine", "list", eid, "--json"], embedded_env)
    by = {i["id"]: i["redriven_by"] for i in page["items"]}
    assert by == {"each:1:3": new, "each:1:7": new, "other:1:1": None}
    again = run_cli(["quarantine", "redrive", eid, "each:1:3"], embedded_env)
    assert again.returncode == 2 and f"already redriven: each:1:3 (by {new})" in again.stderr
    executions = run_json(["executions", "--trigger", "rerun", "--json"], embedded_env)
    assert [e["rerun_of"] for e in executions] == [eid]
