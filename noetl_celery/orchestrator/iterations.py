"""What both loop kinds share: issuing planned iterations, counting a finished one, and
finishing an epoch with `loop.done` (`loop.in` in loops, `loop.cursor` in cursor; both
import this module, which imports neither)."""

from __future__ import annotations

from typing import Any

from noetl_celery.constants import EV_ITEM_QUARANTINED, EV_LOOP_DONE, LOOP_DONE, StepStatus
from noetl_celery.errors import NoetlError, playbooks_fault
from noetl_celery.models.outcome import Outcome, StepError, error_message, output_view
from noetl_celery.models.playbook import Step, step_on_error
from noetl_celery.orchestrator.decisions import Completion, EngineEvent, IssueRange, LoopMirror
from noetl_celery.orchestrator.run import Run
from noetl_celery.orchestrator.state import ItemError, LoopProgress, StepState
from noetl_celery.orchestrator.variables import apply_set
from noetl_celery.templating.context import iteration_names

# item errors an epoch keeps in the execution's snapshot (and names in its failure)
ITEM_ERRORS_KEPT = 5
# characters of one item error's message kept there
ITEM_ERROR_CHARS = 500


def item_error(completion: Completion) -> ItemError:
    """`{item, kind, message}` of a failed iteration (item: its index in the epoch)."""
    error = completion.outcome.error
    kind = error.kind if error is not None else None
    message = error_message(error)
    if len(message) > ITEM_ERROR_CHARS:
        message = message[: ITEM_ERROR_CHARS - 1] + "…"
    return {"item": completion.iteration, "kind": kind or "error", "message": message}


def keep_item_error(kept: list[ItemError], error: ItemError) -> None:
    """Keep the errors of the lowest item indexes, in index order: what an epoch reports
    then does not depend on the order in which parallel items happened to finish."""
    kept.append(error)
    kept.sort(key=lambda e: -1 if e["item"] is None else e["item"])
    del kept[ITEM_ERRORS_KEPT:]


def event(type_: str, step: str | None, epoch: int | None, payload: dict[str, Any]) -> EngineEvent:
    return EngineEvent(type=type_, step=step, epoch=epoch, payload=payload)


def issue_range(run: Run, name: str, epoch: int, start: int, stop: int) -> None:
    """Issue planned iterations [start, stop), merged with the previous range when they
    continue it (one UPDATE instead of one per completion)."""
    version = run.ctx_version()
    issues = run.decision.issues
    last = issues[-1] if issues else None
    if last is not None and (last.step, last.epoch, last.stop, last.ctx_version) == (
        name,
        epoch,
        start,
        version,
    ):
        issues[-1] = IssueRange(name, epoch, last.start, stop, version)
    else:
        issues.append(IssueRange(name, epoch, start, stop, version))


def apply_iteration(run: Run, step: Step, completion: Completion, weight: int = 1) -> None:
    """Count a finished iteration (`weight` rows for a cursor frame body) and apply what
    it reports."""
    progress = run.state.step(step.step).loop
    assert progress is not None
    outcome = completion.outcome
    if completion.ok:
        progress.succeeded += weight
    elif quarantined(step, completion):
        progress.quarantined += weight
        run.decision.events.append(quarantine_event(completion, weight))
    else:
        progress.failed += weight
        keep_item_error(progress.errors, item_error(completion))
    if outcome.ctx:
        run.state.vars.update(outcome.ctx)
        run.touch()
    if completion.ok and step.set:
        _iteration_set(run, step, completion)


def quarantined(step: Step, completion: Completion) -> bool:
    """A failed iteration set aside rather than failed: its body's `do: quarantine`
    policy said so, or its loop quarantines every unhandled item failure."""
    assert step.loop is not None
    return bool(completion.outcome.meta.get("quarantine")) or (
        step.loop.spec.on_item_error == "quarantine"
    )


def quarantine_event(completion: Completion, weight: int) -> EngineEvent:
    """The record of a quarantined item: its command (which keeps its input and its
    terminal event) and its error, bounded as the snapshot's item errors are."""
    error = item_error(completion)
    payload: dict[str, Any] = {"kind": error["kind"], "message": error["message"]}
    meta = completion.outcome.meta
    # how often its body ran: the retries a policy made, else the pipeline's task runs
    failure = completion.outcome.error
    runs = failure.attempts if failure is not None and failure.attempts else meta.get("runs")
    if runs is not None:
        payload["runs"] = runs
    if meta.get("attempt") is not None:
        payload["attempt"] = meta["attempt"]  # the command's delivery (a lost worker's: 2..)
    if weight != 1:
        payload["rows"] = weight  # a cursor frame body: its rows are one command
    return EngineEvent(
        type=EV_ITEM_QUARANTINED,
        step=completion.step,
        epoch=completion.epoch,
        payload=payload,
        iteration=completion.iteration,
        command_id=completion.command_id,
    )


def loop_stats(progress: LoopProgress) -> dict[str, int]:
    """An epoch's `stats`: every item is exactly one of success, failed and quarantined
    (`quarantined` only when some are: a loop without any reads as it always did)."""
    stats = {"total": progress.total, "success": progress.succeeded, "failed": progress.failed}
    if progress.quarantined:
        stats["quarantined"] = progress.quarantined
    return stats


def _iteration_set(run: Run, step: Step, completion: Completion) -> None:
    """Step-level `set` runs after every successful iteration (NoETL semantics)."""
    assert step.loop is not None
    scope = dict(completion.outcome.iter or {})
    item = scope.get(step.loop.iterator)
    names = iteration_names(step.loop.iterator, item, completion.iteration or 0, None, scope)
    extra = {"output": output_view(completion.outcome), "event": {"name": "call.done"}, **names}
    try:
        apply_set(
            run.state.vars,
            step.set,
            run.context(extra),
            f"step '{step.step}' set",
            renderer=run.renderer,
        )
    except NoetlError as exc:
        if not playbooks_fault(exc):
            raise
        run.fail(step.step, completion.epoch, str(exc))
    run.touch()


def finish_loop(run: Run, step: Step, st: StepState) -> None:
    progress = st.loop
    assert progress is not None
    progress.done = True
    st.status = StepStatus.COMPLETED
    run.touched_loops.add(step.step)
    # the finished epoch's row, kept apart: the same pass may re-enter the step (an arc
    # back to itself), replacing the epoch the state holds before the pass ends
    run.finished_loops.append(mirror_of(step.step, progress))
    cap = run.limits.loop_results_cap
    per_item = run.facts.iteration_results(step.step, progress.epoch, cap) if progress.total else []
    stats = loop_stats(progress)
    aggregate = {"stats": stats, "results": per_item}
    run.decision.events.append(event(EV_LOOP_DONE, step.step, progress.epoch, {"stats": stats}))
    run.record_result(step.step, progress.epoch, "ok", aggregate)
    run.state.last_step = step.step
    if progress.failed and step_on_error(step) != "continue":
        # NoETL fails the execution on any unhandled iteration error, and so does every
        # peer (Airflow: a failed mapped task fails the run). The loop still completes
        # and routes; the execution ends FAILED once its flow is done. A body policy that
        # continues past the error (or a retry that succeeds) makes the item a success;
        # the step's `spec.on_error: continue` handles them all. Quarantined items never
        # fail it: they wait for `noetl-celery quarantine redrive`.
        fail_items(run, step, progress)
    if step.step in run.state.halt:
        return  # a redrive's loop: its items ran, nothing after it runs
    output = output_view(Outcome("ok", aggregate))
    run.route(step, progress.epoch, output, LOOP_DONE)


def fail_items(run: Run, step: Step, progress: LoopProgress) -> None:
    """Record the epoch's unhandled item failures as the step's failure."""
    noun = "item" if progress.total == 1 else "items"
    first = "; ".join(f"item {e['item']}: {e['message']}" for e in progress.errors[:3])
    message = f"{progress.failed} of {progress.total} {noun} failed"
    if first:
        message += f" (first: {first})"
    counts = {"failed": progress.failed, "total": progress.total, "items": list(progress.errors)}
    error = StepError("items_failed", message, extra=counts)
    run.fail(step.step, progress.epoch, message, error)


def reserved(progress: LoopProgress) -> int:
    """Iteration numbers reserved by cursor claims in flight (or by the last claim of a
    drained lane), and those left in the lanes' chain blocks, not used by a body:
    `issued` counts only bodies planned."""
    size = 1 if progress.per_frame else max(progress.max_rows, 1)
    count = 0
    for lane in progress.lanes or []:
        if lane.chain_end:  # the block from the lane's next number on
            first = lane.stop if lane.body is None else lane.body
            count += max(lane.chain_end - first, 0)
        elif lane.body is not None:
            count += size
    return count


def mirror_of(name: str, progress: LoopProgress) -> LoopMirror:
    """The loops row of an epoch: the counters a worker's close reads mid-loop."""
    return LoopMirror(
        step=name,
        epoch=progress.epoch,
        mode=progress.mode,
        total=progress.total,
        issued=progress.next_index - reserved(progress) - progress.unused,
        succeeded=progress.succeeded,
        failed=progress.failed,
        quarantined=progress.quarantined,
        done=progress.done,
        window=progress.window,
        in_flight=progress.in_flight,
    )
