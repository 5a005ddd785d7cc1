"""Shared plumbing of the playbook validator: locating problems and reading raw YAML data.

Checks work on the raw constructed YAML (not on the pydantic models) so that they still
run when the models reject the document; every accessor here therefore tolerates any shape.
"""

from __future__ import annotations

import difflib
from collections.abc import Iterable
from typing import Any

from noetl_celery.errors import Problem
from noetl_celery.models.yaml_positions import Path, YamlDocument

ERROR = "error"
WARNING = "warning"


def format_path(path: Path) -> str | None:
    """`('next', 'arcs', 0, 'step')` -> `next.arcs[0].step`."""
    text = ""
    for part in path:
        text += f"[{part}]" if isinstance(part, int) else (f".{part}" if text else part)
    return text or None


def as_dict(value: Any) -> dict[str, Any]:
    """The value if it is a mapping, else an empty one (the schema layer reports the type)."""
    return value if isinstance(value, dict) else {}


def as_list(value: Any) -> list[Any]:
    return value if isinstance(value, list) else []


def type_word(value: Any) -> str:
    """How a YAML user would call the type of `value`."""
    if value is None:
        return "nothing (null)"
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, int | float):
        return "a number"
    if isinstance(value, str):
        return "a string"
    if isinstance(value, list):
        return "a list"
    if isinstance(value, dict):
        return "a mapping"
    return type(value).__name__


def nonblank(value: Any) -> bool:
    """A usable value: not missing, not an empty/whitespace string, not an empty list."""
    if isinstance(value, str):
        return bool(value.strip())
    if isinstance(value, list):
        return any(nonblank(item) for item in value)
    return value is not None


def names_list(names: list[str]) -> str:
    return ", ".join(f"`{name}`" for name in names) if names else "(none)"


def did_you_mean(name: str, candidates: Iterable[str], prefix: str = "") -> str:
    """`; did you mean `<prefix><closest>`?` or "" when no candidate is close."""
    found = difflib.get_close_matches(name, sorted(candidates), n=1, cutoff=0.7)
    return f"; did you mean `{prefix}{found[0]}`?" if found else ""


class Collector:
    """Turns a document path + message into a located `Problem`."""

    def __init__(self, file: str | None, document: YamlDocument) -> None:
        self.file = file
        self.document = document
        self.problems: list[Problem] = []

    @property
    def data(self) -> Any:
        return self.document.data

    def error(self, path: Path, message: str, *, line: int | None = None) -> None:
        self._add(path, message, ERROR, line)

    def warning(self, path: Path, message: str, *, line: int | None = None) -> None:
        self._add(path, message, WARNING, line)

    def _add(self, path: Path, message: str, severity: str, line: int | None) -> None:
        step, field = self._split(path)
        self.problems.append(
            Problem(
                message=message,
                file=self.file,
                line=line if line is not None else self.document.line_of(path),
                step=step,
                field=field,
                severity=severity,
            )
        )

    def _split(self, path: Path) -> tuple[str | None, str | None]:
        """Problems inside `workflow[i]` name the step and give the field inside it."""
        if len(path) >= 2 and path[0] == "workflow" and isinstance(path[1], int):
            steps = as_list(as_dict(self.data).get("workflow"))
            raw = as_dict(steps[path[1]]) if path[1] < len(steps) else {}
            name = raw.get("step")
            if isinstance(name, str) and name:
                return name, format_path(path[2:])
        return None, format_path(path)

    def sorted_problems(self) -> list[Problem]:
        """Unique problems in file order (document-wide ones without a line first)."""
        unique = list(dict.fromkeys(self.problems))
        return sorted(unique, key=lambda p: (p.line is not None, p.line or 0))
