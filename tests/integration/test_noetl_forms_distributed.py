"""NoETL DSL forms on real workers (Postgres, Redis, two `noetl-celery worker` processes),
not only on the embedded engine: a fan-in join released by the re-check in its last
arrival's context, skipped arc targets in both router modes, a loop step's `when` when it
is re-entered while it runs, python's `input_data` and top-level `return`, duration
strings, `next.spec.on_no_match`, a NoETL tool kind this engine lacks, and a keychain
provider refused in a sub-playbook (issue 31)."""

from __future__ import annotations

from typing import Any

import pytest
from sqlalchemy import select

from noetl_celery.engine.service import Engine
from noetl_celery.store.rows import EventJSON
from noetl_celery.store.schema import executions

pytestmark = pytest.mark.integration

HEAD = "apiVersion: noetl.io/v2\nkind: Playbook\n"


@pytest.fixture
def engine(engine_on_workers: Engine) -> Engine:
    return engine_on_workers


def run(engine: Engine, text: str, payload: dict[str, Any] | None = None) -> tuple[str, Any]:
    eid = engine.start_text(text, payload)
    row = engine.wait(eid, 60)
    return eid, row


def events(engine: Engine, eid: str, kind: str) -> list[EventJSON]:
    return [e for e in engine.events(eid) if e["type"] == kind]


RELEASED = (
    HEAD
    + """metadata: {name: released_join, path: tests/forms/released_join}
workflow:
  - step: start
    tool: {kind: noop}
    next:
      spec: {mode: inclusive}
      arcs:
        - step: a
        - step: b
        - step: never
          when: "{{ false }}"
  - step: a
    tool: {kind: python, code: "result = {'data': {'v': 7}}"}
    next: {arcs: [{step: join}]}
  - step: b
    tool: {kind: python, code: "import time\\ntime.sleep(1.0)\\nraise ValueError('b fails')"}
    next: {arcs: [{step: join, when: "{{ event.name == 'call.done' }}"}]}
  - step: never
    tool: {kind: noop}
  - step: join
    when: "{{ event.name == 'call.done' and event.step == 'a' and output.data.v == 7 }}"
    tool: {kind: python, code: "result = {'joined': True}"}
"""
)


def test_a_released_join_runs_in_its_last_arrivals_context(engine: Engine) -> None:
    """`a` arrives and waits for `b`; `b` fails and routes nowhere, so the re-check
    releases the join, whose `when` reads `a`'s arc: event, output. The inclusive
    router's unmatched target records step.skipped (reason inclusive)."""
    eid, row = run(engine, RELEASED)
    assert row.status == "FAILED" and "b fails" in str(row.error), row.error
    assert engine.store.result(eid, "join", 1) == {"joined": True}
    skipped = events(engine, eid, "step.skipped")
    assert [(e["step"], e["payload"]["reason"]) for e in skipped] == [("never", "inclusive")]


LOOP_WHEN = (
    HEAD
    + """metadata: {name: loop_when_reentry, path: tests/forms/loop_when_reentry}
workload: {go: true, n: 0}
workflow:
  - step: hub
    tool: {kind: noop}
    next:
      spec: {mode: inclusive}
      arcs:
        - step: work
        - step: poke
  - step: poke
    tool: {kind: python, code: "import time\\ntime.sleep(0.3)\\nresult = 1"}
    next: {arcs: [{step: hub, when: "{{ n < 1 }}", set: {ctx.go: false, ctx.n: 1}}]}
  - step: work
    when: "{{ go }}"
    loop: {in: "{{ [1, 2, 3] }}", iterator: x, spec: {mode: sequential}}
    tool:
      kind: python
      input: {x: "{{ iter.x }}"}
      code: "import time\\ntime.sleep(0.5)\\nresult = x"
"""
)


def test_a_loop_steps_when_reentered_while_it_runs_skips_without_stopping_it(
    engine: Engine,
) -> None:
    """`work` runs its 3 items; `poke` loops back to `hub`, which reaches `work` again
    mid-loop with `go` now false: the guard skips that entry (a step.skipped event) and
    the running epoch goes on to its end (one loop.done, 3 items)."""
    eid, row = run(engine, LOOP_WHEN)
    assert row.status == "COMPLETED", row.error
    assert engine.summary(eid)["steps"]["work"]["stats"]["total"] == 3
    assert [e["step"] for e in events(engine, eid, "step.skipped")] == ["work"]
    assert len(events(engine, eid, "loop.done")) == 1
    order = [e["type"] for e in engine.events(eid)]
    assert order.index("step.skipped") < order.index("loop.done")  # while it ran
    state = engine.store.execution(eid).state or {}
    assert state["steps"]["work"]["status"] == "completed"


FORMS = (
    HEAD
    + """metadata: {name: noetl_forms, path: tests/forms/noetl_forms}
workflow:
  - step: start
    tool:
      kind: python
      input: {a: 2, b: 3}
      code: |
        return {"sum": input_data["a"] + input_data.get("b", 0)}
    spec: {timeout: "1m"}
    next:
      spec: {mode: exclusive, on_no_match: complete}
      arcs:
        - step: later
          when: "{{ output.data.sum == 5 }}"
  - step: later
    tool: {kind: python, code: "result = {'later': True}"}
    spec: {timeout: "30s"}
    next:
      arcs:
        - step: unknown_kind
          when: "{{ reach_unknown }}"
  - step: unknown_kind
    tool: {kind: gcs, bucket: b}
"""
)


@pytest.mark.parametrize("reach", [False, True])
def test_noetl_forms_run_on_workers_and_a_lacking_kind_fails_only_when_reached(
    engine: Engine, reach: bool
) -> None:
    eid, row = run(engine, FORMS, {"reach_unknown": reach})
    assert engine.store.result(eid, "start", 1) == {"sum": 5}
    if not reach:
        assert row.status == "COMPLETED", row.error
        return
    assert row.status == "FAILED"
    assert "kind gcs is not supported by noetl-celery" in str(row.error), row.error
    assert "step 'unknown_kind'" in str(row.error)


CHILD_GCP = (
    HEAD
    + """metadata: {name: child_gcp, path: tests/forms/child_gcp}
keychain:
  - {name: openai, kind: secret_manager, provider: gcp, auth: gcp, map: {api_key: p/s}}
workflow:
  - step: start
    tool: {kind: python, code: "result = 1"}
"""
)
PARENT = (
    HEAD
    + """metadata: {name: parent_of_gcp, path: tests/forms/parent_of_gcp}
workflow:
  - step: call
    tool: {kind: playbook, path: tests/forms/child_gcp, return_step: start}
"""
)


def test_a_keychain_provider_is_refused_naming_it_in_a_sub_playbook(engine: Engine) -> None:
    """A start through the engine refuses it before anything exists
    (tests/integration/test_keychain.py); a sub-playbook started by its parent on a
    worker fails its first command instead, naming the entry and the provider."""
    engine.register_text(CHILD_GCP)
    eid, row = run(engine, PARENT)
    assert row.status == "FAILED", row.error
    with engine.database.read_engine.connect() as conn:
        [child_id] = conn.execute(
            select(executions.c.execution_id).where(executions.c.parent_execution_id == eid)
        ).scalars()
    child = engine.store.execution(child_id)
    assert child.status == "FAILED"
    assert "keychain entry 'openai' (kind secret_manager, provider gcp)" in str(child.error)
    assert "Google Secret Manager (`provider: gcp`)" in str(child.error), child.error


OPTIONAL_PRE = (
    HEAD
    + """metadata: {name: optional_pre, path: tests/forms/optional_pre}
workload: {prepare: true}
workflow:
  - step: start
    tool: {kind: noop}
    next:
      arcs:
        - step: pre
          when: "{{ prepare }}"
        - step: main
  - step: pre
    tool: {kind: python, code: "result = {'pre': True}"}
    next: {arcs: [{step: main}]}
  - step: main
    tool: {kind: python, input: {pre: "{{ pre.pre if pre else false }}"}, code: "result = pre"}
"""
)


@pytest.mark.parametrize("prepare", [True, False])
def test_an_unchosen_target_another_path_reaches_runs_once_and_is_not_skipped(
    engine: Engine, prepare: bool
) -> None:
    """NoETL marks `main` skipped when `start` chooses `pre`, and then drops `pre`'s arc
    to it (docs/compatibility.md, Deliberate differences); here `main` runs once, after
    `pre`, and nothing is skipped. Without `pre` chosen, `pre` is the skipped one."""
    eid, row = run(engine, OPTIONAL_PRE, {"prepare": prepare})
    assert row.status == "COMPLETED", row.error
    assert engine.summary(eid)["result"] is prepare
    ran = [e["step"] for e in events(engine, eid, "command.completed")]
    assert ran == (["start", "pre", "main"] if prepare else ["start", "main"])
    skipped = [e["step"] for e in events(engine, eid, "step.skipped")]
    assert skipped == ([] if prepare else ["pre"])
