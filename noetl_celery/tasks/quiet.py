"""Keep the periodic housekeeping tasks out of the default log.

Beat sends `noetl.fire_schedules` every NOETL_SCHEDULE_TICK_SECONDS (1 s) and
`noetl.reap` every few seconds. At Celery's INFO level each tick costs a worker two lines
(`Task ... received` from `celery.worker.strategy`, `Task ... succeeded` from
`celery.app.trace`) and beat one (`Sending due task` from `celery.beat`): a log that
grows by ~10k lines an hour of nothing, burying the lines that matter. Celery has no
per-task log level, so a filter on those loggers turns these INFO records into DEBUG
ones: shown under `-l DEBUG`, dropped otherwise. Only INFO records are touched: a tick
that fails is logged by Celery at ERROR and still shows, and what a tick *does* (a
schedule fired, a command republished or re-issued) is logged by the engine itself.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping

from noetl_celery.constants import TASK_FIRE_SCHEDULES, TASK_REAP

QUIET_TASKS = frozenset({TASK_FIRE_SCHEDULES, TASK_REAP})
# Celery's loggers that write a line per task message: received, succeeded, discarded
# (an expired tick a busy worker drops), and beat's "Sending due task"
LOGGERS = ("celery.worker.strategy", "celery.app.trace", "celery.worker.request", "celery.beat")


def _about_quiet_task(record: logging.LogRecord) -> bool:
    args = record.args
    if isinstance(args, Mapping):  # trace and strategy log `fmt % {name, id, ...}`
        return args.get("name") in QUIET_TASKS
    if isinstance(args, tuple):  # beat: (entry name, task name); request: (name, id)
        return any(isinstance(arg, str) and arg in QUIET_TASKS for arg in args)
    return False


class QuietTicks(logging.Filter):
    """INFO lines about a periodic housekeeping task become DEBUG lines."""

    def filter(self, record: logging.LogRecord) -> bool:
        if record.levelno != logging.INFO or not _about_quiet_task(record):
            return True
        if not logging.getLogger(record.name).isEnabledFor(logging.DEBUG):
            return False
        record.levelno, record.levelname = logging.DEBUG, logging.getLevelName(logging.DEBUG)
        return True


def quiet_periodic_task_logs() -> None:
    """Install the filter (idempotent; a prefork child inherits it)."""
    for name in LOGGERS:
        logger = logging.getLogger(name)
        if not any(isinstance(f, QuietTicks) for f in logger.filters):
            logger.addFilter(QuietTicks())
