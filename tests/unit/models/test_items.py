"""A quarantined item's id (models.items): `step:epoch:iteration` both ways, and every
malformed id a one-line InputInvalid (numbers past Postgres INTEGER never reach SQL)."""

from __future__ import annotations

import pytest

from noetl_celery.errors import InputInvalid
from noetl_celery.models.items import item_id, parse_item_id


def test_an_id_round_trips() -> None:
    assert parse_item_id(item_id("each", 2, 17)) == ("each", 2, 17)


@pytest.mark.parametrize(
    "text",
    [
        "each",
        "each:1",
        ":1:2",
        "each:x:2",
        "each:1:-2",
        "each:1:\u0663",  # an Arabic-Indic digit: isdigit(), not an integer for SQL
        f"each:{2**31}:1",
        f"each:1:{10**30}",
    ],
)
def test_a_malformed_id_is_refused_in_one_line(text: str) -> None:
    with pytest.raises(InputInvalid, match="is not a quarantined item id") as info:
        parse_item_id(text)
    assert "\n" not in str(info.value)
