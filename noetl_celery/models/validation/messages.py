"""Plain-English rewrites of pydantic error messages for playbook documents."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel
from pydantic_core import ErrorDetails

from noetl_celery.constants import TOOL_KINDS
from noetl_celery.models.playbook import Arc, Loop, Next
from noetl_celery.models.policy import ElseClause, Rule, Then
from noetl_celery.models.validation.base import format_path, type_word
from noetl_celery.models.yaml_positions import Path

_CLOSED_MODELS: dict[str, type[BaseModel]] = {
    "loop": Loop,
    "arcs": Arc,
    "next": Next,
    "then": Then,
    "rules": Rule,
    "else": ElseClause,
}
_KINDS = ", ".join(sorted(TOOL_KINDS))
_MISSING_MESSAGES: dict[tuple[str, ...], str] = {
    ("apiVersion",): "`apiVersion` is required; add `apiVersion: noetl.io/v2`",
    ("kind",): "`kind` is required; add `kind: Playbook`",
    ("metadata",): "`metadata` is required; add `metadata:` with at least `name:`",
    ("workflow",): "`workflow` is required; add `workflow:` with a list of steps",
    ("metadata", "name"): "`metadata.name` is required; add `name: <playbook name>` under "
    "`metadata`",
    ("workflow", "step"): "every workflow item needs `step: <unique name>`",
    ("tool", "kind"): f"the tool needs `kind:` (one of: {_KINDS})",
    ("next", "arcs"): "`next` needs `arcs:`, a list like `- step: <target>` (with optional "
    "`when:`)",
    ("arcs", "step"): "each arc needs `step: <target step name>`",
    ("loop", "iterator"): "`loop` needs `iterator: <name>` (the variable each item is bound to)",
    ("cursor", "claim"): "`loop.cursor` needs `claim:` SQL that claims rows and RETURNs them "
    "(limit it with `{{ __frame_max_rows }}`)",
    ("then", "do"): "`then` needs `do:` (continue, retry, jump, break, fail or quarantine)",
    ("else", "then"): "`else` needs `then: {do: ...}`",
    ("workbook", "name"): "each `workbook` entry needs `name:` (steps call it by that name)",
    ("workbook", "tool"): "each `workbook` entry needs `tool:` with a `kind:`",
}


def leaf_name(loc: Path) -> str:
    names = [part for part in loc if isinstance(part, str)]
    return names[-1] if names else "document"


def _signature(loc: Path) -> tuple[str, ...]:
    """The last two key names of `loc` (list indexes dropped): `('arcs', 'step')`."""
    names = tuple(part for part in loc if isinstance(part, str))
    return names[-2:] if len(loc) > 1 else names


def _literal_message(loc: Path, leaf: str, value: Any, expected: Any) -> str:
    if loc == ("kind",):
        return f"`kind` must be `Playbook` (this file declares `{value}`)"
    return f"`{leaf}: {value}` is not allowed; use one of {expected}"


def error_message(err: ErrorDetails, loc: Path) -> str:
    kind = err["type"]
    leaf = leaf_name(loc)
    value = err.get("input")
    ctx = err.get("ctx") or {}
    if kind == "missing":
        return _missing_message(loc, value)
    if kind == "extra_forbidden":
        return _extra_message(loc)
    if kind == "literal_error":
        return _literal_message(loc, leaf, value, ctx.get("expected"))
    if kind in ("model_type", "model_attributes_type", "dict_type"):
        return _mapping_message(loc, value)
    if kind == "list_type":
        return f"`{leaf}` must be a list, not {type_word(value)}"
    if kind == "too_short":
        if loc == ("workflow",):
            return "`workflow` is empty; list at least one step"
        return f"`{leaf}` must not be empty"
    if kind == "duration":  # models.durations: the message quotes the value
        return str(err["msg"])
    if kind == "value_error":
        text = str(ctx.get("error", err["msg"]))
        scalar = value is None or isinstance(value, str | int | float)
        return f"{text} (got {value!r})" if scalar else text
    if kind == "greater_than_equal":
        return f"`{leaf}` must be at least {ctx.get('ge')}, not {value!r}"
    if kind == "greater_than":
        return f"`{leaf}` must be greater than {ctx.get('gt')}, not {value!r}"
    if kind in (
        "string_type",
        "int_type",
        "int_parsing",
        "float_type",
        "float_parsing",
        "bool_type",
        "bool_parsing",
        "int_from_float",
    ):
        wanted = {"s": "a string", "i": "an integer", "f": "a number", "b": "true or false"}
        return f"`{leaf}` must be {wanted[kind[0]]}, not {type_word(value)} ({value!r})"
    return f"`{format_path(loc) or leaf}`: {err['msg']}"


def _missing_message(loc: Path, value: Any) -> str:
    signature = _signature(loc)
    if signature == ("tool", "kind") and _is_label_sugar(value):
        return (
            "pipeline tasks are written `- name: <label>` followed by `kind: ...`; the "
            "`- <label>: {kind: ...}` form is not supported"
        )
    message = _MISSING_MESSAGES.get(signature)
    return message or f"`{leaf_name(loc)}` is required here"


def _is_label_sugar(value: Any) -> bool:
    if not isinstance(value, dict) or len(value) != 1:
        return False
    inner = next(iter(value.values()))
    return isinstance(inner, dict) and "kind" in inner


def _extra_message(loc: Path) -> str:
    key = leaf_name(loc)
    container = leaf_name(loc[:-1])
    if container == "arcs" and key == "args":
        return (
            "arc `args` is not supported (NoETL rejects it too); pass values with the arc's "
            "`set:` or the target step's `input:`"
        )
    if container == "rules" and key == "expr":
        return "rule `expr` is not supported; write the condition as `when: '{{ ... }}'`"
    if container == "loop" and key in ("mode", "max_in_flight", "policy", "frame"):
        return f"`{key}` belongs under `loop.spec`, not directly under `loop`"
    model = _CLOSED_MODELS.get(container)
    allowed = (
        ", ".join(f"`{f.alias or name}`" for name, f in model.model_fields.items())
        if model is not None
        else "see the DSL reference"
    )
    return f"unknown key `{key}` in `{container}`; allowed keys: {allowed}"


def _mapping_message(loc: Path, value: Any) -> str:
    leaf = leaf_name(loc)
    got = type_word(value)
    if leaf == "next":
        return (
            f"`next` must be a mapping with `arcs:` (e.g. `next: {{arcs: [{{step: b}}]}}`), "
            f"not {got}"
        )
    if len(loc) == 2 and loc[0] == "workflow":
        return f"each `workflow` item must be a mapping with `step:` and `tool:`, not {got}"
    return f"`{leaf}` must be a mapping, not {got}"
