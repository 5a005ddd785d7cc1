"""A step's `spec.on_error: retry` on the worker: the step runs as a pipeline and a failed
task no rule matched is retried with NoETL's `do: retry` defaults (3 runs, 1 s apart,
`backoff: none` waiting its delay as everywhere here), then fails the step."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import pytest
import yaml

from noetl_celery.models.outcome import Outcome
from noetl_celery.models.playbook import Step, ToolSpec, step_on_error
from noetl_celery.tools.base import ToolOutcome
from noetl_celery.worker.pipeline import ON_ERROR_RETRY, PipelineLimits, run_pipeline


def step(text: str) -> Step:
    return Step.model_validate(yaml.safe_load(text))


def run(
    s: Step, outcomes: list[ToolOutcome], sleeps: list[float]
) -> tuple[dict[str, Any], list[str]]:
    ran: list[str] = []

    def task(label: str, tool: ToolSpec, ctx: Mapping[str, Any], key: str = "") -> ToolOutcome:
        ran.append(label)
        return outcomes.pop(0) if len(outcomes) > 1 else outcomes[0]

    limits = PipelineLimits(sleep=sleeps.append)
    on_error = ON_ERROR_RETRY if step_on_error(s) == "retry" else None
    outcome = run_pipeline(s.step, s.tasks(), {"ctx": {}}, None, task, limits, on_error=on_error)
    assert isinstance(outcome, Outcome)
    return outcome.to_json(), ran


SINGLE = "{step: s, spec: {on_error: retry}, tool: {kind: http, url: x}}"
BOOM = ToolOutcome.failure("server_error", "HTTP 503", retryable=True)


def test_a_single_tool_under_retry_runs_as_a_pipeline() -> None:
    assert step(SINGLE).is_pipeline
    assert not step("{step: s, spec: {on_error: continue}, tool: {kind: noop}}").is_pipeline


def test_retry_recovers_a_flaky_tool() -> None:
    sleeps: list[float] = []
    result, ran = run(step(SINGLE), [BOOM, ToolOutcome.success({"ok": 1})], sleeps)
    assert result["status"] == "ok" and result["result"]["ok"] == 1
    assert ran == ["s_task", "s_task"] and sleeps == [1.0]


def test_retry_gives_up_after_three_runs() -> None:
    sleeps: list[float] = []
    result, ran = run(step(SINGLE), [BOOM], sleeps)
    assert result["status"] == "error"
    assert "gave up after 3 attempts" in result["error"]["message"]
    assert len(ran) == 3 and sleeps == [1.0, 1.0]


def test_a_matching_rule_wins_over_on_error() -> None:
    text = """
    step: s
    spec: {on_error: retry}
    tool:
      - name: a
        kind: http
        url: x
        spec: {policy: {rules: [{when: "{{ output.status == 'error' }}", then: {do: fail}}]}}
      - name: b
        kind: http
        url: x
    """
    sleeps: list[float] = []
    result, ran = run(step(text), [BOOM], sleeps)
    assert result["status"] == "error" and ran == ["a"] and sleeps == []


@pytest.mark.parametrize(("value", "expected"), [(None, "fail"), ("Retry", "retry"), (3, "fail")])
def test_on_error_values(value: Any, expected: str) -> None:
    spec = {} if value is None else {"on_error": value}
    s = Step.model_validate({"step": "s", "spec": spec, "tool": {"kind": "noop"}})
    assert step_on_error(s) == expected
