"""A pipeline task's `set:` (NoETL tools' task_sequence, forward-only binding since
92716a5) and `input:` by table: pure, tasks scripted, the context each task saw kept."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import pytest
import yaml

from noetl_celery.models.outcome import Outcome
from noetl_celery.models.playbook import Step, ToolSpec
from noetl_celery.templating import STRICT
from noetl_celery.tools.base import ToolOutcome
from noetl_celery.worker.pipeline import PipelineLimits, RunState, run_pipeline


class Script:
    """label -> outcomes (one per run); records each task's context and rendered input."""

    def __init__(self, outcomes: dict[str, list[ToolOutcome]] | None = None) -> None:
        self.outcomes = {k: list(v) for k, v in (outcomes or {}).items()}
        self.seen: list[tuple[str, dict[str, Any]]] = []

    def __call__(
        self, label: str, tool: ToolSpec, context: Mapping[str, Any], spawn_key: str = ""
    ) -> ToolOutcome:
        rendered = STRICT.value(tool.input, context, f"task {label} input")
        self.seen.append((label, {**context, "input": rendered}))
        queue = self.outcomes.get(label) or [ToolOutcome.success({"n": len(self.seen)})]
        return queue.pop(0) if len(queue) > 1 else queue[0]

    def context_of(self, label: str, run: int = 0) -> dict[str, Any]:
        return [ctx for name, ctx in self.seen if name == label][run]


def run(tasks_yaml: str, script: Script) -> dict[str, Any]:
    tasks = Step.model_validate({"step": "s", "tool": yaml.safe_load(tasks_yaml)}).tasks()
    limits = PipelineLimits(max_jumps=20, sleep=lambda _s: None)
    outcome = run_pipeline("s", tasks, {"ctx": {"base": 1}}, {}, script, limits)
    assert isinstance(outcome, Outcome), outcome
    return outcome.to_json()


FORWARD = """
- name: first
  kind: python
  code: x
  set: {total: "{{ output.rows | length }}", first_rows: "{{ output.data.rows }}"}
- name: second
  kind: python
  code: x
  input: {doubled: "{{ total * 2 }}"}
  set: {page.next: "{{ output.n + 1 }}", page.size: 10}
- name: third
  kind: python
  code: x
  input: {next: "{{ page.next }}", size: "{{ page.size }}", total: "{{ total }}"}
"""


def test_set_binds_names_for_the_following_tasks() -> None:
    script = Script({"first": [ToolOutcome.success({"rows": [1, 2, 3]})]})
    result = run(FORWARD, script)
    assert result["status"] == "ok"
    assert "total" not in script.context_of("first")  # forward only
    assert script.context_of("second")["input"] == {"doubled": 6}
    assert script.context_of("second")["first_rows"] == [1, 2, 3]
    assert script.context_of("third")["input"] == {"next": 3, "size": 10, "total": 3}
    # bound names stay in the pipeline: neither the step's ctx nor its result has them
    assert not result.get("ctx")
    assert not {"total", "page", "first_rows"} & set(result["result"])


def test_scoped_keys_write_ctx_and_iter_as_a_rule_set_does() -> None:
    tasks = """
    - name: a
      kind: noop
      set: {ctx.count: "{{ output.n }}", iter.page: 2}
    - name: b
      kind: noop
      input: {seen: "{{ ctx.count }}-{{ iter.page }}-{{ ctx.base }}"}
    """
    script = Script()
    result = run(tasks, script)
    assert script.context_of("b")["input"] == {"seen": "1-2-1"}
    assert result["ctx"] == {"count": 1}
    assert result["iter"] == {"page": 2}


def test_a_failed_task_binds_only_what_its_failure_has_and_its_policy_still_decides() -> None:
    tasks = """
    - name: fetch
      kind: http
      url: x
      set: {rows: "{{ output.rows }}", last_status: "{{ output.status }}"}
      spec:
        policy:
          rules:
            - when: "{{ output.status == 'error' }}"
              then: {do: retry, attempts: 2, delay: 0}
    - name: use
      kind: noop
      input: {rows: "{{ rows }}", last: "{{ last_status }}"}
    """
    failed = ToolOutcome.failure("server_error", "HTTP 500", retryable=True)
    script = Script({"fetch": [failed, ToolOutcome.success({"rows": [7], "status": "ok"})]})
    result = run(tasks, script)
    assert result["status"] == "ok"
    assert [name for name, _ in script.seen] == ["fetch", "fetch", "use"]
    assert script.context_of("use")["input"] == {"rows": [7], "last": "ok"}


def test_a_failed_task_that_continues_passes_its_envelope_on() -> None:
    tasks = """
    - name: fetch
      kind: http
      url: x
      set: {rows: "{{ output.rows }}", failed: "{{ output }}"}
      spec:
        policy:
          rules:
            - else: {then: {do: continue}}
    - name: use
      kind: noop
      input: {kind: "{{ failed.error.kind }}", has_rows: "{{ rows is defined }}"}
    """
    failed = ToolOutcome.failure("server_error", "HTTP 500", retryable=True)
    script = Script({"fetch": [failed]})
    result = run(tasks, script)
    assert result["status"] == "ok"
    assert script.context_of("use")["input"] == {"kind": "server_error", "has_rows": False}


def test_a_set_template_error_fails_the_pipeline_naming_the_task() -> None:
    tasks = """
    - name: a
      kind: noop
      set: {x: "{{ output.missing.deeper }}"}
    - name: b
      kind: noop
    """
    result = run(tasks, Script())
    assert result["status"] == "error"
    assert result["error"]["kind"] == "template_error"
    assert "task 'a' set.x" in result["error"]["message"]


def test_a_later_binding_replaces_an_earlier_one_and_jumps_see_the_latest() -> None:
    tasks = """
    - name: page
      kind: noop
      input: {current: "{{ cursor | default(0) }}"}
      set: {cursor: "{{ output.next }}"}
      spec:
        policy:
          rules:
            - when: "{{ output.data.next < 3 }}"
              then: {do: jump, to: page}
            - else: {then: {do: continue}}
    """
    outcomes = [ToolOutcome.success({"next": n}) for n in (1, 2, 3)]
    script = Script({"page": outcomes})
    run(tasks, script)
    assert [ctx["input"]["current"] for _, ctx in script.seen] == [0, 1, 2]


def test_prev_and_labels_still_work_beside_set() -> None:
    tasks = """
    - name: a
      kind: noop
      set: {k: v}
    - name: b
      kind: noop
      input: {prev: "{{ _prev.n }}", label: "{{ a.n }}", k: "{{ k }}"}
    """
    script = Script()
    run(tasks, script)
    assert script.context_of("b")["input"] == {"prev": 1, "label": 1, "k": "v"}


@pytest.mark.parametrize("value", [{"x": 1}, [1, 2], "text", None])
def test_output_is_the_result_and_a_mapping_is_also_its_data(value: Any) -> None:
    tasks = """
    - name: a
      kind: noop
      set: {got: "{{ output }}"}
    - name: b
      kind: noop
    """
    script = Script({"a": [ToolOutcome.success(value)]})
    run(tasks, script)
    got = script.context_of("b")["got"]
    assert got == ({**value, "data": value} if isinstance(value, dict) else value)


def test_bound_names_survive_a_continuation() -> None:
    state = RunState(bound={"cursor": 5})
    assert RunState.from_json(state.to_json()).bound == {"cursor": 5}
    older = state.to_json()
    del older["bound"]  # written before `set:` was bound
    assert RunState.from_json(older).bound == {}
