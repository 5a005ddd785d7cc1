"""Tool lookup by `kind`.

Implementation modules are imported on first use: httpx, duckdb and psycopg each take
60-90 ms to import, and a worker that never runs such a step should not pay for them.
"""

from __future__ import annotations

import importlib
import threading
from typing import TYPE_CHECKING

from noetl_celery.constants import UNSUPPORTED_NOETL_KINDS
from noetl_celery.errors import UnknownTool
from noetl_celery.tools.base import Tool

# kind -> (module, class)
_IMPLEMENTATIONS: dict[str, tuple[str, str]] = {
    "python": ("noetl_celery.tools.python_tool", "PythonTool"),
    "http": ("noetl_celery.tools.http_tool", "HttpTool"),
    "postgres": ("noetl_celery.tools.postgres_tool", "PostgresTool"),
    "duckdb": ("noetl_celery.tools.duckdb_tool", "DuckdbTool"),
    "noop": ("noetl_celery.tools.noop", "NoopTool"),
    "artifact": ("noetl_celery.tools.artifact_tool", "ArtifactTool"),
}
# Step kinds that exist in the DSL but are executed by the runner itself.
_RUNNER_KINDS = frozenset({"workbook", "playbook"})

_cache: dict[str, Tool] = {}
_lock = threading.Lock()


def tool_kinds() -> frozenset[str]:
    """Every kind `get_tool` accepts."""
    return frozenset(_IMPLEMENTATIONS)


def get_tool(kind: str) -> Tool:
    """The shared tool instance for `kind`; UnknownTool for anything else."""
    tool = _cache.get(kind)
    if tool is not None:
        return tool
    key = kind.strip().lower() if isinstance(kind, str) else ""
    target = _IMPLEMENTATIONS.get(key)
    if target is None:
        if key in _RUNNER_KINDS:
            raise UnknownTool(f"tool kind '{kind}' is run by the step runner, not a tool")
        if key in UNSUPPORTED_NOETL_KINDS:  # validated with a warning; fails when reached
            raise UnknownTool(
                f"kind {key} is not supported by noetl-celery (a NoETL tool kind this "
                "engine does not run; see the README's NoETL compatibility section)"
            )
        known = ", ".join(sorted(_IMPLEMENTATIONS))
        raise UnknownTool(f"unknown tool kind '{kind}' (known kinds: {known})")
    with _lock:
        tool = _cache.get(key)
        if tool is None:
            module = importlib.import_module(target[0])
            tool = getattr(module, target[1])()
            _cache[key] = tool
        _cache[kind] = tool  # also under the spelling used, for the lock-free fast path
    return tool


if TYPE_CHECKING:
    # Let mypy prove that every implementation satisfies the Tool protocol.
    from noetl_celery.tools.duckdb_tool import DuckdbTool
    from noetl_celery.tools.http_tool import HttpTool
    from noetl_celery.tools.noop import NoopTool
    from noetl_celery.tools.postgres_tool import PostgresTool
    from noetl_celery.tools.python_tool import PythonTool

    _CONFORMANCE: tuple[Tool, ...] = (
        DuckdbTool(),
        HttpTool(),
        NoopTool(),
        PostgresTool(),
        PythonTool(),
    )
