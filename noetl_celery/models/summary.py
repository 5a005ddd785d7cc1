"""The summary of an execution: what `run --json` prints and what a waiting parent
command receives as `resume.child` (one shape for both, so the two cannot drift)."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any


def execution_summary(
    execution_id: str,
    status: str,
    result: Any,
    error: Any,
    duration_seconds: float,
    state: Mapping[str, Any] | None,
    step_result: Callable[[str, int], Any],
) -> dict[str, Any]:
    """`{execution_id, status, result, error, duration_seconds, steps}`: steps maps each
    step that ran to its last result (what `{{ step_name }}` renders to), read through
    `step_result(step, epoch)`; an error object is shown as its message."""
    steps: dict[str, Any] = {}
    for name, st in ((state or {}).get("steps") or {}).items():
        epoch = st.get("result_epoch")
        if epoch is not None:
            steps[name] = step_result(name, epoch)
    if isinstance(error, dict):
        error = str(error.get("message") or error)
    return {
        "execution_id": execution_id,
        "status": status,
        "result": result,
        "error": None if error is None else str(error),
        "duration_seconds": round(duration_seconds, 3),
        "steps": steps,
    }
