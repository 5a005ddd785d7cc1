"""The deadline check (issue 32), run by the reaper's sweep: for every running top-level
execution whose playbook declares `metadata.deadline`, `models.deadlines.deadline_state`
decides from now, the deadline and its running loops' ETA (what `status` shows) whether
to record `deadline.at_risk` or `deadline.missed`. Each is recorded once per execution
(a unique index), with its notifications in the same transaction
(store.notifications.record_deadline)."""

from __future__ import annotations

import datetime as dt
import logging

from noetl_celery.engine.summaries import loop_progress
from noetl_celery.errors import NoetlError
from noetl_celery.models.deadlines import (
    Deadline,
    deadline_state,
    declared_deadline,
    parse_deadline,
)
from noetl_celery.models.notify import EVENT_MISSED
from noetl_celery.passes.playbooks import PlaybookCache
from noetl_celery.store.repository import Store
from noetl_celery.store.rows import DeadlineCandidate

log = logging.getLogger("noetl_celery.deadlines")


def _deadline(
    store: Store, playbooks: PlaybookCache, candidate: DeadlineCandidate
) -> Deadline | None:
    """The schedule's deadline for a run it started (when it has one), else the
    playbook's `metadata.deadline`."""
    if candidate.schedule_id is not None:
        schedule = store.schedules.get(candidate.schedule_id)
        if schedule is not None and schedule.deadline:
            try:
                return parse_deadline(schedule.deadline, schedule.timezone)
            except NoetlError:  # refused when added; an edited row: the playbook's
                pass
    catalog_id = candidate.catalog_id
    try:
        playbook = playbooks.get(catalog_id)
    except NoetlError:
        return None
    return declared_deadline(playbook.metadata.model_extra or {})


def _eta_at(store: Store, execution_id: str, now: dt.datetime) -> dt.datetime | None:
    """When the running loops are expected to be done (the latest ETA); None: unknown."""
    row = store.execution(execution_id)
    etas = [
        lp["eta_seconds"]
        for lp in loop_progress(store, row)
        if not lp["finished"] and lp["eta_seconds"] is not None
    ]
    return now + dt.timedelta(seconds=max(etas)) if etas else None


def check_one(
    store: Store, playbooks: PlaybookCache, candidate: DeadlineCandidate, now: dt.datetime
) -> str | None:
    """The event recorded for `candidate` now, if any."""
    if EVENT_MISSED in candidate.recorded:
        return None  # nothing left to tell
    deadline = _deadline(store, playbooks, candidate)
    if deadline is None:
        return None
    due = deadline.at(candidate.started_at)
    eta = _eta_at(store, candidate.execution_id, now) if now < due else None
    event = deadline_state(now, due, eta)
    if event is None or event in candidate.recorded:
        return None
    payload = {
        "deadline_at": due.isoformat() + "Z",
        "eta_at": None if eta is None else eta.isoformat() + "Z",
    }
    if not store.notifications.record_deadline(candidate.execution_id, event, payload):
        return None
    log.warning(
        "execution %s: %s (deadline %sZ)",
        candidate.execution_id,
        event,
        due.isoformat(timespec="seconds"),
        extra={"execution_id": candidate.execution_id},
    )
    return event
