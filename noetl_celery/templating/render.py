"""Rendering values: native types for single expressions, strict errors with locations.

`render_value` walks dicts and lists and renders every string that holds a template:
- a string that is exactly one `{{ expr }}` keeps the expression's native type
  (`'{{ rows }}'` gives the list, `'{{ n + 1 }}'` the int);
- any other template renders to a string;
- an undefined name or attribute raises `UndefinedVariable` naming the template and
  where it sits (`| default(...)` and `is defined` keep working).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from typing import Any

from jinja2 import TemplateError as JinjaTemplateError
from jinja2 import nodes
from jinja2.runtime import Undefined

from noetl_celery.errors import ReplayError, StoreError, TemplateError, UndefinedVariable
from noetl_celery.templating.environment import (
    ENV,
    UndefinedNameError,
    compile_expression,
    compile_template,
)
from noetl_celery.templating.evaluate import evaluate, render
from noetl_celery.templating.result_view import unwrap

_SINGLE = re.compile(r"^\s*\{\{(?P<expr>.*)\}\}\s*$", re.DOTALL)
# `range(...)` or `range(...) | list`: the whole of a `loop.in` that asks for a range
_RANGE_EXPRESSION = re.compile(r"^\s*(?P<call>range\s*\(.*\))\s*(?:\|\s*list\s*)?$", re.DOTALL)
_FALSE_STRINGS = frozenset({"false", "0", "no", "none", "null", "off", ""})


def is_template(value: Any) -> bool:
    return isinstance(value, str) and ("{{" in value or "{%" in value)


def _single_expression(source: str) -> str | None:
    match = _SINGLE.match(source)
    if match is None:
        return None
    expr = match.group("expr")
    if "{{" in expr or "}}" in expr or "{%" in source or "{#" in source:
        return None
    return expr


def _location(where: str | None) -> str:
    return f" in {where}" if where else ""


def render_string(
    source: str, context: Mapping[str, Any], where: str | None = None, *, lenient: bool = False
) -> Any:
    """Render one template string; see the module docstring for the rules."""
    if not is_template(source):
        return source
    try:
        expr = _single_expression(source)
        if expr is not None:
            # the context is read through, not copied (templating.evaluate)
            value = evaluate(compile_expression(expr.strip(), lenient), context)
            if isinstance(value, Undefined):
                if lenient:
                    return ""  # what the lenient Undefined renders as
                value._fail_with_undefined_error()
            return unwrap(value)
        return render(compile_template(source, lenient), context)
    except UndefinedNameError as exc:
        kind = "attribute" if exc.is_attribute else "variable"
        raise UndefinedVariable(
            f"undefined {kind}{_location(where)}: {exc.in_template(source)} "
            f"(template: {source.strip()!r})",
            template=source,
            is_attribute=exc.is_attribute,
        ) from None
    except JinjaTemplateError as exc:
        raise TemplateError(
            f"template error{_location(where)}: {exc} (template: {source.strip()!r})",
            template=source,
        ) from None
    except (TemplateError, StoreError, ReplayError):
        # a template that reads history (a step's result) and finds the engine's database
        # away, or a replay's record without the answer, did nothing wrong: not its failure
        raise
    except Exception as exc:  # errors raised by expressions: ZeroDivisionError, TypeError...
        raise TemplateError(
            f"template failed{_location(where)}: {type(exc).__name__}: {exc} "
            f"(template: {source.strip()!r})",
            template=source,
        ) from None


def lazy_range(
    source: Any, context: Mapping[str, Any], where: str | None = None, *, lenient: bool = False
) -> range | None:
    """The `range` a template such as `{{ range(n) | list }}` asks for, not built into a
    list: a loop over a million numbers then costs its planner a `range` object, not the
    40 MB list of a million ints. None when `source` is anything else (then render it
    as usual): only a single `range(...)` call, alone or piped into `list` and nothing
    more, is taken, and only when it evaluates to a real `range` (a variable that shadows
    the name is not one)."""
    expr = _single_expression(source) if isinstance(source, str) else None
    match = _RANGE_EXPRESSION.match(expr) if expr is not None else None
    if match is None or not _is_range_call(match.group("call")):
        return None
    value = render_string("{{ " + match.group("call") + " }}", context, where, lenient=lenient)
    return value if isinstance(value, range) else None


def _is_range_call(source: str) -> bool:
    """Whether `source` parses as one call of the name `range` (so `range(3) + other`,
    which the pattern also matches, is not taken for one)."""
    try:
        body = ENV.parse("{{ " + source + " }}").body
    except JinjaTemplateError:
        return False
    if len(body) != 1 or not isinstance(body[0], nodes.Output) or len(body[0].nodes) != 1:
        return False
    call = body[0].nodes[0]
    return (
        isinstance(call, nodes.Call)
        and isinstance(call.node, nodes.Name)
        and call.node.name == "range"
        and call.dyn_args is None
        and call.dyn_kwargs is None
    )


def render_value(
    value: Any,
    context: Mapping[str, Any],
    where: str | None = None,
    *,
    string: Callable[[str, Mapping[str, Any], str | None], Any] = render_string,
) -> Any:
    """Render every template inside `value` (dicts and lists recursively)."""
    if isinstance(value, str):
        return string(value, context, where)
    if isinstance(value, Mapping):
        return {
            key: render_value(item, context, f"{where}.{key}" if where else str(key), string=string)
            for key, item in value.items()
        }
    if isinstance(value, list):
        return [
            render_value(item, context, f"{where}[{i}]" if where else f"[{i}]", string=string)
            for i, item in enumerate(value)
        ]
    return value


def truthy(value: Any) -> bool:
    """NoETL's truthiness for guards: strings are true unless false/0/no/none/null/''."""
    if isinstance(value, str):
        return value.strip().lower() not in _FALSE_STRINGS
    return bool(value)


def evaluate_condition(
    when: str | bool | None,
    context: Mapping[str, Any],
    where: str | None = None,
    *,
    lenient: bool = False,
) -> bool:
    """Evaluate an arc / rule guard.

    Data-dependent failures (a missing attribute such as `output.data.rows[0]` on an empty
    result, `None > 0`) make the guard false, as in NoETL. An undefined top-level *name*
    is a bug in the playbook and raises `UndefinedVariable`.
    """
    if when is None:
        return True
    if isinstance(when, bool):
        return when
    try:
        return truthy(render_string(when, context, where, lenient=lenient))
    except UndefinedVariable as exc:
        if exc.is_attribute:
            return False
        raise
    except TemplateError:
        return False
