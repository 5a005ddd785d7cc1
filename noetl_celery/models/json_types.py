"""The one alias for arbitrary user JSON (a workload payload, a value a playbook passes
on): what `json.loads` can return, so a type checker follows it past the first level
instead of stopping at `Any`. Fixed-shape records get TypedDicts or dataclasses, not
this alias."""

from __future__ import annotations

from typing import TypeAlias

JSONValue: TypeAlias = "bool | int | float | str | list[JSONValue] | dict[str, JSONValue] | None"
JSONObject: TypeAlias = "dict[str, JSONValue]"
