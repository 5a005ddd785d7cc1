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

Once a worker has claimed a command, the check goes on for routed steps (routing): a
command of a step routed to a queue that no worker of this database consumes would wait
forever, so after WARN_AFTER_SECONDS of waiting the fleet is asked which queues it
serves, and an unserved queue is named once, with the command that serves it. `status`
asks the same question (`unserved_queues`).
"""

from __future__ import annotations

import datetime as dt
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

import click

from noetl_celery.constants import CMD_ISSUED
from noetl_celery.engine.service import Engine
from noetl_celery.errors import WorkersElsewhere
from noetl_celery.settings import Settings
from noetl_celery.store.schema import utcnow

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


def unserved_queues(
    waiting: Iterable[Mapping[str, Any]], answers: Answers, mine: str | None
) -> dict[str, list[str]]:
    """Routed queues that waiting steps (status_view's `waiting`) need and that no
    answering worker of database `mine` consumes: queue -> its waiting steps. Nothing
    when no worker answers (that is the "no worker at all" case) or when an answer does
    not list its queues (an older worker: it may serve them)."""
    ours = [a for a in answers if mine is None or a.get("database_id") == mine]
    if not ours or any("queues" not in a for a in ours):
        return {}
    served = {str(q) for a in ours for q in a["queues"] or ()}
    missing: dict[str, list[str]] = {}
    for entry in waiting:
        queue = entry.get("queue")
        if queue and queue not in served:
            missing.setdefault(str(queue), []).append(str(entry["step"]))
    return missing


def unserved_text(queue: str, steps: Sequence[str]) -> str:
    names = ", ".join(steps)
    return (
        f"step{'s' if len(steps) != 1 else ''} {names} wait{'' if len(steps) != 1 else 's'} "
        f"on queue {queue}, which no worker of this engine database consumes: start one "
        f"with `noetl-celery worker -Q {queue}`"
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
        self._done = False  # a worker of this database claimed a command
        self._warned: set[str] = set()
        self._queues: dict[str, str] | None = None  # the execution's routed steps

    def __call__(self) -> None:
        """Raises WorkersElsewhere (after cancelling the execution) when every worker
        that answers uses another database."""
        now = self._clock()
        if now < self._next_poll:
            return
        self._next_poll = now + POLL_SECONDS
        if self._done:
            self._routes(now)
            return
        if self._engine.store.any_claimed(self._execution_id):
            self._done = True  # a worker of this database exists: routed queues are left
            self._next_ask = now
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

    def _routes(self, now: float) -> None:
        """Warn once per routed queue that a step has waited on for WARN_AFTER_SECONDS
        and that no worker of this database consumes."""
        if self._queues is None:
            catalog_id = self._engine.store.execution(self._execution_id).catalog_id
            self._queues = self._engine.routed_queues(catalog_id)
        if not self._queues or now < self._next_ask:
            return
        cutoff = utcnow() - dt.timedelta(seconds=WARN_AFTER_SECONDS)
        waiting = [
            {"step": f.step, "queue": self._queues.get(f.step)}
            for f in self._engine.store.in_flight(self._execution_id)
            if f.status == CMD_ISSUED and f.oldest_issued_at and f.oldest_issued_at <= cutoff
        ]
        if not any(w["queue"] and f"queue:{w['queue']}" not in self._warned for w in waiting):
            return
        self._next_ask = now + ASK_AFTER_SECONDS
        missing = unserved_queues(waiting, self._ask(), self._engine.database_id)
        for queue, steps in missing.items():
            self._warn_once(f"queue:{queue}", unserved_text(queue, steps))

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
