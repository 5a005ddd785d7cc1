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

While the broker is down, beat logs every tick it cannot send at ERROR with the stack
and the whole exception chain: about 150 lines a tick, two ticks a second. `BrokerDown`
keeps each such record, at ERROR, as its one line (beat keeps going and sends at the
next tick once the broker is back; the reaper then republishes what was lost).
"""

from __future__ import annotations

import logging
from collections.abc import Mapping

from noetl_celery.constants import TASK_FIRE_SCHEDULES, TASK_PRUNE, TASK_REAP

QUIET_TASKS = frozenset({TASK_FIRE_SCHEDULES, TASK_PRUNE, TASK_REAP})
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


def _broker_unreachable(exc: BaseException | None) -> bool:
    """True when `exc` or what caused it is a connection error (redis-py's included)."""
    from kombu.exceptions import OperationalError

    seen = 0
    while exc is not None and seen < 10:
        if isinstance(exc, (OperationalError, OSError)) or (
            type(exc).__name__ == "ConnectionError" and type(exc).__module__.startswith("redis")
        ):
            return True
        exc = exc.__cause__ or exc.__context__
        seen += 1
    return False


class BrokerDown(logging.Filter):
    """Beat's "Message Error" about a broker it cannot reach: one line, no traceback."""

    def filter(self, record: logging.LogRecord) -> bool:
        if record.levelno < logging.ERROR or not record.exc_info:
            return True
        if not str(record.msg).startswith("Message Error"):
            return True
        exc = record.exc_info[1]
        if not _broker_unreachable(exc):
            return True
        record.msg = "Message Error: %s (the broker is unreachable; sent again at the next tick)"
        record.args = (exc,)
        record.exc_info = None
        record.exc_text = None
        return True


def quiet_periodic_task_logs() -> None:
    """Install the filters (idempotent; a prefork child inherits them)."""
    for name in LOGGERS:
        logger = logging.getLogger(name)
        if not any(isinstance(f, QuietTicks) for f in logger.filters):
            logger.addFilter(QuietTicks())
    beat = logging.getLogger("celery.beat")
    if not any(isinstance(f, BrokerDown) for f in beat.filters):
        beat.addFilter(BrokerDown())
