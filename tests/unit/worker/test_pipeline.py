"""Pipelines and task policies by table (pure: tasks are scripted, sleeps recorded)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import pytest
import yaml

from noetl_celery.models.outcome import Outcome
from noetl_celery.models.playbook import Step, ToolSpec
from noetl_celery.tools.base import ToolOutcome
from noetl_celery.worker.pipeline import PipelineLimits, run_pipeline


class Script:
    """Scripted task outcomes: label -> list of outcomes, consumed one per run."""

    def __init__(self, outcomes: dict[str, list[ToolOutcome]]) -> None:
        self.outcomes = {k: list(v) for k, v in outcomes.items()}
        self.calls: list[tuple[str, dict[str, Any]]] = []

    def __call__(
        self, label: str, tool: ToolSpec, context: Mapping[str, Any], spawn_key: str = ""
    ) -> ToolOutcome:
        self.calls.append(
            (
                label,
                {
                    "iter": dict(context["iter"]),
                    "_attempt": context["_attempt"],
                    "_prev": context["_prev"],
                },
            )
        )
        queue = self.outcomes.get(label) or [ToolOutcome.success({"label": label})]
        return queue.pop(0) if len(queue) > 1 else queue[0]


def step(tasks_yaml: str) -> Step:
    return Step.model_validate({"step": "s", "tool": yaml.safe_load(tasks_yaml)})


def http_error(code: int, retry_after: int | None = None) -> ToolOutcome:
    return ToolOutcome.failure(
        "server_error" if code >= 500 else "rate_limit",
        f"HTTP {code}",
        retryable=True,
        status_code=code,
        retry_after=retry_after,
        detail={"http": {"status": code}},
    )


def run(
    tasks_yaml: str,
    script: Script,
    sleeps: list[float] | None = None,
    iter_scope: dict[str, Any] | None = None,
) -> dict[str, Any]:
    record = sleeps if sleeps is not None else []
    limits = PipelineLimits(max_jumps=50, max_retry_delay=60, sleep=record.append)
    outcome = run_pipeline("s", step(tasks_yaml).tasks(), {"ctx": {}}, iter_scope, script, limits)
    assert isinstance(outcome, Outcome), outcome
    return outcome.to_json()  # as the terminal event stores it


RETRY = """
- name: fetch
  kind: http
  url: x
  spec:
    policy:
      rules:
        - when: "{{ output.status == 'error' }}"
          then: {do: retry, attempts: 3, backoff: %s, delay: 1.0}
        - else: {then: {do: continue}}
"""


@pytest.mark.parametrize(
    ("backoff", "failures", "status", "runs", "sleeps"),
    [
        ("none", 1, "ok", 2, [1.0]),  # deliberate: `none` waits `delay` (NoETL: 0)
        ("fixed", 2, "ok", 3, [1.0, 1.0]),
        ("linear", 2, "ok", 3, [1.0, 2.0]),
        ("exponential", 2, "ok", 3, [1.0, 2.0]),
        ("exponential", 3, "error", 3, [1.0, 2.0]),  # attempts counts total runs
    ],
)
def test_retry_policies(
    backoff: str, failures: int, status: str, runs: int, sleeps: list[float]
) -> None:
    outcomes = [http_error(500)] * failures + [ToolOutcome.success({"ok": 1})]
    script = Script({"fetch": outcomes})
    recorded: list[float] = []
    outcome = run(RETRY % backoff, script, recorded)
    assert outcome["status"] == status
    assert len(script.calls) == runs
    assert recorded == sleeps
    assert [c[1]["_attempt"] for c in script.calls] == list(range(1, runs + 1))
    if status == "error":
        assert "gave up after 3 attempts" in outcome["error"]["message"]


def test_retry_after_is_honoured() -> None:
    script = Script({"fetch": [http_error(429, retry_after=7), ToolOutcome.success({})]})
    recorded: list[float] = []
    run(RETRY % "fixed", script, recorded)
    assert recorded == [7.0]


def test_jump_pagination_with_iter_state() -> None:
    tasks = """
- name: init
  kind: noop
  spec: {policy: {rules: [{else: {then: {do: continue, set: {iter.page: 1}}}}]}}
- name: fetch
  kind: http
  url: x
  spec:
    policy:
      rules:
        - else:
            then:
              do: continue
              set: {iter.has_more: "{{ output.data.more }}", iter.seen: "{{ iter.page }}"}
- name: paginate
  kind: noop
  spec:
    policy:
      rules:
        - when: "{{ iter.has_more }}"
          then: {do: jump, to: fetch, set: {iter.page: "{{ iter.page + 1 }}"}}
        - else: {then: {do: continue}}
"""
    pages = [
        ToolOutcome.success({"more": True}),
        ToolOutcome.success({"more": True}),
        ToolOutcome.success({"more": False}),
    ]
    script = Script({"fetch": pages})
    outcome = run(tasks, script, iter_scope={"patient": 9})
    assert [label for label, _ in script.calls] == [
        "init",
        "fetch",
        "paginate",
        "fetch",
        "paginate",
        "fetch",
        "paginate",
    ]
    assert outcome["status"] == "ok"
    assert outcome["iter"] == {"patient": 9, "page": 3, "has_more": False, "seen": 3}
    assert set(outcome["result"]["results"]) == {"init", "fetch", "paginate"}


@pytest.mark.parametrize(
    ("rules", "outcome", "status", "calls"),
    [
        ("[]", ToolOutcome.success({}), "ok", ["a", "b"]),
        ("[]", http_error(500), "error", ["a"]),  # no rule: error fails
        (
            "[{when: '{{ output.status == \"error\" }}', then: {do: continue}}]",
            http_error(500),
            "ok",
            ["a", "b"],
        ),
        ("[{else: {then: {do: break}}}]", ToolOutcome.success({}), "break", ["a"]),
        ("[{else: {then: {do: fail}}}]", ToolOutcome.success({}), "error", ["a"]),
        ("[{when: true, then: {do: continue}}]", http_error(404), "ok", ["a", "b"]),
        # shapes NoETL's runtime tolerates (models.legacy warns): evaluated as NoETL does
        ("[{else: {}}, {else: {then: {do: break}}}]", ToolOutcome.success({}), "break", ["a"]),
        ("[{else: {}}]", http_error(500), "error", ["a"]),  # skipped: no rule matched
        ("[{then: {do: break}}]", http_error(500), "break", ["a"]),  # no `when`: always
        ("[{}, {then: {do: break}}]", ToolOutcome.success({}), "break", ["a"]),
        ("[{when: true}]", ToolOutcome.success({}), "error", ["a"]),  # matched, no `then`
        ("[{when: false}]", ToolOutcome.success({}), "ok", ["a", "b"]),
    ],
)
def test_actions(rules: str, outcome: ToolOutcome, status: str, calls: list[str]) -> None:
    tasks = f"""
- name: a
  kind: http
  url: x
  spec: {{policy: {{rules: {rules}}}}}
- name: b
  kind: noop
"""
    script = Script({"a": [outcome]})
    result = run(tasks, script)
    assert result["status"] == status
    assert [c[0] for c in script.calls] == calls


def test_python_result_with_status_error_fails_a_task() -> None:
    script = Script({"a": [ToolOutcome.success({"status": "error", "message": "bad row"})]})
    result = run("[{name: a, kind: python, code: x}, {name: b, kind: noop}]", script)
    assert result["status"] == "error"
    assert result["error"]["message"] == "bad row"


def test_status_failed_inside_a_pipeline_is_not_an_error() -> None:
    script = Script({"a": [ToolOutcome.success({"status": "failed", "v": 1})]})
    result = run("[{name: a, kind: python, code: x}]", script)
    assert result["status"] == "ok" and result["result"]["v"] == 1


def test_prev_and_results_thread_through() -> None:
    script = Script({"a": [ToolOutcome.success({"n": 1})], "b": [ToolOutcome.success({"n": 2})]})
    result = run("[{name: a, kind: noop}, {name: b, kind: noop}, {name: c, kind: noop}]", script)
    assert script.calls[1][1]["_prev"] == {"n": 1}
    assert script.calls[2][1]["_prev"] == {"n": 2}
    assert result["result"]["results"]["a"] == {"n": 1}
    assert result["result"]["status"] == "ok"  # last task's fields merged with the status


def test_ctx_set_is_returned_for_the_orchestrator() -> None:
    tasks = (
        "[{name: a, kind: noop, spec: {policy: {rules: [{else: {then: {do: continue, "
        "set: {ctx.total: '{{ 40 + 2 }}'}}}}]}}}]"
    )
    result = run(tasks, Script({}))
    assert result["ctx"] == {"total": 42}


def test_runaway_jumps_fail() -> None:
    tasks = "[{name: a, kind: noop, spec: {policy: {rules: [{else: {then: {do: jump, to: a}}}]}}}]"
    result = run(tasks, Script({}))
    assert result["status"] == "error" and "jumps" in result["error"]["message"]


def test_undefined_name_in_rule_fails_with_a_clear_message() -> None:
    tasks = (
        "[{name: a, kind: noop, spec: {policy: {rules: "
        "[{when: '{{ nope }}', then: {do: continue}}]}}}]"
    )
    result = run(tasks, Script({}))
    assert result["status"] == "error"
    assert result["error"]["kind"] == "template_error" and "nope" in result["error"]["message"]


def test_a_waiting_sub_playbook_suspends_and_resumes_with_the_childs_outcome() -> None:
    from noetl_celery.store.rows import SpawnRequest
    from noetl_celery.worker.subplaybook import Suspend, Suspended

    tasks = """
- name: prep
  kind: noop
  spec: {policy: {rules: [{else: {then: {do: continue, set: {iter.k: 7}}}}]}}
- name: child
  kind: playbook
  path: some/child
  return_step: end
  spec:
    policy:
      rules:
        - when: "{{ output.status == 'error' }}"
          then: {do: retry, attempts: 2, delay: 0}
        - else: {then: {do: continue, set: {iter.got: "{{ output.data.result.v }}"}}}
- name: after
  kind: noop
"""
    keys: list[str] = []

    def runner(label: str, tool: ToolSpec, context: Mapping[str, Any], key: str) -> ToolOutcome:
        if label == "child":
            keys.append(key)
            raise Suspend(SpawnRequest("some/child", None, {}, key, wait=True))
        return ToolOutcome.success({"label": label})

    limits = PipelineLimits(sleep=lambda s: None)
    first = run_pipeline("s", step(tasks).tasks(), {"ctx": {}}, None, runner, limits)
    assert isinstance(first, Suspended) and first.request.path == "some/child"
    # the child failed: the retry rule spawns a second child (a new key)
    failed = {"execution_id": "c1", "status": "FAILED", "result": None, "error": "boom"}
    second = run_pipeline(
        "s",
        step(tasks).tasks(),
        {"ctx": {}},
        None,
        runner,
        limits,
        resume={"continuation": first.continuation, "child": failed},
    )
    assert isinstance(second, Suspended)
    assert keys == ["child#1", "child#2"]
    done = {"execution_id": "c2", "status": "COMPLETED", "result": {"v": 5}, "error": None}
    final = run_pipeline(
        "s",
        step(tasks).tasks(),
        {"ctx": {}},
        None,
        runner,
        limits,
        resume={"continuation": second.continuation, "child": done},
    )
    assert isinstance(final, Outcome) and final.status == "ok"
    assert final.iter == {"k": 7, "got": 5}
    assert final.result["results"]["child"]["execution_id"] == "c2"
    assert final.meta["runs"] == 4  # prep, child (failed), child (ok), after


@pytest.mark.parametrize(
    ("rules", "outcome", "kind"),
    [
        # the task's own error is kept: `quarantine list --kind` filters on it
        (
            "[{when: '{{ output.status == \"error\" }}', then: {do: quarantine}}]",
            http_error(500),
            "server_error",
        ),
        # a success a rule quarantines fails by policy, as `do: fail` does
        ("[{else: {then: {do: quarantine}}}]", ToolOutcome.success({}), "policy"),
    ],
)
def test_quarantine_fails_the_pipeline_and_marks_its_outcome(
    rules: str, outcome: ToolOutcome, kind: str
) -> None:
    tasks = f"""
- name: a
  kind: http
  url: x
  spec: {{policy: {{rules: {rules}}}}}
- name: b
  kind: noop
"""
    script = Script({"a": [outcome]})
    result = run(tasks, script)
    assert (result["status"], result["error"]["kind"]) == ("error", kind)
    assert result["meta"]["quarantine"] is True
    assert result["result"]["status"] == "failed"  # what templates see: a failure
    assert [c[0] for c in script.calls] == ["a"]  # the rest of the pipeline does not run


def test_a_plain_failure_is_not_marked_quarantined() -> None:
    script = Script({"a": [http_error(500)]})
    result = run("[{name: a, kind: http, url: x}]", script)
    assert result["status"] == "error"
    assert "quarantine" not in result["meta"]
