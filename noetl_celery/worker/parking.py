"""A pipeline waiting out a long retry delay gives its worker slot back (design §2.7).

`run_pipeline` answers `Parked` (its run state, the waiting task, the delay) when a
retry's delay, its backoff or the server's `Retry-After`, is above
`NOETL_PARK_AFTER_SECONDS`. The command is then parked in Postgres: `delayed`, due when
the delay is over, with the continuation in `resume`; what it printed so far is stored
now (the resumed run adds a block of its own). The reaper's sweep issues it when due,
any worker claims it, and the pipeline resumes at the waiting task with its attempt
count kept, so the rule's `attempts` still bounds it. A cancel of the execution cancels
the parked row; a worker killed meanwhile loses nothing (nothing of it is in a worker).
"""

from __future__ import annotations

import logging

from noetl_celery import logcapture
from noetl_celery.engine.logsink import LogSink
from noetl_celery.logcontext import of_command
from noetl_celery.store.history import write_logs
from noetl_celery.store.repository import Store
from noetl_celery.store.rows import ClaimedCommand
from noetl_celery.tools.redaction import mask_command_value
from noetl_celery.worker.pipeline import Parked

log = logging.getLogger("noetl_celery.worker")


def masked(parked: Parked) -> Parked:
    """The continuation with the command's keychain values masked (it is stored)."""
    return Parked(mask_command_value(parked.continuation), parked.delay, parked.task)


def park(
    store: Store,
    command: ClaimedCommand,
    parked: Parked,
    capture: logcapture.Capture | None,
) -> bool:
    """Park `command` until its delay is over; False when it was no longer ours (the
    row had been cancelled or taken over: nothing is written, nothing comes back)."""
    resume = {
        "continuation": parked.continuation,
        "parked": {"task": parked.task, "delay": parked.delay},
    }
    write_logs(store, LogSink.command_rows(capture, command))
    due = store.parking.park(command.command_id, resume, parked.delay)
    if due is None:
        log.info(
            "command %s was no longer running when it was to wait %.3gs: dropped",
            command.command_id,
            parked.delay,
            extra=of_command(command.command_id),
        )
        return False
    log.info(
        "command %s: task '%s' retries in %.3gs; parked until %s (the slot is free)",
        command.command_id,
        parked.task,
        parked.delay,
        due.isoformat(timespec="milliseconds"),
        extra=of_command(command.command_id),
    )
    return True
