"""`events` filters and --follow; `logs`: what commands printed and logged, per command,
capped, redacted."""

from __future__ import annotations

import json
import re
import time
from pathlib import Path
from typing import Any

import psycopg
import pytest

from noetl_celery.constants import FAILURE_EVENTS
from tests.support.terminal import Spawned
from tests.support.workers import run_cli

pytestmark = pytest.mark.acceptance

CANARY = "canary-pw-7d1e0b-never-shown"  # the `unused_canary` password (tests/conftest.py)

FLAKY = """apiVersion: noetl.io/v2
kind: Playbook
metadata: {name: flaky, path: tests/history_flaky}
workload: {items: [0, 1, 2, 3, 4, 5, 6, 7, 8, 9], fail_on: [3, 7]}
workflow:
  - step: setup
    tool: {kind: python, code: "result = {'base': 100}"}
    next: {arcs: [{step: each}]}
  - step: each
    loop: {in: "{{ items }}", iterator: it, spec: {mode: parallel, max_in_flight: 3}}
    tool:
      kind: python
      input: {it: "{{ iter.it }}", fail_on: "{{ fail_on }}"}
      code: |
        if it in fail_on:
            raise ValueError(f"item {it} failed")
        result = {"it": it}
    next: {arcs: [{step: done, when: "{{ event.name == 'loop.done' }}"}]}
  - step: done
    tool: {kind: noop}
"""

CHATTY = """apiVersion: noetl.io/v2
kind: Playbook
metadata: {name: chatty, path: tests/chatty}
workload: {items: [0, 1, 2, 3, 4, 5], pw: none, big: 0, pause: 0}
workflow:
  - step: quiet
    tool: {kind: python, code: "result = {'n': 1}"}
    next: {arcs: [{step: talk}]}
  - step: talk
    loop: {in: "{{ items }}", iterator: it, spec: {mode: parallel, max_in_flight: 4}}
    tool:
      kind: python
      input: {it: "{{ iter.it }}", pw: "{{ pw }}", pause: "{{ pause }}"}
      code: |
        import logging, time
        print(f"printed by item {it}: secret {pw}")
        print("odd:\\x00:\\udcff:end")  # text no database column takes as is
        time.sleep(pause)
        logging.info("logged by item %s with %s", it, pw)
        logging.getLogger("step.own").warning("warned by item %s", it)
        result = {"it": it}
    next: {arcs: [{step: flood, when: "{{ event.name == 'loop.done' }}"}]}
  - step: flood
    tool:
      kind: python
      input: {big: "{{ big }}"}
      code: |
        for n in range(big):
            print(f"line {n:06d} " + "x" * 90)
        result = {"printed": big}
"""


def write(tmp_path: Path, name: str, text: str) -> Path:
    path = tmp_path / name
    path.write_text(text)
    return path


def run_json(args: list[str], env: dict[str, str], code: int = 0) -> Any:
    proc = run_cli(args, env)
    assert proc.returncode == code, proc.stderr
    return json.loads(proc.stdout)


def run_json_any(args: list[str], env: dict[str, str]) -> Any:
    """For runs whose failed items may or may not fail the execution."""
    proc = run_cli(args, env)
    assert proc.returncode in (0, 1), proc.stderr
    return json.loads(proc.stdout)


@pytest.fixture
def flaky_run(embedded_env: dict[str, str], tmp_path: Path) -> str:
    out = run_json_any(["run", str(write(tmp_path, "flaky.yaml", FLAKY)), "--json"], embedded_env)
    return str(out["execution_id"])


# ---- events ---------------------------------------------------------------------------------


def test_events_filters(embedded_env: dict[str, str], tmp_path: Path) -> None:
    env = embedded_env
    eid = run_json_any(["run", str(write(tmp_path, "flaky.yaml", FLAKY)), "--json"], env)[
        "execution_id"
    ]
    every = run_json(["events", eid, "--json", "--limit", "0"], env)
    assert len(every) == len(run_json(["events", eid, "--json"], env))  # < 200: all shown

    failed = run_json(["events", eid, "--failed", "--json"], env)
    assert {e["type"] for e in failed} <= FAILURE_EVENTS
    assert sorted(e["iteration"] for e in failed if e["type"] == "command.failed") == [3, 7]
    assert failed == [e for e in every if e["type"] in FAILURE_EVENTS]

    [done] = run_json(["events", eid, "--type", "loop.done", "--json"], env)
    assert done["payload"]["stats"] == {"total": 10, "success": 8, "failed": 2}
    two = run_json(
        ["events", eid, "--type", "loop.done", "--type", "execution.started", "--json"], env
    )
    assert [e["type"] for e in two] == ["execution.started", "loop.done"]

    completed = run_json(
        ["events", eid, "--type", "command.completed", "--step", "each", "--json"], env
    )
    assert sorted(e["iteration"] for e in completed) == [0, 1, 2, 4, 5, 6, 8, 9]
    setup = run_json(["events", eid, "--step", "setup", "--json"], env)
    assert [(e["type"], e["step"]) for e in setup] == [("command.completed", "setup")]
    # filters combine: failures that are loop.done, i.e. none
    assert run_json(["events", eid, "--type", "loop.done", "--failed", "--json"], env) == []

    newest = run_cli(["events", eid, "--limit", "3"], env)
    assert newest.returncode == 0
    shown = newest.stdout.strip().splitlines()
    assert len(shown) == 3 and shown[-1].split()[0] == str(every[-1]["event_id"])
    assert f"{len(every) - 3} earlier events not shown (--limit 0 shows all)" in newest.stderr
    limited = run_json(["events", eid, "--limit", "3", "--json"], env)
    assert [e["event_id"] for e in limited] == [e["event_id"] for e in every[-3:]]


def test_events_bad_input(flaky_run: str, embedded_env: dict[str, str]) -> None:
    for args, message in (
        (["--type", "loop.finished"], "unknown event type 'loop.finished'"),
        (["--step", "nope"], "no step 'nope' in tests/history_flaky (steps: setup, each, done)"),
        (["--limit", "-1"], "--limit"),
    ):
        proc = run_cli(["events", flaky_run, *args], embedded_env)
        assert proc.returncode == 2 and message in proc.stderr, proc.stderr
        assert "Traceback" not in proc.stderr and proc.stdout == ""
    unknown = run_cli(["events", "987"], embedded_env)
    assert unknown.returncode == 2 and unknown.stderr.strip() == "Error: no execution with id 987"


def test_events_and_logs_follow_a_running_execution(
    embedded_env: dict[str, str], tmp_path: Path
) -> None:
    env = embedded_env
    chatty = write(tmp_path, "chatty.yaml", CHATTY)
    runner = Spawned(
        ["run", str(chatty), "--set", "pause=1", "--set", f"items={list(range(12))}"],
        env,
        tty=False,
    )
    try:
        eid = runner.expect(r"execution (\d+) started").group(1)
        events = Spawned(
            ["events", eid, "--follow", "--type", "command.completed", "--json"], env, tty=False
        )
        logs = Spawned(["logs", eid, "--follow", "--step", "talk"], env, tty=False)
        assert events.wait() == 0 and logs.wait() == 0
        assert runner.wait() == 0
        ended = time.monotonic()
    finally:
        runner.kill()
    lines = [json.loads(line) for _, line in events.stdout_lines]  # one object a line
    assert [e["step"] for e in lines].count("talk") == 12
    assert {e["type"] for e in lines} == {"command.completed"}
    assert [e["event_id"] for e in lines] == sorted(e["event_id"] for e in lines)
    # followed: lines came while the execution ran, not all at its end
    assert events.stdout_lines[0][0] < ended - 1.0
    assert len(re.findall(r"^=== talk\[\d+\]  command ", logs.stdout, re.MULTILINE)) == 12
    assert logs.stdout_lines[0][0] < ended - 1.0


# ---- logs -----------------------------------------------------------------------------------


def check_blocks(blocks: list[dict[str, Any]], eid: str, items: int) -> None:
    """One block per loop command, holding its own lines only; none for a silent step."""
    talk = [b for b in blocks if b["step"] == "talk"]
    assert sorted(b["iteration"] for b in talk) == list(range(items))
    for block in talk:
        it = block["iteration"]
        assert block["command_id"] == f"{eid}:talk:1:{it}"
        text = block["text"]
        assert f"printed by item {it}: secret ***\n" in text
        assert re.search(rf" INFO root: logged by item {it} with \*\*\*\n", text), text
        assert f" WARNING step.own: warned by item {it}\n" in text
        assert "odd:\ufffd:\ufffd:end\n" in text
        others = {int(n) for n in re.findall(r"by item (\d+)", text)}
        assert others == {it}, text  # nothing from the commands running beside it
        assert block["truncated"] is False
    assert not [b for b in blocks if b["step"] == "quiet"]  # printed nothing: no row


@pytest.mark.integration
def test_logs_on_workers(distributed: dict[str, Any], tmp_path: Path) -> None:
    env = distributed["env"]
    chatty = write(tmp_path, "chatty.yaml", CHATTY)
    out = run_json(
        ["run", str(chatty), "--json", "--set", f"pw={CANARY}", "--set", "big=1000"], env
    )
    eid = out["execution_id"]
    proc = run_cli(["logs", eid, "--json", "--limit", "0"], env)
    assert proc.returncode == 0, proc.stderr
    blocks = json.loads(proc.stdout)
    check_blocks(blocks, eid, 6)
    # the default cap (64 KiB) keeps the head of a flood and says so
    [flood] = [b for b in blocks if b["step"] == "flood"]
    assert flood["truncated"] is True and flood["command_id"] == f"{eid}:flood:1"
    assert flood["text"].startswith("line 000000 ")
    assert 60_000 < len(flood["text"].encode()) <= 64 * 1024
    text = run_cli(["logs", eid, "--step", "flood"], env).stdout
    assert text.startswith(f"=== flood  command {eid}:flood:1  ")
    assert text.rstrip().endswith("[... truncated: NOETL_LOG_CAPTURE_BYTES]")
    # no secret anywhere: the stored rows, what the commands show, the workers' logs
    assert CANARY not in proc.stdout
    assert CANARY not in run_cli(["events", eid, "--json", "--limit", "0"], env).stdout
    dsn = distributed["url"].replace("postgresql+psycopg://", "postgresql://")
    with psycopg.connect(dsn) as conn:
        rows = conn.execute("SELECT text FROM command_logs WHERE execution_id = %s", (eid,))
        stored = [r[0] for r in rows]
    assert len(stored) == len(blocks) == 7  # 6 items and the flood; `quiet` said nothing
    assert not [t for t in stored if CANARY in t]
    for worker in distributed["workers"]:
        assert CANARY not in worker.log.read_text(errors="replace")


def test_logs_embedded_threads_cap_and_echo(embedded_env: dict[str, str], tmp_path: Path) -> None:
    env = {**embedded_env, "NOETL_LOG_CAPTURE_BYTES": "2000"}
    chatty = write(tmp_path, "chatty.yaml", CHATTY)
    proc = run_cli(["run", str(chatty), "--json", "--set", f"pw={CANARY}", "--set", "big=50"], env)
    assert proc.returncode == 0, proc.stderr
    eid = json.loads(proc.stdout)["execution_id"]
    # still echoed on stderr as before (redacted), INFO lines kept out of it
    assert "printed by item 3: secret ***" in proc.stderr and CANARY not in proc.stderr
    assert "logged by item" not in proc.stderr and "warned by item 3" in proc.stderr
    blocks = run_json(["logs", eid, "--json"], env)
    check_blocks(blocks, eid, 6)  # four threads at once, each command its own lines
    [flood] = [b for b in blocks if b["step"] == "flood"]
    assert flood["truncated"] is True and len(flood["text"].encode()) <= 2000
    assert CANARY not in json.dumps(blocks)
    only = run_json(["logs", eid, "--step", "talk", "--limit", "2", "--json"], env)
    assert len(only) == 2 and {b["step"] for b in only} == {"talk"}
    assert only == [b for b in blocks if b["step"] == "talk"][-2:]
    bad = run_cli(["logs", eid, "--step", "nope"], env)
    assert bad.returncode == 2 and "no step 'nope'" in bad.stderr
    unknown = run_cli(["logs", "4242"], env)
    assert unknown.returncode == 2 and "no execution with id 4242" in unknown.stderr
    off = {**embedded_env, "NOETL_LOG_CAPTURE_BYTES": "0"}
    quiet = run_json(["run", str(chatty), "--json"], off)
    assert run_json(["logs", quiet["execution_id"], "--json"], off) == []
