"""Checks on payloads before anything is written (design invariant 8).

A payload reaches Postgres as JSON (the execution row, the contexts commands render
with) and is walked by recursive code on the way (Jinja, json, pydantic). So a payload is
refused, with the key path named, when it

- nests containers deeper than `MAX_PAYLOAD_DEPTH` (recursive walkers overflow Python's
  stack a few hundred levels down, and an execution would be left RUNNING);
- is larger than its byte limit as compact JSON (`NOETL_MAX_PAYLOAD_BYTES`);
- holds a string (value or key) with a NUL character or a lone surrogate, which Postgres
  text and JSONB cannot store, or a NaN / infinite number, which JSON has no token for;
- holds a value no JSON encoding exists for (an arbitrary object from the Python API).

The shape walk (depth and element count) is iterative, so checking can never overflow
itself, and it is done first: after it, `json.dumps` (C speed, its recursion bounded by
the depth, its work by the count) measures the size and meets every string and number
once. Only when that suspects a problem does the slower walk of `payload_walk` run, to
name the key path.
"""

from __future__ import annotations

import datetime as dt
import decimal
import json
import uuid
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from noetl_celery.constants import DEFAULT_MAX_PAYLOAD_BYTES, MAX_PAYLOAD_DEPTH
from noetl_celery.errors import PayloadInvalid
from noetl_celery.models.payload_walk import CONTAINERS, find_deep, find_problem, format_path

__all__ = ["PayloadLimits", "check_payload", "size_words"]

# exact types skipped without an isinstance() check (most values of a payload)
_PLAIN = frozenset({str, int, float, bool, type(None)})


@dataclass(frozen=True)
class PayloadLimits:
    max_depth: int = MAX_PAYLOAD_DEPTH
    max_bytes: int = DEFAULT_MAX_PAYLOAD_BYTES


def size_words(n: int) -> str:
    """`16 MiB`, `512 KiB` or `300 bytes`, for limits in messages."""
    for unit, scale in (("MiB", 1 << 20), ("KiB", 1 << 10)):
        if n >= scale and n % scale == 0:
            return f"{n // scale} {unit}"
    return f"{n:,} bytes"


def _encode_default(value: Any) -> Any:
    # The types the store's JSON encoding accepts (templating.environment.json_default,
    # a layer above this one); anything else is a TypeError, reported by find_problem.
    if isinstance(value, dt.datetime | dt.date | dt.time):
        return value.isoformat()
    if isinstance(value, decimal.Decimal):
        return float(value)  # a NaN Decimal becomes a NaN float: allow_nan refuses it
    if isinstance(value, uuid.UUID):
        return str(value)
    if isinstance(value, set | frozenset):
        return list(value)
    if isinstance(value, bytes):
        return value.decode("utf-8", errors="replace")
    raise TypeError(type(value).__name__)


def _check_shape(payload: Mapping[str, Any], limits: PayloadLimits, root: str) -> None:
    """Depth and element count, one nesting level at a time (iterative; plain scalars
    cost one type lookup). Counting elements also stops shared references (the Python
    API: `a = []; a += [a, a]`) that json.dumps would expand without end: every element
    takes at least one byte of JSON, so more elements than bytes is too large."""
    level: list[Any] = [payload]
    depth, count = 1, 0
    while level:
        if depth > limits.max_depth:
            keys = find_deep(payload, limits.max_depth)
            raise PayloadInvalid(
                format_path(root, keys),
                f"nested deeper than the limit of {limits.max_depth} levels",
            )
        deeper: list[Any] = []
        for container in level:
            values = container.values() if isinstance(container, dict) else container
            count += len(values)
            if count > limits.max_bytes:
                raise _too_large(root, limits)
            for value in values:
                if type(value) not in _PLAIN and isinstance(value, CONTAINERS):
                    deeper.append(value)
        level = deeper
        depth += 1


def _too_large(root: str, limits: PayloadLimits) -> PayloadInvalid:
    return PayloadInvalid(
        root,
        f"larger than the limit of {size_words(limits.max_bytes)} as JSON "
        "(NOETL_MAX_PAYLOAD_BYTES)",
    )


def check_payload(
    payload: Any, limits: PayloadLimits | None = None, *, root: str = "payload"
) -> None:
    """Raise `PayloadInvalid` naming the key path and the limit of the first problem
    found. `payload` must be a dict (None is an empty payload)."""
    limits = limits or PayloadLimits()
    if payload is None:
        return
    if not isinstance(payload, dict):
        raise PayloadInvalid(
            root, f"must be a mapping (a JSON object), not {type(payload).__name__}"
        )
    _check_shape(payload, limits, root)
    try:
        text = json.dumps(
            payload,
            default=_encode_default,
            allow_nan=False,
            ensure_ascii=False,
            separators=(",", ":"),
        )
        size = len(text.encode("utf-8"))  # fails on a lone surrogate
    except (TypeError, ValueError, UnicodeEncodeError) as exc:
        _raise_found(payload, root, f"cannot be written as JSON ({type(exc).__name__})")
        return  # unreachable: _raise_found always raises here
    if size > limits.max_bytes:
        raise _too_large(root, limits)
    # json escapes NUL as \u0000; a literal backslash-u0000 text matches too, and then
    # the walk finds nothing
    if "\\u0000" in text:
        _raise_found(payload, root, None)


def _raise_found(payload: Mapping[str, Any], root: str, otherwise: str | None) -> None:
    found = find_problem(payload)
    if found is not None:
        keys, problem = found
        raise PayloadInvalid(format_path(root, keys), problem)
    if otherwise is not None:
        raise PayloadInvalid(root, otherwise)
