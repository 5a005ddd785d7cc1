"""The writes of cursor frames whose claims' workers run them (worker.frames): the chained
close of a frame (orchestrator.cursor's chains), and what tells whether a claim's queue
runs on the engine's own server (store.queries.frames)."""

from __future__ import annotations

from collections.abc import Sequence

from sqlalchemy.exc import DataError, SQLAlchemyError

from noetl_celery.errors import StoreError
from noetl_celery.models.outcome import Outcome
from noetl_celery.store import queries
from noetl_celery.store.completion import Closed, CompletionTx, closed_of, not_storable
from noetl_celery.store.database import Database
from noetl_celery.store.orchestration import keyed_rows
from noetl_celery.store.queries import ResultCache
from noetl_celery.store.queries.commands import FinishedBody
from noetl_celery.store.rows import ClaimedCommand, FrameRows, LogRow
from noetl_celery.store.schema import utcnow


class FramesManager:
    def __init__(self, database: Database, results: ResultCache) -> None:
        self.db = database
        self._results = results
        self._cluster: tuple[str | None] | None = None  # cluster_id, once read

    def close_and_chain(
        self,
        command: ClaimedCommand,
        outcome: Outcome,
        body: FinishedBody,
        following: queries.NextClaim,
        logs: Sequence[LogRow] = (),
    ) -> tuple[Closed, bool, FrameRows | None] | None:
        """Close a per-frame cursor claim whose body its worker ran, writing the body,
        and issue the lane's next claim (`following`) as claimed by this worker, in one
        statement, no lock (orchestrator.cursor's chains): (what the close saw, whether
        the next claim was issued, the rows recorded on it when the worker claimed its
        frame ahead: `following.rows`). The claim's completion says whether it was
        issued. In autocommit, or with the command's captured output (`logs`) in one
        transaction. None: not on this database (SQLite); nothing was written.
        ResultNotStorable when the database refuses a value of the outcome, of the
        body's or of the rows (nothing written)."""
        if self.db.is_sqlite:
            return None
        keyed = None if following.rows is None else keyed_rows(following.rows)
        try:
            with self.db.write() if logs else self.db.single_write() as conn:
                row = queries.close_and_chain(
                    conn, command, outcome, *body, following, utcnow(), keyed
                )
                if logs and row is not None and row.closed:
                    CompletionTx(conn, command, self._results).add_logs(logs)
        except DataError as exc:
            raise not_storable(exc) from exc
        if row is None or not row.closed:
            return Closed(closed=False), False, None
        recorded = FrameRows.of(row.resume) if row.chained else None
        return closed_of(row, int(row.waiting) + 1), bool(row.chained), recorded

    @property
    def chains(self) -> bool:
        """Whether this database closes frames chained (Postgres, not SQLite)."""
        return not self.db.is_sqlite

    def cluster_id(self) -> str | None:
        """The engine database's server (its system identifier), None on SQLite or when
        the server does not say: read once (cursors.postgres compares its queue's)."""
        if self._cluster is None:
            found: str | None = None
            if not self.db.is_sqlite:
                try:
                    with self.db.read() as conn:
                        found = queries.cluster_id(conn)
                except (StoreError, SQLAlchemyError):  # not said (a role without the right)
                    found = None
            self._cluster = (found,)
        return self._cluster[0]
