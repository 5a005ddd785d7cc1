"""Check a JSON value against one of the read models' TypedDicts (engine.summaries,
engine.readmodels, store.rows, web.noetl_shapes): the shape the HTTP API declares as its
response model. Exact: pydantic ignores undeclared keys (FastAPI drops them from an
answer), so the value must come back unchanged from a validate-and-dump round trip: a
missing key fails validation, an undeclared key or a coerced value fails the comparison."""

from __future__ import annotations

from typing import Any

from pydantic import TypeAdapter


def exact(shape: Any, value: Any) -> None:
    """`value` (parsed JSON) has exactly the keys and value types of `shape`."""
    adapter: TypeAdapter[Any] = TypeAdapter(shape)
    again = adapter.dump_python(adapter.validate_python(value), mode="json")
    assert again == value, _difference(again, value)


def _difference(again: Any, value: Any, where: str = "$") -> str:
    """Where the round trip changed `value`: the first differing path."""
    if isinstance(value, dict) and isinstance(again, dict):
        for key in sorted(set(value) | set(again)):
            if key not in again:
                return f"{where}.{key}: not declared by the shape"
            if key not in value:
                return f"{where}.{key}: added by the shape"
            if again[key] != value[key]:
                return _difference(again[key], value[key], f"{where}.{key}")
    if isinstance(value, list) and isinstance(again, list) and len(value) == len(again):
        for index, (a, v) in enumerate(zip(again, value, strict=True)):
            if a != v:
                return _difference(a, v, f"{where}[{index}]")
    return f"{where}: {value!r} came back as {again!r}"
