"""While `run` waits: are there workers for this engine database at all?

A client and workers configured with different NOETL_DATABASE_URLs share the broker but
not the tables: the workers refuse the client's messages (tasks.tasks) and the client
would wait forever. Until a worker claims one of the execution's commands, `run`'s wait
loop calls a `WorkerCheck` (it acts at most once a second): after a few seconds it asks
the workers which database they use. None answering is a warning (start one, and the
run goes on); workers that all use another database end the run with one line naming
both databases, its execution cancelled so nothing is left RUNNING. While the
execution's commands are held for a broker that is away (engine.outbox), the check waits:
no worker could answer then, and the progress line names the broker instead.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import click

from noetl_celery.engine.service import Engine
from noetl_celery.errors import WorkersElsewhere
from noetl_celery.settings import Settings

Answers = Sequence[Mapping[str, Any]]  # tasks.fleet.fleet_identities, only read here

POLL_SECONDS = 1.0  # how often the check looks at the database
ASK_AFTER_SECONDS = 3.0  # nothing claimed this long: ask the fleet (then every as long)
WARN_AFTER_SECONDS = 10.0  # nothing claimed this long: say so once


def describe(answers: Answers) -> str:
    """`postgresql://...B (identity id/B): w1@h, w2@h`, one group per database."""
    groups: dict[tuple[str, str], list[str]] = {}
    for answer in answers:
        key = (str(answer.get("database") or "?"), str(answer.get("database_id") or "unknown"))
        groups.setdefault(key, []).append(str(answer.get("hostname")))
    return "; ".join(
        f"{url} (identity {ident}): {', '.join(sorted(hosts))}"
        for (url, ident), hosts in sorted(groups.items())
    )


class WorkerCheck:
    def __init__(
        self,
        engine: Engine,
        settings: Settings,
        execution_id: str,
        ask: Callable[[], Answers],
        warn: Callable[[str], None],
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._engine, self._settings, self._execution_id = engine, settings, execution_id
        self._ask, self._warn, self._clock = ask, warn, clock
        self._started = clock()
        self._next_poll = self._started
        self._next_ask = self._started + ASK_AFTER_SECONDS
        self._done = False
        self._warned: set[str] = set()

    def __call__(self) -> None:
        """Raises WorkersElsewhere (after cancelling the execution) when every worker
        that answers uses another database."""
        now = self._clock()
        if self._done or now < self._next_poll:
            return
        self._next_poll = now + POLL_SECONDS
        if self._engine.store.any_claimed(self._execution_id):
            self._done = True  # a worker of this database exists: nothing more to check
            return
        if self._engine.store.outbox.waiting(self._execution_id):
            # its commands wait for the broker, not for a worker: the progress line says
            # so, and no worker can answer a broker that is away (engine.outbox)
            self._started, self._next_ask = now, now + ASK_AFTER_SECONDS
            return
        waited = now - self._started
        if now >= self._next_ask:
            self._next_ask = now + ASK_AFTER_SECONDS
            self._judge(self._ask())
        if waited >= WARN_AFTER_SECONDS:
            self._warn_once(
                "slow",
                f"no worker has claimed a command of execution {self._execution_id} "
                f"after {waited:.0f} s (workers busy, or none for "
                f"{self._settings.shown_database_url})",
            )

    def _judge(self, answers: Answers) -> None:
        broker = self._settings.shown_broker_url
        if not answers:
            self._warn_once(
                "none",
                f"waiting for a worker: no noetl-celery worker answers on {broker}; start "
                "one with the same NOETL_DATABASE_URL",
            )
            return
        mine = self._engine.database_id
        if mine is None or any("database_id" not in a for a in answers):
            return  # older workers (no identity to compare): keep waiting
        if any(a["database_id"] == mine for a in answers):
            return  # a worker of this database is there (busy, or starting)
        reason = (
            f"the workers on {broker} use another engine database: {describe(answers)}; "
            f"this client uses {self._settings.shown_database_url} (identity {mine}); "
            "give the client and the workers the same NOETL_DATABASE_URL"
        )
        self._engine.cancel(self._execution_id, reason)
        self._done = True
        raise WorkersElsewhere(f"{reason} (execution {self._execution_id} cancelled)")

    def _warn_once(self, key: str, message: str) -> None:
        if key not in self._warned:
            self._warned.add(key)
            self._warn(message)


def worker_check(
    engine: Engine, settings: Settings, execution_id: str
) -> Callable[[], None] | None:
    """The check for `run`'s wait loop; None in the embedded mode (commands run here)."""
    if settings.embedded:
        return None
    from noetl_celery.tasks.app import make_app
    from noetl_celery.tasks.fleet import fleet_identities

    app = make_app(settings)
    return WorkerCheck(
        engine,
        settings,
        execution_id,
        ask=lambda: fleet_identities(app, timeout=1.0),
        warn=lambda message: click.echo(f"warning: {message}", err=True),
    )
