"""`NOETL_RECORD_PASSES`: a recorded pass holds everything needed to decide it again."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from noetl_celery.models.validation import load_playbook
from noetl_celery.orchestrator.decide import decide, start
from noetl_celery.orchestrator.decisions import Completion, Limits
from noetl_celery.orchestrator.ids import iteration_command_id
from noetl_celery.orchestrator.recording import RecordingFacts, replay
from noetl_celery.passes.pass_recorder import PassRecorder
from noetl_celery.settings import Settings
from tests.unit.orchestrator.sim import Sim, ok

PLAYBOOK = """\
apiVersion: noetl.io/v2
kind: Playbook
metadata: {name: recorded}
workflow:
  - step: first
    tool: {kind: noop}
    next: {arcs: [{step: each}]}
  - step: each
    loop: {in: "{{ first.items }}", iterator: item, spec: {mode: parallel, max_in_flight: 2}}
    tool: {kind: noop}
"""


def test_a_recorded_pass_replays_from_its_file(tmp_path: Path) -> None:
    playbook = load_playbook(PLAYBOOK)
    sim = Sim(playbook, lambda step, item, i: ok())
    limits = Limits()
    sim.apply(start(playbook, "e1", None, sim, limits, now=5.0))
    assert sim.state is not None
    done = Completion(7, "e1:first:1", "first", 1, None, ok({"items": [1, 2]}))
    sim.apply(decide(playbook, sim.state, [done], sim, limits, 6.0))
    state = sim.state
    # the loop's two iterations finish: the pass reads their results (facts)
    iterations = [
        Completion(8 + i, iteration_command_id("e1", "each", 1, i), "each", 1, i, ok(i))
        for i in range(2)
    ]
    for c in iterations:
        sim.events.append(
            {"step": "each", "epoch": 1, "iteration": c.iteration, "outcome": c.outcome.to_json()}
        )
    facts = RecordingFacts(sim)
    decision = decide(playbook, state, iterations, facts, limits, 10.0)
    recorder = PassRecorder(tmp_path)
    for _ in range(2):  # the playbook is stored once however many passes use it
        recorder.write(
            playbook_text=PLAYBOOK,
            state=state,
            completions=iterations,
            facts=facts,
            now=10.0,
            limits=limits,
            decision=decision,
        )
    [path] = tmp_path.glob("*.json")
    assert path.name == "e1-000000008-2.json"
    record: dict[str, Any] = json.loads(path.read_text())
    assert record["now"] == 10.0 and record["completions"][1]["event_id"] == 9
    [yaml_file] = (tmp_path / "playbooks").glob("*.yaml")
    assert yaml_file.stem == record["playbook"]["sha256"]
    assert yaml_file.read_text() == PLAYBOOK
    assert record["facts"] == [
        {"call": "iteration_results", "args": ["each", 1, 100], "answer": [0, 1]}
    ]
    assert replay(record, load_playbook(yaml_file.read_text())) == record["decision"]
    assert record["decision"]["terminal"]["status"] == "COMPLETED"


def test_recording_is_off_unless_asked() -> None:
    assert Settings.from_env({}).record_passes == ""
    assert Settings.from_env({"NOETL_RECORD_PASSES": " /tmp/x "}).record_passes == "/tmp/x"


def test_a_recorded_first_pass_replays_with_its_rerun_inputs(tmp_path: Path) -> None:
    playbook = load_playbook(PLAYBOOK)
    sim = Sim(playbook, lambda step, item, i: ok())
    inputs: dict[str, Any] = {
        "entry": "each",
        "variables": {"x": 1},
        "results": {"first": {"items": [1, 2, 3]}},
        "loop_items": {"each": [2]},
    }
    facts = RecordingFacts(sim)
    decision = start(playbook, "e2", {"p": 1}, facts, Limits(), now=3.0, **inputs)
    PassRecorder(tmp_path).write_start(
        playbook_text=PLAYBOOK,
        execution_id="e2",
        payload={"p": 1},
        inputs=inputs,
        facts=facts,
        now=3.0,
        limits=Limits(),
        decision=decision,
    )
    [path] = tmp_path.glob("*.json")
    record: dict[str, Any] = json.loads(path.read_text())
    assert record["state"] is None and record["start"]["entry"] == "each"
    assert record["decision"]["plans"][0]["items"] == [2]
    assert replay(record, playbook) == record["decision"]
    record["start"]["loop_items"] = {"each": [3]}
    assert replay(record, playbook) != record["decision"]
