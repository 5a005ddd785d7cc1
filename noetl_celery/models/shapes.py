"""The names NoETL's tools give their results, as read-only aliases of the stored ones.

A results row keeps each tool result once, in this engine's shape. What NoETL playbooks
read under NoETL's own names is added only where results are read (templates, `output`),
as a second key for the same object, never as a second copy in Postgres:

- HTTP: NoETL's Rust http tool (noetl/tools `src/tools/http.rs`, `build_response_data`)
  returns `{status_code, headers, data: body, body: body}`; the stored envelope is
  `{status_code, headers, url, elapsed, data: body}`, so `body` is read as `data`.
- Postgres: NoETL's Python postgres tool keyed each statement's result `command_<i>`
  (`{status, rows, row_count, columns}` or `{status, row_count, message}`) and fixtures
  still read `command_0.rows`; the stored result describes the last statement
  (`{status, rows, row_count, columns, statement_count}`, as NoETL's collapsed result
  and the Rust tool's flat one do), so `command_<statement_count - 1>` is read as that
  statement. For a one-statement query, the common case, that is `command_0`.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

# the fields of one statement's result (the stored postgres result minus its totals)
_STATEMENT_FIELDS = (
    "status",
    "rows",
    "row_count",
    "columns",
    "truncated",
    "total_row_count",
    "message",
)


def is_http_envelope(value: Mapping[str, Any]) -> bool:
    return "status_code" in value and "headers" in value and "data" in value


def read_aliases(value: Mapping[str, Any]) -> dict[str, Any]:
    """NoETL's names for a stored tool result that lacks them (empty if none apply)."""
    aliases: dict[str, Any] = {}
    if is_http_envelope(value) and "body" not in value:
        aliases["body"] = value["data"]
    count = value.get("statement_count")
    if isinstance(count, int) and not isinstance(count, bool) and count > 0:
        name = f"command_{count - 1}"
        if name not in value:
            aliases[name] = {k: value[k] for k in _STATEMENT_FIELDS if k in value}
    return aliases


def with_read_aliases(value: Any) -> Any:
    """`value` with NoETL's names added (a shallow copy), or `value` itself."""
    if not isinstance(value, Mapping):
        return value
    aliases = read_aliases(value)
    return {**value, **aliases} if aliases else value
