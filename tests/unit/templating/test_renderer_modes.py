"""NOETL_TEMPLATE_MODE=noetl reproduces NoETL's rendering; strict stays strict."""

from __future__ import annotations

import pytest

from noetl_celery.errors import UndefinedVariable
from noetl_celery.templating import renderer_for

CTX = {"output": {"data": {"status_code": 200, "data": {"rows": []}}}, "n": 2}


def test_strict_fails_on_a_missing_attribute() -> None:
    with pytest.raises(UndefinedVariable):
        renderer_for("strict", worker=True).value("{{ output.data.meta.page < 3 }}", CTX)


@pytest.mark.parametrize(
    ("template", "worker", "expected"),
    [
        (
            "{{ output.data.meta.page < output.data.meta.total }}",
            True,
            "{{ output.data.meta.page < output.data.meta.total }}",
        ),  # kept as raw text
        ("{{ (n | int) + (output.data.entry | length) }}", True, 2),  # undefined has length 0
        ("{{ nowhere }}", True, ""),  # lenient undefined renders as ""
        ("{{ nowhere }}", False, "{{ nowhere }}"),  # server side: strict, raw text kept
        ("{{ n + 1 }}", False, 3),
    ],
)
def test_noetl_mode(template: str, worker: bool, expected: object) -> None:
    assert renderer_for("noetl", worker=worker).value(template, CTX) == expected


def test_noetl_guards_are_false_when_they_cannot_render() -> None:
    assert renderer_for("noetl", worker=False).condition("{{ nowhere > 1 }}", CTX) is False
    with pytest.raises(UndefinedVariable):
        renderer_for("strict", worker=False).condition("{{ nowhere > 1 }}", CTX)


def test_unknown_mode_is_rejected() -> None:
    with pytest.raises(ValueError, match="template mode"):
        renderer_for("loose", worker=True)
