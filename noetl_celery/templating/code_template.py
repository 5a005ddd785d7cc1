"""`{{ … }}` inside python `code:`, as NoETL renders it, without running data as code.

NoETL's tools crate renders every string of a tool's config, python `code` included
(`tools/src/template/engine.rs` `render_value_with`), so e2e fixtures write
`"payload_kb_per_item": {{ payload_kb_per_item }},` in a script. Plain text substitution
into source code is an injection: a value from an API holding `"); os.system("…` would
run. Here a placeholder in code renders only as a Python literal that cannot change the
code around it: numbers, booleans and None as literals, lists and dicts as their `repr`
(a literal whose strings Python escapes), and strings only when they hold no quote,
backslash, brace or line break (ids, dates, names); any other string fails the step
naming the placeholder and the way out (pass the value through `input:`).

A brace pair that is not a placeholder of context names is left alone: Python's own
braces (`f"{{literal}}"`, a set of a name the context lacks) parse as Jinja but name
nothing the playbook defines, so that part of the code runs as written.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from functools import lru_cache
from typing import Any

from jinja2 import TemplateError as JinjaTemplateError
from jinja2 import TemplateSyntaxError, meta
from jinja2.runtime import Undefined

from noetl_celery.errors import TemplateError, UndefinedVariable, UnsafeCodeValue
from noetl_celery.templating.environment import ENV, UndefinedNameError, compile_expression
from noetl_celery.templating.evaluate import evaluate
from noetl_celery.templating.result_view import unwrap

_SAFE_TEXT = re.compile(r"[\w .:/@+,=%#-]*\Z")


def _literal(value: Any) -> str:
    if isinstance(value, Undefined):
        return str(value)  # strict: raises naming the name
    value = unwrap(value)
    if value is None or isinstance(value, bool | int):
        return repr(value)
    if isinstance(value, float) and math.isfinite(value):
        return repr(value)
    if isinstance(value, str):
        if _SAFE_TEXT.match(value):
            return value
        raise UnsafeCodeValue(
            f"rendered the text {value[:40]!r} (quotes, backslashes, braces or line breaks "
            "could change the code around it)"
        )
    if isinstance(value, list | tuple | dict):
        _check_plain(value)
        return repr(value)
    raise UnsafeCodeValue(f"rendered a {type(value).__name__}, which has no Python literal")


def _check_plain(value: Any) -> None:
    value = unwrap(value)
    if isinstance(value, dict):
        for key, item in value.items():
            _check_plain(key)
            _check_plain(item)
    elif isinstance(value, list | tuple):
        for item in value:
            _check_plain(item)
    elif not (value is None or isinstance(value, bool | int | float | str)):
        raise UnsafeCodeValue(f"rendered a {type(value).__name__} inside a list or dict")


@lru_cache(maxsize=4096)  # a python step's code is the same for each of its commands
def _names(expr: str) -> frozenset[str] | None:
    """The undeclared names of `{{ expr }}`; None when it is not Jinja."""
    try:
        return frozenset(meta.find_undeclared_variables(ENV.parse("{{" + expr + "}}")))
    except TemplateSyntaxError:
        return None


_PLACEHOLDER = re.compile(r"\{\{(?P<expr>.*?)\}\}", re.DOTALL)


def render_code(code: str, context: Mapping[str, Any], where: str) -> str:
    """The code with each `{{ expr }}` whose names the context (or the template globals)
    defines rendered as a literal; every other brace pair is Python's and stays as written.
    `{% … %}` blocks are not rendered (no NoETL fixture puts one in code)."""
    if "{{" not in code:
        return code

    def one(found: re.Match[str]) -> str:
        expr = found.group("expr")
        names = _names(expr)
        if names is None:
            return found.group(0)  # `f"{{'a': 1}}"`: Python's braces, not a template
        if not names or any(n not in context and n not in ENV.globals for n in names):
            return found.group(0)
        try:
            return _literal(evaluate(compile_expression(expr.strip()), context))
        except UnsafeCodeValue as exc:
            raise UnsafeCodeValue(
                f"{where}: `{found.group(0)}` in python code {exc}; pass the value through "
                "`input:` and read it as a variable instead"
            ) from None
        except UndefinedNameError as exc:
            kind = "attribute" if exc.is_attribute else "variable"
            raise UndefinedVariable(
                f"undefined {kind} in {where} code: {exc.in_template(found.group(0))} "
                f"(template: {found.group(0)!r})",
                is_attribute=exc.is_attribute,
            ) from None
        except JinjaTemplateError as exc:
            raise TemplateError(f"template error in {where} code: {exc}") from None

    return _PLACEHOLDER.sub(one, code)
