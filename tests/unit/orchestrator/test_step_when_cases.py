"""Step-level `when` (NoETL's enable guard, server `Step.when`) by a table of cases: a
false guard skips the step (`step.skipped`, no command, no result) and routing follows
the skipped step's first matching arc, in the context the arc that reached it saw."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import pytest

from noetl_celery.models.outcome import Outcome
from tests.unit.orchestrator.sim import Sim, err, ok, playbook, terminal_event

HEAD = "apiVersion: noetl.io/v2\nkind: Playbook\nmetadata: {name: case}\n"


def py(name: str, extra: str = "") -> str:
    return f"  - step: {name}\n    tool: {{kind: python, code: 'result = 1'}}\n{extra}"


def when(guard: str) -> str:
    return f"    when: {guard}\n"


def arcs(*targets: str, mode: str = "exclusive") -> str:
    items = "".join(f"        - {t}\n" for t in targets)
    return f"    next:\n      spec: {{mode: {mode}}}\n      arcs:\n{items}"


@dataclass
class Case:
    id: str
    workflow: str
    ran: list[str]
    skipped: list[str] = field(default_factory=list)  # step.skipped events, in order
    results: dict[str, Outcome] = field(default_factory=dict)
    status: str = "COMPLETED"
    message: str | None = None
    workload: str = ""
    vars: dict[str, Any] | None = None
    last: str | None = None  # the execution's result is this step's
    batch: int = 1


CASES = [
    Case(
        "a false guard skips the step and its arcs route on",
        py("start", arcs("step: gated"))
        + py("gated", when("'{{ start.go }}'") + arcs("step: after"))
        + py("after"),
        results={"start": ok({"go": False})},
        ran=["start", "after"],
        skipped=["gated"],
        last="after",
    ),
    Case(
        "a true guard runs the step",
        py("start", arcs("step: gated"))
        + py("gated", when("'{{ start.go }}'") + arcs("step: after"))
        + py("after"),
        results={"start": ok({"go": True})},
        ran=["start", "gated", "after"],
    ),
    Case(
        "YAML booleans are guards",
        py("start", arcs("step: a")) + py("a", when("false") + arcs("step: b")) + py("b"),
        ran=["start", "b"],
        skipped=["a"],
    ),
    Case(
        "the guard sees the arc's output, event and the arc's set",
        py("start", arcs("{step: gated, set: {ctx.n: '{{ output.data.n }}'}}"))
        + py(
            "gated",
            when("'{{ output.data.n == n and event.name == \"call.done\" and n > 5 }}'")
            + arcs("step: after"),
        )
        + py("after"),
        results={"start": ok({"n": 3})},
        ran=["start", "after"],
        skipped=["gated"],
        vars={"n": 3},
    ),
    Case(
        "the skipped step's first matching arc is taken, even when inclusive",
        py("start", arcs("step: gated"))
        + py(
            "gated",
            when("false")
            + arcs(
                "{step: a, when: '{{ event.name == \"step.skipped\" }}'}",
                "step: b",
                mode="inclusive",
            ),
        )
        + py("a")
        + py("b"),
        ran=["start", "a"],
        skipped=["gated"],
    ),
    Case(
        "a skipped step's arc set applies",
        py("start", arcs("step: gated"))
        + py("gated", when("false") + arcs("{step: after, set: {ctx.via: skipped}}"))
        + py("after"),
        ran=["start", "after"],
        skipped=["gated"],
        vars={"via": "skipped"},
    ),
    Case(
        "skips chain through consecutive false guards",
        py("start", arcs("step: a"))
        + py("a", when("false") + arcs("step: b"))
        + py("b", when("'{{ 1 > 2 }}'") + arcs("step: c"))
        + py("c"),
        ran=["start", "c"],
        skipped=["a", "b"],
    ),
    Case(
        "a skipped step without a matching arc ends its path; the run completes",
        py("start", arcs("step: gated"))
        + py("gated", when("false") + arcs("{step: after, when: '{{ false }}'}"))
        + py("after"),
        ran=["start"],
        skipped=["gated"],
        last="start",
    ),
    Case(
        "a false guard on the first step: the run goes on past it",
        py("start", when("'{{ enabled }}'") + arcs("step: after")) + py("after"),
        workload="workload: {enabled: false}\n",
        ran=["after"],
        skipped=["start"],
    ),
    Case(
        "a guard of a loop step skips the whole loop",
        py("start", arcs("step: each"))
        + "  - step: each\n    when: false\n    loop: {in: [1, 2], iterator: x}\n"
        "    tool: {kind: noop}\n" + arcs("step: after") + py("after"),
        ran=["start", "after"],
        skipped=["each"],
    ),
    Case(
        "a guard after a failure handled by its arc sees the error",
        py("start", arcs("{step: gated, when: '{{ event.name == \"call.error\" }}'}"))
        + py("gated", when("'{{ error is none }}'") + arcs("step: after"))
        + py("after"),
        results={"start": err("boom")},
        ran=["start", "after"],
        skipped=["gated"],
    ),
    Case(
        "an undefined name in the guard fails the step",
        py("start", arcs("step: gated"))
        + py("gated", when("'{{ no_such_name }}'") + arcs("step: after"))
        + py("after"),
        ran=["start"],
        status="FAILED",
        message="no_such_name",
    ),
    Case(
        "a cycle of skipped steps is stopped by the idle-transition limit",
        py("start", arcs("step: a"))
        + py("a", when("false") + arcs("step: b"))
        + py("b", when("false") + arcs("step: a")),
        ran=["start"],
        skipped=["a", "b"],
        status="FAILED",
        message="routing cycle",
    ),
]


@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
def test_case(case: Case) -> None:
    pb = playbook(HEAD + case.workload + "workflow:\n" + case.workflow)
    sim = Sim(pb, lambda step, _item, _it: case.results.get(step, ok({"step": step})))
    state = sim.run(batch=case.batch)
    assert state.status == case.status, state.failures
    assert sim.steps_ran() == case.ran
    skipped = [e["step"] for e in sim.events if e.get("type") == "step.skipped"]
    if case.id.startswith("a cycle"):  # skipped until the limit fails the step
        assert skipped[:2] == case.skipped
    else:
        assert skipped == case.skipped
        for name in case.skipped:
            assert state.step(name).status == "skipped"
    for name in case.skipped:
        assert not any(step == name for step, _ in sim.results)  # no result recorded
    if case.message:
        assert case.message in state.failures[0]["message"]
    if case.vars:
        assert {k: state.vars.get(k) for k in case.vars} == case.vars
    assert state.in_flight == 0
    terminal = terminal_event(sim)
    assert sim.event_types().count(terminal["type"]) == 1
    if case.last is not None:
        assert state.last_step == case.last


def test_the_same_inputs_give_the_same_skips() -> None:
    text = (
        HEAD
        + "workflow:\n"
        + py("start", arcs("step: a"))
        + py("a", when("'{{ start.go }}'") + arcs("step: b"))
        + py("b")
    )
    runs = []
    for _ in range(2):
        sim = Sim(playbook(text), lambda step, _i, _t: ok({"go": False}))
        sim.run()
        runs.append([(e["type"], e["step"], e["epoch"]) for e in sim.events if "type" in e])
    assert runs[0] == runs[1]


LOOP_REENTRY = (
    "workload: {go: true, n: 0}\nworkflow:\n"
    + py("hub", arcs("step: work", "step: poke", mode="inclusive"))
    + py("poke", arcs("{step: hub, when: '{{ n < 1 }}', set: {ctx.go: false, ctx.n: 1}}"))
    + "  - step: work\n    when: '{{ go }}'\n"
    "    loop: {in: [1, 2, 3], iterator: x, spec: {mode: sequential}}\n"
    "    tool: {kind: noop}\n"
)


@pytest.mark.parametrize("batch", [1, 2])
def test_a_loop_steps_when_reentered_while_it_runs_skips_that_entry_only(batch: int) -> None:
    """`poke` loops back to `hub`, which reaches `work` again while its loop runs, with
    `go` now false: the guard skips that entry (step.skipped), the running epoch keeps
    its status and goes on to its end (tests/integration/test_noetl_forms_distributed.py
    runs it on workers)."""
    sim = Sim(playbook(HEAD + LOOP_REENTRY), lambda step, _item, _it: ok({"step": step}))
    state = sim.run(batch=batch)
    assert state.status == "COMPLETED", state.failures
    assert sim.steps_ran() == ["hub", "poke", "hub", "poke"]
    assert [e["step"] for e in sim.events if e.get("type") == "step.skipped"] == ["work"]
    assert [e["step"] for e in sim.events if e.get("type") == "loop.done"] == ["work"]
    assert len([s for s, i in sim.ran if s == "work" and i is not None]) == 3
    assert state.step("work").status == "completed" and state.step("work").epoch == 1
