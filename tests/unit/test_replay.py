"""The core is deterministic: every recorded pass (tests/fixtures/passes, recorded from
integration runs on real Postgres, Redis and Celery workers) decided again from its
record alone gives the decision it gave then (Temporal's replay test)."""

from __future__ import annotations

import json
from functools import cache
from pathlib import Path
from typing import Any

import pytest

from noetl_celery.errors import ReplayError, StoreInterrupted
from noetl_celery.models.outcome import Outcome
from noetl_celery.models.playbook import Playbook
from noetl_celery.models.validation import load_playbook
from noetl_celery.orchestrator.decide import decide, start
from noetl_celery.orchestrator.decisions import Completion, Limits
from noetl_celery.orchestrator.recording import (
    ReplayFacts,
    completion_from_json,
    decision_to_json,
    limits_from_json,
    replay,
)
from noetl_celery.orchestrator.state import ExecutionState, Lane, LoopProgress, copy_state

PASSES = Path(__file__).resolve().parents[1] / "fixtures" / "passes"
RECORDS = sorted(PASSES.glob("*.json"))


def load(path: Path) -> dict[str, Any]:
    record: dict[str, Any] = json.loads(path.read_text())
    return record


@cache
def playbook_of(directory: Path, sha256: str) -> Playbook:
    return load_playbook((directory / "playbooks" / f"{sha256}.yaml").read_text())


def playbook_for(record: dict[str, Any], directory: Path = PASSES) -> Playbook:
    return playbook_of(directory, record["playbook"]["sha256"])


@pytest.mark.parametrize("path", RECORDS, ids=[p.stem for p in RECORDS])
def test_a_recorded_pass_replays_to_its_decision(path: Path) -> None:
    record = load(path)
    assert replay(record, playbook_for(record)) == record["decision"]


def _playbook_texts() -> list[str]:
    shas = {load(path)["playbook"]["sha256"] for path in RECORDS}
    return [(PASSES / "playbooks" / f"{sha}.yaml").read_text() for sha in shas]


def test_the_recorded_passes_cover_the_engines_features() -> None:
    assert len(RECORDS) >= 30
    assert sum(load(path).get("start") is not None for path in RECORDS) >= 5  # first passes
    texts = _playbook_texts()

    def playbooks_with(*words: str) -> int:
        return sum(all(word in text for word in words) for text in texts)

    assert playbooks_with("loop:", "in:") >= 3
    assert playbooks_with("cursor:") >= 2
    assert playbooks_with("kind: playbook") >= 2
    assert playbooks_with("policy:", "retry") >= 1
    assert playbooks_with("policy:", "do: jump") >= 1
    assert playbooks_with("cancel") >= 1  # the cursor drain the cancellation test stops
    kinds = {
        (c["outcome"].get("error") or {}).get("kind")
        for path in RECORDS
        for c in load(path)["completions"]
    }
    assert {"python_error", "child_failed", "timeout"} <= kinds
    decided = [load(path)["decision"] for path in RECORDS]
    assert {"COMPLETED", "FAILED"} <= {(d["terminal"] or {}).get("status") for d in decided}
    assert any(e["type"] == "loop.done" for d in decided for e in d["events"])
    # the fan-in barrier: a pass that leaves an arrival waiting, one that passes it
    assert any((d["state"] or {}).get("joins") for d in decided)
    assert any(
        (load(path)["state"] or {}).get("joins") and load(path)["decision"]["commands"]
        for path in RECORDS
    )
    # a waiting join keeps its last arrival's arc (join_arcs); unmatched targets of an
    # inclusive router are skipped
    assert any((d["state"] or {}).get("join_arcs") for d in decided)
    assert any(
        e["type"] == "step.skipped" and (e["payload"] or {}).get("reason") == "inclusive"
        for d in decided
        for e in d["events"]
    )
    assert any(d["plans"] for d in decided) and any(d["issues"] for d in decided)
    # a cursor frame's per-row bodies run with its claim, one of them parked (in flight)
    bodies = [
        (c["outcome"].get("result") or {}).get("bodies") or []
        for path in RECORDS
        for c in load(path)["completions"]
        if isinstance(c["outcome"].get("result"), dict)
    ]
    assert any(b for b in bodies) and any({"parked": True} in b for b in bodies)
    assert sum(f.stat().st_size for f in PASSES.rglob("*") if f.is_file()) < 2_000_000


def test_a_pass_whose_core_read_the_wall_clock_is_detected() -> None:
    """The fixture's decision rendered `now()` from the wall clock, not from its `now`:
    the replay must not reproduce it (the suite would catch such a core)."""
    directory = PASSES / "nondeterministic"
    [path] = directory.glob("*.json")
    record = load(path)
    replayed = replay(record, playbook_for(record, directory))
    assert replayed != record["decision"]
    stamped = replayed["state"]["vars"]["stamped_at"]
    assert stamped == "2023-11-14T22:13:20+00:00"  # the record's now, 1_700_000_000
    assert record["decision"]["state"]["vars"]["stamped_at"] != stamped


def test_a_replay_refuses_a_fact_the_record_lacks() -> None:
    """Every recorded pass that read history fails to replay without its answers, even
    one that read them inside a template (an arc's `when`): a missing answer is never
    turned into the step's template failure."""
    reading = [r for r in map(load, RECORDS) if r["facts"]]
    assert reading, "no recorded pass reads facts"
    for recorded in reading:
        record = {**recorded, "facts": []}
        with pytest.raises(ReplayError, match="not recorded"):
            replay(record, playbook_for(record))


def test_replay_facts_answer_copies() -> None:
    facts = ReplayFacts([{"call": "result", "args": ["a", 1], "answer": {"rows": [1]}}])
    first = facts.result("a", 1)
    first["rows"].append(2)
    assert facts.result("a", 1) == {"rows": [1]}


PASSES_WITH_STATE = [p for p in RECORDS if load(p)["state"] is not None][::7]


@pytest.mark.parametrize("path", PASSES_WITH_STATE, ids=[p.stem for p in PASSES_WITH_STATE])
def test_the_same_pass_twice_decides_the_same_and_leaves_its_state(path: Path) -> None:
    record = load(path)
    state = ExecutionState.from_json(record["state"])
    before = json.dumps(state.to_json(), sort_keys=True)
    decisions = [
        decision_to_json(
            decide(
                playbook_for(record),
                state,
                [completion_from_json(c) for c in record["completions"]],
                ReplayFacts(record["facts"]),
                limits_from_json(record["limits"]),
                record["now"],
            )
        )
        for _ in range(2)
    ]
    assert decisions[0] == decisions[1] == record["decision"]
    assert json.dumps(state.to_json(), sort_keys=True) == before


STAMPED = """\
apiVersion: noetl.io/v2
kind: Playbook
metadata: {name: stamped}
workflow:
  - step: start
    tool: {kind: noop}
    set: {stamped_at: "{{ now() }}"}
"""


class NoFacts:
    def result(self, step: str, epoch: int) -> Any:
        raise AssertionError("not read")

    def iteration_results(self, step: str, epoch: int, limit: int) -> list[Any]:
        raise AssertionError("not read")


def test_now_in_a_template_is_the_passes_time() -> None:
    playbook = load_playbook(STAMPED)
    first = start(playbook, "e1", None, NoFacts(), now=0.0)
    done = Completion(1, "e1:start:1", "start", 1, None, Outcome("ok"))
    decision = decide(playbook, first.state, [done], NoFacts(), Limits(), 86_400.5)
    assert decision.state.vars["stamped_at"] == "1970-01-02T00:00:00.500000+00:00"


def test_a_variable_called_now_still_wins_over_the_passes_time() -> None:
    playbook = load_playbook(STAMPED.replace("{{ now() }}", "{{ now }}"))
    first = start(playbook, "e1", {"now": "mine"}, NoFacts(), now=0.0)
    done = Completion(1, "e1:start:1", "start", 1, None, Outcome("ok"))
    decision = decide(playbook, first.state, [done], NoFacts(), Limits(), 0.0)
    assert decision.state.vars["stamped_at"] == "mine"


def test_the_state_copy_shares_nothing_a_pass_changes() -> None:
    state = ExecutionState("e1", vars={"items": list(range(10_000))})
    state.step("each").loop = LoopProgress(
        epoch=1,
        total=10_000,
        window=4,
        lanes=[Lane()],
        errors=[{"item": 1, "kind": "python_error", "message": "m"}],
    )
    state.failures.append({"step": "each", "epoch": 1, "message": "m"})
    copied = copy_state(state)
    assert copied == state
    copied.vars["x"] = 1
    copied.step("each").epoch = 2
    loop = copied.step("each").loop
    assert loop is not None and loop.lanes is not None
    loop.succeeded = 5
    loop.lanes[0].frame = 3
    loop.errors.append({"item": 2, "kind": "python_error", "message": "m"})
    copied.failures.append({"step": "other", "epoch": 1, "message": "m"})
    copied.step("new")
    assert state == ExecutionState.from_json(json.loads(json.dumps(state.to_json())))
    assert "x" not in state.vars and state.steps["each"].epoch == 0 and "new" not in state.steps
    original = state.steps["each"].loop
    assert original is not None and original.lanes is not None
    assert original.succeeded == 0 and original.lanes[0].frame == 0
    assert len(original.errors) == 1 and len(state.failures) == 1


class _DatabaseAway(ReplayFacts):
    """Facts whose every read fails as the store's do when its database is away."""

    def result(self, step: str, epoch: int) -> Any:
        raise StoreInterrupted("the connection was lost while reading a result")

    def iteration_results(self, step: str, epoch: int, limit: int) -> list[Any]:
        raise StoreInterrupted("the connection was lost while reading results")


def test_history_that_cannot_be_read_ends_the_pass_instead_of_failing_a_step() -> None:
    """A pass whose templates read step results (an arc's `when`, a `set`) when the
    database goes away must raise the StoreError (the pass rolls back and runs again),
    never record the step as failed with the database's words as its error."""
    reading = [r for r in map(load, RECORDS) if r["facts"] and r["state"] is not None]
    assert reading, "no recorded pass reads facts"
    for record in reading:
        with pytest.raises(StoreInterrupted):
            decide(
                playbook_for(record),
                ExecutionState.from_json(record["state"]),
                [completion_from_json(c) for c in record["completions"]],
                _DatabaseAway([]),
                limits_from_json(record["limits"]),
                record["now"],
            )
