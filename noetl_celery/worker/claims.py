"""Running a cursor lane's claim command on a worker.

A claim whose rows are recorded on its command already (`resume.frame`: its worker ran
the frame's body itself and died, worker.frames) hands those rows over, never claiming
again. The claim SQL (and `auth`) are rendered against the command's context plus the frame's
names: `__frame_max_rows`, `__worker_slot_id` (`<epoch>:slot-<lane>`), `__cursor_frame`,
`__cursor_lane`. The rows the driver returns are the command's result; the orchestrator
turns each into a body command. The driver's transaction stays open (`HeldFrame`) until
the worker has recorded that result (cursors.base says why).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from noetl_celery.cursors.base import ClaimRequest, Committed, CursorError, HeldClaim
from noetl_celery.cursors.registry import get_driver
from noetl_celery.errors import NoetlError
from noetl_celery.models.outcome import Outcome, OutcomeMeta, StepError
from noetl_celery.models.playbook import Step
from noetl_celery.store.rows import ClaimedCommand, FrameRows
from noetl_celery.templating import Renderer
from noetl_celery.tools.services import ToolServices


def frame_names(command: ClaimedCommand) -> dict[str, Any]:
    item = command.item if isinstance(command.item, dict) else {}
    lane, frame = int(item.get("lane", 0)), int(item.get("frame", 1))
    return {
        "__frame_max_rows": int((command.meta or {}).get("max_rows", 1)),
        "__worker_slot_id": f"{command.epoch}:slot-{lane}",
        "__cursor_frame": frame,
        "__cursor_lane": lane,
    }


@dataclass
class HeldFrame:
    """A claim's outcome, and its transaction to end once the outcome is recorded.
    `recorded`: the rows are recorded on the command already, their queue transaction
    committed (the close of the lane's frame before claimed them ahead, worker.frames)."""

    outcome: Outcome
    claim: HeldClaim
    recorded: FrameRows | None = None


def claimed_ahead(command: ClaimedCommand, frame: FrameRows) -> HeldFrame:
    """A claim whose frame the lane's previous frame claimed ahead and recorded on it
    (worker.frames): held as if this run had claimed it, nothing left to commit."""
    outcome = handed_over(command, frame, (command.meta or {}).get("iteration"))
    return HeldFrame(outcome, Committed(frame.rows), frame)


def run_claim(
    step: Step,
    command: ClaimedCommand,
    context: Mapping[str, Any],
    services: ToolServices,
    renderer: Renderer,
) -> Outcome | HeldFrame:
    assert step.loop is not None and step.loop.cursor is not None
    recorded = FrameRows.of(command.resume)
    if recorded is not None:  # a run after its worker died: never claim twice
        return handed_over(command, recorded, (command.meta or {}).get("iteration"))
    cursor = step.loop.cursor
    names = frame_names(command)
    where = f"step '{step.step}' loop.cursor"
    try:
        scope = {**context, **names}
        request = ClaimRequest(
            kind=cursor.kind,
            auth=renderer.value(cursor.auth, scope, f"{where}.auth"),
            sql=str(renderer.value(cursor.claim, scope, f"{where}.claim")),
            max_rows=names["__frame_max_rows"],
            options=dict(cursor.options),
        )
        held = get_driver(cursor.kind).claim(request, services)
    except CursorError as exc:
        return Outcome.failed(StepError(exc.kind, str(exc), exc.retryable))
    except NoetlError as exc:
        return Outcome.failed(StepError("config_error", str(exc)))
    outcome = Outcome(
        "ok",
        {"rows": held.rows, "row_count": len(held.rows)},
        meta={"lane": names["__cursor_lane"], "frame": names["__cursor_frame"]},
    )
    return HeldFrame(outcome, held)


def handed_over(command: ClaimedCommand, frame: FrameRows, iteration: Any) -> Outcome:
    """The outcome of a claim whose rows are recorded on its command (worker.frames):
    `recorded` (the pass does not check them against its epoch's claims again: the
    record did), and the body iteration its claim reserved."""
    names = frame_names(command)
    result: dict[str, Any] = {"rows": frame.rows, "row_count": len(frame.rows)}
    if frame.duplicates:
        result["duplicates"] = frame.duplicates
    result.update(recorded=True, iteration=iteration)
    meta: OutcomeMeta = {"lane": names["__cursor_lane"], "frame": names["__cursor_frame"]}
    return Outcome("ok", result, meta=meta)
