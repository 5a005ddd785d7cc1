"""Statuses are compared and set through the enums of `noetl_celery.constants`, never as
bare strings spread through the code (a typo there is a silent bug: `== "runing"` is
simply never true)."""

from __future__ import annotations

import ast
import json
from pathlib import Path

import noetl_celery
from noetl_celery.constants import CommandStatus, ExecutionStatus, StepStatus
from noetl_celery.orchestrator.state import ExecutionState, StepState

PACKAGE = Path(noetl_celery.__file__).parent
STATUS_VALUES = {str(s) for enum in (ExecutionStatus, StepStatus, CommandStatus) for s in enum}
STATUS_VALUES.discard("")


def _status_strings(node: ast.expr) -> list[str]:
    items = node.elts if isinstance(node, ast.Tuple | ast.List | ast.Set) else [node]
    return [
        i.value
        for i in items
        if isinstance(i, ast.Constant) and isinstance(i.value, str) and i.value in STATUS_VALUES
    ]


def _mentions_status(node: ast.expr) -> bool:
    return "status" in ast.unparse(node).lower()


# NoETL's API shapes whose `status` is NoETL's word, not one of ours
NOETL_SHAPES = "web/noetl_shapes.py"


def rel_allowed(filename: str, node: ast.Dict) -> bool:
    return filename != NOETL_SHAPES


def bare_statuses(source: str, filename: str = "<source>") -> list[str]:
    """`file:line: code` of every comparison of something named status with a bare status
    string, and of every bare status string assigned to a `status`."""
    found = []
    for node in ast.walk(ast.parse(source, filename)):
        if isinstance(node, ast.expr | ast.stmt) and _bare_status(node, filename):
            found.append(f"{filename}:{node.lineno}: {ast.unparse(node)}")
    return sorted(found, key=lambda f: int(f.split(":")[1]))


def _bare_status(node: ast.AST, filename: str) -> bool:
    if isinstance(node, ast.Compare):
        operands = [node.left, *node.comparators]
        return any(
            _status_strings(operand)
            and any(_mentions_status(o) for o in operands[:i] + operands[i + 1 :])
            for i, operand in enumerate(operands)
        )
    if isinstance(node, ast.Assign | ast.AnnAssign):
        targets = node.targets if isinstance(node, ast.Assign) else [node.target]
        named = any(
            (isinstance(t, ast.Attribute) and t.attr == "status")
            or (isinstance(t, ast.Name) and t.id == "status")
            for t in targets
        )
        return named and node.value is not None and bool(_status_strings(node.value))
    if isinstance(node, ast.Call):
        # `ExecutionState(eid, status="FAILED")`
        return any(k.arg == "status" and _status_strings(k.value) for k in node.keywords)
    if isinstance(node, ast.Dict):
        return _bare_status_in_dict(node, filename)
    return False


def _bare_status_in_dict(node: ast.Dict, filename: str) -> bool:
    # `{"status": "planned"}`: a row or bind parameters written with a status
    for key, value in zip(node.keys, node.values, strict=True):
        if key is None or not _mentions_status(key):
            continue
        options = [value.body, value.orelse] if isinstance(value, ast.IfExp) else [value]
        if any(_status_strings(o) for o in options) and rel_allowed(filename, node):
            return True
    return False


def test_no_bare_status_literals_in_the_package() -> None:
    found = []
    for path in sorted(PACKAGE.rglob("*.py")):
        rel = path.relative_to(PACKAGE).as_posix()
        if rel == "constants.py":
            continue  # where the statuses are defined
        found += bare_statuses(path.read_text(), rel)
    assert not found, "compare statuses with noetl_celery.constants enums:\n" + "\n".join(found)


def test_the_scan_finds_bare_statuses() -> None:
    source = """
if row.status == "running": pass
if "COMPLETED" != view["status"]: pass
if cmd.status in ("issued", "planned"): pass
st.status = "failed"
row = {"b_status": "completed" if ok else "failed"}
state = ExecutionState(eid, status="FAILED")
if status == StepStatus.RUNNING: pass
if kind == "running": pass
"""
    assert [line.split(":")[1] for line in bare_statuses(source)] == ["2", "3", "4", "5", "6", "7"]


def test_an_enum_status_is_the_string_it_replaced() -> None:
    # stored values, JSON and lookups by the stored string are unchanged
    planned: str = CommandStatus.PLANNED
    assert planned == "planned" and "planned" in {CommandStatus.PLANNED}
    assert {"running": 1}[StepStatus.RUNNING] == 1
    state = ExecutionState("e1", status=ExecutionStatus.FAILED)
    state.step("a").status = StepStatus.COMPLETED
    stored = json.dumps(state.to_json())
    assert '"status": "FAILED"' in stored and '"status": "completed"' in stored
    again = ExecutionState.from_json(json.loads(stored))
    assert again.status is ExecutionStatus.FAILED
    assert again.step("a").status is StepStatus.COMPLETED
    assert StepState.from_json({}).status is StepStatus.NOT_STARTED
