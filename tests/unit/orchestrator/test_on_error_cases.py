"""A step's `spec.on_error` (NoETL server `StepSpec.on_error`) in the decision core:
`continue` handles the step's error (the execution does not end FAILED for it, arcs
route with the error as NoETL's call.error routing exposes it); `fail` and no value
are today's behaviour; `retry` is the worker's (tests/unit/worker)."""

from __future__ import annotations

import pytest

from noetl_celery.models.outcome import Outcome
from tests.unit.orchestrator.sim import Sim, err, ok, playbook

HEAD = "apiVersion: noetl.io/v2\nkind: Playbook\nmetadata: {name: case}\n"

FLOW = """workflow:
  - step: start
    tool: {kind: python, code: x}
    next: {arcs: [{step: risky}]}
  - step: risky
    %s
    tool: {kind: python, code: x}
    next:
      arcs:
        - {step: cleanup, when: "{{ output.status == 'error' and error.message == 'boom' }}"}
        - {step: after}
  - step: cleanup
    tool: {kind: python, code: x}
  - step: after
    tool: {kind: python, code: x}
"""


def run(spec: str, outcomes: dict[str, Outcome]) -> tuple[Sim, str]:
    sim = Sim(playbook(HEAD + FLOW % spec), lambda s, _i, _t: outcomes.get(s, ok({"s": s})))
    state = sim.run()
    return sim, state.status


@pytest.mark.parametrize(
    ("spec", "status", "ran"),
    [
        ("", "COMPLETED", ["start", "risky", "cleanup"]),  # a guarded arc handles it
        ("spec: {on_error: fail}", "COMPLETED", ["start", "risky", "cleanup"]),
        ("spec: {on_error: continue}", "COMPLETED", ["start", "risky", "cleanup"]),
    ],
)
def test_an_error_a_guarded_arc_catches_is_handled_whatever_on_error(
    spec: str, status: str, ran: list[str]
) -> None:
    sim, got = run(spec, {"risky": err("boom")})
    assert (got, sim.steps_ran()) == (status, ran)


@pytest.mark.parametrize(
    ("spec", "status"),
    [
        ("", "FAILED"),
        ("spec: {on_error: fail}", "FAILED"),
        ("spec: {on_error: retry}", "FAILED"),  # retries exhausted: fails as fail does
        ("spec: {on_error: continue}", "COMPLETED"),
        ("spec: {on_error: CONTINUE}", "COMPLETED"),
    ],
)
def test_an_unmatched_error_fails_the_run_unless_on_error_continue(spec: str, status: str) -> None:
    # `other` is not `boom`: the guarded arc does not match; the unconditional one routes
    sim, got = run(spec, {"risky": err("other")})
    assert got == status
    assert sim.steps_ran() == ["start", "risky", "after"]
    assert ("step.failed" in sim.event_types()) == (status == "FAILED")


def test_continue_keeps_the_error_as_the_steps_result_and_status() -> None:
    sim, got = run("spec: {on_error: continue}", {"risky": err("other", result={"partial": 1})})
    assert got == "COMPLETED"
    assert sim.results[("risky", 1)] == {"partial": 1}
    assert sim.state is not None and sim.state.step("risky").status == "failed"


def test_continue_on_a_loop_step_completes_with_failed_items_counted() -> None:
    text = (
        HEAD
        + """workflow:
  - step: each
    spec: {on_error: continue}
    loop: {in: [1, 2, 3], iterator: x}
    tool: {kind: python, code: x}
    next: {arcs: [{step: after, when: "{{ output.data.stats.failed == 1 }}"}]}
  - step: after
    tool: {kind: python, code: x}
"""
    )
    sim = Sim(playbook(text), lambda s, item, _t: err("bad") if item == 2 else ok({"s": s}))
    state = sim.run()
    assert state.status == "COMPLETED", state.failures
    assert sim.steps_ran() == ["after"]
