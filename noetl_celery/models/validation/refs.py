"""The names a template reads, found with Jinja's own parser (no regular expressions).

`template_refs` parses one template and returns every dotted name it reads from the
render context (`iter.page`, `ctx.total`, `fetch`), minus the names the template declares
itself (`{% set %}`, `{% for %}`, macro arguments: `jinja2.meta` knows Jinja's scoping), and
every literal `event.name` is compared with. A read is *guarded* when the template makes
it safe to be missing (`x | default(...)`, `x is defined`): such names are never reported.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from functools import lru_cache

import jinja2
from jinja2 import meta, nodes

# Parsing only: a plain environment accepts every filter and test the engine knows.
_JINJA = jinja2.Environment()
_GUARD_FILTERS = frozenset({"default", "d"})
_GUARD_TESTS = frozenset({"defined", "undefined"})
_EQUALITY = frozenset({"eq", "ne"})
_MEMBERSHIP = frozenset({"in", "notin"})


@dataclass(frozen=True)
class Reference:
    """`names` read from the context, e.g. `('iter', 'page')`; `line` within the template."""

    names: tuple[str, ...]
    line: int


@dataclass(frozen=True)
class EventComparison:
    """`event.name` compared with a literal (`==`, `!=`, `in [...]`)."""

    value: str
    line: int


@dataclass(frozen=True)
class TemplateRefs:
    references: tuple[Reference, ...]
    events: tuple[EventComparison, ...]


@lru_cache(maxsize=4096)  # a playbook is validated at registration and at every `run`
def template_refs(text: str) -> TemplateRefs | None:
    """The references of `text`; None when it is not valid Jinja (reported elsewhere)."""
    try:
        tree = _JINJA.parse(text)
    except jinja2.TemplateSyntaxError:
        return None
    walker = _Walker(meta.find_undeclared_variables(tree))
    walker.walk(tree, guarded=False)
    guarded = walker.guarded
    # a prefix made safe anywhere in the template (`{% if iter.x is defined %}`) makes
    # every read below it safe
    references = tuple(
        ref
        for ref in walker.found
        if not any(ref.names[:end] in guarded for end in range(1, len(ref.names) + 1))
    )
    return TemplateRefs(references, tuple(walker.events))


class _Walker:
    def __init__(self, undeclared: set[str]) -> None:
        self.undeclared = undeclared
        self.found: list[Reference] = []
        self.guarded: set[tuple[str, ...]] = set()
        self.events: list[EventComparison] = []

    def walk(self, node: nodes.Node, guarded: bool) -> None:
        if isinstance(node, nodes.Name | nodes.Getattr | nodes.Getitem):
            self._chain(node, guarded)
        elif isinstance(node, nodes.Call) and isinstance(node.node, nodes.Getattr):
            # `iter.get('x')`, `ctx.items()`: the method is not a key of the mapping
            self._chain(node.node.node, guarded)
            self._children(node, guarded, skip=node.node)
        elif _is_guard(node):
            assert isinstance(node, nodes.Filter | nodes.Test)
            self._guard(node, guarded)
        else:
            if isinstance(node, nodes.Compare):
                self._compare(node)
            self._children(node, guarded)

    def _children(self, node: nodes.Node, guarded: bool, skip: nodes.Node | None = None) -> None:
        for child in node.iter_child_nodes():
            if child is not skip:
                self.walk(child, guarded)

    def _guard(self, node: nodes.Filter | nodes.Test, guarded: bool) -> None:
        if node.node is not None:
            names, _ = _split_chain(node.node)
            if names is not None:
                self.guarded.add(names)
            self.walk(node.node, guarded=True)
        self._children(node, guarded, skip=node.node)

    def _chain(self, node: nodes.Node, guarded: bool) -> None:
        names, rest = _split_chain(node)
        if names is not None and names[0] in self.undeclared and not guarded:
            self.found.append(Reference(names, node.lineno))
        for child in rest:
            self.walk(child, guarded)

    def _compare(self, node: nodes.Compare) -> None:
        operands = [node.expr, *(op.expr for op in node.ops)]
        for index, op in enumerate(node.ops):
            left, right = operands[index], operands[index + 1]
            if op.op in _EQUALITY:
                pairs = ((left, right), (right, left))
                for side, other in pairs:
                    if _is_event_name(side, self.undeclared) and _const_str(other) is not None:
                        self.events.append(EventComparison(str(_const_str(other)), node.lineno))
            elif op.op in _MEMBERSHIP and _is_event_name(left, self.undeclared):
                for value in _const_items(right):
                    self.events.append(EventComparison(value, node.lineno))


def _is_guard(node: nodes.Node) -> bool:
    """`x | default(...)`, `x is defined`: the template copes with `x` missing."""
    if isinstance(node, nodes.Filter):
        return node.name in _GUARD_FILTERS
    return isinstance(node, nodes.Test) and node.name in _GUARD_TESTS


def _split_chain(node: nodes.Node) -> tuple[tuple[str, ...] | None, list[nodes.Node]]:
    """`iter.page.size` -> (('iter', 'page', 'size'), []); a chain on anything but a name
    (a call, a literal) -> (None, [that base and any computed subscripts])."""
    names: list[str] = []
    rest: list[nodes.Node] = []
    current = node
    while True:
        if isinstance(current, nodes.Getattr):
            names.append(current.attr)
            current = current.node
        elif isinstance(current, nodes.Getitem):
            key = _const_str(current.arg)
            if key is None:  # `rows[i]`: the index is an expression, the chain stops here
                names.clear()
                rest.append(current.arg)
            else:
                names.append(key)
            current = current.node
        else:
            break
    if isinstance(current, nodes.Name):
        return ((current.name, *reversed(names)) if current.ctx == "load" else None), rest
    rest.append(current)
    return None, rest


def _is_event_name(node: nodes.Node, undeclared: set[str]) -> bool:
    names, _ = _split_chain(node)
    return names == ("event", "name") and "event" in undeclared


def _const_str(node: nodes.Node) -> str | None:
    if isinstance(node, nodes.Const) and isinstance(node.value, str):
        return node.value
    return None


def _const_items(node: nodes.Node) -> Iterator[str]:
    if isinstance(node, nodes.Const) and isinstance(node.value, list | tuple):
        # the parser folds a literal list into one constant
        yield from (value for value in node.value if isinstance(value, str))
    elif isinstance(node, nodes.List | nodes.Tuple):
        for item in node.items:
            value = _const_str(item)
            if value is not None:
                yield value
