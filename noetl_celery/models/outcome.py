"""What a command reports when it finishes, and the `output` view templates see.

A command's outcome is stored in its terminal event's payload:

    {"status": "ok" | "error" | "break",
     "result": <what {{ step }} renders to>,
     "error": {"kind", "message", "retryable", ...} | None,
     "ctx": {...}          # ctx.* mutations made by pipeline policies
     "iter": {...}         # the iteration scope (loop commands whose step has `set`)
     "detail": {"http": {...}} | {"pg": {...}} | {"py": {...}}
     "meta": {"attempt": n, "duration_ms": ms, ...}}   # OutcomeMeta
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Literal, TypedDict, cast, get_args

from noetl_celery.models.shapes import with_read_aliases

# Every error kind the package emits. Policies and arcs match on `output.error.kind`, so
# this is the one list: a kind not here does not type-check at its producer (and
# tests/unit/models/test_outcome.py scans the source for kinds written as literals).
ErrorKind = Literal[
    # reported by tools
    "connection",  # could not reach the remote end
    "timeout",  # the call took longer than its timeout (or a lost command's deadline)
    "rate_limit",  # HTTP 429
    "auth",  # HTTP 401/403, bad database password
    "not_found",  # HTTP 404
    "client_error",  # other HTTP 4xx
    "server_error",  # HTTP 5xx
    "db_error",  # SQL error not covered below
    "db_connection",
    "db_constraint",
    "db_deadlock",
    "db_timeout",
    "python_error",  # exception raised by user python code
    "syntax_error",  # user code / SQL does not parse
    "template_error",  # a template in the tool config failed to render
    "config_error",  # the tool is misconfigured (missing field, unknown credential)
    "result_error",  # the tool ran but its result says status error/failed
    "child_failed",  # a sub-playbook the task started did not complete
    # set by the engine
    "policy",  # a pipeline policy failed a task that had no error of its own
    "cancelled",  # the command was cancelled or taken over while its pipeline ran
    "items_failed",  # a loop epoch ended with unhandled item failures (the step's error)
    "result_not_storable",  # the outcome holds a value Postgres cannot store (NUL)
    "engine_error",  # the engine crashed running the command, or orchestrating
    "worker_lost",  # the command's worker died NOETL_MAX_ATTEMPTS times
]
ERROR_KINDS: tuple[ErrorKind, ...] = get_args(ErrorKind)

OutcomeStatus = Literal["ok", "error", "break"]
_OUTCOME_STATUSES: tuple[OutcomeStatus, ...] = get_args(OutcomeStatus)

# StepError's optional fields, in the order producers have always written them: the
# JSON is written in this order so a stored error reads as it always did
_OPTIONAL_ERROR_FIELDS = (
    "code",
    "status_code",
    "retry_after",
    "exception",
    "traceback",
    "attempts",
)
_ERROR_FIELDS = frozenset({"kind", "message", "retryable", *_OPTIONAL_ERROR_FIELDS})


@dataclass(frozen=True)
class StepError:
    """A failed command's (or step's) error, `output.error` in templates.

    `retryable` is None when the producer did not say (engine and configuration errors):
    the key is then absent from the JSON, as it always was, and nothing retries it.
    Keys this class does not name (an `items_failed` error's counts, a key an older
    version stored) are kept in `extra`, so every stored error round-trips unchanged.
    """

    kind: ErrorKind
    message: str
    retryable: bool | None = None
    # `SQLSTATE` of a database error, `HTTP_<status>` of an HTTP one
    code: str | None = None
    status_code: int | None = None  # HTTP status
    retry_after: float | None = None  # seconds the server asked to wait (Retry-After)
    exception: str | None = None  # the exception class a duckdb error came from
    traceback: str | None = None  # the engine's own crash (engine_error)
    attempts: int | None = None  # a pipeline retry that gave up: how many runs it had
    extra: Mapping[str, Any] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {"kind": self.kind, "message": self.message}
        if self.retryable is not None:
            out["retryable"] = self.retryable
        for name in _OPTIONAL_ERROR_FIELDS:
            value = getattr(self, name)
            if value is not None:
                out[name] = value
        out.update(self.extra)
        return out

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> StepError:
        if "kind" not in data:
            raise ValueError(f"a stored error without a kind: {dict(data)!r}")
        known = {k: v for k, v in data.items() if k in _ERROR_FIELDS}
        extra = {k: v for k, v in data.items() if k not in _ERROR_FIELDS}
        known.setdefault("message", "")
        # stored kinds are trusted: they were written by a producer of this package
        return cls(**known, extra=extra)


class Detail(TypedDict, total=False):
    """The protocol part of a tool's output view: `output.http`, `output.pg`, `output.py`."""

    http: dict[str, Any]  # {status, headers}
    pg: dict[str, Any]  # {code, sqlstate}
    py: dict[str, Any]  # {exception, traceback}


class OutcomeMeta(TypedDict, total=False):
    """How the command ran (`output.meta`)."""

    attempt: int  # the command's attempt (a lost worker's command runs again)
    duration_ms: float
    # a pipeline: tasks run, jumps taken, the last task run
    runs: int
    jumps: int
    last_task: str | None
    # a cursor claim: its lane and frame
    lane: int
    frame: int
    # a `do: quarantine` policy failed the command: its loop item counts as quarantined
    quarantine: bool


@dataclass(frozen=True)
class Outcome:
    """What a command reports when it finishes (the module docstring shows its JSON).

    `status == "error"` exactly when `error` is set: a pipeline that stopped on a
    `break` policy (`"break"`) and a success both have no error. Serialised only where
    it is stored (the terminal event's payload) and read back there.
    """

    status: OutcomeStatus
    result: Any = None
    error: StepError | None = None
    ctx: Mapping[str, Any] = field(default_factory=dict)
    # the iteration scope: None when the command has none to report (absent from JSON)
    iter: Mapping[str, Any] | None = None
    detail: Detail = field(default_factory=lambda: Detail())
    meta: OutcomeMeta = field(default_factory=lambda: OutcomeMeta())

    def __post_init__(self) -> None:
        if self.status not in _OUTCOME_STATUSES:
            raise ValueError(f"outcome status must be one of {_OUTCOME_STATUSES}: {self.status!r}")
        if (self.status == "error") != (self.error is not None):
            raise ValueError(
                f"an outcome has an error exactly when its status is 'error' "
                f"(status {self.status!r}, error {self.error!r})"
            )

    @property
    def ok(self) -> bool:
        """Not an error: `break` ends a pipeline early without failing its step."""
        return self.status != "error"

    @classmethod
    def failed(cls, error: StepError, *, meta: OutcomeMeta | None = None) -> Outcome:
        """A command that failed before it produced a result."""
        return cls("error", None, error, meta=meta or {})

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "status": self.status,
            "result": self.result,
            "error": self.error.to_json() if self.error is not None else None,
        }
        # empty parts are left out, as they always were
        if self.ctx:
            out["ctx"] = dict(self.ctx)
        if self.iter is not None:
            out["iter"] = dict(self.iter)
        if self.detail:
            out["detail"] = dict(self.detail)
        if self.meta:
            out["meta"] = dict(self.meta)
        return out

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> Outcome:
        """An outcome as stored, by this version or an older one. A payload without a
        status (never written, but readers always treated it so) is a success."""
        status = data.get("status") or "ok"
        error = data.get("error")
        if status not in _OUTCOME_STATUSES:
            raise ValueError(f"stored outcome has an unknown status: {status!r}")
        return cls(
            status=cast(OutcomeStatus, status),
            result=data.get("result"),
            error=_stored_error(error),
            ctx=data.get("ctx") or {},
            iter=data.get("iter"),
            detail=cast(Detail, data.get("detail") or {}),
            meta=cast(OutcomeMeta, data.get("meta") or {}),
        )


def _stored_error(error: Any) -> StepError | None:
    if error is None:
        return None
    if isinstance(error, Mapping):
        return StepError.from_json(error)
    # never written by this package; an error as bare text still reads as its message
    return StepError("engine_error", str(error))


_OK_STATUSES = frozenset({"ok", "success", "completed", "complete", "done", "noop"})
_ERROR_STATUSES = frozenset({"error", "failed", "failure"})


def normalise_status(value: Any) -> str | None:
    """NoETL's status normalisation: ok/success/completed/done/noop -> ok, error/failed
    -> error; anything else is passed through lower-cased (or None)."""
    if not isinstance(value, str):
        return None
    lowered = value.strip().lower()
    if lowered in _OK_STATUSES:
        return "ok"
    if lowered in _ERROR_STATUSES:
        return "error"
    return lowered


def output_data(result: Any) -> Any:
    """Step-level `output.data`: the result's `data` if it has one, else the result
    (so an HTTP step's `output.data` is the body, a postgres step's is `{rows, ...}`)."""
    if isinstance(result, dict) and "data" in result:
        return result["data"]
    return result


def output_view(outcome: Outcome, *, step_level: bool = True) -> dict[str, Any]:
    """The `output` object of arcs, step `set` and policies.

    Inside a pipeline (`step_level=False`) `output.data` is the task's whole tool result
    (for HTTP: `{status_code, headers, data: body}`, `body` read as `data`), as in NoETL.
    NoETL's names for the result (models.shapes) are read-only aliases, never stored.
    """
    result = with_read_aliases(outcome.result)
    view: dict[str, Any] = {
        "status": "ok" if outcome.ok else "error",
        "data": output_data(result) if step_level else result,
        "error": outcome.error.to_json() if outcome.error is not None else None,
        "meta": dict(outcome.meta),
    }
    for key in ("http", "pg", "py"):
        if key in outcome.detail:
            view[key] = outcome.detail[key]
    return view


def error_message(error: StepError | None) -> str:
    if error is None:
        return "failed"
    return error.message or str(error.to_json())
