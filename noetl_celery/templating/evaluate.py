"""Running a compiled template or expression against a context without copying it.

Jinja's `TemplateExpression.__call__` and `Template.render` copy the caller's mapping
twice per call: `dict(context)`, then `dict(globals, **that)` into the new `Context`'s
parent. A worker's context holds every variable, step name and engine name (40-odd keys
in the PFT flow), and a row of a cursor drain renders a dozen expressions (its tool's
fields, its policy's `when`s, its `set`s): on `bench.pft_cursor` the copies and the
context built around them were about 2 % of a worker's CPU (py-spy, `new_context` and
`Context.__init__`).

Here the parent is a read-only view, `Names`: the caller's mapping first, then the
template's globals (the precedence Jinja's copy gives). Jinja reads a parent with `in`
and `[]` only (`Context.resolve_or_missing`); a template's own `{% set %}` writes to the
context's `vars`, never to its parent, so the caller's mapping is never changed.
`Context.keys()`/`items()` would need a real dict: nothing here calls them (the only
context function, `token()`, uses `.get`); `copy()` is there for Jinja's traceback
rewriting, which copies the parent.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any

from jinja2 import Template
from jinja2.runtime import Context
from jinja2.utils import consume


class Names(Mapping[str, Any]):
    """`names`, then `fallback` (the globals), read through without a copy."""

    __slots__ = ("_fallback", "_names")

    def __init__(self, names: Mapping[str, Any], fallback: Mapping[str, Any]) -> None:
        self._names = names
        self._fallback = fallback

    def __getitem__(self, key: str) -> Any:
        if key in self._names:
            return self._names[key]
        return self._fallback[key]

    def __contains__(self, key: object) -> bool:
        return key in self._names or key in self._fallback

    def __iter__(self) -> Iterator[str]:
        return iter(self.copy())

    def __len__(self) -> int:
        return len(self.copy())

    def copy(self) -> dict[str, Any]:
        """Every name as one dict (Jinja's traceback rewriting copies `get_all()`,
        which is the parent while the template has set nothing)."""
        return {**self._fallback, **self._names}


def _context(template: Template, names: Mapping[str, Any]) -> Context:
    env = template.environment
    # `globals` is not passed: it only records which names were globals, for
    # `{% import %}` of a module (not available to these string templates)
    parent: Any = Names(names, template.globals)
    return env.context_class(env, parent, template.name, template.blocks)


def evaluate(expression: Any, names: Mapping[str, Any]) -> Any:
    """What `expression(names)` gives for a `compile_expression` result (compiled with
    `undefined_to_none=False`): the expression's value, an `Undefined` included."""
    template: Template = expression._template
    context = _context(template, names)
    consume(template.root_render_func(context))
    return context.vars["result"]


def render(template: Template, names: Mapping[str, Any]) -> str:
    """What `template.render(names)` gives, its errors rewritten by Jinja as there."""
    context = _context(template, names)
    env = template.environment
    try:
        return str(env.concat(template.root_render_func(context)))
    except Exception:
        env.handle_exception()
        raise  # handle_exception always raises
