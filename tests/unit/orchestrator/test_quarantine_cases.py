"""Quarantined loop items in the decision core: an item whose body a `do: quarantine`
policy failed (the worker marks its outcome's meta), or any unhandled item failure of a
loop with `spec.on_item_error: quarantine`, counts in `stats.quarantined`, never in
`failed`, and does not fail the execution."""

from __future__ import annotations

from dataclasses import replace

import pytest

from noetl_celery.models.outcome import Outcome
from tests.unit.orchestrator.sim import Sim, err, ok, playbook

HEAD = "apiVersion: noetl.io/v2\nkind: Playbook\nmetadata: {name: case}\n"

FLOW = """workflow:
  - step: each
    loop: {in: [1, 2, 3, 4, 5], iterator: x, spec: {mode: parallel%s}}
    tool: {kind: python, code: x}
    next: {arcs: [{step: after, when: "{{ output.data.stats.success == 2 }}"}]}
  - step: after
    tool: {kind: python, code: x}
"""


def quarantine(message: str) -> Outcome:
    """What the worker reports for a body a `do: quarantine` rule stopped."""
    failed = err(message)
    return replace(failed, meta={"quarantine": True})


def run(loop_spec: str, outcome_of: dict[int, Outcome]) -> Sim:
    sim = Sim(
        playbook(HEAD + FLOW % loop_spec),
        lambda s, item, _t: outcome_of.get(item, ok({"s": s})) if s == "each" else ok({}),
    )
    sim.run()
    return sim


@pytest.mark.parametrize(
    ("loop_spec", "outcomes", "status", "stats"),
    [
        # the policy quarantines: no failure left, the execution completes
        (
            "",
            {1: quarantine("bad"), 3: quarantine("bad"), 5: quarantine("bad")},
            "COMPLETED",
            {"total": 5, "success": 2, "failed": 0, "quarantined": 3},
        ),
        # one quarantined, one failed unhandled: the failed one still fails the run
        (
            "",
            {1: quarantine("bad"), 3: err("x"), 5: err("x")},
            "FAILED",
            {"total": 5, "success": 2, "failed": 2, "quarantined": 1},
        ),
        # the loop's option quarantines every unhandled failure
        (
            ", on_item_error: quarantine",
            {1: err("x"), 3: err("x", kind="timeout"), 5: quarantine("bad")},
            "COMPLETED",
            {"total": 5, "success": 2, "failed": 0, "quarantined": 3},
        ),
        # `fail` is the default, spelled out
        (
            ", on_item_error: fail",
            {1: err("x"), 3: err("x"), 5: err("x")},
            "FAILED",
            {"total": 5, "success": 2, "failed": 3},
        ),
    ],
)
def test_quarantined_items_are_counted_apart_and_do_not_fail_the_run(
    loop_spec: str, outcomes: dict[int, Outcome], status: str, stats: dict[str, int]
) -> None:
    sim = run(loop_spec, outcomes)
    assert sim.state is not None
    assert sim.state.status == status, sim.state.failures
    assert sim.results[("each", 1)]["stats"] == stats
    # every item is exactly one of success, failed, quarantined
    assert stats["success"] + stats["failed"] + stats.get("quarantined", 0) == stats["total"]
    assert sim.steps_ran() == ["after"]  # the loop routes either way
    assert ("step.failed" in sim.event_types()) == (status == "FAILED")


def test_a_loop_without_quarantined_items_reports_stats_as_before() -> None:
    sim = run("", {})
    assert sim.results[("each", 1)]["stats"] == {"total": 5, "success": 5, "failed": 0}
    assert sim.state is not None
    snapshot = sim.state.step("each").to_json()
    assert "quarantined" not in (snapshot["loop"] or {})  # snapshots read as they always did


def test_the_quarantined_count_survives_the_snapshot() -> None:
    sim = run(", on_item_error: quarantine", {2: err("x")})
    assert sim.state is not None
    loop = sim.state.step("each").to_json()["loop"]
    assert loop["quarantined"] == 1 and loop["failed"] == 0


@pytest.mark.parametrize(("halt", "ran"), [(["each"], []), ([], ["after"])])
def test_a_redrive_start_runs_its_items_and_routes_nowhere(halt: list[str], ran: list[str]) -> None:
    sim = Sim(playbook(HEAD + FLOW % ""), lambda s, item, _t: ok({"s": s}))
    # the items replace `loop.in`, all succeed: the arc's guard (success == 2) matches
    state = sim.run(entry="each", loop_items={"each": [3, 7]}, halt_after=halt)
    assert state.status == "COMPLETED"
    assert sim.results[("each", 1)]["stats"] == {"total": 2, "success": 2, "failed": 0}
    assert sim.steps_ran() == ran
    assert state.to_json().get("halt", []) == halt  # kept in the snapshot for later passes
