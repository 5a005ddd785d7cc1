"""Compiled templates carry the environment's globals as one plain dict (every render
copies them into its context: through Jinja's ChainMap that copy was most of a small
render's time), and rendering takes the caller's context as a mapping, unchanged."""

from __future__ import annotations

from types import MappingProxyType

import pytest

from noetl_celery.templating.environment import (
    ENV,
    LENIENT_ENV,
    compile_expression,
    compile_template,
)
from noetl_celery.templating.render import render_string


@pytest.mark.parametrize("lenient", [False, True])
def test_compiled_templates_hold_the_environments_globals_flat(lenient: bool) -> None:
    env = LENIENT_ENV if lenient else ENV
    for template in (
        compile_template("a {{ x }} b", lenient),
        compile_expression("x + 1", lenient)._template,
    ):
        assert type(template.globals) is dict
        assert template.globals == dict(env.globals)


def test_every_global_is_reached_from_expressions_and_templates() -> None:
    assert render_string("{{ range(3) | list }}", {}) == [0, 1, 2]
    assert render_string("{{ now()[:2] }}", {}) == "20"
    assert render_string("from {{ now()[:2] }}", {}) == "from 20"
    keychain = {"keychain": {"api": {"access_token": "t0k"}}}
    assert render_string("{{ token('api') }}", keychain) == "t0k"
    assert render_string("Bearer {{ token('api') }}", keychain) == "Bearer t0k"


def test_the_callers_context_is_read_as_a_mapping_and_left_as_it_was() -> None:
    context = {"n": 2, "rows": [1, 2]}
    assert render_string("{% set n = 5 %}{{ n }}", context) == "5"
    assert render_string("{{ n * 2 }}", context) == 4
    assert context == {"n": 2, "rows": [1, 2]}
    frozen = MappingProxyType({"n": 3})
    assert render_string("{{ n }}", frozen) == 3
    assert render_string("n={{ n }}", frozen) == "n=3"
