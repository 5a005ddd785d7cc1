"""The fan-in barrier (NoETL server v2.49.0 #142, v2.57.2; orchestrator.decide's
docstring) by a table of cases: a step with two or more upstream steps is entered once,
when every upstream has arrived or can no longer fire; untaken exclusive siblings record
`step.skipped`. Every case runs one completion a pass and all waiting completions a pass
(branches finishing together), and the joined step runs once per barrier either way."""

from __future__ import annotations

from dataclasses import dataclass, field

import pytest

from noetl_celery.models.outcome import Outcome
from noetl_celery.orchestrator.decide import decide
from noetl_celery.orchestrator.decisions import Completion, Decision
from noetl_celery.orchestrator.state import ExecutionState
from tests.unit.orchestrator.sim import Sim, err, ok, playbook, terminal_event

HEAD = "apiVersion: noetl.io/v2\nkind: Playbook\nmetadata: {name: fanin}\n"


def py(name: str, extra: str = "") -> str:
    return f"  - step: {name}\n    tool: {{kind: python, code: 'result = 1'}}\n{extra}"


def arcs(*targets: str, mode: str = "exclusive") -> str:
    items = "".join(f"        - {t}\n" for t in targets)
    return f"    next:\n      spec: {{mode: {mode}}}\n      arcs:\n{items}"


def fork(*targets: str) -> str:
    return arcs(*(f"step: {t}" for t in targets), mode="inclusive")


def to(target: str) -> str:
    return arcs(f"step: {target}")


@dataclass
class Case:
    id: str
    workflow: str
    runs: dict[str, int]  # how many times each step ran
    after: dict[str, list[str]] = field(default_factory=dict)  # step -> ran before it
    skipped: list[str] = field(default_factory=list)
    results: dict[str, Outcome] = field(default_factory=dict)
    status: str = "COMPLETED"
    workload: str = ""


# what a released join's `when` reads of its last arrival (a's call.done): every field
RELEASED_WHEN = (
    '{{{{ event.name == "call.done" and event.step == "a" and output.status == "ok"'
    " and output.data.v == {v} and error is none }}}}"
)

CASES = [
    Case(
        "two branches of different lengths join once, after both",
        py("start", fork("a", "b"))
        + py("a", to("join"))
        + py("b", to("b2"))
        + py("b2", to("join"))
        + py("join"),
        runs={"start": 1, "a": 1, "b": 1, "b2": 1, "join": 1},
        after={"join": ["b2"]},
    ),
    Case(
        "three branches join once, after all three",
        py("start", fork("a", "b", "c"))
        + py("a", to("join"))
        + py("b", to("b2"))
        + py("b2", to("join"))
        + py("c", to("c2"))
        + py("c2", to("c3"))
        + py("c3", to("join"))
        + py("join"),
        runs={"join": 1, "a": 1, "b2": 1, "c3": 1},
        after={"join": ["a", "b2", "c3"]},
    ),
    Case(
        "an exclusive choice skips the untaken branch and the join does not wait for it",
        py("start", fork("a", "pick"))
        + py("a", to("a2"))
        + py("a2", to("join"))
        + py("pick", arcs("step: x\n          when: '{{ pick.go }}'", "step: y"))
        + py("x", to("join"))
        + py("y", to("join"))
        + py("join"),
        results={"pick": ok({"go": True})},
        runs={"join": 1, "x": 1, "y": 0, "a2": 1},
        after={"join": ["a2", "x"]},
        skipped=["y"],
    ),
    Case(
        "a step-level when skipping a branch: its skip chain is an arrival",
        py("start", fork("a", "b"))
        + py("a", "    when: false\n" + to("join"))
        + py("b", to("b2"))
        + py("b2", to("join"))
        + py("join"),
        runs={"a": 0, "b2": 1, "join": 1},
        after={"join": ["b2"]},
        skipped=["a"],
    ),
    Case(
        "a failed branch routing elsewhere releases the join; the run ends FAILED",
        py("start", fork("a", "b"))
        + py("a", arcs("step: join\n          when: '{{ event.name == \"call.done\" }}'"))
        + py("b", to("b2"))
        + py("b2", to("join"))
        + py("join"),
        results={"a": err("boom")},
        runs={"a": 1, "b2": 1, "join": 1},
        after={"join": ["b2"]},
        status="FAILED",
    ),
    Case(
        "a failed branch with an unconditional arc arrives; the run ends FAILED",
        py("start", fork("a", "b"))
        + py("a", to("join"))
        + py("b", to("b2"))
        + py("b2", to("join"))
        + py("join"),
        results={"a": err("boom")},
        runs={"a": 1, "b2": 1, "join": 1},
        after={"join": ["b2"]},
        status="FAILED",
    ),
    Case(
        "re-entry by a self arc passes straight through and clears the barrier",
        py("start", fork("a", "b"))
        + py("a", to("join"))
        + py("b", to("join"))
        + py("join", arcs("step: join\n          when: '{{ join.again }}'")),
        results={"join": ok({"again": False})},
        runs={"join": 1},
        after={"join": ["a", "b"]},
    ),
    Case(
        "a cycle through the whole diamond has no barrier (NoETL's back-edge rule)",
        py("start", fork("a", "b"))
        + py("a", to("join"))
        + py("b", to("join"))
        + py(
            "join",
            arcs(
                "step: start\n          when: '{{ n < 1 }}'\n          set: {ctx.n: '{{ n + 1 }}'}"
            ),
        ),
        runs={"start": 2, "a": 2, "b": 2},
        workload="workload: {n: 0}\n",
    ),
    Case(
        "a join released by the re-check sees its last arrival's arc (event, output)",
        py("start", fork("a", "b"))
        + py("a", to("join"))
        + py("b", arcs("step: join\n          when: '{{ event.name == \"call.done\" }}'"))
        + py("join", f"    when: '{RELEASED_WHEN.format(v=7)}'\n"),
        results={"a": ok({"data": {"v": 7}}), "b": err("boom")},
        runs={"a": 1, "b": 1, "join": 1},
        after={"join": ["a", "b"]},
        status="FAILED",
    ),
    Case(
        "a released join's when is evaluated in that context: false skips it",
        py("start", fork("a", "b"))
        + py("a", to("join"))
        + py("b", arcs("step: join\n          when: '{{ event.name == \"call.done\" }}'"))
        + py("join", f"    when: '{RELEASED_WHEN.format(v=8)}'\n"),
        results={"a": ok({"data": {"v": 7}}), "b": err("boom")},
        runs={"a": 1, "b": 1, "join": 0},
        skipped=["join"],
        status="FAILED",
    ),
    Case(
        "a released join after a loop's arrival sees loop.done and the loop's result",
        py("start", fork("a", "b"))
        + "  - step: a\n    loop: {in: '{{ [1, 2] }}', iterator: i}\n"
        + "    tool: {kind: python, code: 'result = 1'}\n"
        + to("join")
        + py("b", to("b2"))
        + py("b2", arcs("step: join\n          when: '{{ event.name == \"call.done\" }}'"))
        + py(
            "join",
            '    when: \'{{ event.name == "loop.done" and event.step == "a"'
            " and output.data.stats.total == 2 }}'\n",
        ),
        results={"b2": err("boom")},
        runs={"b2": 1, "join": 1},
        after={"join": ["b2"]},
        status="FAILED",
    ),
    Case(
        "an inclusive router's unmatched arc target records step.skipped",
        py("start", arcs("step: a", "step: b\n          when: false", mode="inclusive"))
        + py("a")
        + py("b"),
        runs={"a": 1, "b": 0},
        skipped=["b"],
    ),
    Case(
        "a single arc that does not match skips its target (NoETL: any unmatched target)",
        py("start", arcs("step: a\n          when: false")) + py("a"),
        runs={"start": 1, "a": 0},
        skipped=["a"],
    ),
    Case(
        "an untaken target another chosen path reaches is not skipped, and runs after it",
        py("start", arcs("step: pre\n          when: true", "step: main"))
        + py("pre", to("main"))
        + py("main"),
        runs={"pre": 1, "main": 1},
        after={"main": ["pre"]},
    ),
    Case(
        "an untaken target a running branch reaches is not skipped",
        py("start", fork("a", "pick"))
        + py("a", to("a2"))
        + py("a2", to("y"))
        + py("pick", arcs("step: x\n          when: true", "step: y"))
        + py("x")
        + py("y"),
        runs={"x": 1, "y": 1, "a2": 1},
        after={"y": ["a2"]},
    ),
    Case(
        "several arcs of one step to a target are not a fan-in",
        py("start", arcs("step: t\n          when: true", "step: t", mode="inclusive")) + py("t"),
        runs={"start": 1, "t": 1},
    ),
]


def _run(case: Case, batch: int) -> tuple[Sim, ExecutionState]:
    pb = playbook(HEAD + case.workload + "workflow:\n" + case.workflow)
    sim = Sim(pb, lambda step, _item, _it: case.results.get(step, ok({"step": step})))
    return sim, sim.run(batch=batch)


@pytest.mark.parametrize("batch", [1, 3])
@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
def test_case(case: Case, batch: int) -> None:
    sim, state = _run(case, batch)
    assert state.status == case.status, state.failures
    ran = sim.steps_ran()
    for name, count in case.runs.items():
        assert ran.count(name) == count, (name, ran)
    for name, before in case.after.items():
        assert all(ran.index(b) < ran.index(name) for b in before), ran
    skipped = [e["step"] for e in sim.events if e.get("type") == "step.skipped"]
    assert skipped == case.skipped
    assert state.joins == {}
    assert state.in_flight == 0
    assert sim.event_types().count(terminal_event(sim)["type"]) == 1


def test_the_cycle_case_runs_join_per_arrival() -> None:
    """Without a barrier (the diamond is on a cycle) the entries dedupe as before."""
    case = next(c for c in CASES if c.id.startswith("a cycle"))
    sim, _state = _run(case, 1)
    assert sim.steps_ran().count("join") >= 2


def test_the_barrier_waits_in_the_snapshot() -> None:
    """Between passes the arrivals live in the state's `joins` (stored per execution,
    so a replayed or redone pass decides the same)."""
    text = (
        HEAD
        + "workflow:\n"
        + py("start", fork("a", "b"))
        + py("a", to("join"))
        + py("b", to("b2"))
        + py("b2", to("join"))
        + py("join")
    )
    sim = Sim(playbook(text), lambda step, _i, _t: ok({"step": step}))
    seen: list[dict[str, list[str]]] = []
    apply = sim.apply

    def record(d: Decision) -> None:
        apply(d)
        seen.append(dict(d.state.joins))

    sim.apply = record  # type: ignore[method-assign]
    sim.run(batch=1)
    assert {"join": ["a"]} in seen
    waiting = next(d.state for d in sim.decisions if d.state.joins)
    round_trip = ExecutionState.from_json(waiting.to_json())
    assert round_trip.joins == waiting.joins
    # the last arrival's arc context, its output.data a pointer to a's result
    arc = round_trip.join_arcs["join"]
    assert arc["source"] == "a" and arc["origin"] == ["a", 1]
    assert "data" not in arc["output"] and arc["output"]["status"] == "ok"
    assert arc["extra"]["event"] == {"name": "call.done", "step": "a"}
    assert sim.decisions[-1].state.join_arcs == {}


def test_an_exclusive_router_on_a_cycle_records_no_skip() -> None:
    """A pagination branch point's exit is not dead while it iterates."""
    text = (
        HEAD
        + "workload: {n: 0}\nworkflow:\n"
        + py("fetch", to("check"))
        + py(
            "check",
            arcs(
                "step: fetch\n          when: '{{ n < 2 }}'\n          set: {ctx.n: '{{ n + 1 }}'}",
                "step: done",
            ),
        )
        + py("done")
    )
    sim = Sim(playbook(text), lambda step, _i, _t: ok({"step": step}))
    state = sim.run()
    assert state.status == "COMPLETED"
    assert sim.steps_ran() == ["fetch", "check"] * 3 + ["done"]
    assert "step.skipped" not in sim.event_types()


def test_a_redone_pass_issues_the_same_join_command() -> None:
    """Passes are serialized per execution; a pass redone from the same snapshot (a
    crash before commit, a second wake-up) decides the same command id for the joined
    step, and the store inserts it ON CONFLICT DO NOTHING: one command."""
    text = HEAD + "workflow:\n" + py("start", fork("a", "b")) + py("a", to("join"))
    text += py("b", to("join")) + py("join")
    sim = Sim(playbook(text), lambda step, _i, _t: ok({"step": step}))
    sim.run(batch=2)
    joined = next(d for d in sim.decisions if any(c.step == "join" for c in d.commands))
    index = sim.decisions.index(joined)
    before = sim.decisions[index - 1].state
    assert before is not None
    pending = [
        c for c in sim.decisions[index - 1].commands if c.step in ("a", "b")
    ]  # the branches whose completions the joining pass folded
    assert {c.step for c in pending} == {"a", "b"}
    completions = [
        Completion(i + 1, c.command_id, c.step, c.epoch, None, ok({"step": c.step}))
        for i, c in enumerate(pending)
    ]
    again = [decide(sim.playbook, before, completions, sim, sim.limits, 0.0) for _ in range(2)]
    ids = [[c.command_id for c in d.commands if c.step == "join"] for d in again]
    assert ids[0] == ids[1] == [c.command_id for c in joined.commands if c.step == "join"]
