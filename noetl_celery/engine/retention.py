"""Retention: deleting executions that ended long ago, with every row they left in the
engine tables (`noetl-celery db prune`, and NOETL_RETENTION's daily prune sent by beat).

A prune walks the executions that ended before the cutoff in creation order, a page at a
time; for each page it reads their families (parents, children, running reruns) and
`models.retention.decide` says which go. Those are deleted a chunk of rows at a time,
each chunk its own transaction (store.retention), the executions rows last. Nothing is
locked beyond the rows being deleted, which nothing else reads or writes any more (their
executions ended), so running loops go on meanwhile.

One prune at a time: a prune holds the lease row `retention` (renewed as it goes; a
pruner that died loses it after LEASE_SECONDS). Two prunes at once would still be
correct (a chunk deletes only rows that are there, and the counts are the rows each
statement deleted), only wasteful; the lease is what keeps them from contending. The
daily prune also takes `retention.daily` for a day, with an owner unique to that run, so
however many beats send the task, and whichever worker gets it, it prunes once a day.
"""

from __future__ import annotations

import datetime as dt
import logging
import time
import uuid
from dataclasses import dataclass, field
from typing import Any

from noetl_celery.constants import ROW_CHUNK
from noetl_celery.errors import NoetlError
from noetl_celery.models.retention import decide
from noetl_celery.store.repository import Store
from noetl_celery.store.retention import EXECUTION_TABLES
from noetl_celery.store.schema import utcnow

log = logging.getLogger("noetl_celery.retention")

LEASE = "retention"
DAILY_LEASE = "retention.daily"
# a pruner that died holds the prune this long at most; renewed every LEASE_SECONDS / 3
LEASE_SECONDS = 120.0
# the daily prune's lease: beat sends the task every RETENTION_CHECK_SECONDS (10 minutes),
# the first worker to get it once this has passed since the last prune prunes
DAILY_SECONDS = 23 * 3600.0
# executions read per page, and deleted per round (whole families: a round may take more)
PAGE = 1000
ROUND = 2000


class PruneBusy(NoetlError):
    """Another process holds the prune (its holder in the message): try again later."""


@dataclass
class PruneReport:
    cutoff: dt.datetime
    dry_run: bool
    executions: int = 0
    rows: dict[str, int] = field(default_factory=dict)
    # executions that ended before the cutoff but stay: linked to one that did not
    kept: int = 0
    transactions: int = 0
    longest_transaction_ms: float = 0.0
    longest_table: str = ""  # what the longest transaction deleted from
    seconds: float = 0.0
    # rate_limit keys whose pacing row was idle as long (their learned rates forgotten)
    idle_keys: int = 0

    def as_json(self) -> dict[str, Any]:
        return {
            "dry_run": self.dry_run,
            "cutoff": self.cutoff.isoformat(timespec="seconds"),
            "executions": self.executions,
            "rows": dict(self.rows),
            "kept": self.kept,
            "transactions": self.transactions,
            "longest_transaction_ms": round(self.longest_transaction_ms, 1),
            "longest_table": self.longest_table,
            "seconds": round(self.seconds, 3),
            "idle_keys": self.idle_keys,
        }


class Pruner:
    def __init__(
        self, store: Store, *, owner: str | None = None, row_chunk: int = ROW_CHUNK
    ) -> None:
        self.store = store
        self.retention = store.retention
        self.owner = owner or f"prune-{uuid.uuid4().hex[:12]}"
        self.row_chunk = row_chunk
        self._renewed = 0.0

    # ---- entry points -----------------------------------------------------------------------
    def prune(self, older_than_seconds: float, *, dry_run: bool = False) -> PruneReport:
        """Delete (or with `dry_run` count) the ended executions older than the age.
        Raises PruneBusy when another prune is running (a dry run never waits for one)."""
        cutoff = utcnow() - dt.timedelta(seconds=older_than_seconds)
        if dry_run:
            return self._walk(cutoff, dry_run=True)
        if not self.retention.take_lease(LEASE, self.owner, LEASE_SECONDS):
            holder = self.retention.lease_holder(LEASE)
            raise PruneBusy(f"another prune is running ({holder}); try again when it ends")
        self._renewed = time.monotonic()
        try:
            return self._walk(cutoff, dry_run=False)
        finally:
            self.retention.release_lease(LEASE, self.owner)

    def daily(self, older_than_seconds: float) -> PruneReport | None:
        """NOETL_RETENTION's prune: at most once per DAILY_SECONDS across the fleet. None
        when it is not due (or another prune runs)."""
        if not self.retention.take_lease(DAILY_LEASE, self.owner, DAILY_SECONDS):
            return None
        try:
            report = self.prune(older_than_seconds)
        except PruneBusy:
            self.retention.release_lease(DAILY_LEASE, self.owner)  # the next check tries
            return None
        except Exception:
            # the database away half way: the next check tries again (and finishes
            # what this one started: the executions rows go last)
            self.retention.release_lease(DAILY_LEASE, self.owner)
            raise
        log.info("retention: %s", _summary(report))
        return report

    # ---- the walk ---------------------------------------------------------------------------
    def _walk(self, cutoff: dt.datetime, *, dry_run: bool) -> PruneReport:
        started = time.perf_counter()
        report = PruneReport(cutoff=cutoff, dry_run=dry_run)
        report.rows = dict.fromkeys([*EXECUTION_TABLES, "executions"], 0)
        done: set[str] = set()  # removed (or, dry, counted) already
        kept: set[str] = set()
        after: tuple[dt.datetime, str] | None = None
        while True:
            page = self.retention.ended_before(cutoff, after, PAGE)
            if not page:
                break
            last, created = page[-1]
            after = (created, last.execution_id)
            fresh = [row for row, _ in page if row.execution_id not in done]
            if not fresh:
                continue
            decision = decide(self.retention.closure(fresh), cutoff)
            kept.update(decision.kept)
            batch: list[tuple[str, ...]] = []
            size = 0
            for family in decision.families:
                if family[0] in done:
                    continue
                done.update(family)
                batch.append(family)
                size += len(family)
                if size >= ROUND:
                    kept.update(self._remove(batch, report, dry_run))
                    batch, size = [], 0
            if batch:
                kept.update(self._remove(batch, report, dry_run))
        report.kept = len(kept)
        # a rate_limit key idle as long as an execution is old goes too (store.retention)
        idle_before = cutoff.replace(tzinfo=dt.UTC).timestamp()
        report.idle_keys = self.retention.idle_keys(idle_before, dry_run=dry_run)
        report.seconds = time.perf_counter() - started
        return report

    def _remove(
        self, families: list[tuple[str, ...]], report: PruneReport, dry_run: bool
    ) -> list[str]:
        """Delete (count) `families`; the ids kept after all."""
        if dry_run:
            ids = [i for family in families for i in family]
            for table, n in self.retention.count(ids).items():
                report.rows[table] += n
            report.executions += len(ids)
            return []
        # checked again just before they go: a rerun of one of them may have started
        # since the page was read (it reads its original as it starts). Nothing else
        # about an ended execution changes: only a running one has children spawned.
        originals = self.retention.rerun_originals()
        kept = [i for family in families if originals.intersection(family) for i in family]
        ids = [i for family in families if not originals.intersection(family) for i in family]
        for table in EXECUTION_TABLES:
            while ids:
                deleted, seconds = self.retention.delete_chunk(table, ids, self.row_chunk)
                self._tally(report, seconds, table)
                report.rows[table] += deleted
                self._renew()
                if deleted < self.row_chunk:
                    break
        if ids:
            deleted, seconds = self.retention.delete_executions(ids)
            self._tally(report, seconds, "executions")
            report.rows["executions"] += deleted
            report.executions += deleted
        return kept

    def _tally(self, report: PruneReport, seconds: float, table: str) -> None:
        report.transactions += 1
        if seconds * 1000 > report.longest_transaction_ms:
            report.longest_transaction_ms = seconds * 1000
            report.longest_table = table

    def _renew(self) -> None:
        if time.monotonic() - self._renewed > LEASE_SECONDS / 3:
            self.retention.take_lease(LEASE, self.owner, LEASE_SECONDS)
            self._renewed = time.monotonic()


def _summary(report: PruneReport) -> str:
    rows = sum(n for t, n in report.rows.items() if t != "executions")
    return (
        f"{'would prune' if report.dry_run else 'pruned'} {report.executions} executions "
        f"ended before {report.cutoff.isoformat(timespec='seconds')} ({rows} rows), "
        f"{report.kept} kept (linked to a running one), {report.transactions} transactions, "
        f"longest {report.longest_transaction_ms:.0f} ms, {report.seconds:.1f} s, "
        f"{report.idle_keys} idle rate_limit keys"
    )
