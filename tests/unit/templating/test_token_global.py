"""`token(...)` and `keychain.<name>.<field>` in templates: a pure read of the entries
the worker resolved and passed in (no I/O in templating)."""

from __future__ import annotations

import pytest

from noetl_celery.errors import TemplateError, UndefinedVariable
from noetl_celery.templating import render_string, render_value

KEYCHAIN = {
    "api": {"access_token": "tok-1", "token_type": "Bearer"},
    "plain": {"token": "tok-2"},
    "static": {"api_key": "k-3"},
}


def test_token_and_fields() -> None:
    context = {"keychain": KEYCHAIN}
    assert render_string("Bearer {{ token('api') }}", context) == "Bearer tok-1"
    assert render_string("{{ token('plain', 'https://aud.example') }}", context) == "tok-2"
    assert render_string("{{ keychain.static.api_key }}", context) == "k-3"
    headers = {"Authorization": "Bearer {{ keychain.api.access_token }}"}
    assert render_value(headers, context) == {"Authorization": "Bearer tok-1"}


def test_a_variable_named_token_wins_over_the_global() -> None:
    assert render_string("{{ token }}", {"token": "mine"}) == "mine"


@pytest.mark.parametrize(
    ("template", "context", "said"),
    [
        ("{{ token('api') }}", {}, "token('api'): the playbook declares no `keychain`"),
        (
            "{{ token('nope') }}",
            {"keychain": KEYCHAIN},
            "token('nope'): no keychain entry 'nope' (entries: api, plain, static)",
        ),
        (
            "{{ token('static') }}",
            {"keychain": KEYCHAIN},
            "keychain entry 'static' holds no token (one of access_token, token, id_token)",
        ),
    ],
)
def test_token_errors_name_the_entry(template: str, context: dict[str, object], said: str) -> None:
    with pytest.raises(TemplateError) as caught:
        render_string(template, context, "step 'call' tool.headers")
    assert said in str(caught.value) and "step 'call' tool.headers" in str(caught.value)


def test_an_undeclared_entry_is_an_undefined_attribute() -> None:
    with pytest.raises(UndefinedVariable, match="has no field 'missing'"):
        render_string("{{ keychain.missing.x }}", {"keychain": KEYCHAIN})
