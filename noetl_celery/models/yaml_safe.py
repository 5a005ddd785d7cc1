"""The one YAML loader for text users give us: playbooks, `--set` values, credentials files.

PyYAML composes an alias as a second reference to its anchor's node, but everything
downstream (the position map, constructed dicts walked by pydantic, Jinja, json) sees
the *expanded* tree: a few hundred bytes of nested aliases ("billion laughs") expand to
10^9 nodes, and took `validate` 27 s to die with MemoryError. PyYAML's composer also
recurses once per nesting level, so deep nesting overflows the stack.

`BoundedSafeLoader` is `yaml.SafeLoader` with a composer that keeps, for every node it
finished, the size of its expanded subtree. An alias adds its anchor's size to a running
total, so the expanded size is known while composing, in time linear in the *text*, and
the first node past `MAX_YAML_NODES` or deeper than `MAX_YAML_DEPTH` stops the parse at
once (microseconds for a bomb). An alias used inside its own anchor (a recursive
structure, which no playbook or JSON value can be) is refused too.
"""

from __future__ import annotations

from typing import Any

import yaml
from yaml.events import AliasEvent, Event
from yaml.nodes import Node

from noetl_celery.constants import MAX_YAML_DEPTH, MAX_YAML_NODES

__all__ = ["BoundedSafeLoader", "YamlLimitExceeded", "safe_load"]


class YamlLimitExceeded(yaml.YAMLError):
    """The YAML is past a bound; `message` says which, `line` (1-based) where."""

    def __init__(self, message: str, event: Event) -> None:
        super().__init__(message)
        self.message = message
        mark = event.start_mark
        self.line = None if mark is None else mark.line + 1


class BoundedSafeLoader(yaml.SafeLoader):
    max_nodes = MAX_YAML_NODES
    max_depth = MAX_YAML_DEPTH

    def __init__(self, stream: str) -> None:
        super().__init__(stream)
        self._depth = 0
        self._expanded = 0  # nodes of the expanded tree composed so far
        self._aliases = 0
        # id(node) -> size of its expanded subtree; set when the node is complete, so an
        # anchor still being composed has no entry (an alias to it is recursive). Nodes
        # stay referenced by the tree while the loader lives: ids are not reused.
        self._sizes: dict[int, int] = {}

    def compose_node(self, parent: Node | None, index: int) -> Node | None:
        event: Event = self.peek_event()  # type: ignore[no-untyped-call]  # (untyped stub)
        if isinstance(event, AliasEvent):
            target = self.anchors.get(event.anchor)
            if target is not None:  # an undefined alias is reported by PyYAML itself
                size = self._sizes.get(id(target))
                if size is None:
                    raise YamlLimitExceeded(
                        f"the alias *{event.anchor} is used inside its own anchor "
                        f"&{event.anchor}: a recursive structure, which cannot be used",
                        event,
                    )
                self._aliases += 1
                self._grow(size, event)
            return super().compose_node(parent, index)
        self._depth += 1
        if self._depth > self.max_depth:
            raise YamlLimitExceeded(
                f"YAML nested deeper than the limit of {self.max_depth} levels", event
            )
        before = self._expanded
        self._grow(1, event)
        node = super().compose_node(parent, index)
        self._depth -= 1
        self._sizes[id(node)] = self._expanded - before
        return node

    def _grow(self, nodes: int, event: Event) -> None:
        self._expanded += nodes
        if self._expanded <= self.max_nodes:
            return
        if self._aliases:
            message = (
                f"YAML aliases (*name) expand this document past the limit of "
                f"{self.max_nodes:,} nodes (an alias bomb?); it was not expanded"
            )
        else:
            message = f"the YAML has more than {self.max_nodes:,} nodes, the limit"
        raise YamlLimitExceeded(message, event)


def safe_load(text: str) -> Any:
    """`yaml.safe_load` with the bounds above (raises `YamlLimitExceeded`, a YAMLError,
    or another YAMLError for text that is not YAML)."""
    loader = BoundedSafeLoader(text)
    try:
        return loader.get_single_data()
    finally:
        loader.dispose()
