"""Today's NoETL step forms on the engine with its real store (both backends) and
in-process workers (issue 31): a step-level `when` (enable guard), `spec.on_error` and a
pipeline task's `set:`, each in a small playbook."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from noetl_celery.engine.service import Engine
from noetl_celery.engine.summaries import RunSummary
from noetl_celery.models.validation import validate_text
from tests.support.engines import embedded_engine

HEAD = "apiVersion: noetl.io/v2\nkind: Playbook\nmetadata: {name: forms, path: tests/forms}\n"


@pytest.fixture
def engine(store_url: str, tmp_path: Path) -> Iterator[Engine]:
    built = embedded_engine(store_url, tmp_path)
    yield built
    built.close()


def run(engine: Engine, text: str, payload: dict[str, Any] | None = None) -> RunSummary:
    report = validate_text(text, "pb.yaml")
    assert report.ok and not report.warnings, report.problems
    eid = engine.start_text(text, payload=payload)
    engine.wait(eid, 60)
    return engine.summary(eid)


def events_of(engine: Engine, execution_id: str, kind: str) -> list[Any]:
    return list(engine.events(execution_id, types=[kind]))


GUARDED = (
    HEAD
    + """workload: {mode: quick}
workflow:
  - step: start
    tool: {kind: python, code: "result = {'rows': 3}"}
    next:
      arcs:
        - step: heavy
          set: {ctx.checked: true}
  - step: heavy
    when: "{{ mode == 'full' and checked }}"
    tool: {kind: python, code: "result = {'heavy': True}"}
    next:
      arcs:
        - step: report
  - step: report
    tool: {kind: python, input: {rows: "{{ start.rows }}"}, code: "result = {'rows': rows}"}
"""
)


def test_a_false_step_when_skips_the_step_and_routing_continues(engine: Engine) -> None:
    summary = run(engine, GUARDED)
    assert summary["status"] == "COMPLETED", summary["errors"]
    assert summary["result"] == {"rows": 3}
    assert "heavy" not in summary["steps"] or summary["steps"]["heavy"] is None
    eid = summary["execution_id"]
    [skipped] = events_of(engine, eid, "step.skipped")
    assert skipped["step"] == "heavy"
    ran = [e["step"] for e in engine.events(eid, types=["command.completed"])]
    assert ran == ["start", "report"]


def test_a_true_step_when_runs_the_step(engine: Engine) -> None:
    summary = run(engine, GUARDED, payload={"mode": "full"})
    assert summary["status"] == "COMPLETED", summary["errors"]
    assert summary["steps"]["heavy"] == {"heavy": True}
    assert events_of(engine, summary["execution_id"], "step.skipped") == []


PIPELINE_SET = (
    HEAD
    + """workload: {base_url: "https://api.example.test"}
workflow:
  - step: start
    tool:
      - name: fetch
        kind: python
        code: "result = {'items': [{'id': 1}, {'id': 2}, {'id': 3}], 'next_page': 2}"
        set:
          item_count: "{{ output.items | length }}"
          paging.next: "{{ output.data.next_page }}"
      - name: transform
        kind: python
        input: {count: "{{ item_count }}", page: "{{ paging.next }}"}
        code: "result = {'summary': f'{count} items, next page {page}'}"
        set: {summary: "{{ output.summary }}", ctx.pages_seen: "{{ paging.next }}"}
      - name: save
        kind: noop
        input: {line: "{{ summary }} from {{ base_url }}"}
    next:
      arcs:
        - step: check
  - step: check
    tool:
      kind: python
      input: {seen: "{{ pages_seen }}", saved: "{{ start.results.transform.summary }}"}
      code: "result = {'seen': seen, 'saved': saved}"
"""
)


def test_task_set_binds_names_for_the_following_tasks(engine: Engine) -> None:
    summary = run(engine, PIPELINE_SET)
    assert summary["status"] == "COMPLETED", summary["errors"]
    assert summary["result"] == {"seen": 2, "saved": "3 items, next page 2"}


ON_ERROR = (
    HEAD
    + """workflow:
  - step: start
    tool: {kind: noop}
    next: {arcs: [{step: flaky}]}
  - step: flaky
    spec: {on_error: retry}
    tool:
      kind: python
      input: {db: "{{ db }}"}
      code: |
        import json, pathlib
        marks = pathlib.Path(db)
        runs = json.loads(marks.read_text()) if marks.exists() else 0
        marks.write_text(json.dumps(runs + 1))
        if runs < 1:
            raise RuntimeError("first run fails")
        result = {"runs": runs + 1}
    next: {arcs: [{step: optional}]}
  - step: optional
    spec: {on_error: "%s"}
    tool: {kind: python, code: "raise ValueError('optional failed')"}
    next:
      arcs:
        - {step: report, when: "{{ event.name == 'call.error' and output.status == 'error' }}"}
        - {step: unreachable}
  - step: report
    tool:
      kind: python
      input: {runs: "{{ flaky.runs }}", failed: "{{ optional is defined }}"}
      code: "result = {'runs': runs, 'optional_recorded': failed}"
  - step: unreachable
    tool: {kind: noop}
"""
)


def test_on_error_retry_then_continue(engine: Engine, tmp_path: Path) -> None:
    marks = str(tmp_path / "runs.json")
    summary = run(engine, ON_ERROR % "continue", payload={"db": marks})
    assert summary["status"] == "COMPLETED", summary["errors"]
    assert summary["result"] == {"runs": 2, "optional_recorded": True}


@pytest.mark.parametrize(("on_error", "status"), [("fail", "FAILED"), ("continue", "COMPLETED")])
def test_an_error_no_arc_catches(
    engine: Engine, tmp_path: Path, on_error: str, status: str
) -> None:
    guard = "event.name == 'call.error' and output.status == 'error'"
    text = (ON_ERROR % on_error).replace(guard, "false")  # no guarded arc catches it
    summary = run(engine, text, payload={"db": str(tmp_path / "runs.json")})
    assert summary["status"] == status
    assert [e["step"] for e in summary["errors"]] == (["optional"] if status == "FAILED" else [])
    if status == "COMPLETED":
        assert summary["result"]["step"] == "unreachable"  # the unconditional arc routed
