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


ENVELOPE = {
    "output": {
        "data": {
            "status_code": 200,
            "headers": {},
            "data": {"meta": {"page": 1, "totalPages": 3}, "entry": [1, 2], "status_code": 7},
        }
    },
    "plain": {"data": {"meta": 1}},
}


@pytest.mark.parametrize(
    ("template", "expected"),
    [
        ("{{ output.data.meta.page < output.data.meta.totalPages }}", True),  # body field
        ("{{ output.data.entry | length }}", 2),
        ("{{ output.data['meta'].page }}", 1),
        ("{{ output.data.status_code }}", 200),  # the envelope's own key wins
        ("{{ output.data.data.meta.page }}", 1),  # the exact path still works
        ("{{ output.data.nothing is defined }}", False),
    ],
)
def test_strict_reads_body_fields_through_an_http_envelope(template: str, expected: object) -> None:
    assert renderer_for("strict", worker=True).value(template, ENVELOPE) == expected


def test_only_http_envelopes_fall_through() -> None:
    # a mapping without `status_code` is not an HTTP result: no fallthrough
    with pytest.raises(UndefinedVariable):
        renderer_for("strict", worker=True).value("{{ plain.meta }}", ENVELOPE)
    # NoETL mode renders as NoETL does: the raw text stays
    assert renderer_for("noetl", worker=True).value("{{ output.data.meta.page }}", ENVELOPE) == (
        "{{ output.data.meta.page }}"
    )
