"""`{{ … }}` in python code: literals only, Python's braces untouched (issue 31)."""

from __future__ import annotations

from typing import Any

import pytest

from noetl_celery.errors import UndefinedVariable, UnsafeCodeValue
from noetl_celery.templating.code_template import render_code
from noetl_celery.templating.result_view import wrap

CONTEXT: dict[str, Any] = {
    "n": 50,
    "ratio": 0.5,
    "flag": True,
    "nothing": None,
    "name": "shop_7",
    "when": "2026-11-29T06:00:00+00:00",
    "ids": [1, "two", {"k": "it's"}],
    "start": wrap({"count": 3, "label": 'say "hi"'}),
    "evil": '"); import os; ("',
    "multi": "a\nb",
}


@pytest.mark.parametrize(
    ("code", "rendered"),
    [
        ("x = {{ n }} * 2", "x = 50 * 2"),
        ("x = {{n}}", "x = 50"),
        ("x = {{ ratio }}", "x = 0.5"),
        ("x = {{ flag }}, {{ nothing }}", "x = True, None"),
        ('x = "{{ name }}-{{ when }}"', 'x = "shop_7-2026-11-29T06:00:00+00:00"'),
        ("x = {{ ids }}", "x = [1, 'two', {'k': \"it's\"}]"),
        ("x = {{ start.count + 1 }}", "x = 4"),
        # Python's braces: names nothing the context defines, or not Jinja at all
        ('x = f"{{literal}}" + "{{ n }}"', 'x = f"{{literal}}" + "50"'),
        ("x = f\"{{'a': 1}}\"", "x = f\"{{'a': 1}}\""),
        ("x = {{ 1 + 2 }}", "x = {{ 1 + 2 }}"),
        ("no templates here", "no templates here"),
    ],
)
def test_placeholders_render_as_literals(code: str, rendered: str) -> None:
    assert render_code(code, CONTEXT, "step 's'") == rendered


@pytest.mark.parametrize("name", ["evil", "multi", "start.label"])
def test_text_that_could_change_the_code_is_refused(name: str) -> None:
    with pytest.raises(UnsafeCodeValue) as info:
        render_code(f'x = "{{{{ {name} }}}}"', CONTEXT, "step 's'")
    message = str(info.value)
    assert message.startswith("step 's': `{{ " + name + " }}` in python code rendered the text")
    assert "pass the value through `input:`" in message


def test_an_undefined_attribute_names_the_placeholder() -> None:
    with pytest.raises(UndefinedVariable) as info:
        render_code("x = {{ start.missing }}", CONTEXT, "step 's'")
    assert "step 's' code" in str(info.value) and "start.missing" in str(info.value)
