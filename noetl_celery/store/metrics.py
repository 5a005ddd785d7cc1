"""`store.metrics`: the figures `/metrics` exports, read per scrape in one read
transaction; the SQL (and why it stays cheap) is `store.queries.metrics`.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from noetl_celery.store.database import Database
from noetl_celery.store.queries import metrics as sql
from noetl_celery.store.queries.metrics import IN_FLIGHT
from noetl_celery.store.throttle import ThrottleSnapshot
from noetl_celery.store.throttle import read_snapshot as read_throttles

__all__ = ["IN_FLIGHT", "LoopTotals", "MetricsManager", "MetricsSnapshot"]


@dataclass(frozen=True)
class LoopTotals:
    path: str
    step: str
    succeeded: int
    failed: int
    quarantined: int = 0  # set aside by a quarantine: neither succeeded nor failed


@dataclass
class MetricsSnapshot:
    executions_by_status: dict[str, int] = field(default_factory=dict)
    # finished loop epochs, summed per playbook path and step
    finished_loops: list[LoopTotals] = field(default_factory=list)
    # (path, state) of every RUNNING execution: their running epochs' live counts
    running_states: list[tuple[str, dict[str, Any]]] = field(default_factory=list)
    commands_by_status: dict[str, int] = field(default_factory=dict)
    oldest_issued_at: datetime | None = None
    counters: dict[str, int] = field(default_factory=dict)
    # keyed rate_limits: their rows, held run slots and parked commands
    throttles: ThrottleSnapshot = field(default_factory=ThrottleSnapshot)


class MetricsManager:
    def __init__(self, db: Database) -> None:
        self.db = db

    def read_snapshot(self) -> MetricsSnapshot:
        """Every figure, from one read transaction (one consistent snapshot)."""
        with self.db.read() as conn:
            return MetricsSnapshot(
                executions_by_status=sql.executions_by_status(conn),
                finished_loops=[LoopTotals(*t) for t in sql.finished_loops(conn)],
                running_states=sql.running_states(conn),
                commands_by_status=sql.commands_by_status(conn),
                oldest_issued_at=sql.oldest_issued_at(conn),
                counters=sql.counter_values(conn),
                throttles=read_throttles(conn),
            )
