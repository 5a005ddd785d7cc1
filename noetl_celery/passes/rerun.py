"""`rerun`: a new execution of the same catalog version and payload (plus overrides),
from the start, from a step, or over the failed items of the original's loops. A
redrive (`noetl-celery quarantine redrive`) is a rerun over chosen quarantined items.

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
        "items": {"fetch": 2},        # loop step -> failed items to run (read at start)
        "redrive": {"fetch": [[1, 3], [1, 7]]}   # a redrive: the quarantined items'
      }                                        # (epoch, iteration) in the original
    }
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from noetl_celery.constants import RUNNING, TRIGGER_RERUN
from noetl_celery.errors import InputInvalid, NoetlError
from noetl_celery.models.items import parse_item_id
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
    detail["start"] = {**_start_at(store, original, entry), "items": items}
    return RerunPlan(payload, detail)


def _start_at(store: Store, original: ExecutionRow, entry: str) -> dict[str, Any]:
    """Where a rerun entering at `entry` starts: the context version `entry` started its
    latest epoch with, and the result pointers it rendered with."""
    eid = original.execution_id
    version = store.reruns.step_context(eid, entry)
    if version is not None:
        pointers = store.context(eid, version).get("results") or {}
    else:  # the step never ran: start from where the original ended
        pointers = {
            name: st["result_epoch"]
            for name, st in ((original.state or {}).get("steps") or {}).items()
            if st.get("result_epoch") is not None and name != entry
        }
    return {"entry": entry, "context": version, "results": dict(pointers)}


@dataclass(frozen=True)
class RedrivePlan(RerunPlan):
    # the quarantined items (step, epoch, iteration) it runs, marked redriven in the
    # original when the redrive's execution row is written
    redriven: list[tuple[str, int, int]]


def plan_redrive(
    store: Store,
    original: ExecutionRow,
    playbook: Playbook,
    *,
    step: str | None = None,
    kind: str | None = None,
    item_ids: Sequence[str] = (),
    overrides: dict[str, Any] | None = None,
) -> RedrivePlan:
    """A rerun of exactly the quarantined items of `original` that `step`, `kind` and
    `item_ids` select (every one not yet redriven when none is given), all of one loop
    step: it enters that loop with just those items, and nothing runs after it (its
    `loop.done` routes nowhere: `start(halt_after=...)`). A cursor loop's items are the
    rows its bodies got, as their commands recorded them: the redrive runs its body over
    those rows and claims nothing from the queue (where the original left them claimed)."""
    eid = original.execution_id
    if original.status == RUNNING:
        raise RerunError(f"execution {eid} is still RUNNING: wait for its end or cancel it")
    if step is not None and not playbook.has_step(step):
        names = ", ".join(s.step for s in playbook.workflow)
        raise RerunError(f"no step '{step}' in {original.path} (steps: {names})")
    found = store.quarantine.items(eid, step=step, kind=kind)
    if item_ids:
        wanted = [_coordinate(text) for text in item_ids]
        by_coordinate = {(q.step, q.epoch, q.iteration): q for q in found}
        missing = [text for text, c in zip(item_ids, wanted, strict=True) if c not in by_coordinate]
        if missing:
            raise RerunError(
                f"execution {eid} has no quarantined item {', '.join(missing)}"
                + (" of that step and kind" if step or kind else "")
            )
        taken = [
            f"{text} (by {by_coordinate[c].redriven_by})"
            for text, c in zip(item_ids, wanted, strict=True)
            if by_coordinate[c].redriven_by
        ]
        if taken:
            raise RerunError(f"already redriven: {', '.join(taken)}")
        chosen = [by_coordinate[c] for c in dict.fromkeys(wanted)]
    else:
        chosen = [q for q in found if q.redriven_by is None]
    if not chosen:
        what = "quarantined items" + (" of that step and kind" if step or kind else "")
        raise RerunError(f"execution {eid} has no {what} left to redrive")
    coordinates: dict[str, list[list[int]]] = {}
    for q in sorted(chosen, key=lambda q: (q.step, q.epoch, q.iteration)):
        loop = playbook.step(q.step).loop if playbook.has_step(q.step) else None
        if loop is None:
            raise RerunError(f"step '{q.step}' of {original.path} is no longer a loop")
        if loop.is_cursor and loop.spec.frame is not None and loop.spec.frame.process == "frame":
            # its quarantined item is a whole frame, counted as its rows: not redriven yet
            raise RerunError(
                f"step '{q.step}' runs its cursor's body per frame (`frame.process: "
                "frame`): a redrive runs a cursor's quarantined rows one body per row only"
            )
        coordinates.setdefault(q.step, []).append([q.epoch, q.iteration])
    if len(coordinates) > 1:
        # a redrive enters its one loop and routes nowhere after it: a loop it never
        # enters would never run
        steps = ", ".join(sorted(coordinates))
        raise RerunError(
            f"the quarantined items chosen are of several steps ({steps}): redrive one "
            "step at a time (--step)"
        )
    ordered = list(coordinates)
    overrides = dict(overrides or {})
    detail: dict[str, Any] = {
        "options": {
            "from": None,
            "failed_items": False,
            "set": overrides,
            "redrive": {"step": step, "kind": kind, "items": list(item_ids)},
        },
        "start": {
            **_start_at(store, original, ordered[0]),
            "items": {name: len(coordinates[name]) for name in ordered},
            "redrive": {name: coordinates[name] for name in ordered},
        },
    }
    payload = {**(original.payload or {}), **overrides}
    redriven = [(name, e, i) for name in ordered for e, i in coordinates[name]]
    return RedrivePlan(payload, detail, redriven)


def _coordinate(text: str) -> tuple[str, int, int]:
    try:
        return parse_item_id(text)
    except InputInvalid as exc:  # here a redrive that cannot be made, as the others
        raise RerunError(exc.reason) from exc


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
        "loop_items": _loop_items(store, original, begin),
        "halt_after": list(begin.get("redrive") or ()),
    }


def _loop_items(store: Store, original: str, begin: dict[str, Any]) -> dict[str, list[Any]]:
    """The items each loop of the rerun runs: a redrive's quarantined items (by their
    coordinates, in the order planned), else the loops' failed items."""
    redrive = begin.get("redrive")
    if redrive is None:
        return {name: store.reruns.failed_items(original, name) for name in begin["items"]}
    out: dict[str, list[Any]] = {}
    for name, coordinates in redrive.items():
        items = {
            (q.epoch, q.iteration): q.item for q in store.quarantine.items(original, step=name)
        }
        out[name] = [items[(int(e), int(i))] for e, i in coordinates]
    return out
