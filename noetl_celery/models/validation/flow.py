"""Checks of routing and iteration: arcs and loops (docs/reference/dsl.md §1.5, §4)."""

from __future__ import annotations

import difflib
from collections.abc import Mapping
from typing import Any

from noetl_celery.constants import CURSOR_KINDS
from noetl_celery.models.validation.base import (
    Collector,
    as_dict,
    as_list,
    did_you_mean,
    names_list,
)
from noetl_celery.models.validation.values import check_set_keys, check_when
from noetl_celery.models.yaml_positions import Path


def check_arcs(collector: Collector, path: Path, nxt: Any, names: list[str]) -> None:
    for index, arc in enumerate(as_list(as_dict(nxt).get("arcs"))):
        if not isinstance(arc, dict):
            continue
        arc_path = (*path, "arcs", index)
        _check_arc_keys(collector, arc_path, arc)
        target = arc.get("step")
        if isinstance(target, str) and target not in names:
            collector.error((*arc_path, "step"), no_such_step("the arc", target, names))
        if "when" in arc:
            check_when(collector, (*arc_path, "when"), arc["when"])
        check_set_keys(collector, (*arc_path, "set"), arc.get("set"))


ARC_KEYS = ("step", "when", "set", "spec")
# what other engines call an arc's condition
_CONDITION_WORDS = frozenset({"cond", "condition", "if", "where", "guard"})


def _check_arc_keys(collector: Collector, arc_path: Path, arc: Mapping[str, Any]) -> None:
    """`args` is refused (NoETL refuses it too); any other unknown key is ignored, as
    NoETL ignores it, with a warning: a condition under another name means the arc is
    always taken, in both engines."""
    for key in arc:
        if key in ARC_KEYS or not isinstance(key, str):
            continue
        if key == "args":
            collector.error(
                (*arc_path, key),
                "arc `args` is not supported (NoETL rejects it too); pass values with the "
                "arc's `set:` or the target step's `input:`",
            )
            continue
        hint = (
            "; an arc's condition is `when:` (as written, the arc is always taken)"
            if key in _CONDITION_WORDS
            else did_you_mean(key, ARC_KEYS)
        )
        allowed = ", ".join(f"`{k}`" for k in ARC_KEYS)
        collector.warning(
            (*arc_path, key),
            f"unknown key `{key}` in an arc is ignored (NoETL ignores it too); allowed "
            f"keys: {allowed}{hint}",
        )


def no_such_step(what: str, target: str, names: list[str]) -> str:
    guess = difflib.get_close_matches(target, names, n=1)
    hint = f"did you mean `{guess[0]}`?" if guess else f"steps: {names_list(names)}"
    return f"{what} names step `{target}`, which does not exist; {hint}"


def check_loop(collector: Collector, path: Path, loop: Mapping[str, Any]) -> None:
    has_in = loop.get("in") is not None
    cursor = loop.get("cursor")
    spec = as_dict(loop.get("spec"))
    mode = spec.get("mode", "sequential")
    if has_in and cursor is not None:
        collector.error(path, "a loop takes `in:` or `cursor:`, not both; remove one")
    elif not has_in and cursor is None:
        collector.error(
            (*path, "in"),
            "`loop` needs `in:` (a list or a template that renders to "
            "one) or `cursor:` (a SQL claim)",
        )
    if cursor is not None and mode != "cursor":
        collector.error(
            (*path, "spec", "mode") if "mode" in spec else path,
            "a `cursor:` loop needs `spec: {mode: cursor}`",
        )
    if mode == "cursor" and cursor is None:
        collector.error(
            (*path, "spec", "mode"),
            "`mode: cursor` needs `loop.cursor` "
            "(with `claim:` SQL); use `sequential` or `parallel` for `loop.in`",
        )
    iterator = loop.get("iterator")
    if isinstance(iterator, str) and not iterator.isidentifier():
        collector.error(
            (*path, "iterator"),
            f"`iterator: {iterator}` must be a plain name such as `item` (it becomes a variable)",
        )
    if mode == "sequential" and cursor is None and spec.get("max_in_flight") is not None:
        collector.warning(
            (*path, "spec", "max_in_flight"),
            "`max_in_flight` is ignored: a "
            "sequential loop runs one item at a time; set `mode: parallel`",
        )
    if mode != "cursor" and spec.get("frame") is not None:
        collector.warning(
            (*path, "spec", "frame"), "`frame` is only used by cursor loops; it is ignored here"
        )
    if isinstance(cursor, dict):
        _check_cursor(collector, (*path, "cursor"), cursor)


def _check_cursor(collector: Collector, path: Path, cursor: Mapping[str, Any]) -> None:
    claim = cursor.get("claim")
    if isinstance(claim, str) and not claim.strip():
        collector.error(
            (*path, "claim"), "`claim` is empty; write the SQL that claims rows and RETURNs them"
        )
    kind = cursor.get("kind", "postgres")
    if isinstance(kind, str) and kind not in CURSOR_KINDS:
        collector.error(
            (*path, "kind"),
            f"cursor `kind: {kind}` is not supported; use one of {', '.join(sorted(CURSOR_KINDS))}",
        )
