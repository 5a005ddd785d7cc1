"""`rerun`: a new execution of the same catalog version and payload (plus overrides),
from the start, from a step, or over the failed items of the original's loops.

Where a rerun starts is recorded in `executions.trigger_detail` by reference into the
original, which has ended, so what it points at never changes: the context version the
entry step started with (its variables and the result pointers it rendered with), and
the loop steps whose failed items run again. The first orchestration pass resolves the
references into plain values for the pure `start()`; ids rather than copies keep the
execution row, which every pass reads, small.

    trigger_detail = {
      "options": {"from": "load", "failed_items": true, "set": {"flag": false}},
      "start": {                      # absent: a plain rerun from the first step
        "entry": "fetch",
        "context": 7,                 # the original's context version; null: its final state
        "results": {"setup": 1},      # step -> the original's epoch whose result is copied
        "items": {"fetch": 2}         # loop step -> failed items to run (read at start)
      }
    }
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from noetl_celery.constants import RUNNING, TRIGGER_RERUN
from noetl_celery.errors import NoetlError
from noetl_celery.models.playbook import Playbook
from noetl_celery.orchestrator.decide import merge_payload
from noetl_celery.store.repository import Store
from noetl_celery.store.rows import ExecutionRow


class RerunError(NoetlError):
    """A rerun that cannot be made as asked (bad input: the CLI exits 2)."""


@dataclass(frozen=True)
class RerunPlan:
    payload: dict[str, Any]
    detail: dict[str, Any]


def plan_rerun(
    store: Store,
    original: ExecutionRow,
    playbook: Playbook,
    *,
    from_step: str | None = None,
    failed_only: bool = False,
    overrides: dict[str, Any] | None = None,
) -> RerunPlan:
    eid = original.execution_id
    if original.status == RUNNING:
        raise RerunError(f"execution {eid} is still RUNNING: wait for its end or cancel it")
    if from_step is not None and not playbook.has_step(from_step):
        names = ", ".join(s.step for s in playbook.workflow)
        raise RerunError(f"no step '{from_step}' in {original.path} (steps: {names})")
    overrides = dict(overrides or {})
    payload = {**(original.payload or {}), **overrides}
    detail: dict[str, Any] = {
        "options": {"from": from_step, "failed_items": failed_only, "set": overrides}
    }
    if from_step is None and not failed_only:
        return RerunPlan(payload, detail)
    items: dict[str, int] = {}
    entry = from_step
    if failed_only:
        items = _failing_loops(store, original, playbook)
        entry = entry or next(iter(items))
    assert entry is not None
    version = store.reruns.step_context(eid, entry)
    if version is not None:
        pointers = store.context(eid, version).get("results") or {}
    else:  # the step never ran: start from where the original ended
        pointers = {
            name: st["result_epoch"]
            for name, st in ((original.state or {}).get("steps") or {}).items()
            if st.get("result_epoch") is not None and name != entry
        }
    detail["start"] = {
        "entry": entry,
        "context": version,
        "results": dict(pointers),
        "items": items,
    }
    return RerunPlan(payload, detail)


def _failing_loops(store: Store, original: ExecutionRow, playbook: Playbook) -> dict[str, int]:
    """Loop steps with failed items, the one whose first failure came first leading
    (the rerun enters it first): step -> count."""
    failing = store.reruns.failed_loops(original.execution_id)
    if not failing:
        raise RerunError(f"execution {original.execution_id} has no failed loop items to rerun")
    for name in failing:
        loop = playbook.step(name).loop if playbook.has_step(name) else None
        if loop is None or loop.is_cursor:
            raise RerunError(
                f"step '{name}' failed rows of a cursor loop: --failed-items reruns "
                "`loop.in` items only (a cursor claims its rows from your queue again)"
            )
    ordered = sorted(failing, key=lambda name: failing[name][1])
    return {name: failing[name][0] for name in ordered}


def start_inputs(store: Store, row: ExecutionRow) -> dict[str, Any]:
    """The keyword inputs of `orchestrator.decide.start` for `row`'s first pass: empty
    unless it is a rerun that starts from somewhere in its original."""
    detail = row.trigger_detail or {}
    begin = detail.get("start")
    if row.trigger != TRIGGER_RERUN or not begin or row.rerun_of is None:
        return {}
    original = row.rerun_of
    if begin.get("context") is not None:
        base = store.context(original, int(begin["context"])).get("vars") or {}
    else:
        base = (store.execution(original).state or {}).get("vars") or {}
    overrides = (detail.get("options") or {}).get("set") or {}
    return {
        "entry": begin["entry"],
        "variables": merge_payload(base, overrides),
        "results": {
            name: store.result(original, name, int(epoch))
            for name, epoch in (begin.get("results") or {}).items()
        },
        "loop_items": {name: store.reruns.failed_items(original, name) for name in begin["items"]},
    }
