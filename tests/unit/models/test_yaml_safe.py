"""The bounded YAML loader (`models.yaml_safe`) and what validation makes of its refusals:
alias bombs, deep nesting, recursive aliases, oversized playbooks, text Postgres cannot
store. Each refusal is one line naming the file, the line and the limit, at once."""

from __future__ import annotations

import gc
import time
from typing import Any

import pytest
import yaml

from noetl_celery.constants import MAX_PLAYBOOK_BYTES, MAX_YAML_DEPTH
from noetl_celery.models.validation import validate_text
from noetl_celery.models.yaml_safe import BoundedSafeLoader, YamlLimitExceeded, safe_load

HEAD = "apiVersion: noetl.io/v2\nkind: Playbook\nmetadata: {name: x}\n"
TAIL = "workflow:\n  - step: start\n    tool: {kind: noop}\n"


def bomb(levels: int = 9, width: int = 9) -> str:
    """The "billion laughs" in YAML: `levels` anchors, each `width` aliases of the last."""
    lines = ["workload:", f"  l0: &l0 [{', '.join(['lol'] * width)}]"]
    for i in range(1, levels):
        lines.append(f"  l{i}: &l{i} [{', '.join([f'*l{i - 1}'] * width)}]")
    return "\n".join(lines) + "\n"


def flow_nested(depth: int) -> str:
    return "[" * depth + "]" * depth


LIMITS: dict[str, tuple[str, int | None, str]] = {
    # name: (text, line, message)
    "billion laughs": (
        bomb(),
        7,
        "YAML aliases (*name) expand this document past the limit of 100,000 nodes (an "
        "alias bomb?); it was not expanded",
    ),
    "recursive alias": (
        "a: &a [1, *a]\n",
        1,
        "the alias *a is used inside its own anchor &a: a recursive structure, which "
        "cannot be used",
    ),
    "nested flow sequences": (
        flow_nested(10_000),
        1,
        "YAML nested deeper than the limit of 64 levels",
    ),
    "nested block sequences": (
        "- " * 1000 + "x\n",
        1,
        "YAML nested deeper than the limit of 64 levels",
    ),
}


@pytest.mark.parametrize("name", sorted(LIMITS))
def test_limits_refuse_at_once_with_the_line(name: str) -> None:
    text, line, message = LIMITS[name]
    # this thread's CPU with the collector held off: late in a full run the process can
    # have other threads and holds a heap of thousands of tests' objects, whose CPU and
    # full collections are not the parser's (0.12 s alone; 1.06 s of process CPU once, at
    # test 3,100 of a full run)
    collecting = gc.isenabled()
    gc.disable()
    try:
        started = time.thread_time()
        with pytest.raises(YamlLimitExceeded) as info:
            safe_load(text)
        spent = time.thread_time() - started
    finally:
        if collecting:
            gc.enable()
    assert spent < 1.0
    assert info.value.message == message and info.value.line == line
    assert isinstance(info.value, yaml.YAMLError)  # callers' `except YAMLError` see it


def test_depth_limit_is_exact() -> None:
    assert safe_load(flow_nested(MAX_YAML_DEPTH)) is not None
    with pytest.raises(YamlLimitExceeded, match="deeper than the limit of 64"):
        safe_load(flow_nested(MAX_YAML_DEPTH + 1))


class SmallLoader(BoundedSafeLoader):
    max_nodes = 105  # the counting is the same at any bound; the default is slow to reach


def load_small(text: str) -> Any:
    loader = SmallLoader(text)
    try:
        return loader.get_single_data()
    finally:
        loader.dispose()


def test_node_limit_counts_the_expanded_tree() -> None:
    """A list of n scalars is n + 1 nodes; through an alias it counts again."""
    items = (SmallLoader.max_nodes - 5) // 2  # the mapping, 2 keys, the list twice: 2 n + 5
    text = f"a: &a [{', '.join(['1'] * items)}]\nb: *a\n"
    assert len(load_small(text)["b"]) == items  # 105 nodes: at the limit
    over = f"a: &a [{', '.join(['1'] * (items + 1))}]\nb: *a\n"
    with pytest.raises(YamlLimitExceeded) as info:
        load_small(over)
    assert info.value.message == (
        "YAML aliases (*name) expand this document past the limit of 105 nodes (an alias "
        "bomb?); it was not expanded"
    )


def test_a_large_document_without_aliases_says_so() -> None:
    assert len(load_small("[" + ", ".join(["1"] * 104) + "]")) == 104
    with pytest.raises(YamlLimitExceeded) as info:
        load_small("[" + ", ".join(["1"] * 105) + "]")
    assert info.value.message == "the YAML has more than 105 nodes, the limit"


SAME_AS_PYYAML = [
    "a: 1\nb: [x, 2.5, null, true]\nc: {d: '2026-11-22'}\n",
    "day: 2026-11-22\n",
    "base: &b {x: 1, y: 2}\nuse: {<<: *b, y: 3}\n",
    "items: &i [1, 2]\nagain: *i\n",
    "text: |\n  line one\n  line two\n",
    "",
    "5",
]


@pytest.mark.parametrize("text", SAME_AS_PYYAML)
def test_ordinary_yaml_loads_as_pyyaml_does(text: str) -> None:
    assert safe_load(text) == yaml.safe_load(text)


def test_loader_is_a_safe_loader() -> None:
    with pytest.raises(yaml.YAMLError):
        safe_load("!!python/object/apply:os.system ['true']")
    assert issubclass(BoundedSafeLoader, yaml.SafeLoader)


# --- through validation: one problem naming the file and line -----------------------------


def only_error(text: str, file: str = "x.yaml") -> str:
    report = validate_text(text, file=file)
    assert report.playbook is None and len(report.errors) == 1, report.problems
    return str(report.errors[0])


PLAYBOOK_PROBLEMS: dict[str, tuple[str, str]] = {
    "alias bomb": (
        HEAD + bomb() + TAIL,
        "x.yaml:10: YAML aliases (*name) expand this document past the limit of 100,000 "
        "nodes (an alias bomb?); it was not expanded",
    ),
    "deep nesting": (
        HEAD + "workload:\n  deep: " + flow_nested(100) + "\n" + TAIL,
        "x.yaml:5: YAML nested deeper than the limit of 64 levels",
    ),
    "recursive alias": (
        HEAD + "workload:\n  a: &a {self: *a}\n" + TAIL,
        "x.yaml:5: the alias *a is used inside its own anchor &a: a recursive structure, "
        "which cannot be used",
    ),
    "NUL from a YAML escape": (
        HEAD + 'workload:\n  sep: "a\\0b"\n' + TAIL,
        "x.yaml:5: field 'workload.sep': contains a NUL character (\\u0000), which "
        "Postgres cannot store",
    ),
    "lone surrogate from a YAML escape": (
        HEAD + 'workload:\n  s: "\\ud800"\n' + TAIL,
        "x.yaml:5: field 'workload.s': contains a lone surrogate (\\ud800), which is not "
        "valid Unicode text and Postgres cannot store it",
    ),
    "NaN in a step": (
        HEAD + "workflow:\n  - step: start\n    tool: {kind: noop, limit: .nan}\n",
        "x.yaml:6: step 'start': field 'tool.limit': is nan (not a finite number), which "
        "JSON cannot carry and Postgres cannot store",
    ),
    "a control character in the text": (
        HEAD + "workload: {a: 1}\x07\n" + TAIL,
        "x.yaml:4: the text holds the character U+0007 (at offset 75), which YAML does "
        "not allow (control characters, lone surrogates); remove it",
    ),
    "an integer past Python's conversion limit": (
        HEAD + "workload: {n: " + "9" * 5000 + "}\n" + TAIL,
        "x.yaml: a YAML value cannot be read: Exceeds the limit (4300 digits) for integer "
        "string conversion: value has 5000 digits; use sys.set_int_max_str_digits() to "
        "increase the limit",
    ),
}


@pytest.mark.parametrize("name", sorted(PLAYBOOK_PROBLEMS))
def test_playbook_problems_are_one_line_with_file_and_line(name: str) -> None:
    text, message = PLAYBOOK_PROBLEMS[name]
    started = time.process_time()
    assert only_error(text) == message
    assert time.process_time() - started < 1.0


def test_playbook_text_size_limit() -> None:
    filler = "# " + "x" * 98 + "\n"
    body = HEAD + TAIL
    fits = body + filler * ((MAX_PLAYBOOK_BYTES - len(body)) // len(filler))
    assert validate_text(fits).ok
    too_big = fits + "#" * (MAX_PLAYBOOK_BYTES - len(fits) + 1)
    assert len(too_big) == MAX_PLAYBOOK_BYTES + 1
    assert only_error(too_big) == "x.yaml: the playbook is larger than the limit of 1 MiB"


def test_size_limit_counts_utf8_bytes() -> None:
    text = HEAD + TAIL + "# " + "é" * (MAX_PLAYBOOK_BYTES // 2)  # half the chars, 2 bytes each
    assert len(text) < MAX_PLAYBOOK_BYTES
    assert "larger than the limit of 1 MiB" in only_error(text)


def test_an_ordinary_playbook_with_anchors_is_valid() -> None:
    text = HEAD + "workload:\n  base: &b {page: 1}\n  use: {<<: *b, size: 10}\n" + TAIL
    report = validate_text(text)
    assert report.ok, report.problems
    assert report.playbook is not None
