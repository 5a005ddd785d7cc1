"""`Store`: every query the engine makes (procrastinate style: SQL lives in one place).

Layers above receive plain rows (`store.rows`) and never see SQLAlchemy.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import datetime, timedelta
from typing import Any

from sqlalchemy import Connection, func, select, update
from sqlalchemy.exc import IntegrityError

from noetl_celery.constants import (
    CMD_ISSUED,
    CMD_RUNNING,
    EV_COMMAND_COMPLETED,
    EV_COMMAND_FAILED,
    EV_EXECUTION_STARTED,
    RUNNING,
    TRIGGER_MANUAL,
)
from noetl_celery.errors import CatalogNotFound, ExecutionNotFound, StoreError
from noetl_celery.store import overview
from noetl_celery.store.cache import ImmutableCache
from noetl_celery.store.completion import CompletionTx
from noetl_celery.store.database import Database
from noetl_celery.store.dialect import insert_ignore
from noetl_celery.store.orchestration import OrchestrationTx
from noetl_celery.store.rows import (
    CatalogEntry,
    ClaimedCommand,
    CommandCounts,
    EventRow,
    ExecutionRow,
    FailedItem,
    InFlight,
    LoopRow,
)
from noetl_celery.store.schema import (
    catalog,
    commands,
    contexts,
    events,
    executions,
    inbox,
    loops,
    results,
    utcnow,
)
from noetl_celery.store.statements import (
    CATALOG_OF,
    CLAIM,
    CLOSE_COMMAND,
    EXECUTION_COLUMNS,
    HAS_UNHANDLED,
    LOCK_TRY,
    LOCK_WAIT,
    STATE_OF,
    STATUS_OF,
)


def append_terminal(
    conn: Connection,
    execution_id: str,
    step: str,
    command_id: str,
    epoch: int,
    iteration: int | None,
    event_type: str,
    outcome: dict[str, Any],
    now: datetime,
) -> None:
    """A command's terminal event and its inbox entry (the unique index on the event
    keeps a second terminal of the same command out)."""
    event_id = conn.execute(
        insert_ignore(conn, events).returning(events.c.event_id),
        {
            "execution_id": execution_id,
            "type": event_type,
            "step": step,
            "command_id": command_id,
            "epoch": epoch,
            "iteration": iteration,
            "payload": outcome,
            "created_at": now,
        },
    ).scalar()
    if event_id is not None:
        conn.execute(
            inbox.insert().values(
                event_id=event_id,
                execution_id=execution_id,
                step=step,
                epoch=epoch,
                iteration=iteration,
            )
        )


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


def _execution(row: Any) -> ExecutionRow:
    return ExecutionRow(**row._mapping)


class Store:
    def __init__(self, database: Database) -> None:
        self.db = database
        self._results: ImmutableCache[tuple[str, str, int], Any] = ImmutableCache(256)
        self._contexts: ImmutableCache[tuple[str, int], dict[str, Any]] = ImmutableCache(256)
        self._catalog_of: ImmutableCache[str, int] = ImmutableCache(4096)
        self._content: ImmutableCache[int, str] = ImmutableCache(256)

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
            latest = conn.execute(
                select(catalog.c.catalog_id, catalog.c.version, catalog.c.content_sha256)
                .where(catalog.c.path == path)
                .order_by(catalog.c.version.desc())
                .limit(1)
            ).first()
            if latest is not None and latest.content_sha256 == digest:
                return CatalogEntry(latest.catalog_id, path, latest.version, name, created=False)
            version = 1 if latest is None else latest.version + 1
            row = conn.execute(
                catalog.insert()
                .values(
                    path=path,
                    version=version,
                    name=name,
                    content=content,
                    content_sha256=digest,
                    created_at=utcnow(),
                    scripts=scripts,
                )
                .returning(catalog.c.catalog_id)
            ).one()
        return CatalogEntry(row[0], path, version, name, created=True)

    def resolve_catalog(self, path: str, version: int | None = None) -> CatalogEntry:
        query = select(catalog.c.catalog_id, catalog.c.version, catalog.c.name).where(
            catalog.c.path == path
        )
        if version is not None:
            query = query.where(catalog.c.version == version)
        with self.db.read() as conn:
            row = conn.execute(query.order_by(catalog.c.version.desc()).limit(1)).first()
        if row is None:
            suffix = f" version {version}" if version is not None else ""
            raise CatalogNotFound(f"no playbook registered at catalog path '{path}'{suffix}")
        return CatalogEntry(row.catalog_id, path, row.version, row.name)

    def catalog_entry(self, catalog_id: int) -> CatalogEntry:
        """The catalog row `catalog_id` (a rerun starts the very version its original ran)."""
        with self.db.read() as conn:
            row = conn.execute(
                select(catalog.c.path, catalog.c.version, catalog.c.name).where(
                    catalog.c.catalog_id == catalog_id
                )
            ).first()
        if row is None:
            raise CatalogNotFound(f"no catalog entry {catalog_id}")
        return CatalogEntry(catalog_id, row.path, row.version, row.name)

    def catalog_content(self, catalog_id: int) -> str:
        def load() -> str:
            with self.db.read() as conn:
                value = conn.execute(
                    select(catalog.c.content).where(catalog.c.catalog_id == catalog_id)
                ).scalar_one()
            return str(value)

        return self._content.get_or_load(catalog_id, load)

    def catalog_scripts(self, catalog_id: int) -> dict[str, Any] | None:
        """The `script:` files stored with a catalog version (engine.scripts), or None."""
        with self.db.read() as conn:
            value = conn.execute(
                select(catalog.c.scripts).where(catalog.c.catalog_id == catalog_id)
            ).scalar_one_or_none()
        return value if isinstance(value, dict) else None

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
        conn: Connection | None = None,
    ) -> None:
        """A RUNNING execution and its `execution.started` event (in `conn`'s transaction
        when given: a schedule firing creates it together with its idempotency key)."""
        if conn is None:
            with self.db.write() as own:
                self.create_execution(
                    execution_id,
                    entry,
                    payload,
                    parent_execution_id=parent_execution_id,
                    parent_command_id=parent_command_id,
                    trigger=trigger,
                    rerun_of=rerun_of,
                    trigger_detail=trigger_detail,
                    owner=owner,
                    conn=own,
                )
            return
        now = utcnow()
        conn.execute(
            executions.insert().values(
                execution_id=execution_id,
                catalog_id=entry.catalog_id,
                path=entry.path,
                status=RUNNING,
                parent_execution_id=parent_execution_id,
                parent_command_id=parent_command_id,
                trigger=trigger,
                rerun_of=rerun_of,
                trigger_detail=trigger_detail,
                owner=owner,
                payload=payload or {},
                state=None,
                passes=0,
                created_at=now,
                updated_at=now,
            )
        )
        conn.execute(
            events.insert().values(
                execution_id=execution_id,
                type=EV_EXECUTION_STARTED,
                payload={
                    "path": entry.path,
                    "version": entry.version,
                    "catalog_id": entry.catalog_id,
                },
                created_at=now,
            )
        )

    def execution(self, execution_id: str) -> ExecutionRow:
        with self.db.read() as conn:
            row = conn.execute(
                select(*EXECUTION_COLUMNS).where(executions.c.execution_id == execution_id)
            ).first()
        if row is None:
            raise ExecutionNotFound(f"no execution with id {execution_id}")
        return _execution(row)

    def execution_status(self, execution_id: str) -> str:
        with self.db.read() as conn:
            status = conn.execute(STATUS_OF, {"b_eid": execution_id}).scalar()
        if status is None:
            raise ExecutionNotFound(f"no execution with id {execution_id}")
        return str(status)

    # ---- orchestration ----------------------------------------------------------------------
    @contextmanager
    def orchestration(self, execution_id: str, *, wait: bool) -> Iterator[OrchestrationTx | None]:
        """Lock the execution for one pass; yield None when another pass holds the lock
        (that pass re-checks the inbox before it lets go, so nothing is lost)."""
        with self.db.write() as conn:
            yield self._lock(conn, execution_id, wait=wait)

    def _lock(self, conn: Connection, execution_id: str, *, wait: bool) -> OrchestrationTx | None:
        row = conn.execute(LOCK_WAIT if wait else LOCK_TRY, {"b_eid": execution_id}).first()
        return None if row is None else OrchestrationTx(self, conn, _execution(row))

    def has_unhandled(self, execution_id: str) -> bool:
        with self.db.read() as conn:
            return conn.execute(HAS_UNHANDLED, {"b_eid": execution_id}).first() is not None

    # ---- commands (worker side) -------------------------------------------------------------
    def claim(self, command_id: str, worker: str, lease_seconds: int) -> ClaimedCommand | None:
        """Conditional claim: None means another delivery already took it (drop it)."""
        now = utcnow()
        params = {
            "b_cid": command_id,
            "b_worker": worker,
            "b_now": now,
            "b_lease": now + timedelta(seconds=lease_seconds),
        }
        with self.db.single_write() as conn:
            row = conn.execute(CLAIM, params).first()
            if row is None:
                return None
            catalog_id = self._catalog_of.get_or_load(
                row.execution_id,
                lambda: int(conn.execute(CATALOG_OF, {"b_eid": row.execution_id}).scalar_one()),
            )
        return ClaimedCommand(command_id=command_id, catalog_id=catalog_id, **row._mapping)

    def close_command(
        self, conn: Connection, command: ClaimedCommand, outcome: dict[str, Any]
    ) -> bool:
        ok = outcome.get("status") != "error"
        now = utcnow()
        closed = conn.execute(
            CLOSE_COMMAND,
            {
                "b_cid": command.command_id,
                "b_status": "completed" if ok else "failed",
                "b_now": now,
            },
        ).first()
        if closed is None:
            return False
        append_terminal(
            conn,
            command.execution_id,
            command.step,
            command.command_id,
            command.epoch,
            command.iteration,
            EV_COMMAND_COMPLETED if ok else EV_COMMAND_FAILED,
            outcome,
            now,
        )
        return True

    def complete(self, command: ClaimedCommand, outcome: dict[str, Any]) -> bool:
        """Close a running command and append its terminal event (the inbox entry), in one
        transaction. False when the command is no longer ours (cancelled, re-issued)."""
        with self.db.write() as conn:
            return self.close_command(conn, command, outcome)

    @contextmanager
    def completion(self, command: ClaimedCommand) -> Iterator[CompletionTx]:
        """A transaction to close `command` and maybe orchestrate right after (see
        store.completion)."""
        with self.db.write() as conn:
            yield CompletionTx(self, conn, command)

    def try_lock(self, conn: Connection, execution_id: str) -> OrchestrationTx | None:
        return self._lock(conn, execution_id, wait=False)

    @staticmethod
    def execution_state(conn: Connection, execution_id: str) -> dict[str, Any] | None:
        value = conn.execute(STATE_OF, {"b_eid": execution_id}).scalar()
        return dict(value) if value else None

    def renew_lease(self, command_id: str, seconds: float) -> bool:
        """Extend a running command's lease; False when it is no longer running."""
        now = utcnow()
        with self.db.single_write() as conn:
            row = conn.execute(
                update(commands)
                .where(commands.c.command_id == command_id, commands.c.status == CMD_RUNNING)
                .values(lease_until=now + timedelta(seconds=seconds))
                .returning(commands.c.command_id)
            ).first()
        return row is not None

    def any_claimed(self, execution_id: str) -> bool:
        """True once a worker has claimed any command of the execution (a client uses it
        to tell "workers are busy" from "no worker of this database is there")."""
        with self.db.read() as conn:
            row = conn.execute(
                select(commands.c.command_id)
                .where(commands.c.execution_id == execution_id, commands.c.started_at.is_not(None))
                .limit(1)
            ).first()
        return row is not None

    def command_status(self, command_id: str) -> str | None:
        with self.db.read() as conn:
            value = conn.execute(
                select(commands.c.status).where(commands.c.command_id == command_id)
            ).scalar()
        return None if value is None else str(value)

    def set_deadline(self, command_id: str, seconds: float) -> None:
        with self.db.single_write() as conn:
            conn.execute(
                update(commands)
                .where(commands.c.command_id == command_id)
                .values(deadline_at=utcnow() + timedelta(seconds=seconds))
            )

    # ---- immutable lookups ------------------------------------------------------------------
    def context(self, execution_id: str, version: int) -> dict[str, Any]:
        def load() -> dict[str, Any]:
            with self.db.read() as conn:
                value = conn.execute(
                    select(contexts.c.data).where(
                        contexts.c.execution_id == execution_id, contexts.c.version == version
                    )
                ).scalar_one()
            return dict(value)

        return self._contexts.get_or_load((execution_id, version), load)

    def result(
        self, execution_id: str, step: str, epoch: int, *, conn: Connection | None = None
    ) -> Any:
        def load() -> Any:
            query = select(results.c.data).where(
                results.c.execution_id == execution_id,
                results.c.step == step,
                results.c.epoch == epoch,
            )
            if conn is not None:
                return conn.execute(query).scalar_one()
            with self.db.read() as own:
                return own.execute(query).scalar_one()

        return self._results.get_or_load((execution_id, step, epoch), load)

    def summary(self, row: ExecutionRow, *, conn: Connection | None = None) -> dict[str, Any]:
        """An execution as `run --json` and a waiting parent see it: `{execution_id,
        status, result, error, duration_seconds, steps}` (steps: each step that ran ->
        its last result, what `{{ step_name }}` renders to)."""
        steps: dict[str, Any] = {}
        for name, st in ((row.state or {}).get("steps") or {}).items():
            epoch = st.get("result_epoch")
            if epoch is not None:
                steps[name] = self.result(row.execution_id, name, epoch, conn=conn)
        error = row.error
        if isinstance(error, dict):
            error = str(error.get("message") or error)
        return {
            "execution_id": row.execution_id,
            "status": row.status,
            "result": row.result,
            "error": None if error is None else str(error),
            "duration_seconds": round(row.duration_seconds, 3),
            "steps": steps,
        }

    # ---- reads for operators ----------------------------------------------------------------
    def events(self, execution_id: str) -> list[EventRow]:
        with self.db.read() as conn:
            rows = conn.execute(
                select(events)
                .where(events.c.execution_id == execution_id)
                .order_by(events.c.event_id)
            ).all()
        return [EventRow(**r._mapping) for r in rows]

    def failed_iterations(
        self, execution_id: str, step: str, epoch: int | None, limit: int, *, offset: int = 0
    ) -> list[FailedItem]:
        """`limit` failed iterations of a loop epoch (every epoch when None) from
        `offset`, in iteration order, with their items (through the failed iterations'
        partial index); `count_failed_iterations` tells how many there are."""
        return overview.failed_iterations(
            self, execution_id, step, epoch=epoch, offset=offset, limit=limit
        )

    def count_failed_iterations(
        self, execution_id: str, step: str, epoch: int | None = None
    ) -> int:
        return overview.count_failed_iterations(self, execution_id, step, epoch=epoch)

    def command_counts(self, execution_id: str) -> CommandCounts:
        with self.db.read() as conn:
            rows = conn.execute(
                select(commands.c.status, func.count())
                .where(commands.c.execution_id == execution_id)
                .group_by(commands.c.status)
            ).all()
        return CommandCounts(**{status: count for status, count in rows})

    def loops(self, execution_id: str) -> list[LoopRow]:
        with self.db.read() as conn:
            rows = conn.execute(
                select(
                    loops.c.step,
                    loops.c.epoch,
                    loops.c.mode,
                    loops.c.total,
                    loops.c.issued,
                    loops.c.succeeded,
                    loops.c.failed,
                    loops.c.done,
                    loops.c.started_at,
                    loops.c.updated_at,
                )
                .where(loops.c.execution_id == execution_id)
                .order_by(loops.c.step, loops.c.epoch)
            ).all()
        return [LoopRow(**r._mapping) for r in rows]

    def list_executions(
        self,
        *,
        status: str | None = None,
        path: str | None = None,
        trigger: str | None = None,
        limit: int = 20,
    ) -> list[ExecutionRow]:
        """Recent executions, newest first (the state snapshot is left out)."""
        columns = [c for c in EXECUTION_COLUMNS if c.name != "state"]
        query = select(*columns).order_by(executions.c.created_at.desc()).limit(limit)
        if status is not None:
            query = query.where(executions.c.status == status.upper())
        if path is not None:
            query = query.where(executions.c.path == path)
        if trigger is not None:
            query = query.where(executions.c.trigger == trigger.lower())
        with self.db.read() as conn:
            rows = conn.execute(query).all()
        return [ExecutionRow(state=None, **r._mapping) for r in rows]

    def in_flight(self, execution_id: str) -> list[InFlight]:
        """Per step: commands issued (waiting for a worker) and running (claimed)."""
        with self.db.read() as conn:
            rows = conn.execute(
                select(
                    commands.c.step,
                    commands.c.status,
                    func.count(),
                    func.min(commands.c.issued_at),
                )
                .where(
                    commands.c.execution_id == execution_id,
                    commands.c.status.in_((CMD_ISSUED, CMD_RUNNING)),
                )
                .group_by(commands.c.step, commands.c.status)
            ).all()
        return [InFlight(r[0], r[1], r[2], r[3]) for r in rows]
