"""`tool.kind: playbook` (docs/reference/dsl.md §2.6): run another registered playbook as a child.

With `return_step` the caller waits for the child without holding a worker slot: the
task raises `Suspend`, the worker parks its command (`waiting`) and creates the child in
one transaction, and the child's end issues the command again with the child's summary.
Without `return_step` the child is started and the task succeeds at once.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Protocol

from noetl_celery.constants import COMPLETED
from noetl_celery.errors import ToolError
from noetl_celery.models.playbook import ToolSpec
from noetl_celery.store.rows import SpawnRequest
from noetl_celery.templating import STRICT, Renderer
from noetl_celery.tools.base import ToolOutcome


class Children(Protocol):
    """How a running task reaches the catalog and starts detached children."""

    def check(self, request: SpawnRequest) -> None:
        """Raise CatalogNotFound when `request.path` is not registered."""

    def start_detached(self, request: SpawnRequest) -> str:
        """Start a fire-and-forget child; returns its execution id."""


class Suspend(Exception):
    """The running task must wait for a child execution."""

    def __init__(self, request: SpawnRequest) -> None:
        super().__init__(request.path)
        self.request = request


@dataclass(frozen=True)
class Suspended:
    """A command that waits: what to save, and the child to start."""

    continuation: dict[str, Any]
    request: SpawnRequest


def spawn_request(
    tool: ToolSpec,
    context: Mapping[str, Any],
    where: str,
    key: str,
    input_: Mapping[str, Any],
    renderer: Renderer = STRICT,
) -> SpawnRequest:
    fields = tool.model_extra or {}
    path = renderer.value(fields.get("path"), context, f"{where} tool.path")
    if not path or not isinstance(path, str):
        raise ToolError(f"{where}: a playbook tool needs `path` (a catalog path)")
    version = renderer.value(fields.get("version"), context, f"{where} tool.version")
    payload = renderer.value(dict(input_), context, f"{where} input")
    return SpawnRequest(
        path=path,
        version=int(version) if version not in (None, "") else None,
        payload=payload if isinstance(payload, dict) else {},
        key=key,
        wait="return_step" in fields,
    )


def child_outcome(summary: Mapping[str, Any]) -> ToolOutcome:
    """The child's summary as the task's outcome: a failed child fails the task."""
    data = dict(summary)
    if summary.get("status") == COMPLETED:
        return ToolOutcome.success(data)
    return ToolOutcome.failure(
        "child_failed",
        f"child execution {summary.get('execution_id')} {summary.get('status')}: "
        f"{summary.get('error')}",
        data=data,
    )


def started(child_id: str, request: SpawnRequest) -> ToolOutcome:
    return ToolOutcome.success(
        {"execution_id": child_id, "status": "started", "path": request.path}
    )
