"""Checks of individual values used all over a playbook: templates, `set` keys, `when`."""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import Any

import jinja2

from noetl_celery.constants import UNSUPPORTED_NOETL_KINDS
from noetl_celery.models.validation.base import Collector, type_word
from noetl_celery.models.yaml_positions import Path

# Syntax only: parsing never looks filters or variables up, so a plain environment accepts
# everything the engine's own (richer) environment would render.
_JINJA = jinja2.Environment()
# `workload.<k>` writes the same flat map as `ctx.<k>` (docs/reference/dsl.md §1.6).
_SET_SCOPES = frozenset({"ctx", "iter", "step", "workload"})
_BARE_KEY = re.compile(r"[A-Za-z_][A-Za-z0-9_-]*")
# Strings NoETL reads as a boolean without rendering anything (docs/reference/dsl.md §1.5).
_LITERAL_CONDITIONS = frozenset({"true", "false", "yes", "no", "0", "1", "none", ""})


def is_template(text: str) -> bool:
    return "{{" in text or "{%" in text


def check_templates(collector: Collector, path: Path, value: Any) -> None:
    """Every string below `value` that looks like a template must be valid Jinja syntax."""
    for where, text in template_strings(value, path):
        if not is_template(text):
            continue
        try:
            _JINJA.parse(text)
        except jinja2.TemplateSyntaxError as exc:
            name = next((p for p in reversed(where) if isinstance(p, str)), "value")
            reason = (exc.message or "invalid syntax").rstrip(".")
            collector.error(
                where,
                f"template syntax error in `{name}`: {reason}; fix the Jinja "
                "(`{{ expression }}`, `{% statement %}`) in this value",
                line=collector.document.text_line(where, exc.lineno),
            )


def template_strings(value: Any, path: Path) -> Iterator[tuple[Path, str]]:
    """Every string leaf below `value` with its path, except tool `code`: python code is
    not a template (`{{ }}` there is a set display); and of a tool of a NoETL-only kind,
    only `spec`."""
    if isinstance(value, str):
        yield path, value
    elif isinstance(value, dict):
        is_tool = "kind" in value
        # a tool of a NoETL kind this engine lacks is never rendered here (it fails when
        # reached), so only its `spec` (policy rules still route that failure) is checked
        foreign = is_tool and value.get("kind") in UNSUPPORTED_NOETL_KINDS
        for key, item in value.items():
            if not (is_tool and key == "code") and not (foreign and key != "spec"):
                yield from template_strings(item, (*path, key))
    elif isinstance(value, list):
        for index, item in enumerate(value):
            yield from template_strings(item, (*path, index))


def check_set_keys(collector: Collector, path: Path, mapping: Any) -> None:
    """`set` keys are `ctx.<k>`, `iter.<k>`, `step.<k>` or a bare name
    (docs/reference/dsl.md §1.6)."""
    if not isinstance(mapping, dict):
        return  # the schema layer reports a `set` that is not a mapping
    for key in mapping:
        problem = _set_key_problem(key)
        if problem:
            collector.warning((*path, key), problem)


def _set_key_problem(key: Any) -> str | None:
    if not isinstance(key, str) or not key.strip():
        return "a `set` key is empty; name the variable, e.g. `ctx.total` or `iter.page`"
    scope, dot, rest = key.partition(".")
    if dot:
        if scope not in _SET_SCOPES:
            return (
                f"`set` key `{key}` has an unknown scope `{scope}`; use `ctx.{rest}`, "
                f"`iter.{rest}`, `step.{rest}` or a bare name"
            )
        if not rest:
            return f"`set` key `{key}` names no variable; write `{scope}.<name>`"
        return None
    if not _BARE_KEY.fullmatch(key):
        return f"`set` key `{key}` is not a plain name; use letters, digits and `_`"
    return None


def check_when(collector: Collector, path: Path, value: Any) -> None:
    """An arc / rule condition: a Jinja string or a YAML boolean."""
    if value is None or isinstance(value, bool):
        return
    if not isinstance(value, str):
        collector.error(
            path,
            f"`when` must be a Jinja string such as `'{{{{ x > 1 }}}}'` or true/false, "
            f"not {type_word(value)}",
        )
    elif not is_template(value) and value.strip().lower() not in _LITERAL_CONDITIONS:
        collector.warning(
            path,
            f"`when: {value}` has no `{{{{ }}}}`, so it is a constant string that always "
            f"counts as true; write `when: '{{{{ {value} }}}}'`",
        )
