"""`rate_limit` blocks: what validation says about each shape, and what the worker gets."""

from __future__ import annotations

from typing import Any

import pytest

from noetl_celery.models.rate_limit import (
    RateLimit,
    parse_rate_limit,
    rate_limit_problems,
    rendered_key_problem,
)
from noetl_celery.models.validation import validate_text

GOOD: list[tuple[dict[str, Any], RateLimit]] = [
    ({"key": "{{ iter.t }}", "per_second": 5}, RateLimit("{{ iter.t }}", 5.0, 1, None)),
    ({"key": "shop", "concurrency": 2}, RateLimit("shop", None, 1, 2)),
    (
        {"key": "a", "per_second": 0.5, "burst": 3, "concurrency": 1},
        RateLimit("a", 0.5, 3, 1),
    ),
]


@pytest.mark.parametrize(("raw", "parsed"), GOOD)
def test_good_blocks_parse(raw: dict[str, Any], parsed: RateLimit) -> None:
    assert rate_limit_problems(raw) == []
    assert parse_rate_limit(raw) == parsed


BAD: list[tuple[Any, str | None, str]] = [
    ("5/s", None, "is a mapping"),
    ({"key": "a", "per_second": 0}, "per_second", "number above 0"),
    ({"key": "a", "per_second": -1}, "per_second", "number above 0"),
    ({"key": "a", "per_second": "fast"}, "per_second", "number above 0"),
    ({"key": "a", "per_second": True}, "per_second", "number above 0"),
    ({"key": "a", "concurrency": 0}, "concurrency", "whole number of 1 or more"),
    ({"key": "a", "concurrency": 1.5}, "concurrency", "whole number of 1 or more"),
    ({"key": "a", "per_second": 1, "burst": -2}, "burst", "whole number of 1 or more"),
    ({"key": "a", "concurrency": 1, "burst": 2}, "burst", "needs `per_second`"),
    ({"key": "a", "per_second": 1, "rate": 2}, "rate", "unknown `rate_limit` field"),
    ({"per_second": 3}, "key", "is per key: add `key:`"),
    ({"key": "  ", "concurrency": 3}, "key", "is per key: add `key:`"),
    ({"key": ["a"], "concurrency": 3}, "key", "string or a template"),
    ({"key": "a"}, None, "limits nothing"),
    ({}, "key", "needs `key:`"),
]


@pytest.mark.parametrize(("raw", "field", "words"), BAD)
def test_bad_blocks_say_which_field(raw: Any, field: str | None, words: str) -> None:
    problems = rate_limit_problems(raw)
    assert any(f == field and words in message for f, message in problems), problems
    assert parse_rate_limit(raw) is None


@pytest.mark.parametrize(
    ("rendered", "words"),
    [
        ("", "rendered empty"),
        (None, "rendered empty"),
        ("  ", "rendered empty"),
        ("x" * 300, "more than"),
    ],
)
def test_a_key_that_renders_unusable_is_named(rendered: Any, words: str) -> None:
    problem = rendered_key_problem(rendered, "{{ iter.t }}")
    assert problem is not None and words in problem and "{{ iter.t }}" in problem


def test_a_usable_key_has_no_problem() -> None:
    assert rendered_key_problem("tenant-a", "{{ iter.t }}") is None
    assert rendered_key_problem(7, "{{ iter.t }}") is None


PLAYBOOK = """\
apiVersion: noetl.io/v2
kind: Playbook
metadata: {name: rl}
workflow:
  - step: a
    rate_limit: {key: "{{ workload.t }}", per_second: -1}
    tool: {kind: python, code: "result = 1", rate_limit: {concurrency: 2}}
  - step: b
    rate_limit: {key: fixed, per_second: 5, burst: 2, concurrency: 2}
    tool:
      - {name: t, kind: noop, rate_limit: {key: "{{ iter }}", per_second: 5}}
"""


def test_validation_locates_each_problem_by_step_and_field() -> None:
    report = validate_text(PLAYBOOK, "rl.yaml")
    errors = [(p.step, p.field, p.message) for p in report.errors]
    assert ("a", "rate_limit.per_second", errors[0][2]) in errors
    assert any(step == "a" and field == "tool.rate_limit.key" for step, field, _ in errors)
    assert all(step != "b" for step, _, _ in errors), errors
    assert len(errors) == 2


def test_a_valid_block_reaches_the_models() -> None:
    good = PLAYBOOK.replace("per_second: -1", "per_second: 1").replace(
        "{concurrency: 2}", "{key: k, concurrency: 2}"
    )
    playbook = validate_text(good, "rl.yaml").require()
    assert playbook.step("b").limit == RateLimit("fixed", 5.0, 2, 2)
    tasks = playbook.step("b").tasks()
    assert tasks[0][1].limit == RateLimit("{{ iter }}", 5.0, 1, None)
    # not a tool field: never rendered into the tool's config
    assert "rate_limit" not in tasks[0][1].fields()
