"""templating.evaluate: templates read the caller's mapping through, never copy or change
it, and give what Jinja's own `TemplateExpression.__call__` / `Template.render` give."""

from __future__ import annotations

from typing import Any

import pytest
from jinja2.runtime import Undefined

from noetl_celery.templating.environment import compile_expression, compile_template
from noetl_celery.templating.evaluate import Names, evaluate, render

NAMES: dict[str, Any] = {"n": 3, "rows": [{"id": 1}, {"id": 2}], "name": "a'b"}

CASES = [
    "n + 1",
    "rows | map(attribute='id') | list",
    "range(n) | list",
    "name | tojson",
    "missing_name is defined",
    "rows[5] is defined",
]


@pytest.mark.parametrize("source", CASES)
def test_an_expression_gives_what_jinja_gives(source: str) -> None:
    expression = compile_expression(source)
    assert evaluate(expression, NAMES) == expression(dict(NAMES))


@pytest.mark.parametrize(
    "source",
    [
        "x {{ n }} {{ rows | length }}",
        "{% set n = 9 %}{{ n }}",
        "{% for r in rows %}{{ r.id }},{% endfor %}",
    ],
)
def test_a_template_renders_what_jinja_renders(source: str) -> None:
    template = compile_template(source)
    assert render(template, NAMES) == template.render(dict(NAMES))


def test_a_set_inside_the_template_leaves_the_callers_mapping_alone() -> None:
    names = dict(NAMES)
    assert render(compile_template("{% set n = 9 %}{% set extra = 1 %}{{ n }}"), names) == "9"
    assert names == NAMES


def test_the_callers_names_win_over_the_globals_and_the_globals_are_there() -> None:
    shadowing = {"range": lambda n: ["mine"] * n}
    assert evaluate(compile_expression("range(2)"), shadowing) == ["mine", "mine"]
    assert evaluate(compile_expression("range(2) | list"), {}) == [0, 1]


def test_an_undefined_name_comes_back_undefined_as_from_jinja() -> None:
    assert isinstance(evaluate(compile_expression("nowhere"), NAMES), Undefined)


def test_an_error_inside_a_template_is_raised_with_jinjas_traceback_rewriting() -> None:
    # the rewriting copies the context's names (`get_all().copy()`): it must not break
    with pytest.raises(ZeroDivisionError):
        render(compile_template("{{ n // 0 }}"), NAMES)


def test_the_view_reads_names_then_fallback_and_copies_to_one_dict() -> None:
    view = Names({"a": 1, "b": 2}, {"b": 20, "c": 30})
    assert (view["a"], view["b"], view["c"]) == (1, 2, 30)
    assert "c" in view and "d" not in view
    with pytest.raises(KeyError):
        view["d"]
    assert view.copy() == {"a": 1, "b": 2, "c": 30}
    assert sorted(view) == ["a", "b", "c"] and len(view) == 3
