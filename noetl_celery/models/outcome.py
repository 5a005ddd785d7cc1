"""What a command reports when it finishes, and the `output` view templates see.

A command's outcome is stored in its terminal event's payload:

    {"status": "ok" | "error" | "break",
     "result": <what {{ step }} renders to>,
     "error": {"kind", "message", "retryable", ...} | None,
     "ctx": {...}          # ctx.* mutations made by pipeline policies
     "iter": {...}         # the iteration scope (loop commands whose step has `set`)
     "detail": {"http": {...}} | {"pg": {...}} | {"py": {...}}
     "meta": {"attempts": n, "duration_ms": ms}}
"""

from __future__ import annotations

from typing import Any

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


def output_view(outcome: dict[str, Any], *, step_level: bool = True) -> dict[str, Any]:
    """The `output` object of arcs, step `set` and policies.

    Inside a pipeline (`step_level=False`) `output.data` is the task's whole tool result
    (for HTTP: `{status_code, headers, data: body}`), as in NoETL.
    """
    status = "error" if outcome.get("status") == "error" else "ok"
    result = outcome.get("result")
    view: dict[str, Any] = {
        "status": status,
        "data": output_data(result) if step_level else result,
        "error": outcome.get("error"),
        "meta": outcome.get("meta") or {},
    }
    detail = outcome.get("detail") or {}
    for key in ("http", "pg", "py"):
        if key in detail:
            view[key] = detail[key]
    return view


def make_outcome(
    status: str,
    result: Any = None,
    error: dict[str, Any] | None = None,
    *,
    ctx: dict[str, Any] | None = None,
    iter_scope: dict[str, Any] | None = None,
    detail: dict[str, Any] | None = None,
    meta: dict[str, Any] | None = None,
) -> dict[str, Any]:
    outcome: dict[str, Any] = {"status": status, "result": result, "error": error}
    if ctx:
        outcome["ctx"] = ctx
    if iter_scope is not None:
        outcome["iter"] = iter_scope
    if detail:
        outcome["detail"] = detail
    if meta:
        outcome["meta"] = meta
    return outcome


def error_message(error: Any) -> str:
    if isinstance(error, dict):
        return str(error.get("message") or error)
    return str(error)
