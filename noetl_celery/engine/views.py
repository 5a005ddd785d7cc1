"""Read models for operators: the `status` view (the `run --json` summary is
`Store.summary`)."""

from __future__ import annotations

from typing import Any

from noetl_celery.store.repository import Store
from noetl_celery.store.rows import ExecutionRow


def error_text(error: Any) -> str | None:
    if error is None:
        return None
    if isinstance(error, dict):
        return str(error.get("message") or error)
    return str(error)


def loop_progress(store: Store, row: ExecutionRow) -> list[dict[str, Any]]:
    """Every loop epoch: finished ones from the `loops` table, the running one of each
    step live from the state snapshot (the table is written at epoch start and end)."""
    live = {}
    for name, st in ((row.state or {}).get("steps") or {}).items():
        lp = st.get("loop")
        if lp and not lp.get("done"):
            live[(name, lp["epoch"])] = lp
    out = []
    for lp in store.loops(row.execution_id):
        current = live.get((lp.step, lp.epoch))
        succeeded = current["succeeded"] if current else lp.succeeded
        failed = current["failed"] if current else lp.failed
        in_flight = current["in_flight"] if current else 0
        out.append(
            {
                "step": lp.step,
                "epoch": lp.epoch,
                "mode": lp.mode,
                "total": lp.total,
                "done": succeeded + failed,
                "succeeded": succeeded,
                "failed": failed,
                "in_flight": in_flight,
                "finished": lp.done,
            }
        )
    return out


def execution_line(row: ExecutionRow) -> dict[str, Any]:
    """One execution as `executions` lists it (and the head of `status`)."""
    return {
        "execution_id": row.execution_id,
        "path": row.path,
        "status": row.status,
        "parent_execution_id": row.parent_execution_id,
        "trigger": row.trigger,  # manual | schedule | rerun | parent
        "rerun_of": row.rerun_of,
        "created_at": row.created_at.isoformat() + "Z",
        "finished_at": row.finished_at.isoformat() + "Z" if row.finished_at else None,
        "duration_seconds": round(row.duration_seconds, 3),
        "error": error_text(row.error),
    }


def status_view(store: Store, row: ExecutionRow) -> dict[str, Any]:
    state = row.state or {}
    steps = state.get("steps") or {}
    running = store.running_commands(row.execution_id)
    return {
        **execution_line(row),
        "steps": [
            {"step": name, "status": st.get("status") or "", "runs": st.get("epoch", 0)}
            for name, st in steps.items()
        ],
        "current": sorted({step for _, step in running}),
        "errors": state.get("failures") or [],
        "loops": loop_progress(store, row),
        "commands": store.command_counts(row.execution_id).__dict__,
    }
