"""Which engine database each worker uses, told and asked over the broker.

A worker keeps the identity of its engine database (read once, at its start) and answers
the `noetl_identity` remote-control command with it; `fleet_identities` asks every worker
at once, so a client whose commands nobody claims can tell "no worker is running" from
"the workers use another database" (cli.fleet).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any

from celery import Celery
from celery.worker.control import inspect_command

log = logging.getLogger("noetl_celery.fleet")

IDENTITY_COMMAND = "noetl_identity"


@dataclass
class _Identity:
    database_id: str | None = None
    database: str = ""  # the URL, password masked
    known: bool = False


_mine = _Identity()


def set_identity(database_id: str | None, database: str) -> None:
    """What this worker answers: set in the worker's main process before it starts."""
    _mine.database_id, _mine.database, _mine.known = database_id, database, True


def identity_known() -> bool:
    return _mine.known


@inspect_command(name=IDENTITY_COMMAND)
def noetl_identity(state: Any, **_: Any) -> dict[str, Any]:
    """The remote-control answer: this worker's engine database, host and the queues it
    consumes (a routed step waits on a queue no worker serves: `status` says so)."""
    return {
        "database_id": _mine.database_id,
        "database": _mine.database,
        "hostname": state.hostname,
        "queues": _consumed(state),
    }


def _consumed(state: Any) -> list[str]:
    try:
        return sorted(q.name for q in state.consumer.task_consumer.queues)
    except AttributeError:  # the consumer is still starting: no queue is served yet
        return []


def fleet_identities(app: Celery, timeout: float = 1.0) -> list[dict[str, Any]]:
    """Every worker's answer within `timeout`: `{hostname, database_id, database, queues}`; an
    older worker that does not know the command answers without `database_id`. [] when
    no worker answers, or the broker cannot be reached (logged)."""
    try:
        with app.connection_for_write() as connection:
            # kombu retries a dead broker forever: a diagnosis must not hang on it
            connection.ensure_connection(max_retries=1)
            replies = app.control.broadcast(
                IDENTITY_COMMAND, reply=True, timeout=timeout, connection=connection
            )
    except Exception as exc:  # kombu raises its transport's errors: any means "no answer"
        log.warning("could not ask the workers which database they use: %s", exc)
        return []
    answers: list[dict[str, Any]] = []
    for reply in replies or []:
        for hostname, answer in reply.items():
            if isinstance(answer, dict) and "database_id" in answer:
                answers.append({**answer, "hostname": answer.get("hostname") or hostname})
            else:
                answers.append({"hostname": hostname})
    return answers
