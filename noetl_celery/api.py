"""The Python API: `run()` for one-shot use, `Client` for submit / status / wait / events /
logs / rerun.

    import noetl_celery
    result = noetl_celery.run("playbooks/examples/hello_world.yaml", {"message": "Hi"})
    result["status"]  # "COMPLETED"

    with noetl_celery.Client() as client:
        execution_id = client.submit("my_flow.yaml", payload={"day": "2026-11-22"})
        summary = client.wait(execution_id, timeout=600)

Settings come from the environment (`NOETL_DATABASE_URL`, `NOETL_BROKER_URL`, ...) unless
given. Without a broker the client runs commands on in-process threads, so an embedded
execution only progresses while the client is open. A broker needs a Postgres database
the workers share (ConfigurationError otherwise), at this version's revision
(SchemaOutdated: run `noetl-celery db upgrade`); only the embedded default database is
created and migrated on the way.
"""

from __future__ import annotations

import os
from collections.abc import Collection
from pathlib import Path
from types import TracebackType
from typing import TYPE_CHECKING, Any

from noetl_celery.engine.bootstrap import Role, build_engine
from noetl_celery.models.filters import ExecutionFilter
from noetl_celery.models.validation import read_playbook
from noetl_celery.settings import Settings
from noetl_celery.tasks.broker import client_dispatcher

if TYPE_CHECKING:
    from noetl_celery.engine.summaries import ExecutionLine, RunSummary, StatusView
    from noetl_celery.store.rows import EventJSON, LogJSON

PlaybookSource = str | os.PathLike[str]


def _read(playbook: PlaybookSource) -> tuple[str, str | None]:
    """A path (or path-like string) is read; a string with a newline is YAML text.
    `InputInvalid` names a file that cannot be read, is too large or is not UTF-8."""
    if isinstance(playbook, os.PathLike) or _is_file(playbook):
        path = Path(playbook)
        return read_playbook(path), str(path)
    return str(playbook), None


def _is_file(text: str) -> bool:
    if "\n" in text or "\x00" in text:  # YAML text; a NUL makes the OS refuse the path
        return False
    try:
        return Path(text).is_file()
    except OSError:  # a one-line YAML text longer than a file name can be
        return False


class Client:
    def __init__(self, settings: Settings | None = None) -> None:
        self.settings = settings or Settings.from_env()
        self.engine = build_engine(self.settings, Role.CLIENT, broker=client_dispatcher)

    def register(self, playbook: PlaybookSource) -> dict[str, Any]:
        """Register a playbook in the catalog; returns {path, version, catalog_id}.
        Raises `PlaybookInvalid` or `InputInvalid` (a file too large or not UTF-8)."""
        text, file = _read(playbook)
        _, entry = self.engine.register_text(text, file)
        return {"path": entry.path, "version": entry.version, "catalog_id": entry.catalog_id}

    def submit(self, playbook: PlaybookSource, payload: dict[str, Any] | None = None) -> str:
        """Start an execution of a playbook file or YAML text; returns its id. Bad input
        raises before anything is written: `PlaybookInvalid`, `PayloadInvalid` (too deep,
        too large, text Postgres cannot store), `InputInvalid` (file not UTF-8, ...)."""
        text, file = _read(playbook)
        return self.engine.start_text(text, payload, file=file)

    def submit_path(
        self, catalog_path: str, payload: dict[str, Any] | None = None, version: int | None = None
    ) -> str:
        """Start the registered playbook at `catalog_path` (latest version unless given)."""
        return self.engine.start_path(catalog_path, payload, version)

    def wait(self, execution_id: str, timeout: float | None = None) -> RunSummary:
        """Block until the execution is terminal; returns the `run --json` summary."""
        self.engine.wait(execution_id, timeout)
        return self.engine.summary(execution_id)

    def status(self, execution_id: str) -> StatusView:
        return self.engine.status(execution_id)

    def executions(
        self,
        *,
        status: str | None = None,
        playbook: str | None = None,
        trigger: str | None = None,
        limit: int = 20,
    ) -> list[ExecutionLine]:
        """Recent executions, newest first (`playbook` is a catalog path, `trigger` how
        they were started: manual, schedule, rerun or parent)."""
        match = ExecutionFilter(status=status, path=playbook, trigger=trigger, limit=limit)
        return self.engine.executions(match)

    def cancel(self, execution_id: str) -> bool:
        """Cancel a running execution and its children; False if it had already ended."""
        return self.engine.cancel(execution_id, "cancelled through the Python API")

    def summary(self, execution_id: str) -> RunSummary:
        return self.engine.summary(execution_id)

    def rerun(
        self,
        execution_id: str,
        *,
        from_step: str | None = None,
        failed_items: bool = False,
        overrides: dict[str, Any] | None = None,
    ) -> str:
        """Start a rerun of an ended execution (same catalog version, its payload plus
        `overrides`): from the first step, from `from_step`, or over the failed items of
        its loops. Returns the new id; raises RerunError for one that cannot be made."""
        return self.engine.rerun(
            execution_id, from_step=from_step, failed_items=failed_items, overrides=overrides
        )

    def events(
        self,
        execution_id: str,
        *,
        types: Collection[str] = (),
        step: str | None = None,
        limit: int | None = None,
    ) -> list[EventJSON]:
        """Events oldest first (of any of `types`, of `step`; the newest `limit`)."""
        return self.engine.events(execution_id, types=types, step=step, limit=limit)

    def logs(
        self, execution_id: str, *, step: str | None = None, limit: int | None = None
    ) -> list[LogJSON]:
        """What the execution's commands printed and logged, one entry per command run:
        `{log_id, command_id, step, iteration, text, truncated, created_at, ...}`."""
        return self.engine.logs_page(execution_id, step=step, limit=limit)[0]

    def close(self) -> None:
        self.engine.close()

    def __enter__(self) -> Client:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()


def run(
    playbook: PlaybookSource,
    payload: dict[str, Any] | None = None,
    *,
    settings: Settings | None = None,
    timeout: float | None = None,
) -> RunSummary:
    """Run a playbook (file path or YAML text) to its end; returns the summary
    `{execution_id, status, result, error, duration_seconds, steps}`."""
    with Client(settings) as client:
        return client.wait(client.submit(playbook, payload), timeout)
