"""`rerun`: the same catalog version and payload again, from a step, or over the failed
items of a loop, on real workers."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import psycopg
import pytest

from tests.support.terminal import Spawned
from tests.support.workers import run_cli

pytestmark = [pytest.mark.acceptance, pytest.mark.integration]

FLAKY = """apiVersion: noetl.io/v2
kind: Playbook
metadata: {name: flaky, path: tests/rerun_flaky}
workload: {items: [0, 1, 2, 3, 4, 5, 6, 7, 8, 9], fail_on: [3, 7], trail: "", note: first}
workflow:
  - step: setup
    tool:
      kind: python
      input: {trail: "{{ trail }}"}
      code: |
        with open(trail, "a") as fh:
            fh.write("setup\\n")
        result = {"base": 100}
    next: {arcs: [{step: each}]}
  - step: each
    loop: {in: "{{ items }}", iterator: it, spec: {mode: parallel, max_in_flight: 3}}
    tool:
      kind: python
      input: {it: "{{ iter.it }}", fail_on: "{{ fail_on }}", base: "{{ setup.base }}",
              trail: "{{ trail }}"}
      code: |
        with open(trail, "a") as fh:
            fh.write(f"{it}\\n")
        if it in fail_on:
            raise ValueError(f"item {it} failed on the flag")
        result = {"it": it, "v": base + it}
    next: {arcs: [{step: summarize, when: "{{ event.name == 'loop.done' }}"}]}
  - step: summarize
    tool:
      kind: python
      input: {stats: "{{ each.stats }}", base: "{{ setup.base }}", note: "{{ note }}"}
      code: "result = {'stats': stats, 'base': base, 'note': note}"
"""


@pytest.fixture
def env(distributed: dict[str, Any]) -> dict[str, str]:
    return distributed["env"]


@pytest.fixture
def original(env: dict[str, str], tmp_path: Path) -> dict[str, Any]:
    """A run where items 3 and 7 fail (on the `fail_on` flag of its payload)."""
    playbook = tmp_path / "flaky.yaml"
    playbook.write_text(FLAKY)
    trail = tmp_path / "trail.txt"
    proc = run_cli(["run", str(playbook), "--json", "--set", f"trail={trail}"], env)
    assert proc.returncode in (0, 1), proc.stderr  # failed items may fail the run
    out = json.loads(proc.stdout)
    assert sorted(trail.read_text().split()) == sorted(["setup", *map(str, range(10))])
    trail.write_text("")
    return {"id": out["execution_id"], "trail": trail}


def rerun(args: list[str], env: dict[str, str], codes: tuple[int, ...] = (0,)) -> dict[str, Any]:
    proc = run_cli(["rerun", *args, "--json"], env)
    assert proc.returncode in codes, proc.stderr
    lines = proc.stdout.strip().splitlines()
    assert len(lines) == 1, proc.stdout
    return json.loads(lines[0])


def ran(trail: Path) -> list[str]:
    return sorted(trail.read_text().split())


def executions_row(distributed: dict[str, Any], execution_id: str) -> tuple[Any, ...]:
    dsn = distributed["url"].replace("postgresql+psycopg://", "postgresql://")
    with psycopg.connect(dsn) as conn:
        row = conn.execute(
            "SELECT trigger, rerun_of, trigger_detail, catalog_id, payload FROM executions "
            "WHERE execution_id = %s",
            (execution_id,),
        ).fetchone()
    assert row is not None
    return tuple(row)


def test_failed_items_rerun_exactly_the_failed_items(
    env: dict[str, str], original: dict[str, Any], distributed: dict[str, Any]
) -> None:
    out = rerun([original["id"], "--failed-items", "--set", "fail_on=[]"], env)
    assert out["status"] == "COMPLETED", out["error"]
    assert ran(original["trail"]) == ["3", "7"]  # two iterations, setup not again
    assert out["steps"]["each"]["stats"] == {"total": 2, "success": 2, "failed": 0}
    assert sorted(r["v"] for r in out["steps"]["each"]["results"]) == [103, 107]
    # then on along the flow, with the original's setup result
    assert out["result"] == {
        "stats": {"total": 2, "success": 2, "failed": 0},
        "base": 100,
        "note": "first",
    }
    trigger, rerun_of, detail, catalog_id, payload = executions_row(
        distributed, out["execution_id"]
    )
    assert (trigger, rerun_of) == ("rerun", original["id"])
    assert detail["options"] == {"from": None, "failed_items": True, "set": {"fail_on": []}}
    assert detail["start"]["entry"] == "each" and detail["start"]["items"] == {"each": 2}
    assert catalog_id == executions_row(distributed, original["id"])[3]  # same version
    assert payload["fail_on"] == [] and payload["trail"] == str(original["trail"])
    status = json.loads(run_cli(["status", out["execution_id"], "--json"], env).stdout)
    assert (status["trigger"], status["rerun_of"]) == ("rerun", original["id"])
    # nothing failed this time: a second --failed-items has nothing to do
    proc = run_cli(["rerun", out["execution_id"], "--failed-items"], env)
    assert proc.returncode == 2
    assert proc.stderr.strip() == (
        f"Error: execution {out['execution_id']} has no failed loop items to rerun"
    )


def test_failed_items_that_fail_again_are_counted(
    env: dict[str, str], original: dict[str, Any]
) -> None:
    # a failed item may or may not fail the execution: the counts are what is asserted
    out = rerun([original["id"], "--failed-items", "--set", "fail_on=[7]"], env, codes=(0, 1))
    assert ran(original["trail"]) == ["3", "7"]
    assert out["steps"]["each"]["stats"] == {"total": 2, "success": 1, "failed": 1}


def test_from_a_step_keeps_earlier_results_and_variables(
    env: dict[str, str], original: dict[str, Any]
) -> None:
    out = rerun([original["id"], "--from", "summarize", "--set", "note=again"], env)
    assert out["status"] == "COMPLETED"
    assert ran(original["trail"]) == []  # only summarize ran
    # `{{ each.stats }}` and `{{ setup.base }}` render the original's results
    assert out["result"] == {
        "stats": {"total": 10, "success": 8, "failed": 2},
        "base": 100,
        "note": "again",
    }
    events = json.loads(run_cli(["events", out["execution_id"], "--json"], env).stdout)
    assert [e["step"] for e in events if e["type"] == "command.completed"] == ["summarize"]

    whole_loop = rerun([original["id"], "--from", "each", "--set", "fail_on=[]"], env)
    assert whole_loop["status"] == "COMPLETED"
    assert ran(original["trail"]) == sorted(map(str, range(10)))  # all items, no setup


def test_a_plain_rerun_starts_over_with_the_payload(
    env: dict[str, str], original: dict[str, Any]
) -> None:
    out = rerun([original["id"], "--set", "fail_on=[]"], env)
    assert out["status"] == "COMPLETED"
    assert ran(original["trail"]) == sorted(["setup", *map(str, range(10))])
    assert out["steps"]["each"]["stats"]["failed"] == 0


def test_no_wait_prints_the_id(env: dict[str, str], original: dict[str, Any]) -> None:
    proc = run_cli(["rerun", original["id"], "--failed-items", "--no-wait"], env)
    assert proc.returncode == 0, proc.stderr
    new_id = proc.stdout.strip()
    watched = run_cli(["watch", new_id, "--json"], env)
    assert watched.returncode in (0, 1) and json.loads(watched.stdout)["execution_id"] == new_id


def test_rerun_bad_input(env: dict[str, str], original: dict[str, Any], tmp_path: Path) -> None:
    eid = original["id"]
    for args, message in (
        (["777"], "no execution with id 777"),
        ([eid, "--from", "nope"], "no step 'nope' in tests/rerun_flaky"),
        ([eid, "--set", "novalue"], "expected KEY=VALUE"),
        ([eid, "--timeout", "-2"], "--timeout"),
    ):
        proc = run_cli(["rerun", *args], env)
        assert proc.returncode == 2, (args, proc.stderr)
        assert message in proc.stderr and "Traceback" not in proc.stderr
        assert proc.stdout == ""
    # a rerun repeats an ended execution
    slow = tmp_path / "slow.yaml"
    slow.write_text(
        "apiVersion: noetl.io/v2\nkind: Playbook\nmetadata: {name: s, path: tests/rerun_slow}\n"
        "workflow:\n  - step: a\n    tool: {kind: python, code: 'import time; time.sleep(4)'}\n"
    )
    runner = Spawned(["run", str(slow)], env, tty=False)
    try:
        running = runner.expect(r"execution (\d+) started").group(1)
        proc = run_cli(["rerun", running], env)
        assert proc.returncode == 2
        assert f"execution {running} is still RUNNING" in proc.stderr
        assert runner.wait() == 0
    finally:
        runner.kill()


def test_no_wait_needs_workers(embedded_env: dict[str, str], tmp_path: Path) -> None:
    hello = Path(__file__).resolve().parents[2] / "playbooks" / "examples" / "hello_world.yaml"
    out = json.loads(run_cli(["run", str(hello), "--json"], embedded_env).stdout)
    proc = run_cli(["rerun", out["execution_id"], "--no-wait"], embedded_env)
    assert proc.returncode == 2 and "--no-wait needs workers" in proc.stderr
    again = rerun([out["execution_id"]], embedded_env)  # embedded: waits, on its threads
    assert again["status"] == "COMPLETED" and again["result"] == out["result"]
