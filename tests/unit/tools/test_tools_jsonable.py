from __future__ import annotations

import dataclasses
import datetime as dt
import json
import uuid
from decimal import Decimal

from noetl_celery.tools.jsonable import decimal_value, to_jsonable


def test_decimals() -> None:
    assert decimal_value(Decimal("42")) == 42 and isinstance(decimal_value(Decimal("42.000")), int)
    assert decimal_value(Decimal("1.25")) == 1.25
    assert isinstance(decimal_value(Decimal("NaN")), float)


def test_nested_conversion() -> None:
    @dataclasses.dataclass
    class Point:
        x: int
        when: dt.date

    value = {
        "ts": dt.datetime(2024, 5, 6, 7, 8, 9, tzinfo=dt.UTC),
        "items": ({1, 3, 2}, frozenset({"b", "a"})),
        "blob": memoryview(b"\x01\x02"),
        "id": uuid.UUID(int=5),
        "point": Point(1, dt.date(2024, 1, 1)),
        "nan": float("nan"),
        "mixed": {1, "a"},
    }
    out = to_jsonable(value)
    assert out["ts"] == "2024-05-06T07:08:09+00:00"
    assert out["items"] == [[1, 2, 3], ["a", "b"]]
    assert out["blob"] == "\x01\x02"
    assert to_jsonable(b"\x01\xff", bytes_as="hex") == "01ff"
    assert out["point"] == {"x": 1, "when": "2024-01-01"}
    assert out["nan"] == "nan"
    json.dumps(out)


def test_self_reference_terminates() -> None:
    looped: list[object] = []
    looped.append(looped)
    json.dumps(to_jsonable(looped))
