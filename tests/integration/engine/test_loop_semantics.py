"""Loop semantics on the engine with its real store (both backends), in-process workers."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from noetl_celery.engine.service import Engine
from noetl_celery.engine.summaries import RunSummary
from noetl_celery.settings import Settings
from noetl_celery.store.database import SchemaMode

HEAD = "apiVersion: noetl.io/v2\nkind: Playbook\nmetadata: {name: t}\n"


@pytest.fixture
def engine(store_url: str, tmp_path: Path) -> Iterator[Engine]:
    built = Engine(
        Settings(home=tmp_path, database_url=store_url, loop_results_cap=3),
        schema=SchemaMode.MIGRATE,
    )
    built.use_in_process_workers()
    yield built
    built.close()


def run(engine: Engine, text: str, payload: dict[str, object] | None = None) -> RunSummary:
    eid = engine.start_text(HEAD + text, payload)
    engine.wait(eid, 60)
    return engine.summary(eid)


def test_iteration_variables(engine: Engine) -> None:
    out = run(
        engine,
        """workload: {people: [{name: ann}, {name: bob}, {name: cy}]}
workflow:
  - step: each
    loop: {in: "{{ people }}", iterator: person, spec: {mode: parallel, max_in_flight: 2}}
    tool:
      kind: python
      input:
        name: "{{ iter.person.name }}"
        top: "{{ person.name }}"
        index: "{{ iter._index }}"
        first: "{{ iter._first }}"
        last: "{{ iter._last }}"
        loop_index: "{{ loop_index }}"
      code: "result = dict(name=name, top=top, index=index, first=first, last=last, li=loop_index)"
""",
    )
    assert out["status"] == "COMPLETED", out["error"]
    results = out["steps"]["each"]["results"]
    assert results == [
        {"name": "ann", "top": "ann", "index": 0, "first": True, "last": False, "li": 0},
        {"name": "bob", "top": "bob", "index": 1, "first": False, "last": False, "li": 1},
        {"name": "cy", "top": "cy", "index": 2, "first": False, "last": True, "li": 2},
    ]


def test_results_are_capped_but_stats_are_exact(engine: Engine) -> None:
    out = run(
        engine,
        """workload: {n: 7}
workflow:
  - step: each
    loop: {in: "{{ range(n) | list }}", iterator: i, spec: {mode: parallel, max_in_flight: 4}}
    tool:
      kind: python
      input: {i: "{{ i }}"}
      code: |
        assert i != 5, "five is bad"
        result = {"i": i}
""",
    )
    each = out["steps"]["each"]
    assert each["stats"] == {"total": 7, "success": 6, "failed": 1}
    assert each["results"] == [{"i": 0}, {"i": 1}, {"i": 2}]  # cap 3, iteration order
    # an unhandled item error fails the run (as in NoETL); the loop still completed
    assert (out["status"], out["result"]) == ("FAILED", None)
    assert out["errors"] == [
        {
            "step": "each",
            "item": 5,
            "value": "5",
            "kind": "python_error",
            "message": out["errors"][0]["message"],
        }
    ]
    assert "AssertionError: five is bad" in str(out["errors"][0]["message"])


def test_step_set_runs_per_iteration_with_the_iteration_scope(engine: Engine) -> None:
    out = run(
        engine,
        """workload: {items: [a, b, c], seen: ""}
workflow:
  - step: each
    loop: {in: "{{ items }}", iterator: item}
    tool: {kind: python, input: {item: "{{ item }}"}, code: "result = {'x': item}"}
    set: {ctx.seen: "{{ seen }}{{ iter.item }}"}
    next: {arcs: [{step: done, when: "{{ event.name == 'loop.done' }}"}]}
  - step: done
    tool: {kind: python, input: {seen: "{{ seen }}"}, code: "result = {'seen': seen}"}
""",
    )
    assert out["result"] == {"seen": "abc"}  # sequential: in order


def test_empty_collection_routes_on(engine: Engine) -> None:
    out = run(
        engine,
        """workflow:
  - step: each
    loop: {in: "{{ [] }}", iterator: x}
    tool: {kind: noop}
    next: {arcs: [{step: after, when: "{{ event.name == 'loop.done' and each.stats.total == 0 }}"}]}
  - step: after
    tool: {kind: python, code: "result = {'ok': True}"}
""",
    )
    assert out["status"] == "COMPLETED" and out["result"] == {"ok": True}
