"""Parse playbook YAML and remember where every node sits in the text.

The pydantic models only see plain dicts, so line numbers are lost once the YAML is
constructed. We compose the node graph first, record a `document path -> position` map
(paths are tuples of mapping keys and list indexes, like pydantic's `loc`), and only then
construct the Python data from the same node graph (one parse, two views).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import yaml
from yaml.nodes import MappingNode, Node, ScalarNode, SequenceNode

from noetl_celery.models.yaml_safe import BoundedSafeLoader, YamlLimitExceeded

Path = tuple[str | int, ...]
_BLOCK_STYLES = frozenset({"|", ">"})
_MERGE_KEY = "<<"


@dataclass(frozen=True)
class Spot:
    """Where one node is written. Lines are 1-based."""

    line: int  # the key's line for a mapping entry, the item's line for a list item
    value_line: int  # where the value node starts (the `|` line for block scalars)
    block: bool  # a `|`/`>` block scalar: its text starts on the line after `value_line`


@dataclass
class YamlDocument:
    """The constructed data plus the position of every key and list item."""

    data: Any
    spots: dict[Path, Spot] = field(default_factory=dict)
    duplicate_keys: list[Path] = field(default_factory=list)
    root_line: int = 1

    def line_of(self, path: Path) -> int:
        """Line of `path`, or of its deepest ancestor that exists in the text."""
        for end in range(len(path), 0, -1):
            spot = self.spots.get(path[:end])
            if spot is not None:
                return spot.line
        return self.root_line

    def text_line(self, path: Path, inner_line: int) -> int:
        """File line of line `inner_line` (1-based) of the string value at `path`.

        Exact for block scalars (`code: |`), approximate for folded/quoted scalars.
        """
        spot = self.spots.get(path)
        if spot is None:
            return self.line_of(path)
        first = spot.value_line + (1 if spot.block else 0)
        return first + max(inner_line, 1) - 1


class YamlSyntaxError(Exception):
    """The text is not YAML (or not a single YAML document)."""

    def __init__(self, message: str, line: int | None) -> None:
        super().__init__(message)
        self.message = message
        self.line = line


def parse_yaml(text: str) -> YamlDocument | None:
    """Parse one YAML document; None for an empty document (only comments/whitespace).
    The loader is bounded (`yaml_safe`): an alias bomb or deep nesting is refused while
    composing, before anything is expanded."""
    loader: BoundedSafeLoader | None = None
    try:
        loader = BoundedSafeLoader(text)  # its reader refuses control characters here
        node = loader.get_single_node()
        if node is None:
            return None
        # Map positions before constructing: SafeConstructor flattens `<<` merge keys in
        # place, which would make merged keys look like duplicates.
        document = YamlDocument(data=None, root_line=node.start_mark.line + 1)
        _walk(node, (), document, set())
        document.data = loader.construct_document(node)
        return document
    except YamlLimitExceeded as exc:
        raise YamlSyntaxError(exc.message, exc.line) from None
    except yaml.reader.ReaderError as exc:
        raise YamlSyntaxError(_unacceptable(exc), text.count("\n", 0, exc.position) + 1) from None
    except yaml.YAMLError as exc:
        raise YamlSyntaxError(_describe(exc), _error_line(exc)) from exc
    except ValueError as exc:  # an integer past Python's 4300-digit conversion limit
        raise YamlSyntaxError(f"a YAML value cannot be read: {exc}", None) from None
    finally:
        if loader is not None:
            loader.dispose()


def _unacceptable(exc: yaml.reader.ReaderError) -> str:
    code = exc.character if isinstance(exc.character, int) else ord(exc.character)
    return (
        f"the text holds the character U+{code:04X} (at offset {exc.position}), which YAML "
        "does not allow (control characters, lone surrogates); remove it"
    )


def _walk(node: Node, path: Path, document: YamlDocument, stack: set[int]) -> None:
    if id(node) in stack:  # a recursive alias (`&a [*a]`): stop instead of looping forever
        return
    stack.add(id(node))
    if isinstance(node, MappingNode):
        _walk_mapping(node, path, document, stack)
    elif isinstance(node, SequenceNode):
        for index, item in enumerate(node.value):
            line = item.start_mark.line + 1
            document.spots[(*path, index)] = Spot(line, line, _is_block(item))
            _walk(item, (*path, index), document, stack)
    stack.discard(id(node))


def _walk_mapping(node: MappingNode, path: Path, document: YamlDocument, stack: set[int]) -> None:
    seen: set[str] = set()
    for key_node, value_node in node.value:
        if not isinstance(key_node, ScalarNode) or key_node.value == _MERGE_KEY:
            continue
        key = key_node.value
        child = (*path, key)
        if key in seen:
            document.duplicate_keys.append(child)
        seen.add(key)
        document.spots[child] = Spot(
            line=key_node.start_mark.line + 1,
            value_line=value_node.start_mark.line + 1,
            block=_is_block(value_node),
        )
        _walk(value_node, child, document, stack)


def _is_block(node: Node) -> bool:
    return isinstance(node, ScalarNode) and node.style in _BLOCK_STYLES


def _error_line(exc: yaml.YAMLError) -> int | None:
    if isinstance(exc, yaml.MarkedYAMLError):
        mark = exc.problem_mark or exc.context_mark
        if mark is not None:
            return mark.line + 1
    return None


def _describe(exc: yaml.YAMLError) -> str:
    if isinstance(exc, yaml.MarkedYAMLError):
        what = " ".join(part for part in (exc.context, exc.problem) if part)
    else:
        what = str(exc)
    if "expected a single document" in what:
        return "the file holds more than one YAML document (`---`); put one playbook per file"
    if isinstance(exc, yaml.constructor.ConstructorError):
        return f"YAML error: {what}; playbooks use plain YAML only (no `!!python/...` tags)"
    return f"YAML syntax error: {what}; check the indentation and quoting around this line"
