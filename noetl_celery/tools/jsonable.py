"""Conversion of tool results into JSON-friendly values.

Results are stored as JSON and rendered into templates, so every tool hands back only
dict/list/str/int/float/bool/None. The two database tools and the python tool share
these rules; they differ only in how bytes are shown (hex for SQL bytea, text for python).
"""

from __future__ import annotations

import base64
import dataclasses
import datetime as dt
import math
import uuid
from collections.abc import Mapping
from decimal import Decimal
from typing import Any, Literal

BytesMode = Literal["text", "hex"]


def decimal_value(value: Decimal) -> int | float:
    """Integral decimals become int (ids, counts), the rest float."""
    if value.is_finite() and value == value.to_integral_value():
        return int(value)
    return float(value)


def _bytes_value(value: bytes, mode: BytesMode) -> str:
    if mode == "hex":
        return value.hex()
    try:
        return value.decode("utf-8")
    except UnicodeDecodeError:
        return base64.b64encode(value).decode("ascii")


def _ordered(items: set[Any] | frozenset[Any]) -> list[Any]:
    # sets have no order; sort so that results are stable between runs
    try:
        return sorted(items)
    except TypeError:
        return sorted(items, key=repr)


def to_jsonable(value: Any, *, bytes_as: BytesMode = "text", _depth: int = 0) -> Any:
    """`value` made JSON-serialisable; unknown objects become `str(value)`."""
    if value is None or isinstance(value, bool | int | str):
        return value
    if isinstance(value, float):
        # NaN/inf are not JSON; JSONB and most consumers reject them
        return value if math.isfinite(value) else str(value)
    if _depth > 100:  # a self-referencing structure: stop rather than recurse forever
        return str(value)
    depth = _depth + 1
    if isinstance(value, Mapping):
        return {
            (
                k if isinstance(k, str) else str(to_jsonable(k, bytes_as=bytes_as, _depth=depth))
            ): to_jsonable(v, bytes_as=bytes_as, _depth=depth)
            for k, v in value.items()
        }
    if isinstance(value, list | tuple | set | frozenset):
        items = _ordered(value) if isinstance(value, set | frozenset) else value
        return [to_jsonable(v, bytes_as=bytes_as, _depth=depth) for v in items]
    if isinstance(value, Decimal):
        return decimal_value(value)
    if isinstance(value, dt.datetime | dt.date | dt.time):
        return value.isoformat()
    if isinstance(value, uuid.UUID):
        return str(value)
    if isinstance(value, bytes | bytearray | memoryview):
        return _bytes_value(bytes(value), bytes_as)
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return to_jsonable(dataclasses.asdict(value), bytes_as=bytes_as, _depth=depth)
    return str(value)


def make_serializable(value: Any) -> Any:
    """The python tool's helper of the same name (NoETL's), exposed to user code."""
    return to_jsonable(value)
