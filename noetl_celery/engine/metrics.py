"""The Prometheus view of the engine database (pure: a `MetricsSnapshot` and the time
in, metric samples out; `web.metrics` serves them).

    noetl_executions{status}                      executions by status (gauge)
    noetl_loop_items_succeeded_total{playbook,step}
    noetl_loop_items_failed_total{playbook,step}
    noetl_loop_items_quarantined_total{playbook,step}
                                                  loop items finished, per playbook and
                                                  step, running epochs included (live);
                                                  quarantined: set aside (noetl-celery
                                                  quarantine), neither succeeded nor failed
    noetl_commands{status}                        commands of running executions that are
                                                  issued (waiting for a worker), running,
                                                  waiting (for a sub-playbook) or delayed
    noetl_oldest_unclaimed_command_age_seconds    how long the oldest issued command has
                                                  waited for a worker (0: none waiting)
    noetl_reaper_republished_total                issued commands published again
    noetl_reaper_reissued_total                   lost runs replaced by a next attempt
    noetl_lease_expiries_total                    runs whose worker was lost
    noetl_step_timeouts_total                     runs failed past `spec.timeout`
    noetl_rate_limit_declared{key}                a keyed rate_limit's per_second
    noetl_rate_limit_limit{key}                   the rate it is paced at now (learned)
    noetl_rate_limit_current_rate{key}            its runs in the last second
    noetl_rate_limit_in_flight{key}               its run slots held
    noetl_rate_limit_waiting{key}                 its commands parked for a turn / slot
                                                  (the TOP_KEYS most active keys, the
                                                  rest summed as key="other":
                                                  engine.ratelimits)
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from datetime import datetime

from noetl_celery.constants import CANCELLED, COMPLETED, FAILED, RUNNING
from noetl_celery.engine import ratelimits
from noetl_celery.store.counters import (
    COUNTER_LEASES_EXPIRED,
    COUNTER_REISSUED,
    COUNTER_REPUBLISHED,
    COUNTER_TIMEOUTS,
)
from noetl_celery.store.metrics import IN_FLIGHT, MetricsSnapshot

STATUSES = (RUNNING, COMPLETED, FAILED, CANCELLED)
COUNTERS = (
    ("noetl_reaper_republished", COUNTER_REPUBLISHED, "Issued commands published again."),
    ("noetl_reaper_reissued", COUNTER_REISSUED, "Lost runs the reaper replaced by a next attempt."),
    ("noetl_lease_expiries", COUNTER_LEASES_EXPIRED, "Runs whose lease expired (worker lost)."),
    ("noetl_step_timeouts", COUNTER_TIMEOUTS, "Runs failed past their step's spec.timeout."),
)


@dataclass(frozen=True)
class Family:
    name: str  # counters without the `_total` suffix (prometheus_client adds it)
    kind: str  # "gauge" | "counter"
    help: str
    labels: tuple[str, ...]
    samples: tuple[tuple[tuple[str, ...], float], ...]


def loop_items(snapshot: MetricsSnapshot) -> dict[tuple[str, str], tuple[int, int, int]]:
    """(playbook, step) -> (succeeded, failed, quarantined): finished epochs from the
    table plus the running epochs of RUNNING executions from their state."""
    totals: dict[tuple[str, str], tuple[int, int, int]] = {}

    def add(key: tuple[str, str], ok: int, bad: int, aside: int) -> None:
        was = totals.get(key, (0, 0, 0))
        totals[key] = (was[0] + ok, was[1] + bad, was[2] + aside)

    for row in snapshot.finished_loops:
        add((row.path, row.step), row.succeeded, row.failed, row.quarantined)
    for path, state in snapshot.running_states:
        for step, st in (state.get("steps") or {}).items():
            loop = st.get("loop") if isinstance(st, dict) else None
            if loop and not loop.get("done"):
                add(
                    (path, step),
                    int(loop.get("succeeded") or 0),
                    int(loop.get("failed") or 0),
                    int(loop.get("quarantined") or 0),
                )
    return totals


def families(snapshot: MetricsSnapshot, now: datetime) -> Iterator[Family]:
    by_status: dict[str, int] = {s: snapshot.executions_by_status.get(s, 0) for s in STATUSES}
    for status, count in snapshot.executions_by_status.items():
        by_status.setdefault(status, count)
    yield Family(
        "noetl_executions",
        "gauge",
        "Executions in the engine database, by status.",
        ("status",),
        tuple(((s,), float(n)) for s, n in sorted(by_status.items())),
    )
    items = sorted(loop_items(snapshot).items())
    yield Family(
        "noetl_loop_items_succeeded",
        "counter",
        "Loop items that succeeded, per playbook and step.",
        ("playbook", "step"),
        tuple((key, float(ok)) for key, (ok, _, _) in items),
    )
    yield Family(
        "noetl_loop_items_failed",
        "counter",
        "Loop items that failed (not handled by a policy), per playbook and step.",
        ("playbook", "step"),
        tuple((key, float(bad)) for key, (_, bad, _) in items),
    )
    yield Family(
        "noetl_loop_items_quarantined",
        "counter",
        "Loop items set aside by a quarantine (neither succeeded nor failed), per playbook "
        "and step.",
        ("playbook", "step"),
        tuple((key, float(aside)) for key, (_, _, aside) in items),
    )
    yield Family(
        "noetl_commands",
        "gauge",
        "Commands of running executions: issued (no worker yet), running, waiting, delayed.",
        ("status",),
        tuple(((s,), float(snapshot.commands_by_status.get(s, 0))) for s in IN_FLIGHT),
    )
    oldest = snapshot.oldest_issued_at
    age = max(0.0, (now - oldest).total_seconds()) if oldest is not None else 0.0
    yield Family(
        "noetl_oldest_unclaimed_command_age_seconds",
        "gauge",
        "Seconds the oldest issued command of a running execution has waited for a worker.",
        (),
        (((), age),),
    )
    for name, counter, text in COUNTERS:
        yield Family(name, "counter", text, (), (((), float(snapshot.counters.get(counter, 0))),))
    yield from rate_limit_families(snapshot, now)


RATE_LIMIT_SERIES = (
    ("declared", "A keyed rate_limit's declared per_second."),
    ("limit", "The rate a keyed rate_limit is paced at now (learned below the declared)."),
    ("current_rate", "Runs under a keyed rate_limit in the last second."),
    ("in_flight", "Run slots of a keyed rate_limit's concurrency held now."),
    ("waiting", "Commands parked for a keyed rate_limit's turn or run slot."),
)


def rate_limit_families(snapshot: MetricsSnapshot, now: datetime) -> Iterator[Family]:
    found = ratelimits.bounded(ratelimits.rows(snapshot.throttles, ratelimits.epoch(now)))
    for field, text in RATE_LIMIT_SERIES:
        samples = tuple(
            ((row["key"],), float(value))
            for row in found
            if (value := row[field]) is not None  # type: ignore[literal-required]
        )
        yield Family(f"noetl_rate_limit_{field}", "gauge", text, ("key",), samples)
