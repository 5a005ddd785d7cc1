"""The decision function by tables of cases: playbook + tool behaviour -> what ran, how
the execution ended. The simulator (sim.py) plays the engine and the workers."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import pytest

from noetl_celery.models.outcome import Outcome
from tests.unit.orchestrator.sim import Sim, err, ok, playbook, terminal_event

HEAD = "apiVersion: noetl.io/v2\nkind: Playbook\nmetadata: {name: case}\n"


def py(name: str, extra: str = "") -> str:
    return f"  - step: {name}\n    tool: {{kind: python, code: 'result = 1'}}\n{extra}"


def arcs(*targets: str, mode: str = "exclusive") -> str:
    items = "".join(f"        - {t}\n" for t in targets)
    return f"    next:\n      spec: {{mode: {mode}}}\n      arcs:\n{items}"


@dataclass
class Case:
    id: str
    workflow: str
    results: dict[str, Any] = field(default_factory=dict)  # step -> outcome (or callable)
    status: str = "COMPLETED"
    ran: list[str] | None = None  # non-loop steps in execution order
    not_ran: tuple[str, ...] = ()
    failures: int = 0
    message: str | None = None  # fragment of the first failure message
    workload: str = ""
    payload: dict[str, Any] | None = None
    vars: dict[str, Any] | None = None  # expected subset of final variables
    batch: int = 1


def outcome_for(case: Case, step: str, item: Any, iteration: int | None) -> Outcome:
    spec = case.results.get(step, ok({"status": "ok", "step": step}))
    return spec(item, iteration) if callable(spec) else spec


CASES = [
    Case(
        "linear chain",
        py("start", arcs("step: a")) + py("a", arcs("step: end")) + py("end"),
        ran=["start", "a", "end"],
    ),
    Case(
        "a step without next is terminal",
        py("start", arcs("step: step1")) + py("step1") + py("end"),
        ran=["start", "step1"],
        not_ran=("end",),
    ),
    Case(
        "exclusive fires the first matching arc only",
        py("start", arcs("step: a", "step: b")) + py("a") + py("b"),
        ran=["start", "a"],
        not_ran=("b",),
    ),
    Case(
        "inclusive fires every matching arc",
        py("start", arcs("step: a", "step: b", mode="inclusive")) + py("a") + py("b"),
        ran=["start", "a", "b"],
    ),
    Case(
        "guards read step results",
        py(
            "start",
            arcs(
                "{step: hot, when: '{{ start.temp > 25 }}'}",
                "{step: cold, when: '{{ start.temp <= 25 }}'}",
            ),
        )
        + py("hot")
        + py("cold"),
        results={"start": ok({"temp": 30})},
        ran=["start", "hot"],
        not_ran=("cold",),
    ),
    Case(
        "a missing attribute makes a guard false, not an error",
        py("start", arcs("{step: a, when: '{{ start.rows[0].n > 0 }}'}", "step: b"))
        + py("a")
        + py("b"),
        results={"start": ok({"rows": []})},
        ran=["start", "b"],
    ),
    Case(
        "an undefined name in a guard fails the step with the template",
        py("start", arcs("{step: a, when: '{{ no_such_thing > 0 }}'}")) + py("a"),
        status="FAILED",
        ran=["start"],
        failures=1,
        message="no_such_thing",
    ),
    Case(
        "a failed step without arcs fails the execution",
        py("start", arcs("step: a")) + py("a"),
        results={"a": err("boom")},
        status="FAILED",
        ran=["start", "a"],
        failures=1,
        message="boom",
    ),
    Case(
        "an unconditional arc still routes after a failure, the run ends FAILED",
        py("start", arcs("step: next")) + py("next"),
        results={"start": err("boom")},
        status="FAILED",
        ran=["start", "next"],
        failures=1,
    ),
    Case(
        "a guarded arc that catches the error handles it",
        py(
            "start",
            arcs("{step: recover, when: '{{ event.name == \"call.error\" }}'}", "step: happy"),
        )
        + py("recover")
        + py("happy"),
        results={"start": err("boom")},
        ran=["start", "recover"],
        not_ran=("happy",),
    ),
    Case(
        "step set writes ctx from the output",
        py("start", "    set: {ctx.n: '{{ output.data.n + 1 }}', flag: true}\n" + arcs("step: a"))
        + py("a"),
        results={"start": ok({"data": {"n": 41}})},
        ran=["start", "a"],
        vars={"n": 42, "flag": True},
    ),
    Case(
        "arc set writes ctx when the arc fires",
        py("start", arcs("{step: a, set: {ctx.from_start: '{{ start.data.x }}'}}")) + py("a"),
        results={"start": ok({"data": {"x": "yes"}})},
        vars={"from_start": "yes"},
    ),
    Case(
        "a set template error fails the step",
        py("start", "    set: {ctx.n: '{{ missing_var }}'}\n" + arcs("step: a")) + py("a"),
        status="FAILED",
        ran=["start"],
        failures=1,
        message="missing_var",
    ),
    Case(
        "payload overrides workload, a payload ctx dict is merged flat",
        py("start"),
        workload="workload: {a: 1, b: 2}\n",
        payload={"b": 3, "ctx": {"c": 4}},
        vars={"a": 1, "b": 3, "c": 4},
    ),
    Case(
        "loopback with a ctx counter terminates",
        py("start", arcs("step: fetch"))
        + py(
            "fetch",
            "    set: {ctx.page: '{{ page + 1 }}'}\n"
            + arcs("{step: fetch, when: '{{ page < 3 }}'}", "step: done"),
        )
        + py("done"),
        workload="workload: {page: 0}\n",
        ran=["start", "fetch", "fetch", "fetch", "done"],
        vars={"page": 3},
    ),
    Case(
        "a step result shadows a variable of the same name; ctx.<name> reads the variable",
        py("start", arcs("{step: a, when: '{{ start.v == 1 and ctx.start == \"var\" }}'}"))
        + py("a"),
        workload="workload: {start: var}\n",
        results={"start": ok({"v": 1})},
        ran=["start", "a"],
    ),
    Case(
        "a loopback to a running step is not entered twice",
        py("start", arcs("step: a", "step: b", mode="inclusive"))
        + py("a", arcs("step: c"))
        + py("b", arcs("step: c"))
        + py("c"),
        batch=2,
        ran=["start", "a", "b", "c"],
    ),
]


@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
def test_case(case: Case) -> None:
    pb = playbook(HEAD + case.workload + "workflow:\n" + case.workflow)
    sim = Sim(pb, lambda step, item, it: outcome_for(case, step, item, it))
    state = sim.run(payload=case.payload, batch=case.batch)
    assert state.status == case.status, state.failures
    if case.ran is not None:
        assert sim.steps_ran() == case.ran
    for name in case.not_ran:
        assert name not in sim.steps_ran()
    assert len(state.failures) == case.failures, state.failures
    if case.message:
        assert case.message in state.failures[0]["message"]
    if case.vars:
        assert {k: state.vars.get(k) for k in case.vars} == case.vars
    assert state.in_flight == 0
    terminal = terminal_event(sim)
    assert terminal["type"] == (
        "execution.completed" if case.status == "COMPLETED" else "execution.failed"
    )
    assert sim.event_types().count(terminal["type"]) == 1
