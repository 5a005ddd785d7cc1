"""Layer 1 of validation: the pydantic models, with their errors rewritten in plain words.

Pydantic reports a failed union (`tool: ToolSpec | list[ToolSpec]`, `when: str | bool`) once
per branch, with the branch name inside `loc`. We drop the branches that do not match the
shape the user wrote, or collapse them into one "must be X or Y" problem, so a single mistake
yields a single message.
"""

from __future__ import annotations

from typing import Any

from pydantic import ValidationError
from pydantic_core import ErrorDetails

from noetl_celery.models.playbook import Playbook
from noetl_celery.models.validation.base import Collector, type_word
from noetl_celery.models.validation.messages import error_message, leaf_name
from noetl_celery.models.yaml_positions import Path

_MISSING = object()
_PRIMITIVE_TAGS = frozenset({"str", "int", "float", "bool", "list", "dict", "none"})
_TAG_WORDS = {"str": "a string", "int": "an integer", "float": "a number", "bool": "a boolean"}


def validate_model(collector: Collector) -> Playbook | None:
    """Build the `Playbook`; on failure add one problem per distinct mistake."""
    try:
        return Playbook.model_validate(collector.data)
    except ValidationError as exc:
        _report(collector, exc.errors())
        return None


def _report(collector: Collector, errors: list[ErrorDetails]) -> None:
    parsed = [(*_split_loc(err["loc"], collector.data), err) for err in errors]
    branches: dict[Path, set[str]] = {}
    for _, tags, _ in parsed:
        for prefix, tag in tags:
            branches.setdefault(prefix, set()).add(tag)
    collapsed: dict[Path, set[str]] = {}
    for loc, tags, err in parsed:
        if _keeps(tags, branches, collector.data, collapsed):
            collector.error(loc, error_message(err, loc))
    for prefix, options in collapsed.items():
        # arc / rule `when` types are checked on the raw data (it also catches `when: 1`,
        # which pydantic quietly turns into `True`)
        if prefix[-1] != "when":
            value = _lookup(collector.data, prefix)
            collector.error(prefix, _union_message(prefix, options, value))


def _split_loc(loc: tuple[str | int, ...], data: Any) -> tuple[Path, list[tuple[Path, str]]]:
    """Separate real document keys from union branch names such as `list[ToolSpec]`."""
    clean: list[str | int] = []
    tags: list[tuple[Path, str]] = []
    node: Any = data
    for part in loc:
        if isinstance(part, int):
            node = node[part] if isinstance(node, list) and part < len(node) else _MISSING
        elif isinstance(node, dict) and part in node:
            node = node[part]
        elif _is_union_tag(part):
            tags.append((tuple(clean), part))
            continue
        else:
            node = _MISSING
        clean.append(part)
    return tuple(clean), tags


def _is_union_tag(part: str) -> bool:
    return part in _PRIMITIVE_TAGS or "[" in part or part[:1].isupper()


def _keeps(
    tags: list[tuple[Path, str]],
    branches: dict[Path, set[str]],
    data: Any,
    collapsed: dict[Path, set[str]],
) -> bool:
    """Keep an error only if every union on its path took the branch the YAML's shape fits."""
    for prefix, tag in tags:
        value = _lookup(data, prefix)
        fitting = {t for t in branches[prefix] if _fits(t, value)}
        if not fitting:
            collapsed[prefix] = branches[prefix]
            return False
        if tag not in fitting:
            return False
    return True


def _fits(tag: str, value: Any) -> bool:
    if tag == "list" or tag.startswith("list["):
        return isinstance(value, list)
    if tag == "dict" or tag.startswith("dict[") or tag[:1].isupper():
        return isinstance(value, dict)
    if tag == "str":
        return isinstance(value, str)
    if tag == "bool":
        return isinstance(value, bool)
    if tag == "int":
        return isinstance(value, int) and not isinstance(value, bool)
    if tag == "float":
        return isinstance(value, int | float) and not isinstance(value, bool)
    return False


def _lookup(data: Any, path: Path) -> Any:
    node = data
    for part in path:
        in_list = isinstance(part, int) and isinstance(node, list) and part < len(node)
        if not (in_list or (isinstance(node, dict) and part in node)):
            return _MISSING
        node = node[part]
    return node


def _union_message(prefix: Path, tags: set[str], value: Any) -> str:
    leaf = leaf_name(prefix)
    got = type_word(value)
    if leaf == "tool":
        return (
            "`tool` must be a mapping with `kind:` (one tool) or a list of such mappings "
            f"(a pipeline), not {got}"
        )
    if leaf == "max_in_flight":
        return f"`max_in_flight` must be a positive integer (or a template), not {got}"
    words = sorted({_TAG_WORDS.get(tag, "a mapping") for tag in tags})
    return f"`{leaf}` must be {' or '.join(words)}, not {got}"
