"""`kind: noop`: does nothing; routing-only steps and policy vehicles in pipelines."""

from __future__ import annotations

from typing import ClassVar

from noetl_celery.tools.base import ToolCall, ToolOutcome


class NoopTool:
    kind: ClassVar[str] = "noop"
    raw_fields: ClassVar[frozenset[str]] = frozenset()

    def run(self, call: ToolCall) -> ToolOutcome:
        return ToolOutcome.success({"status": "noop", "step": call.step})
