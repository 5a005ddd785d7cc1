"""Read models for operators: the `run --json` summary and the `status` view.

Their shapes are TypedDicts (typing_extensions': pydantic reads them before Python
3.12): what `--json` prints and what the HTTP API declares as its response models
(web.api_native), declared once here."""

from __future__ import annotations

import datetime as dt
import json
from collections.abc import Iterable, Mapping, Sequence
from typing import Any, NotRequired

from typing_extensions import TypedDict

from noetl_celery import tracing
from noetl_celery.constants import CANCELLED, CMD_ISSUED, CMD_RUNNING, COMPLETED, RUNNING
from noetl_celery.models.summary import execution_summary
from noetl_celery.store.repository import Store
from noetl_celery.store.rows import CommandCountsJSON, ExecutionRow
from noetl_celery.store.schema import utcnow

# errors `run --json` lists for a failed execution, and characters kept of an item
RUN_ERRORS_LIMIT = 20
ITEM_PREVIEW_CHARS = 200


class RunError(TypedDict):
    """One entry of `run --json`'s `errors` (engine.summaries.run_errors)."""

    step: str | None
    item: int | None
    value: NotRequired[str]  # a failed loop item's preview only
    kind: str
    message: str | None


class LoopProgress(TypedDict):
    """One loop epoch as `status` shows it (engine.summaries.loop_progress)."""

    step: str
    epoch: int
    mode: str
    total: int | None
    done: int
    succeeded: int
    failed: int
    quarantined: int  # items set aside by a quarantine (noetl-celery quarantine)
    in_flight: int
    finished: bool
    started_at: str | None
    rate_per_second: float | None
    eta_seconds: float | None


class ExecutionLine(TypedDict):
    """One execution as `executions` lists it (engine.summaries.execution_line)."""

    execution_id: str
    path: str
    status: str
    parent_execution_id: str | None
    trigger: str
    rerun_of: str | None
    trigger_detail: dict[str, Any] | None
    created_at: str
    finished_at: str | None
    duration_seconds: float
    error: str | None


class RunSummary(TypedDict):
    """`run --json` (`watch`, `rerun`; `Engine.summary`): models.summary's object plus
    `errors`."""

    execution_id: str
    status: str
    result: Any  # the playbook's own result: any JSON
    error: str | None
    duration_seconds: float
    steps: dict[str, Any]  # each step that ran: its last result, any JSON
    errors: list[RunError]
    quarantined: int  # loop items set aside (a COMPLETED execution may have some)


class StepLine(TypedDict):
    step: str
    status: str
    runs: int


class WaitingStep(TypedDict):
    """A step whose commands were issued and no worker has taken yet."""

    step: str
    commands: int
    seconds: float | None
    # the named queue they wait in (engine.routing); None: the engine's commands queue
    queue: NotRequired[str | None]


class NotificationLine(TypedDict):
    """A notification of an execution: never its url or a secret."""

    id: str
    event: str
    target: str
    attempts: int
    delivered_at: str | None
    last_error: str | None


class ExecutionView(ExecutionLine):
    """What `status` and the API's detail (engine.readmodels) both show."""

    steps: list[StepLine]
    current: list[str]
    waiting: list[WaitingStep]
    held_for_broker: int
    loops: list[LoopProgress]
    quarantined: int  # loop items set aside, over every epoch (noetl-celery quarantine)
    commands: CommandCountsJSON
    # per cursor step, the `cursor.unfinished` report: {epoch, rows, ...} as recorded
    unfinished_rows: dict[str, dict[str, Any]]
    # `deadline.at_risk`/`.missed` events: {event, at} and the event's own fields
    deadline: list[dict[str, Any]]
    notifications: list[NotificationLine]
    trace_id: str  # the execution's OpenTelemetry trace (noetl_celery.tracing)


class StatusView(ExecutionView):
    """What `status --json` prints (`Engine.status`)."""

    errors: list[dict[str, Any]]  # the state's raw step failures (orchestrator.state)


def run_summary(store: Store, row: ExecutionRow) -> dict[str, Any]:
    """An execution as `run --json` shows it (before `Engine.summary` adds its errors):
    `{execution_id, status, result, error, duration_seconds, steps}`, the shape a
    waiting parent also receives (store.children.child_summary)."""
    return execution_summary(
        row.execution_id,
        row.status,
        row.result,
        row.error,
        row.duration_seconds,
        row.state,
        lambda step, epoch: store.result(row.execution_id, step, epoch),
    )


def error_kind(error: Any, default: str = "error") -> str:
    kind = error.get("kind") if isinstance(error, dict) else None
    return str(kind) if kind else default


def preview(item: Any) -> str:
    text = json.dumps(item, default=str, ensure_ascii=False)
    return text if len(text) <= ITEM_PREVIEW_CHARS else text[: ITEM_PREVIEW_CHARS - 1] + "…"


def run_errors(store: Store, row: ExecutionRow, limit: int = RUN_ERRORS_LIMIT) -> list[RunError]:
    """What made an execution fail, first `limit`: `{step, item, kind, message}` per
    unhandled step failure, and per failed loop item (`item` its index, `value` a short
    preview of the item itself) in iteration order."""
    if row.status == COMPLETED:
        return []
    out: list[RunError] = []
    for failure in (row.state or {}).get("failures") or []:
        if len(out) >= limit:
            break
        error = failure.get("error")
        if error_kind(error) == "items_failed":
            for failed in store.overview.failed_iterations(
                row.execution_id, failure["step"], epoch=failure["epoch"], limit=limit - len(out)
            ):
                out.append(
                    {
                        "step": failure["step"],
                        "item": failed.iteration,
                        "value": preview(failed.item),
                        "kind": error_kind(failed.error),
                        "message": error_text(failed.error) or "failed",
                    }
                )
            continue
        out.append(
            {
                "step": failure["step"],
                "item": None,
                "kind": error_kind(error),
                "message": str(failure.get("message") or error_text(error)),
            }
        )
    if not out and row.error is not None:  # ended from outside: cancel, timeout, reaper
        kind = "cancelled" if row.status == CANCELLED else error_kind(row.error, "failed")
        out.append({"step": None, "item": None, "kind": kind, "message": error_text(row.error)})
    return out[:limit]


def error_text(error: Any) -> str | None:
    if error is None:
        return None
    if isinstance(error, dict):
        return str(error.get("message") or error)
    return str(error)


def loop_pace(
    done: int,
    total: int | None,
    started_at: dt.datetime | None,
    until: dt.datetime,
    *,
    cursor: bool,
    finished: bool,
) -> tuple[float | None, float | None]:
    """(items per second since the epoch started, seconds left at that rate). None when
    unknown: no start recorded (epochs from before migration 0008), no time elapsed, no
    item done yet (ETA), or a cursor loop (its total is not known ahead)."""
    if started_at is None:
        return None, None
    seconds = (until - started_at).total_seconds()
    if seconds <= 0:
        return None, None
    rate = done / seconds
    if cursor or total is None:
        return round(rate, 3), None
    remaining = max(0, total - done)
    if finished or remaining == 0:
        return round(rate, 3), 0.0
    if rate <= 0:
        return round(rate, 3), None
    return round(rate, 3), round(remaining / rate, 1)


def live_loops(steps: Mapping[str, Any]) -> dict[tuple[str, int], dict[str, Any]]:
    """The running loop epoch of each step, from the state snapshot's `steps`: its
    counters are live there (the `loops` table is written at epoch start and end)."""
    live = {}
    for name, st in steps.items():
        lp = st.get("loop") if isinstance(st, dict) else None
        if lp and not lp.get("done"):
            live[(name, lp["epoch"])] = lp
    return live


def quarantined_items(store: Store, row: ExecutionRow) -> int:
    """The execution's quarantined loop items over every epoch (its loops rows; the
    running epoch of each step live from the snapshot)."""
    return sum(lp["quarantined"] for lp in loop_progress(store, row))


def loop_progress(store: Store, row: ExecutionRow) -> list[LoopProgress]:
    """Every loop epoch: finished ones from the `loops` table, the running one of each
    step live from the state snapshot, with its start, rate and ETA (`loop_pace`)."""
    live = live_loops((row.state or {}).get("steps") or {})
    now = utcnow()
    out: list[LoopProgress] = []
    for lp in store.loops(row.execution_id):
        current = live.get((lp.step, lp.epoch))
        succeeded = current["succeeded"] if current else lp.succeeded
        failed = current["failed"] if current else lp.failed
        quarantined = int(current.get("quarantined") or 0) if current else lp.quarantined
        in_flight = current["in_flight"] if current else 0
        # a finished epoch's row was last written at its end; an open epoch of an ended
        # execution stopped when the execution did
        until = (lp.updated_at if lp.done else row.finished_at) or now
        rate, eta = loop_pace(
            succeeded + failed + quarantined,
            lp.total,
            lp.started_at,
            until,
            cursor=lp.mode == "cursor",
            finished=lp.done,
        )
        out.append(
            {
                "step": lp.step,
                "epoch": lp.epoch,
                "mode": lp.mode,
                "total": lp.total,
                "done": succeeded + failed + quarantined,
                "succeeded": succeeded,
                "failed": failed,
                "quarantined": quarantined,
                "in_flight": in_flight,
                "finished": lp.done,
                "started_at": _iso(lp.started_at),
                "rate_per_second": rate,
                "eta_seconds": eta,
            }
        )
    return out


def _iso(value: dt.datetime | None) -> str | None:
    return None if value is None else value.isoformat() + "Z"


def execution_line(row: ExecutionRow) -> ExecutionLine:
    """One execution as `executions` lists it (and the head of `status`)."""
    return {
        "execution_id": row.execution_id,
        "path": row.path,
        "status": row.status,
        "parent_execution_id": row.parent_execution_id,
        # how it was started: manual | schedule | rerun | parent, with what it needs
        # remembered (a schedule run: {schedule_id, schedule, fire_time[, manual]})
        "trigger": row.trigger,
        "rerun_of": row.rerun_of,
        "trigger_detail": row.trigger_detail,
        "created_at": row.created_at.isoformat() + "Z",
        "finished_at": row.finished_at.isoformat() + "Z" if row.finished_at else None,
        "duration_seconds": round(row.duration_seconds, 3),
        "error": error_text(row.error),
    }


def in_workflow_order(names: Iterable[str], order: Sequence[str]) -> list[str]:
    """`names` in the playbook's declaration order (`order`); names it does not declare
    keep their own order after them. The state's `steps` is a JSONB object, whose keys
    Postgres keeps sorted by length, not in the order the steps started."""
    position = {name: i for i, name in enumerate(order)}
    ranked = sorted(enumerate(names), key=lambda p: (position.get(p[1], len(position)), p[0]))
    return [name for _, name in ranked]


def status_view(
    store: Store,
    row: ExecutionRow,
    order: Sequence[str] = (),
    queues: Mapping[str, str] | None = None,
) -> StatusView:
    """What `status` shows; `steps` in `order` (the playbook's workflow order). `queues`:
    the steps routed to a named queue (engine.routing.routed_steps), named on a step
    whose commands wait for a worker: a pool nobody started is the usual reason."""
    state = row.state or {}
    steps = state.get("steps") or {}
    loops = loop_progress(store, row)
    in_flight = store.in_flight(row.execution_id)
    running = {f.step for f in in_flight if f.status == CMD_RUNNING}
    now = utcnow()
    waiting: list[WaitingStep] = [
        {
            "step": f.step,
            "commands": f.count,
            "seconds": round((now - f.oldest_issued_at).total_seconds(), 1)
            if f.oldest_issued_at
            else None,
            # None: the engine's commands queue
            "queue": (queues or {}).get(f.step),
        }
        for f in sorted(in_flight, key=lambda f: f.step)
        if f.status == CMD_ISSUED and f.step not in running
    ]
    return {
        **execution_line(row),
        "steps": [
            {
                "step": name,
                "status": steps[name].get("status") or "",
                "runs": steps[name].get("epoch", 0),
            }
            for name in in_workflow_order(steps, order)
        ],
        # steps with a command a worker claimed, and steps whose commands were issued
        # but no worker has taken yet (none running, or all busy elsewhere)
        "current": sorted(running),
        "waiting": waiting,
        # commands whose publish the broker could not take, held in the engine database
        # until a relay publishes them (engine.outbox): "waiting for the broker"
        "held_for_broker": store.outbox.waiting(row.execution_id) if row.status == RUNNING else 0,
        "errors": state.get("failures") or [],
        "loops": loops,
        "quarantined": sum(lp["quarantined"] for lp in loops),
        "commands": store.command_counts(row.execution_id).to_json(),
        # rows cursor steps had claimed and left unprocessed when the execution was
        # cancelled or timed out (read only once it has ended: they are written then)
        "unfinished_rows": {}
        if row.status == RUNNING
        else store.termination.recorded_unfinished_rows(row.execution_id),
        # `deadline.at_risk` / `deadline.missed` (engine.deadlines), and the
        # notifications of this execution with their delivery (engine.notify)
        "deadline": deadline_view(store, row.execution_id),
        "notifications": notifications_view(store, row.execution_id),
        # the execution's OpenTelemetry trace (noetl_celery.tracing: derived from its id)
        "trace_id": tracing.trace_id_of(row.execution_id),
    }


def deadline_view(store: Store, execution_id: str) -> list[dict[str, Any]]:
    return [
        {"event": kind, "at": _iso(at), **(payload or {})}
        for kind, payload, at in store.notifications.deadline_events(execution_id)
    ]


def notifications_view(store: Store, execution_id: str) -> list[NotificationLine]:
    """`{id, event, target, attempts, delivered_at, last_error}`: never a url or secret."""
    return [
        {
            "id": n.notification_id,
            "event": n.event,
            "target": n.target,
            "attempts": n.attempts,
            "delivered_at": _iso(n.delivered_at),
            "last_error": n.last_error,
        }
        for n in store.notifications.of_execution(execution_id)
        if not n.skipped
    ]
