"""A cursor row's key (store.orchestration.row_key) is what cursor_rows holds per epoch:
it must not change between versions, or a row recorded by an older worker would be
claimed again as new by a newer one (docs/design.md §4)."""

from __future__ import annotations

import datetime as dt
import decimal
import hashlib
import json
from typing import Any

import pytest

from noetl_celery.store.orchestration import row_key

# keys as the versions before this one wrote them (computed with them)
WRITTEN = {
    "ad559f4e2220ee7317330787fe05a065f5a22e4a1ca866b4f480553939f553e2": {"id": 7},
    "24069267935ce05b87734322096201e2d832670677706c98ff91ccfbf01dc09b": {"run": "x", "id": 12},
}


def _as_before(row: Any) -> str:
    text = json.dumps(row, sort_keys=True, default=str)
    return hashlib.sha256(text.encode()).hexdigest()


def test_keys_written_before_stay_the_keys() -> None:
    assert {row_key(row): row for row in WRITTEN.values()} == WRITTEN


@pytest.mark.parametrize(
    "row",
    [
        {"id": 7},
        {"b": {"y": 1, "a": [1, None, 2.5]}, "a": "é\u2028\x00"},
        {"when": dt.datetime(2020, 1, 2, 3, 4, 5), "amount": decimal.Decimal("1.10")},
        [1, "x", {"k": True}],
        "text",
        None,
    ],
)
def test_the_key_is_the_text_earlier_versions_hashed(row: Any) -> None:
    assert row_key(row) == _as_before(row)


def test_a_key_is_independent_of_key_order() -> None:
    assert row_key({"a": 1, "b": 2}) == row_key({"b": 2, "a": 1})
    assert row_key({"a": 1}) != row_key({"a": 2})
