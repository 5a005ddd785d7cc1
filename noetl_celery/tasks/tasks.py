"""The two Celery tasks; thin adapters over the engine (design §3)."""

from __future__ import annotations

from celery.signals import worker_init, worker_process_init

from noetl_celery.constants import (
    TASK_EXECUTE_COMMAND,
    TASK_FIRE_SCHEDULES,
    TASK_ORCHESTRATE,
    TASK_REAP,
)
from noetl_celery.logcontext import about
from noetl_celery.tasks import kombu_redis
from noetl_celery.tasks.app import app
from noetl_celery.tasks.runtime import engine, reset_after_fork


@worker_process_init.connect
def _fresh_engine_per_child(**_: object) -> None:
    reset_after_fork()


@worker_init.connect
def _worker_tuning(**_: object) -> None:
    kombu_redis.install()


@app.task(name=TASK_EXECUTE_COMMAND, acks_late=True, ignore_result=True)
def execute_command(command_id: str) -> None:
    """Claim and run one command, record its outcome, then orchestrate in place."""
    engine().executor.execute(command_id)


@app.task(name=TASK_ORCHESTRATE, acks_late=True, ignore_result=True)
def orchestrate(execution_id: str) -> None:
    """Fold the execution's waiting completions and issue what follows."""
    with about(execution_id=execution_id):
        engine().orchestrator.drive(execution_id, wait=True)


@app.task(name=TASK_REAP, acks_late=True, ignore_result=True)
def reap() -> None:
    """Put back lost work: republish, re-issue or fail lost commands, wake executions,
    end executions past their timeout (engine.reaper; one sweep at a time by lease)."""
    engine().reaper.sweep()


@app.task(name=TASK_FIRE_SCHEDULES, acks_late=True, ignore_result=True)
def fire_schedules() -> None:
    """Start the runs of due cron schedules (exactly once per schedule and fire time,
    however many beats send this)."""
    engine().schedules.fire_due()
