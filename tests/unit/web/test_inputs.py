"""web.inputs: the per-value checks every request passes before its values reach SQL."""

from __future__ import annotations

from typing import Any

import pytest

from noetl_celery.errors import InputInvalid
from noetl_celery.web.inputs import (
    BIGINT_MAX,
    INT_MAX,
    JSON_MAX_DEPTH,
    check_int,
    check_text,
    digits,
    load_json,
)

NUL_REASON = "contains a NUL character (\\u0000), which Postgres cannot store"


def message(call: Any, *args: Any, **kwargs: Any) -> str:
    with pytest.raises(InputInvalid) as caught:
        call(*args, **kwargs)
    text = str(caught.value)
    assert "\n" not in text
    return text


def test_the_bounds_are_postgres_types() -> None:
    assert (BIGINT_MAX, INT_MAX) == (9223372036854775807, 2147483647)


def test_text_with_nul_or_a_lone_surrogate_is_refused() -> None:
    check_text("plain ü text \U0001f600", "query parameter 'path'")
    assert message(check_text, "a\x00b", "query parameter 'path'") == (
        f"query parameter 'path': {NUL_REASON}"
    )
    assert "lone surrogate (\\udc80)" in message(check_text, "a\udc80", "path parameter 'id'")


def test_integers_outside_the_range_are_refused() -> None:
    assert check_int(5, "n", high=10) == 5
    assert message(check_int, 11, "n", high=10) == "n: must be an integer from 1 to 10, not 11"
    assert "from 1 to" in message(check_int, 0, "n")


@pytest.mark.parametrize(
    ("text", "expected"),
    [("12", 12), (" 7 ", 7), ("", None), ("²", None), ("٣", None), ("-1", None), ("1e3", None)],
)
def test_digits_are_ascii_digits_only(text: str, expected: int | None) -> None:
    assert digits(text) == expected


@pytest.mark.parametrize(
    ("raw", "expected"),
    [
        ('{"a": "x\\u0000"}', f"body.a: {NUL_REASON}"),
        ('{"k\\u0000": 1}', f'body: the key "k\\u0000" {NUL_REASON}'),
        ('[1, "\\ud800"]', "body[1]: contains a lone surrogate (\\ud800)"),
        ('"\\u0000"', f"body: {NUL_REASON}"),
        ('{"x": NaN}', "body.x: is nan (not a finite number)"),
        ("{not json", "body: not JSON: Expecting property name"),
        ("[" * 5000 + "]" * 5000, f"body: nested deeper than the limit of {JSON_MAX_DEPTH} levels"),
        (
            "[" * (JSON_MAX_DEPTH + 1) + "]" * (JSON_MAX_DEPTH + 1),
            "body[0][0][0][0][0][0][0][0][0]…(66 keys deep): nested deeper than the limit",
        ),
    ],
)
def test_load_json_refuses_with_one_line(raw: str, expected: str) -> None:
    assert message(load_json, raw).startswith(expected)


def test_load_json_takes_what_postgres_can_store() -> None:
    depth = JSON_MAX_DEPTH - 1
    assert load_json('{"a": "\\ud83d\\ude00", "n": 1e300}') == {"a": "\U0001f600", "n": 1e300}
    assert load_json("[" * depth + "]" * depth) is not None
    assert load_json(b'{"big": 123456789012345678901234567890}') == {
        "big": 123456789012345678901234567890
    }


@pytest.mark.parametrize(
    ("view", "where"),
    [
        (lambda site: site.executions({"path": "a\x00"}), "query parameter &#39;path&#39;"),
        (lambda site: site.execution("1\x00", {}), "path parameter &#39;execution_id&#39;"),
        (lambda site: site.events("1", {"after": "\x00"}), "query parameter &#39;after&#39;"),
        (lambda site: site.schedules({"x": "\ud800"}), "query parameter &#39;x&#39;"),
        (lambda site: site.cancel("\x00"), "path parameter &#39;execution_id&#39;"),
        (lambda site: site.rerun("1", {"from_step": "\x00"}), "form field &#39;from_step&#39;"),
    ],
)
def test_the_pages_refuse_text_postgres_cannot_store(view: Any, where: str) -> None:
    """Flower serves the same `Site` without serve's route checks: refused before the
    engine is asked (it is None here)."""
    from noetl_celery.web.pages.site import Site

    answer = view(Site(None))  # type: ignore[arg-type]
    assert answer.status == 422 and where in answer.body
