"""The Celery tasks; thin adapters over the engine (docs/design.md §3).

Each message names the engine database it was minted against (`db`, tasks.dispatcher).
A worker on another database must not claim anything: in its own database the command
does not exist, so the claim would find nothing and the message would be dropped as a
duplicate delivery, the work lost for the client and the misconfiguration silent. The
task refuses it instead, loudly, and puts the message back for a worker of the right
database. A message without `db` (published by an older version) is accepted.
"""

from __future__ import annotations

import logging
import time

from celery.exceptions import Reject
from celery.signals import (
    worker_init,
    worker_process_init,
    worker_process_shutdown,
    worker_ready,
    worker_shutdown,
)

from noetl_celery import tracing
from noetl_celery.constants import (
    TASK_EXECUTE_COMMAND,
    TASK_EXECUTE_COMMANDS,
    TASK_FIRE_SCHEDULES,
    TASK_ORCHESTRATE,
    TASK_PRUNE,
    TASK_REAP,
)
from noetl_celery.logcontext import about
from noetl_celery.tasks import fleet, kombu_redis
from noetl_celery.tasks import shutdown as _shutdown  # noqa: F401  (connects its signal)
from noetl_celery.tasks.app import app, settings
from noetl_celery.tasks.runtime import (
    engine,
    read_identity,
    reset_after_fork,
    runs_tasks_here,
    start_soon,
)
from noetl_celery.worker import reports

log = logging.getLogger("noetl_celery.tasks")

# a refused message is put back after this pause, so a lone misconfigured worker does not
# spin on it (it gets the message again, and says so again, every few seconds)
REFUSE_PAUSE_SECONDS = 2.0


@worker_process_init.connect
def _fresh_engine_per_child(**_: object) -> None:
    reset_after_fork()
    tracing.runtime()  # this process's span exporter (its parent's thread did not fork)
    start_soon()  # its relay runs whether or not a task comes (engine.outbox)


@worker_process_shutdown.connect
@worker_shutdown.connect
def _flush_traces(**_: object) -> None:
    # a pool process may end without running atexit handlers: the spans its batch
    # processor still holds are sent now (no-op with tracing off)
    tracing.shutdown()


@worker_ready.connect
def _engine_in_the_main_process(**_: object) -> None:
    if runs_tasks_here():  # solo, threads: no child processes
        start_soon()


@worker_init.connect
def _worker_start(**_: object) -> None:
    kombu_redis.install()
    tracing.preload()  # imported once, before the pool forks
    if not fleet.identity_known():  # started by `celery worker`, not `noetl-celery worker`
        fleet.set_identity(read_identity(), settings.shown_database_url)


def refuse_foreign(minted: str | None, what: str) -> None:
    """Raise Reject(requeue) when the message was minted against another database."""
    if minted is None:
        return
    mine = engine().database_id
    if minted == mine:
        return
    log.error(
        "refusing %s: it was published for the engine database %s, but this worker uses %s "
        "(%s); the message goes back to the queue for a worker on that database: give "
        "the workers and their clients the same NOETL_DATABASE_URL",
        what,
        minted,
        mine,
        settings.shown_database_url,
    )
    time.sleep(REFUSE_PAUSE_SECONDS)
    raise Reject(f"minted for engine database {minted}, this worker uses {mine}", requeue=True)


class CommandFailed(Exception):
    """The command's tool failed (recorded in the engine database like any outcome).
    Raised only so Celery-level observers (Flower, `celery events`) see a FAILURE
    instead of a clean SUCCESS; expected (`throws`): logged at INFO without a traceback,
    and acked like a success (the engine's bookkeeping is already done)."""


@app.task(name=TASK_EXECUTE_COMMAND, acks_late=True, ignore_result=True, throws=(CommandFailed,))
def execute_command(command_id: str, db: str | None = None) -> reports.TaskResult:
    """Claim and run one command, record its outcome, then orchestrate in place. Returns
    `{status, execution_id, step[, kind]}` (worker.reports) for whoever watches tasks."""
    refuse_foreign(db, f"command {command_id}")
    report = engine().executor.execute(command_id)
    if report.status == reports.FAILED:
        raise CommandFailed(report.failure_text())
    return report.as_result()


@app.task(name=TASK_EXECUTE_COMMANDS, acks_late=True, ignore_result=True, throws=(CommandFailed,))
def execute_commands(command_ids: list[str], db: str | None = None) -> list[reports.TaskResult]:
    """Claim and run a batch of commands (worker.batch): one report per command it ran
    or skipped as already taken; a FAILURE for Celery's observers if any failed."""
    refuse_foreign(db, f"a batch of {len(command_ids)} commands")
    done = engine().batches.execute(command_ids)
    failed = [r for r in done if r.status == reports.FAILED]
    if failed:
        more = f" (and {len(failed) - 1} more)" if len(failed) > 1 else ""
        raise CommandFailed(failed[0].failure_text() + more)
    return [r.as_result() for r in done]


@app.task(name=TASK_ORCHESTRATE, acks_late=True, ignore_result=True)
def orchestrate(execution_id: str, db: str | None = None) -> None:
    """Fold the execution's waiting completions and issue what follows."""
    refuse_foreign(db, f"the orchestration of execution {execution_id}")
    with about(execution_id=execution_id):
        engine().orchestrator.drive(execution_id, wait=True)


@app.task(name=TASK_REAP, acks_late=True, ignore_result=True)
def reap(db: str | None = None) -> None:
    """Put back lost work: republish, re-issue or fail lost commands, wake executions,
    end executions past their timeout (engine.sweeper; one sweep at a time by lease)."""
    refuse_foreign(db, "a reaper sweep")
    engine().reaper.sweep()


@app.task(name=TASK_FIRE_SCHEDULES, acks_late=True, ignore_result=True)
def fire_schedules(db: str | None = None) -> None:
    """Start the runs of due cron schedules (exactly once per schedule and fire time,
    however many beats send this)."""
    refuse_foreign(db, "a schedule tick")
    engine().schedules.fire_due()


@app.task(name=TASK_PRUNE, acks_late=True, ignore_result=True)
def prune(db: str | None = None) -> None:
    """NOETL_RETENTION's prune: delete the executions that ended longer ago than it, at
    most once a day across the fleet (engine.retention; the daily lease decides)."""
    refuse_foreign(db, "a retention prune")
    if settings.retention_seconds > 0:
        from noetl_celery.engine.retention import Pruner

        Pruner(engine().store).daily(settings.retention_seconds)
