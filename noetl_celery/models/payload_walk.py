"""Naming the key path of a payload problem (`payload.a.b[3]`), and the per-value rules.

`models.inputs` finds *that* a payload has a problem at C speed; this walks it value by
value (iteratively, depth already bounded) to say *where*, and is also what says why
Postgres cannot store a given string.
"""

from __future__ import annotations

import datetime as dt
import decimal
import json
import math
import re
import uuid
from typing import Any

__all__ = ["CONTAINERS", "find_deep", "find_problem", "format_path", "string_problem"]

CONTAINERS = (dict, list, tuple, set, frozenset)
# scalars the store encodes as their text (datetime.isoformat(), str(uuid))
_TEXT_SCALARS = dt.datetime | dt.date | dt.time | uuid.UUID
_IDENTIFIER = re.compile(r"[A-Za-z_][A-Za-z0-9_-]*\Z")
# a path longer than this is shortened in messages (a depth error is 65 levels down)
_PATH_SHOWN = 12

# A key path as a linked list (parent, key): building a tuple per node would copy the
# path at every level; it is only spelled out when a problem is reported.
Crumb = tuple["Crumb", str | int] | None


def spell(crumb: Crumb) -> list[str | int]:
    keys: list[str | int] = []
    while crumb is not None:
        crumb, key = crumb
        keys.append(key)
    keys.reverse()
    return keys


def quote(text: str, limit: int = 40) -> str:
    """A string as one line of JSON, escapes visible (`"a\\u0000b"`), shortened."""
    return json.dumps(text if len(text) <= limit else text[:limit] + "…")


def format_path(root: str, keys: list[str | int]) -> str:
    """`payload.a.b[3]`; keys that are not identifiers are quoted: `payload["a b"]`."""
    shown = keys if len(keys) <= _PATH_SHOWN else keys[: _PATH_SHOWN - 2]
    parts = [root]
    for key in shown:
        if isinstance(key, int):
            parts.append(f"[{key}]")
        elif _IDENTIFIER.match(key):
            parts.append(f".{key}")
        else:
            parts.append(f"[{quote(key)}]")
    if len(shown) < len(keys):
        parts.append(f"…({len(keys)} keys deep)")
    return "".join(parts)


def string_problem(text: str) -> str | None:
    """Why Postgres cannot store `text`, or None. A surrogate cannot be encoded as UTF-8
    (a pair decoded from JSON is joined into one character, so any left is alone)."""
    if "\x00" in text:
        return "contains a NUL character (\\u0000), which Postgres cannot store"
    if not text.isascii():
        try:
            text.encode("utf-8")
        except UnicodeEncodeError as exc:
            return (
                f"contains a lone surrogate (\\u{ord(text[exc.start]):04x}), which is not "
                "valid Unicode text and Postgres cannot store it"
            )
    return None


def scalar_problem(value: Any) -> str | None:
    """Why `value` (not a container) cannot be stored as JSON, or None."""
    if value is None or isinstance(value, bool | _TEXT_SCALARS):
        return None
    if isinstance(value, str):
        return string_problem(value)
    if isinstance(value, int):
        try:
            str(value)
        except ValueError:  # past sys.get_int_max_str_digits(): json.dumps fails alike
            return "is an integer too long to write as JSON"
        return None
    if isinstance(value, float | decimal.Decimal):
        if isinstance(value, float) and math.isfinite(value):
            return None
        if isinstance(value, decimal.Decimal) and value.is_finite():
            return None
        return (
            f"is {value} (not a finite number), which JSON cannot carry and Postgres cannot store"
        )
    if isinstance(value, bytes):  # stored decoded, as the store's JSON encoding does
        return string_problem(value.decode("utf-8", errors="replace"))
    return (
        f"is a value of type {type(value).__name__}, which cannot be stored as JSON (use "
        "strings, numbers, booleans, null, lists and mappings)"
    )


def key_problem(key: Any) -> str | None:
    if isinstance(key, str):
        problem = string_problem(key)
        return None if problem is None else f"the key {quote(key)} {problem}"
    if key is None or isinstance(key, bool | int | float):  # json makes them strings
        return None
    return f"has a key of type {type(key).__name__}; JSON keys are strings"


def find_problem(payload: Any) -> tuple[list[str | int], str] | None:
    """The key path and reason of the first value that cannot be stored, or None.
    Iterative, in reading order; the caller has bounded the depth and the element count
    (a cycle would never end)."""
    stack: list[tuple[Any, Crumb]] = [(payload, None)]
    while stack:
        value, crumb = stack.pop()
        if isinstance(value, dict):
            for key in value:
                problem = key_problem(key)
                if problem is not None:
                    return spell(crumb), problem
            stack.extend(_children(value, crumb))
        elif isinstance(value, CONTAINERS):
            stack.extend(_children(value, crumb))
        else:
            problem = scalar_problem(value)
            if problem is not None:
                return spell(crumb), problem
    return None


def _children(value: Any, crumb: Crumb) -> list[tuple[Any, Crumb]]:
    """(child, crumb) pairs, last first, so a stack pops them in reading order."""
    if isinstance(value, dict):
        return [(value[k], (crumb, str(k))) for k in reversed(list(value))]
    items = list(value)
    return [(items[i], (crumb, i)) for i in range(len(items) - 1, -1, -1)]


def find_deep(payload: Any, max_depth: int) -> list[str | int]:
    """The key path of the first container nested deeper than `max_depth` (depth-first,
    so it goes straight down a deep branch; it stops there, so a cycle ends too)."""
    stack: list[tuple[Any, int, Crumb]] = [(payload, 1, None)]
    while stack:
        value, depth, crumb = stack.pop()
        if depth > max_depth:
            return spell(crumb)
        stack.extend(
            (child, depth + 1, child_crumb)
            for child, child_crumb in _children(value, crumb)
            if isinstance(child, CONTAINERS)
        )
    return []
