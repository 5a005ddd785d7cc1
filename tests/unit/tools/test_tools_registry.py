from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

from noetl_celery.constants import TOOL_KINDS, UNSUPPORTED_NOETL_KINDS
from noetl_celery.errors import ToolError, UnknownTool
from noetl_celery.tools.base import ToolOutcome
from noetl_celery.tools.registry import get_tool, tool_kinds

RunTool = Callable[..., ToolOutcome]
ROOT = Path(__file__).resolve().parents[3]


def test_kinds() -> None:
    assert tool_kinds() == {"python", "http", "postgres", "duckdb", "noop", "artifact"}


@pytest.mark.parametrize("kind", ["python", "http", "postgres", "duckdb", "noop", "artifact"])
def test_instances_are_cached_and_declare_their_kind(kind: str) -> None:
    tool = get_tool(kind)
    assert tool is get_tool(kind)
    assert tool.kind == kind
    assert isinstance(tool.raw_fields, frozenset)


def test_python_raw_fields() -> None:
    assert get_tool("python").raw_fields == {"code", "code_b64", "code_base64"}
    assert get_tool("http").raw_fields == frozenset()


def test_kind_lookup_ignores_case() -> None:
    assert get_tool("NoOp") is get_tool("noop")


@pytest.mark.parametrize("kind", ["workbook", "playbook", "bash", ""])
def test_unknown_kinds(kind: str) -> None:
    with pytest.raises(UnknownTool) as info:
        get_tool(kind)
    assert isinstance(info.value, ToolError)
    assert f"'{kind}'" in str(info.value)


@pytest.mark.parametrize("kind", sorted(UNSUPPORTED_NOETL_KINDS))
def test_noetl_kinds_this_engine_lacks_fail_naming_the_kind(kind: str) -> None:
    with pytest.raises(UnknownTool) as info:
        get_tool(kind)
    assert str(info.value).startswith(f"kind {kind} is not supported by noetl-celery")


def test_todays_noetl_kinds_are_listed() -> None:
    """Every kind of NoETL's Rust server (`ToolKind`, orchestrate-core/src/playbook.rs)
    and tools crate (src/tools/mod.rs) is run here or listed as NoETL's-only."""
    server = {
        "http", "postgres", "duckdb", "ducklake", "python", "workbook", "playbook",
        "playbooks", "secrets", "iterator", "container", "script", "snowflake", "transfer",
        "snowflake_transfer", "gcs", "gateway", "nats", "shell", "artifact", "noop",
        "task_sequence", "rhai", "subscription", "wasm",
    }  # fmt: skip
    tools_crate = {
        "artifact", "container", "duckdb", "ducklake", "http", "mcp", "nats", "noop",
        "playbook", "postgres", "provider", "python", "result_fetch", "rhai", "script",
        "shell", "snowflake", "subscription", "task_sequence", "transfer",
    }  # fmt: skip
    assert (server | tools_crate | {"agent"}) - TOOL_KINDS == UNSUPPORTED_NOETL_KINDS - {
        "cursor_worker"
    }


def test_kind_tables_do_not_overlap() -> None:
    """A kind is either run here or listed as NoETL's-only, never both."""
    assert not (UNSUPPORTED_NOETL_KINDS & TOOL_KINDS)
    assert tool_kinds() | {"workbook", "playbook"} == TOOL_KINDS


def test_noop(run_tool: RunTool) -> None:
    out = run_tool("noop", {}, step="route_me")
    assert out.ok and out.data == {"status": "noop", "step": "route_me"}


def test_registry_and_light_tools_import_no_heavy_libraries(tmp_path: Path) -> None:
    script = (
        "import sys, json\n"
        "from noetl_celery.tools.registry import get_tool\n"
        "from noetl_celery.tools.services import ToolServices\n"
        "from noetl_celery.tools.base import ToolCall\n"
        "from noetl_celery.settings import Settings\n"
        f"svc = ToolServices(Settings(home=__import__('pathlib').Path({str(tmp_path)!r})))\n"
        "for kind in ('noop', 'python'):\n"
        "    tool = get_tool(kind)\n"
        "    call = ToolCall(kind=kind, config={'code': 'result = 1'}, input={},\n"
        "                    execution_id='e', step='s', command_id='c', services=svc)\n"
        "    assert tool.run(call).ok\n"
        "heavy = ['httpx', 'duckdb', 'psycopg', 'psycopg_pool', 'sqlparse', 'yaml']\n"
        "print(json.dumps([m for m in heavy if m in sys.modules]))\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", script],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
        env={"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin"},
    )
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout) == []
