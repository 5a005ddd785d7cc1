"""The contract between the step runner and the tools.

A tool receives a `ToolCall` whose `config` is already rendered (every field except the
ones the tool lists in `raw_fields`, e.g. python `code`) and returns a `ToolOutcome`.
A tool never raises for a failure of the work itself (HTTP 500, SQL error, exception in
user code): it returns `ToolOutcome.failure(...)` with an error `kind` (one of
models.outcome.ErrorKind) so that policies can match on it. Raising is reserved for bugs
and for `ToolError` (misconfiguration), which the runner turns into a failed outcome with
kind `config_error`.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, ClassVar, Literal, Protocol, Unpack

from noetl_celery.errors import ToolError
from noetl_celery.models.durations import DurationInvalid, parse_duration
from noetl_celery.models.outcome import Detail, ErrorKind, StepError

if TYPE_CHECKING:
    from noetl_celery.tools.services import ToolServices


@dataclass(frozen=True)
class ToolOutcome:
    """What one tool call produced.

    `data` is the tool result (what `output.data` and `{{ step }}` show). `detail` holds
    the protocol-specific part of the output view: `{"http": {"status", "headers"}}`,
    `{"pg": {"code", "sqlstate"}}` or `{"py": {"exception", "traceback"}}`.
    """

    status: Literal["ok", "error"]
    data: Any = None
    error: StepError | None = None
    detail: Detail = field(default_factory=lambda: Detail())

    @property
    def ok(self) -> bool:
        return self.status == "ok"

    @classmethod
    def success(cls, data: Any, **detail: Unpack[Detail]) -> ToolOutcome:
        return cls(status="ok", data=data, detail=detail)

    @classmethod
    def failure(
        cls,
        kind: ErrorKind,
        message: str,
        *,
        data: Any = None,
        retryable: bool = False,
        detail: Detail | None = None,
        code: str | None = None,
        status_code: int | None = None,
        retry_after: float | None = None,
        exception: str | None = None,
    ) -> ToolOutcome:
        error = StepError(
            kind,
            message,
            retryable,
            code=code,
            status_code=status_code,
            retry_after=retry_after,
            exception=exception,
        )
        return cls(status="error", data=data, error=error, detail=detail or {})


@dataclass(frozen=True)
class ToolCall:
    """One invocation of a tool, fully rendered."""

    kind: str
    config: dict[str, Any]  # the tool mapping, rendered except `raw_fields`
    input: Mapping[str, Any]  # rendered step input merged over tool input
    execution_id: str
    step: str
    command_id: str
    services: ToolServices
    # the full render context of the call (python exposes it as the `context` global)
    context: Mapping[str, Any] = field(default_factory=dict)
    # render(value, extra_vars) renders templates a tool must render late
    render: Callable[[Any, dict[str, Any]], Any] | None = None

    @property
    def timeout(self) -> float | None:
        """The tool's `timeout` field (seconds, or a duration such as "30s"), also
        accepted under `spec.timeout`; a value that is no duration is a `ToolError`
        naming the field (the step fails with `config_error`)."""
        raw = self.config.get("timeout")
        field = "tool.timeout"
        if raw is None and isinstance(self.config.get("spec"), dict):
            raw, field = self.config["spec"].get("timeout"), "tool.spec.timeout"
        if raw is None or raw == "":
            return None
        try:
            value = parse_duration(raw, field)
        except DurationInvalid as exc:
            raise ToolError(str(exc)) from None
        return value if value > 0 else None


class Tool(Protocol):
    """A tool implementation. Instances are shared across threads: keep them stateless."""

    kind: ClassVar[str]
    # config fields the runner must NOT render (e.g. python `code`)
    raw_fields: ClassVar[frozenset[str]]

    def run(self, call: ToolCall) -> ToolOutcome: ...
