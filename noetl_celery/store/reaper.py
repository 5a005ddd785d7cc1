"""The reaper's queries: what was lost, and putting it back (docs/design.md §3).

- an `issued` command nobody started within the grace period (lost message, flushed
  broker) is published again; duplicates are harmless (conditional claim)
- a `running` command whose lease expired (its worker is gone) is issued again as the
  next attempt of the same coordinate (`:a<n>`, same item, same context), up to a limit;
  past the limit, or past its step deadline, it fails with a terminal event in the inbox
- an execution with completions waiting and nobody folding them is woken
- a `delayed` command (a cursor claim retried after a backoff, a pipeline parked for a
  long retry delay) whose due time came is
  issued, and published by the transaction that issued it

Only RUNNING executions are looked at, through their commands' index (there is no index
on `commands.status`: it would make every claim and close a non-HOT update).
"""

from __future__ import annotations

import datetime as dt
from dataclasses import replace

from noetl_celery.constants import (
    CMD_EXPIRED,
    CMD_FAILED,
    CMD_ISSUED,
    EV_COMMAND_FAILED,
)
from noetl_celery.models.outcome import ErrorKind, Outcome, StepError
from noetl_celery.orchestrator.ids import with_attempt
from noetl_celery.store import queries
from noetl_celery.store.counters import (
    COUNTER_LEASES_EXPIRED,
    COUNTER_REISSUED,
    COUNTER_REPUBLISHED,
    give_up_counter,
)
from noetl_celery.store.database import Database
from noetl_celery.store.rows import LostCommand
from noetl_celery.store.schema import utcnow

__all__ = ["LostCommand", "ReaperManager"]


class ReaperManager:
    """The reaper's queries (`store.reaper`): its lease, stale and delayed commands,
    lost runs, executions to wake."""

    def __init__(self, db: Database) -> None:
        self.db = db

    def take_lease(self, name: str, owner: str, ttl: float) -> bool:
        """Hold the duty `name` for `ttl` seconds unless another owner holds it unexpired
        (a holder that died loses it when `ttl` runs out)."""
        now = utcnow()
        with self.db.write() as conn:
            queries.take_lease(conn, name, owner, now + dt.timedelta(seconds=ttl), now)
            holder = queries.lease_holder(conn, name)
        return bool(holder == owner)

    def held_within(self, name: str, seconds: float) -> bool:
        """Whether the duty `name` was held (or released) less than `seconds` ago, or is
        held now."""
        with self.db.read() as conn:
            expiry = queries.lease_expiry(conn, name)
        return expiry is not None and expiry > utcnow() - dt.timedelta(seconds=seconds)

    def republish_stale(self, grace: float, limit: int = 1000) -> list[str]:
        """Issued commands nobody started: waiting longer than `grace` seconds, doubled
        for every earlier republish (a long broker backlog is not a lost message; its
        commands are republished a few times at most, not every sweep). Their issue time
        is renewed."""
        now = utcnow()
        with self.db.write() as conn:
            rows = queries.stale_issued(conn, now - dt.timedelta(seconds=grace), limit)
            due = [
                r.command_id
                for r in rows
                if r.issued_at < now - dt.timedelta(seconds=grace * 2 ** min(r.republished, 10))
            ]
            if due:
                queries.mark_republished(conn, due, now)
                queries.add_counter(conn, COUNTER_REPUBLISHED, len(due))
        return due

    def release_delayed(self, limit: int = 1000) -> list[str]:
        """Issue the `delayed` commands whose due time (`issued_at`) has come; returns the
        ids this call issued, to publish (a concurrent sweep issues none of them twice)."""
        now = utcnow()
        with self.db.write() as conn:
            due = queries.due_delayed(conn, now, limit)
            if not due:
                return []
            return sorted(queries.issue_delayed(conn, due, now))

    def lost_commands(self, limit: int = 1000) -> list[LostCommand]:
        """Running commands whose lease expired or whose deadline passed."""
        with self.db.read() as conn:
            return queries.lost_runs(conn, utcnow(), limit)

    def reissue(self, lost: LostCommand) -> str | None:
        """Replace a lost run by its next attempt (same coordinate, item and context).
        Returns the new command id to publish, or None if the command moved on meanwhile."""
        now = utcnow()
        new_id = with_attempt(lost.command_id, lost.attempt + 1)
        with self.db.write() as conn:
            if not queries.expire_run(conn, lost.command_id, CMD_EXPIRED, now):
                return None
            # the resume as the lost run left it: a cursor claim may have recorded its
            # frame's rows on it since `lost` was read (worker.frames), and its next
            # attempt must hand those over, never claim again
            lost = replace(lost, resume=queries.resume_of(conn, lost.command_id))
            queries.add_counter(conn, COUNTER_LEASES_EXPIRED, 1)
            queries.add_counter(conn, COUNTER_REISSUED, 1)
            queries.insert_next_attempt(conn, lost, new_id, CMD_ISSUED, now)
        return new_id

    def give_up(self, lost: LostCommand, kind: ErrorKind, message: str) -> bool:
        """Fail a lost command for good: a terminal event in the inbox, as a worker would."""
        now = utcnow()
        with self.db.write() as conn:
            if not queries.expire_run(conn, lost.command_id, CMD_FAILED, now):
                return False
            # a lost run given up for good: its lease expired (or its deadline passed)
            queries.add_counter(conn, give_up_counter(kind), 1)
            queries.append_terminal(
                conn,
                lost.execution_id,
                lost.step,
                lost.command_id,
                lost.epoch,
                lost.iteration,
                EV_COMMAND_FAILED,
                Outcome.failed(StepError(kind, message, retryable=False)).to_json(),
                now,
            )
        return True

    def executions_to_wake(self, grace: float, limit: int = 500) -> list[str]:
        """RUNNING executions with a completion waiting longer than `grace`, or never
        started (no state yet: the process that created them died before its first pass)."""
        cutoff = utcnow() - dt.timedelta(seconds=grace)
        with self.db.read() as conn:
            waiting = queries.inbox_waiting_since(conn, cutoff, limit)
            unstarted = queries.unstarted_since(conn, cutoff, limit)
        return sorted({*waiting, *unstarted})

    def executions_past(self, seconds: float, limit: int = 500) -> list[str]:
        """RUNNING executions started more than `seconds` ago."""
        cutoff = utcnow() - dt.timedelta(seconds=seconds)
        with self.db.read() as conn:
            return queries.running_since(conn, cutoff, limit)

    def release_lease(self, name: str, owner: str) -> None:
        with self.db.write() as conn:
            queries.release_lease(conn, name, owner, utcnow())
