"""A step of the playbook without a result: false in a test, an error when read (issue 31)."""

from __future__ import annotations

import pytest

from noetl_celery.errors import UndefinedVariable
from noetl_celery.templating.context import build_context
from noetl_celery.templating.render import render_string

CONTEXT = build_context(
    {"threshold": 5, "shadow": 1},
    {"low": {"category": "low"}},
    execution_id="e1",
    steps=["start", "high", "low", "shadow"],
)


@pytest.mark.parametrize(
    ("template", "value"),
    [
        ("{{ high.category if high else low.category }}", "low"),
        ("{{ high is defined }}", False),
        ("{{ high | default('none') }}", "none"),
        ("{{ not high }}", True),
        ("{{ shadow }}", 1),  # a variable of a step's name keeps its value
    ],
)
def test_a_step_without_result_is_false_in_a_test(template: str, value: object) -> None:
    assert render_string(template, CONTEXT, "t") == value


@pytest.mark.parametrize("template", ["{{ high.category }}", "x {{ high }}"])
def test_reading_it_fails_saying_the_step_has_no_result(template: str) -> None:
    with pytest.raises(UndefinedVariable) as info:
        render_string(template, CONTEXT, "step 's' input.c")
    assert "step 'high' has no result (it has not run, or was skipped)" in str(info.value)


def test_a_name_that_is_no_step_stays_strictly_undefined() -> None:
    with pytest.raises(UndefinedVariable, match="'hihg' is undefined"):
        render_string("{{ hihg if hihg else 1 }}", CONTEXT, "t")
