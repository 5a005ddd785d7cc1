"""`start()` inputs of a rerun: entry step, variables, earlier results, loop items."""

from __future__ import annotations

from typing import Any

from noetl_celery.models.outcome import Outcome
from noetl_celery.orchestrator.decide import merge_payload, start
from noetl_celery.orchestrator.state import ExecutionState
from tests.unit.orchestrator.sim import Sim, err, ok, playbook

FLOW = playbook("""apiVersion: noetl.io/v2
kind: Playbook
metadata: {name: flow}
workload: {items: [10, 11, 12, 13, 14], bad: [], tag: w}
workflow:
  - step: setup
    tool: {kind: python, code: 'result = 1'}
    next: {arcs: [{step: each}]}
  - step: each
    loop: {in: '{{ items }}', iterator: it, spec: {mode: parallel, max_in_flight: 2}}
    tool: {kind: python, code: 'result = 1'}
    next: {arcs: [{step: other, when: '{{ event.name == "loop.done" }}'}]}
  - step: other
    loop: {in: '{{ [setup.base, tag] }}', iterator: x}
    tool: {kind: python, code: 'result = 1'}
    next: {arcs: [{step: again, when: '{{ event.name == "loop.done" }}'}]}
  - step: again
    tool: {kind: noop}
""")


def runner(bad: set[Any] | None = None) -> Any:
    def run(step: str, item: Any, iteration: int | None) -> Outcome:
        if bad and item in bad:
            return err(f"{item} failed")
        return ok({"step": step, "item": item})

    return run


def test_a_plain_start_is_unchanged() -> None:
    sim = Sim(FLOW, runner())
    state = sim.run(results=None)  # no inputs: the first step, workload + payload
    assert state.status == "COMPLETED"
    assert sim.steps_ran()[0] == "setup"
    assert [i for s, i in sim.ran if s == "each"] == [0, 1, 2, 3, 4]


def test_entry_variables_and_results_start_mid_flow() -> None:
    sim = Sim(FLOW, runner())
    state = sim.run(
        {"tag": "ignored: variables are given"},
        entry="other",
        variables={"tag": "v", "items": []},
        results={"setup": {"base": 7}},
    )
    assert state.status == "COMPLETED"
    assert sim.steps_ran() == ["again"]  # setup and each never ran
    # `{{ setup.base }}` rendered the copied result; `tag` came from the variables
    assert [i for s, i in sim.ran if s == "other"] == [0, 1]
    other = [e for e in sim.decisions[0].plans if e.step == "other"]
    assert other[0].items == [7, "v"]
    # the copied result is epoch 0 of its step, and nothing ran it
    first = sim.decisions[0]
    assert [(r.step, r.epoch, r.data) for r in first.results] == [("setup", 0, {"base": 7})]
    assert state.steps["setup"].epoch == 0 and state.steps["setup"].result_epoch == 0


def test_loop_items_replace_the_first_epoch_of_a_loop() -> None:
    sim = Sim(FLOW, runner())
    state = sim.run(entry="each", loop_items={"each": [12, 14]}, results={"setup": {"base": 1}})
    assert state.status == "COMPLETED"
    ran = [
        (cmd_item, it)
        for (s, it), cmd_item in zip(sim.ran, _items(sim), strict=True)
        if s == "each"
    ]
    assert sorted(ran, key=lambda r: r[1] or 0) == [(12, 0), (14, 1)]
    assert sim.results[("each", 1)]["stats"] == {"total": 2, "success": 2, "failed": 0}
    [plan] = [p for p in sim.decisions[0].plans if p.step == "each"]
    assert (plan.epoch, plan.items, plan.meta) == (1, [12, 14], {"iterator": "it", "total": 2})
    assert state.preplanned == {}  # consumed by the first entry
    assert "again" in sim.steps_ran()


def test_loop_items_of_a_later_step_wait_for_its_first_entry() -> None:
    sim = Sim(FLOW, runner())
    state = sim.run(loop_items={"other": ["only"]}, payload={"items": [1]})
    assert state.status == "COMPLETED"
    first = sim.decisions[0]
    # planned at start (stored once), not rendered from `loop.in` when entered
    assert [(p.step, p.items) for p in first.plans] == [("other", ["only"])]
    assert first.state.preplanned == {"other": 1}
    assert sim.results[("other", 1)]["stats"]["total"] == 1
    assert [i for s, i in sim.ran if s == "other"] == [0]


def test_an_empty_item_list_completes_the_loop_at_once() -> None:
    sim = Sim(FLOW, runner())
    state = sim.run(entry="each", loop_items={"each": []}, results={"setup": {"base": 1}})
    assert state.status == "COMPLETED"
    assert [s for s, i in sim.ran if s == "each"] == []
    assert sim.results[("each", 1)]["stats"] == {"total": 0, "success": 0, "failed": 0}


def test_failures_in_given_items_count_as_usual() -> None:
    sim = Sim(FLOW, runner(bad={14}))
    sim.run(entry="each", loop_items={"each": [12, 14]}, results={"setup": {"base": 1}})
    assert sim.results[("each", 1)]["stats"] == {"total": 2, "success": 1, "failed": 1}


def test_bad_inputs_fail_the_execution_with_a_message() -> None:
    for inputs, text in (
        ({"entry": "nope"}, "cannot start at step 'nope'"),
        ({"loop_items": {"setup": [1]}}, "step 'setup', which is not a loop"),
        ({"loop_items": {"ghost": [1]}}, "step 'ghost', which is not a loop"),
    ):
        decision = start(FLOW, "e1", None, Sim(FLOW, runner()), now=0.0, **inputs)
        assert decision.terminal is not None and decision.terminal.status == "FAILED"
        assert text in decision.terminal.error["message"]  # type: ignore[index]
        assert not decision.commands and not decision.issues


def test_the_same_inputs_give_the_same_decision() -> None:
    inputs: dict[str, Any] = {
        "entry": "each",
        "variables": {"items": [1, 2], "tag": "t", "bad": []},
        "results": {"setup": {"base": 3}},
        "loop_items": {"each": [2, 1], "other": ["z"]},
    }
    one = start(FLOW, "e1", None, Sim(FLOW, runner()), now=0.0, **inputs)
    two = start(FLOW, "e1", None, Sim(FLOW, runner()), now=0.0, **inputs)
    assert one == two
    assert inputs["variables"] == {"items": [1, 2], "tag": "t", "bad": []}  # not mutated


def test_preplanned_survives_the_state_snapshot_and_is_absent_otherwise() -> None:
    state = ExecutionState("e1", preplanned={"each": 3})
    assert ExecutionState.from_json(state.to_json()).preplanned == {"each": 3}
    assert "preplanned" not in ExecutionState("e1").to_json()


def test_overrides_merge_like_a_payload() -> None:
    base = {"a": 1, "nested": {"x": 1}}
    merged = merge_payload(base, {"a": 2, "ctx": {"b": 3}})
    assert merged == {"a": 2, "b": 3, "nested": {"x": 1}}
    assert base == {"a": 1, "nested": {"x": 1}}


def _items(sim: Sim) -> list[Any]:
    """The item each run command had, in run order (the sim records step/iteration)."""
    items: list[Any] = []
    for step, iteration in sim.ran:
        if iteration is None:
            items.append(None)
            continue
        row = next(
            r for r in sim.planned.values() if r["step"] == step and r["iteration"] == iteration
        )
        items.append(row["item"])
    return items
