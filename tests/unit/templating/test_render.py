"""Rendering rules by table: native types, strictness, guards, result views."""

from __future__ import annotations

import time
from typing import Any

import pytest

from noetl_celery.errors import TemplateError, UndefinedVariable
from noetl_celery.templating import evaluate_condition, render_value, wrap
from noetl_celery.templating.context import build_context
from noetl_celery.templating.render import lazy_range

CTX: dict[str, Any] = build_context(
    {"n": 3, "name": "ada", "items": [1, 2], "flag": True, "none": None, "cfg": {"t": 30}},
    {"claim": {"rows": [{"id": 7}], "row_count": 1}, "fetch": {"data": {"page": 2}}},
    execution_id="42",
)


@pytest.mark.parametrize(
    ("template", "expected"),
    [
        ("{{ n }}", 3),
        ("{{ items }}", [1, 2]),
        ("{{ n + 1 }}", 4),
        ("  {{ cfg }}  ", {"t": 30}),
        ("n={{ n }}", "n=3"),
        ("{{ n }}{{ n }}", "33"),
        ("{{ flag }}", True),
        ("{{ none }}", None),
        ("{{ missing | default(5) }}", 5),
        ("{{ cfg.missing | default('x') }}", "x"),
        ("{{ missing is defined }}", False),
        ("{{ claim.rows[0].id }}", 7),
        ("{{ claim.data.rows[0].id }}", 7),  # `.data` falls back to the result itself
        ("{{ fetch.data.page }}", 2),
        ("{{ ctx.cfg.t }}", 30),
        ("{{ workload.n }}", 3),
        ("{{ ctx.claim.row_count }}", 1),  # step results mirror into ctx
        ("{{ execution_id }}", "42"),
        ("{{ job.uuid }}", "42"),
        ("{{ {'a': 1} | tojson }}", '{"a": 1}'),
        ("{{ 'x' | b64encode }}", "eA=="),
        ("no template", "no template"),
        ("{% if flag %}yes{% endif %}", "yes"),
    ],
)
def test_render_value(template: str, expected: Any) -> None:
    assert render_value(template, CTX) == expected


def test_render_walks_containers_and_keeps_non_strings() -> None:
    value = {"a": ["{{ n }}", 4, {"b": "{{ name }}"}], "c": None}
    assert render_value(value, CTX) == {"a": [3, 4, {"b": "ada"}], "c": None}


def test_a_rendered_step_result_is_a_plain_dict() -> None:
    rendered = render_value("{{ claim }}", CTX)
    assert type(rendered) is dict


@pytest.mark.parametrize(
    ("template", "fragment", "attribute"),
    [
        ("{{ nope }}", "'nope' is undefined", False),
        ("hello {{ nope.x }}", "'nope' is undefined", False),
        ("{{ cfg.nope.deeper }}", "'cfg' (a mapping) has no field 'nope'", True),
        ("{{ claim.rows[5].id }}", "undefined", True),
    ],
)
def test_undefined_raises_with_location(template: str, fragment: str, attribute: bool) -> None:
    with pytest.raises(UndefinedVariable) as info:
        render_value({"field": template}, CTX, "step 's' tool")
    message = str(info.value)
    assert fragment in message
    assert "step 's' tool.field" in message and template.strip() in message
    assert info.value.is_attribute is attribute


_USER_TERMS_CTX: dict[str, Any] = build_context(
    {"n": 3, "cfg": {"t": 30, "retries": 2}, "nothing": None, "empty": {}},
    {
        "fetch": {"stats": {"count": 1}, "rows": [{"id": 1}]},
        "page": {"status_code": 200, "headers": {}, "data": {"items": [1]}},
    },
    execution_id="42",
)


@pytest.mark.parametrize(
    ("template", "said"),
    [
        # a step result's missing field: the expression, what it is, the closest field
        (
            "{{ fetch.stat }}",
            "'fetch' (a step result) has no field 'stat'; did you mean 'stats'?",
        ),
        ("{{ fetch['stat'] }}", "'fetch' (a step result) has no field 'stat'"),
        ("rows: {{ fetch.stats.cuont }}", "'fetch.stats' (a mapping) has no field 'cuont'"),
        ("{{ cfg.retry }}", "did you mean 'retries'?"),
        # nothing close: the fields it has, or that it has none
        ("{{ cfg.zzz }}", "'cfg' (a mapping) has no field 'zzz' (its fields: retries, t)"),
        ("{{ empty.x }}", "'empty' (a mapping) has no field 'x' (it is empty)"),
        # an HTTP result suggests its body's fields too
        ("{{ page.item }}", "'page' (an HTTP result) has no field 'item'; did you mean 'items'?"),
        ("{{ fetch.rows[4] }}", "'fetch.rows' (a list of 1 item) has no element 4"),
        ("{{ nothing.x }}", "'nothing' (null) has no field 'x'"),
        ("{{ n.x }}", "'n' (a number) has no field 'x'"),
        # an undefined name used as a number names the name, not NoetlUndefined
        ("{{ range(count) | list }}", "'count' is undefined"),
        ("{{ range(cfg.size) | list }}", "'cfg' (a mapping) has no field 'size'"),
        ("{{ [1, 2][idx] }}", "'idx' is undefined"),
        ("{{ missing | abs }}", "'missing' is undefined"),
        ("{{ missing | round }}", "'missing' is undefined"),
        # the sandbox's refusal names what the object is, not the engine's class
        ("{{ fetch.__class__ }}", "access to attribute '__class__' of a step result is unsafe"),
    ],
)
def test_undefined_messages_speak_user_terms(template: str, said: str) -> None:
    with pytest.raises(UndefinedVariable) as info:
        render_value({"y": template}, _USER_TERMS_CTX, "step 'x' input")
    message = str(info.value)
    assert said in message and "step 'x' input.y" in message
    for internal in ("ResultView", "NoetlUndefined", "dict object", "noetl_celery"):
        assert internal not in message


def test_the_same_field_on_two_expressions_names_neither() -> None:
    # `a.z` and `b.z` both read `z`: which one was missing is not guessed
    context = {"a": {"z": 1}, "b": {"y": 2}}
    with pytest.raises(UndefinedVariable) as info:
        render_value("{{ a.z + b.z }}", context, "w")
    assert "a mapping has no field 'z'" in str(info.value)


def test_expression_errors_are_template_errors() -> None:
    with pytest.raises(TemplateError, match="ZeroDivisionError"):
        render_value("{{ n / 0 }}", CTX, "where")


@pytest.mark.parametrize(
    ("when", "expected"),
    [
        (None, True),
        (True, True),
        (False, False),
        ("{{ n > 2 }}", True),
        ("{{ n > 5 }}", False),
        ("{{ 'false' }}", False),
        ("{{ 'No' }}", False),
        ("{{ '' }}", False),
        ("{{ 'yes' }}", True),
        ("{{ 0 }}", False),
        ("{{ claim.rows[3].id > 0 }}", False),  # missing item: false, not an error
        ("{{ none > 1 }}", False),  # TypeError: false, as NoETL
    ],
)
def test_conditions(when: Any, expected: bool) -> None:
    assert evaluate_condition(when, CTX) is expected


def test_undefined_name_in_condition_is_an_error() -> None:
    with pytest.raises(UndefinedVariable, match="typo"):
        evaluate_condition("{{ typo > 1 }}", CTX, "arc")


def test_sandbox_blocks_python_internals() -> None:
    with pytest.raises(TemplateError):
        render_value("{{ ''.__class__.__mro__ }}", CTX)


def test_mapping_keys_win_over_dict_methods() -> None:
    ctx = {"row": wrap({"items": [1], "values": "v"})}
    assert render_value("{{ row.items }}", ctx) == [1]
    assert render_value("{{ row.values }}", ctx) == "v"


@pytest.mark.parametrize(
    ("template", "limit"),
    [
        ("{{ 'x' * 10**10 }}", "at most 10,000,000"),
        ("{{ 10**9 * [0] }}", "at most 10,000,000"),
        ("{{ 7 ** (10**7) }}", "at most 1,000,000"),
        ("{{ range(10**8) | list }}", r"range\(100000000\) would have 100,000,000 items"),
    ],
)
def test_arithmetic_past_the_sandbox_bounds_fails_at_once(template: str, limit: str) -> None:
    started = time.process_time()
    with pytest.raises(TemplateError, match=limit):
        render_value(template, {}, "step 's' tool.code")
    assert time.process_time() - started < 1.0  # refused, not computed


def test_a_loop_over_a_million_ids_fits_the_sandbox() -> None:
    # Jinja's own sandbox stops range() at 100,000 items; loops of a million are ours
    assert render_value("{{ range(n) | list }}", {"n": 1_000_000}, "x") == list(range(1_000_000))
    assert render_value("{{ range(2, 10, 3) | list }}", {}, "x") == [2, 5, 8]


@pytest.mark.parametrize(
    ("template", "expected"),
    [("{{ 2 ** 64 }}", 2**64), ("{{ 'ab' * 3 }}", "ababab"), ("{{ 10 ** -2 }}", 0.01)],
)
def test_ordinary_arithmetic_is_untouched(template: str, expected: object) -> None:
    assert render_value(template, {}, "x") == expected


@pytest.mark.parametrize(
    ("template", "expected"),
    [
        ("{{ range(n) | list }}", range(1_000_000)),
        ("{{ range(n) }}", range(1_000_000)),
        (" {{ range(2, 10, 3)|list }} ", range(2, 10, 3)),
        ("{{range( n )| list}}", range(1_000_000)),
    ],
)
def test_a_range_loop_in_is_taken_unbuilt(template: str, expected: range) -> None:
    got = lazy_range(template, {"n": 1_000_000}, "x")
    assert isinstance(got, range) and got == expected


@pytest.mark.parametrize(
    ("template", "context"),
    [
        ("{{ range(3) + [7] }}", {}),  # more than the call: rendered as usual
        ("{{ range(3) | list | length }}", {}),
        ("{{ (range(3) | list)[1:] }}", {}),
        ("{{ range(3) | list + [4] }}", {}),
        ("{{ range(*args) }}", {"args": [3]}),
        ("{{ items }}", {"items": [1, 2]}),
        ("ids: {{ range(3) | list }}", {}),  # not a single expression
        ("{{ range(n) | list }}", {"n": 3, "range": lambda n: [n]}),  # a shadowing name
        ([1, 2], {}),
    ],
)
def test_anything_else_is_not_taken_for_a_range(template: Any, context: dict[str, Any]) -> None:
    assert lazy_range(template, context, "x") is None


def test_a_too_large_unbuilt_range_is_still_refused() -> None:
    with pytest.raises(TemplateError, match="range\\(100000000\\) would have"):
        lazy_range("{{ range(10**8) | list }}", {}, "x")
