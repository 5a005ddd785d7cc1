"""`Store`: the façade over the engine's database (procrastinate style: the SQL is the
named queries of the package `store.queries`; the façade and its sub-managers open the
transactions and say what commits together).

Layers above receive plain rows (`store.rows`) and never see SQLAlchemy; a driver error
reaches them as a StoreError (store.database).
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from datetime import timedelta
from typing import Any

from sqlalchemy import Connection
from sqlalchemy.exc import DataError, IntegrityError

from noetl_celery.constants import TRIGGER_MANUAL
from noetl_celery.errors import (
    CatalogNotFound,
    ExecutionNotFound,
    ItemsRedriven,
    ResultNotStorable,
    StoreError,
)
from noetl_celery.models.outcome import Outcome
from noetl_celery.orchestrator.batching import EpochBacklog
from noetl_celery.store import queries
from noetl_celery.store.cache import ImmutableCache
from noetl_celery.store.catalog import CatalogReadsManager
from noetl_celery.store.children import ChildrenManager
from noetl_celery.store.compat import CompatManager
from noetl_celery.store.completion import CompletionTx
from noetl_celery.store.database import Database
from noetl_celery.store.frames import FramesManager
from noetl_celery.store.history import HistoryManager
from noetl_celery.store.metrics import MetricsManager
from noetl_celery.store.notifications import NotificationsManager
from noetl_celery.store.orchestration import OrchestrationTx, keyed_rows
from noetl_celery.store.outbox import OutboxManager
from noetl_celery.store.overview import OverviewManager
from noetl_celery.store.owners import OwnersManager
from noetl_celery.store.pacing import PacingManager
from noetl_celery.store.parking import ParkingManager
from noetl_celery.store.quarantine import QuarantineManager
from noetl_celery.store.queries import ResultCache
from noetl_celery.store.reaper import ReaperManager
from noetl_celery.store.reruns import RerunsManager
from noetl_celery.store.retention import RetentionManager
from noetl_celery.store.rows import (
    CatalogEntry,
    ClaimedCommand,
    CommandCounts,
    EventRow,
    ExecutionRow,
    FrameRows,
    InFlight,
    LoopRow,
)
from noetl_celery.store.schedules import ScheduleManager
from noetl_celery.store.schema import utcnow
from noetl_celery.store.termination import TerminationManager
from noetl_celery.store.throttle import ThrottleManager

# tries of one registration against concurrent ones (each lost race means another
# registration of the same path committed: progress, so a few are plenty)
REGISTER_ATTEMPTS = 50


def catalog_digest(content: str, scripts: dict[str, Any] | None) -> str:
    """The version identity: the YAML, plus the text of its script files when it has
    any (a changed script file registers a new version; the base directory does not)."""
    digest = hashlib.sha256(content.encode())
    files = (scripts or {}).get("files")
    if files:
        digest.update(b"\0scripts\0")
        digest.update(json.dumps(files, sort_keys=True, ensure_ascii=False).encode())
    return digest.hexdigest()


class Store:
    """The façade: its own methods for the hot path and the reads, and one sub-manager
    per area (`schedules`, `reaper`, `children`, `termination`; the operators' reads
    `overview`, `history`, `catalog_reads`, `compat`, `reruns`, `quarantine`, `owners`,
    `metrics`)
    sharing its database and caches."""

    def __init__(self, database: Database) -> None:
        self.db = database
        self.result_cache: ResultCache = ImmutableCache(256)
        self._contexts: ImmutableCache[tuple[str, int], dict[str, Any]] = ImmutableCache(256)
        self._catalog_of: ImmutableCache[str, int] = ImmutableCache(4096)
        self._content: ImmutableCache[int, str] = ImmutableCache(256)
        # the notification outbox; its `rule` (who wants what) is the engine's
        self.notifications = NotificationsManager(database)
        self.schedules = ScheduleManager(database)
        self.reaper = ReaperManager(database)
        self.children = ChildrenManager(database, self.result_cache, self.resolve_catalog)
        self.termination = TerminationManager(database, self.result_cache, self.notifications)
        self.parking = ParkingManager(database)
        self.outbox = OutboxManager(database)  # what the broker could not take
        self.pacing = PacingManager(database)  # the http tool's schedule of the fleet
        self.throttle = ThrottleManager(database)  # keyed rate_limit.concurrency slots
        self.retention = RetentionManager(database)  # deleting executions ended long ago
        # the operators' reads: each opens its own read transaction
        self.overview = OverviewManager(database)
        self.history = HistoryManager(database)
        self.catalog_reads = CatalogReadsManager(database)
        self.compat = CompatManager(database)
        self.reruns = RerunsManager(database)
        self.quarantine = QuarantineManager(database)
        self.owners = OwnersManager(database)
        self.metrics = MetricsManager(database)
        # the writes of cursor frames run by their claims' workers (worker.frames)
        self.frames = FramesManager(database, self.result_cache)

    # ---- catalog ----------------------------------------------------------------------------
    def register(
        self, path: str, name: str, content: str, scripts: dict[str, Any] | None = None
    ) -> CatalogEntry:
        """Register `content` under `path`; identical content reuses the latest version.

        Concurrent first registrations (every `run` registers first) race for the next
        version number: the loser's insert hits `uq_catalog_path_version`, and it reads
        again: the same content then finds the winner's version, other content takes
        the next one. Never an error for the caller."""
        digest = catalog_digest(content, scripts)
        for _ in range(REGISTER_ATTEMPTS):
            try:
                return self._register_once(path, name, content, digest, scripts)
            except IntegrityError:
                continue  # another registration took this version number: read again
        raise StoreError(
            f"could not register '{path}': {REGISTER_ATTEMPTS} concurrent registrations "
            "took every version number first"
        )

    def _register_once(
        self, path: str, name: str, content: str, digest: str, scripts: dict[str, Any] | None
    ) -> CatalogEntry:
        with self.db.write() as conn:
            latest = queries.latest_catalog_version(conn, path)
            if latest is not None and latest.content_sha256 == digest:
                return CatalogEntry(latest.catalog_id, path, latest.version, name, created=False)
            version = 1 if latest is None else latest.version + 1
            catalog_id = queries.insert_catalog_version(
                conn, path, version, name, content, digest, scripts, utcnow()
            )
        return CatalogEntry(catalog_id, path, version, name, created=True)

    def resolve_catalog(self, path: str, version: int | None = None) -> CatalogEntry:
        with self.db.read() as conn:
            entry = queries.resolve_catalog(conn, path, version)
        if entry is None:
            suffix = f" version {version}" if version is not None else ""
            raise CatalogNotFound(f"no playbook registered at catalog path '{path}'{suffix}")
        return entry

    def catalog_entry(self, catalog_id: int) -> CatalogEntry:
        """The catalog row `catalog_id` (a rerun starts the very version its original ran)."""
        with self.db.read() as conn:
            entry = queries.catalog_entry(conn, catalog_id)
        if entry is None:
            raise CatalogNotFound(f"no catalog entry {catalog_id}")
        return entry

    def catalog_content(self, catalog_id: int) -> str:
        def load() -> str:
            with self.db.read() as conn:
                return queries.catalog_content(conn, catalog_id)

        return self._content.get_or_load(catalog_id, load)

    def catalog_scripts(self, catalog_id: int) -> dict[str, Any] | None:
        """The `script:` files stored with a catalog version (passes.scripts), or None."""
        with self.db.read() as conn:
            return queries.catalog_scripts(conn, catalog_id)

    # ---- executions -------------------------------------------------------------------------
    def create_execution(
        self,
        execution_id: str,
        entry: CatalogEntry,
        payload: dict[str, Any] | None,
        *,
        parent_execution_id: str | None = None,
        parent_command_id: str | None = None,
        trigger: str = TRIGGER_MANUAL,
        rerun_of: str | None = None,
        trigger_detail: dict[str, Any] | None = None,
        owner: str | None = None,
        redriven: Sequence[tuple[str, int, int]] = (),
    ) -> None:
        """A RUNNING execution and its `execution.started` event; `redriven`: quarantined
        items of `rerun_of` it runs again (queries.insert_execution), ItemsRedriven when
        another redrive took one of them first."""
        try:
            self._insert_execution(
                execution_id,
                entry,
                payload,
                parent_execution_id=parent_execution_id,
                parent_command_id=parent_command_id,
                trigger=trigger,
                rerun_of=rerun_of,
                trigger_detail=trigger_detail,
                owner=owner,
                redriven=redriven,
            )
        except IntegrityError as exc:
            if not redriven:
                raise
            raise ItemsRedriven(
                f"a quarantined item of execution {rerun_of} was redriven meanwhile by "
                "another execution: list them again (`noetl-celery quarantine list`)"
            ) from exc

    def _insert_execution(
        self,
        execution_id: str,
        entry: CatalogEntry,
        payload: dict[str, Any] | None,
        *,
        parent_execution_id: str | None,
        parent_command_id: str | None,
        trigger: str,
        rerun_of: str | None,
        trigger_detail: dict[str, Any] | None,
        owner: str | None,
        redriven: Sequence[tuple[str, int, int]],
    ) -> None:
        with self.db.write() as conn:
            queries.insert_execution(
                conn,
                execution_id,
                entry,
                payload,
                parent_execution_id=parent_execution_id,
                parent_command_id=parent_command_id,
                trigger=trigger,
                rerun_of=rerun_of,
                trigger_detail=trigger_detail,
                owner=owner,
                now=utcnow(),
                redriven=redriven,
            )

    def execution(self, execution_id: str) -> ExecutionRow:
        with self.db.read() as conn:
            row = queries.execution(conn, execution_id)
        if row is None:
            raise ExecutionNotFound(f"no execution with id {execution_id}")
        return row

    def execution_status(self, execution_id: str) -> str:
        with self.db.read() as conn:
            status = queries.execution_status(conn, execution_id)
        if status is None:
            raise ExecutionNotFound(f"no execution with id {execution_id}")
        return status

    # ---- orchestration ----------------------------------------------------------------------
    @contextmanager
    def orchestration(self, execution_id: str, *, wait: bool) -> Iterator[OrchestrationTx | None]:
        """Lock the execution for one pass; yield None when another pass holds the lock
        (that pass re-checks the inbox before it lets go, so nothing is lost)."""
        with self.db.write() as conn:
            found = queries.lock_and_read(conn, execution_id, wait=wait)
            if found is None:
                yield None
            else:
                row, inbox = found
                yield OrchestrationTx(conn, row, self.result_cache, inbox, self.notifications)

    def has_unhandled(self, execution_id: str) -> bool:
        with self.db.read() as conn:
            return queries.has_unhandled(conn, execution_id)

    def backlog(self, execution_id: str) -> list[EpochBacklog]:
        """The execution's inbox as committed now, per loop epoch (orchestrator.batching)."""
        with self.db.read() as conn:
            return queries.backlog(conn, execution_id)

    # ---- commands (worker side) -------------------------------------------------------------
    def claim(self, command_id: str, worker: str, lease_seconds: int) -> ClaimedCommand | None:
        """Conditional claim: None means another delivery already took it (drop it)."""
        now = utcnow()
        lease_until = now + timedelta(seconds=lease_seconds)
        with self.db.single_write() as conn:
            row = queries.claim(conn, command_id, worker, now, lease_until)
            if row is None:
                return None
            catalog_id = self._catalog_of.get_or_load(
                row.execution_id, lambda: queries.catalog_of(conn, row.execution_id)
            )
        return ClaimedCommand(command_id=command_id, catalog_id=catalog_id, **row._mapping)

    def record_frame(
        self, command: ClaimedCommand, rows: list[Any], witness: queries.Witness | None = None
    ) -> FrameRows | None:
        """Record the rows a running cursor claim took (worker.frames), before its queue
        transaction commits: each row's key as claimed in its epoch, and the rows not
        claimed before on the command, at once (one statement on Postgres); the rows
        recorded (those recorded before, when it is tried again). None (nothing
        written) when the command is no longer running. Durable before the queue
        commits: synchronously, unless the queue transaction (`witness`) runs on the
        engine's own server (store.queries.frames)."""
        try:
            with self.db.single_write() as conn:
                return queries.record_frame(conn, command, keyed_rows(rows), len(rows), witness)
        except DataError as exc:  # a value Postgres refuses (a NUL character)
            raise ResultNotStorable(str(exc.orig or exc).strip().split("\n")[0]) from exc

    def claim_batch(
        self, command_ids: Sequence[str], worker: str, lease_seconds: int
    ) -> list[ClaimedCommand]:
        """Claim a batch's commands in one statement, in the order given; those another
        delivery already claimed or finished are left out (worker.batch)."""
        now = utcnow()
        lease_until = now + timedelta(seconds=lease_seconds)
        with self.db.single_write() as conn:
            rows = {
                str(r.command_id): r
                for r in queries.claim_batch(conn, command_ids, worker, now, lease_until)
            }
            claimed = []
            for command_id in dict.fromkeys(command_ids):
                row = rows.get(command_id)
                if row is None:
                    continue
                catalog_id = self._catalog_id(conn, str(row.execution_id))
                values = {k: v for k, v in row._mapping.items() if k != "command_id"}
                claimed.append(
                    ClaimedCommand(command_id=command_id, catalog_id=catalog_id, **values)
                )
        return claimed

    def _catalog_id(self, conn: Connection, execution_id: str) -> int:
        return self._catalog_of.get_or_load(
            execution_id, lambda: queries.catalog_of(conn, execution_id)
        )

    def renew_leases(self, command_ids: Sequence[str], seconds: float) -> set[str]:
        """Extend the leases of running commands in one statement; the ids still running."""
        if not command_ids:
            return set()
        until = utcnow() + timedelta(seconds=seconds)
        with self.db.single_write() as conn:
            return set(queries.renew_leases(conn, command_ids, until))

    def running_of(self, command_ids: Sequence[str]) -> set[str]:
        """Those of `command_ids` still running, in one statement."""
        if not command_ids:
            return set()
        with self.db.read() as conn:
            return set(queries.running_of(conn, command_ids))

    def release_claims(self, command_ids: Sequence[str], worker: str) -> list[str]:
        """Hand claimed, unstarted commands back (`issued` again) while still `worker`'s;
        the ids released, to be published again."""
        if not command_ids:
            return []
        with self.db.single_write() as conn:
            return queries.release_claims(conn, command_ids, worker, utcnow())

    def release_workers(self, workers: Sequence[str]) -> list[str]:
        """Hand back every command still running under one of `workers` (`issued`
        again, to be published); the ids (a stopping worker, tasks.shutdown)."""
        with self.db.single_write() as conn:
            return queries.release_workers(conn, workers, utcnow())

    def complete(self, command: ClaimedCommand, outcome: Outcome) -> bool:
        """Close a running command and append its terminal event (the inbox entry), in one
        transaction. False when the command is no longer ours (cancelled, re-issued)."""
        with self.db.write() as conn:
            return queries.close_command(conn, command, outcome, utcnow())

    @contextmanager
    def completion(
        self,
        command: ClaimedCommand,
        durable: bool = False,
        witness: queries.Witness | None = None,
    ) -> Iterator[CompletionTx]:
        """A transaction to close `command` and maybe orchestrate right after (see
        store.completion); `durable`: it commits synchronously on Postgres whatever
        `NOETL_SYNCHRONOUS_COMMIT` says (a cursor claim's close: its queue transaction
        commits next), unless that queue transaction (`witness`) runs on the engine's
        own server (store.queries.frames)."""
        with self.db.write() as conn:
            if durable and conn.dialect.name == "postgresql":
                if witness is None:
                    conn.execute(queries.SYNC_COMMIT)
                else:
                    conn.execute(queries.DURABLE_UNLESS_SAME_WAL, queries.witness_params(witness))
            yield CompletionTx(conn, command, self.result_cache, self.notifications)

    def renew_lease(self, command_id: str, seconds: float) -> bool:
        """Extend a running command's lease; False when it is no longer running."""
        until = utcnow() + timedelta(seconds=seconds)
        with self.db.single_write() as conn:
            return queries.renew_lease(conn, command_id, until)

    def any_claimed(self, execution_id: str) -> bool:
        """True once a worker has claimed any command of the execution (a client uses it
        to tell "workers are busy" from "no worker of this database is there")."""
        with self.db.read() as conn:
            return queries.any_claimed(conn, execution_id)

    def command_status(self, command_id: str) -> str | None:
        with self.db.read() as conn:
            return queries.command_status(conn, command_id)

    def set_deadline(self, command_id: str, seconds: float, keep: bool = False) -> float:
        """Start the command's step deadline `seconds` from now (with `keep`, the one it
        already has stays); the seconds left until the deadline in force."""
        now = utcnow()
        with self.db.single_write() as conn:
            deadline = queries.set_deadline(
                conn, command_id, now + timedelta(seconds=seconds), keep
            )
        return (deadline - now).total_seconds()

    # ---- immutable lookups ------------------------------------------------------------------
    def context(self, execution_id: str, version: int) -> dict[str, Any]:
        def load() -> dict[str, Any]:
            with self.db.read() as conn:
                return queries.context(conn, execution_id, version)

        return self._contexts.get_or_load((execution_id, version), load)

    def result(self, execution_id: str, step: str, epoch: int) -> Any:
        def load() -> Any:
            with self.db.read() as conn:
                return queries.result(conn, execution_id, step, epoch)

        return self.result_cache.get_or_load((execution_id, step, epoch), load)

    # ---- reads for operators ----------------------------------------------------------------
    def events(self, execution_id: str) -> list[EventRow]:
        with self.db.read() as conn:
            return queries.events_of(conn, execution_id)

    def command_counts(self, execution_id: str) -> CommandCounts:
        with self.db.read() as conn:
            return queries.command_counts(conn, execution_id)

    def loops(self, execution_id: str) -> list[LoopRow]:
        with self.db.read() as conn:
            return queries.loops_of(conn, execution_id)

    def in_flight(self, execution_id: str) -> list[InFlight]:
        """Per step: commands issued (waiting for a worker) and running (claimed)."""
        with self.db.read() as conn:
            return queries.in_flight(conn, execution_id)
