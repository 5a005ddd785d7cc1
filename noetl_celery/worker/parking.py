"""A pipeline waiting out a long retry delay gives its worker slot back (docs/design.md §2.7).

`run_pipeline` answers `Parked` (its run state, the waiting task, the delay) when a
retry's delay, its backoff or the server's `Retry-After`, is above
`NOETL_PARK_AFTER_SECONDS`. The command is then parked in Postgres: `delayed`, due when
the delay is over, with the continuation in `resume`; what it printed so far is stored
now (the resumed run adds a block of its own). When the wait is over the process that
parked it issues and publishes it (`Wakeups`: one timer thread per process, holding no
worker slot), or, if that process is gone, the reaper's sweep does; any worker claims
it, and the pipeline resumes at the waiting task with its attempt count kept, so the
rule's `attempts` still bounds it. A cancel of the execution cancels the parked row; a
worker killed meanwhile loses nothing (the row in Postgres is the whole state).
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import heapq
import logging
import os
import threading
import time
from collections.abc import Callable, Sequence
from typing import Any

from noetl_celery import logcapture
from noetl_celery.logcontext import of_command
from noetl_celery.passes.logsink import LogSink
from noetl_celery.store.repository import Store
from noetl_celery.store.rows import ClaimedCommand
from noetl_celery.tools.redaction import mask_command_value
from noetl_celery.worker.pipeline import Parked

log = logging.getLogger("noetl_celery.worker")


def masked(parked: Parked) -> Parked:
    """The continuation with the command's keychain values masked (it is stored)."""
    return dataclasses.replace(parked, continuation=mask_command_value(parked.continuation))


# issue_when_due(command id, due) -> issued?; publish(command ids)
IssueWhenDue = Callable[[str, dt.datetime], bool]
Publish = Callable[[Sequence[str]], None]


class Wakeups:
    """Issues and publishes parked commands of this process when their wait is over, on
    one daemon thread (started on first use, again in a forked child). Only a wake-up:
    the row in Postgres is the state, and the sweep issues what a dead process did not."""

    def __init__(self, issue: IssueWhenDue, publish: Publish) -> None:
        self._issue = issue
        self._publish = publish
        self._due: list[tuple[float, str, dt.datetime]] = []  # (monotonic, id, due)
        self._cond = threading.Condition()
        self._thread: threading.Thread | None = None
        self._pid = 0

    def at(self, command_id: str, due: dt.datetime, delay: float) -> None:
        with self._cond:
            heapq.heappush(self._due, (time.monotonic() + delay, command_id, due))
            if self._thread is None or self._pid != os.getpid() or not self._thread.is_alive():
                self._pid = os.getpid()
                self._thread = threading.Thread(
                    target=self._loop, name="noetl-wakeups", daemon=True
                )
                self._thread.start()
            self._cond.notify()

    def _next(self) -> tuple[str, dt.datetime]:
        with self._cond:
            while True:
                now = time.monotonic()
                if self._due and self._due[0][0] <= now:
                    _, command_id, due = heapq.heappop(self._due)
                    return command_id, due
                self._cond.wait(self._due[0][0] - now if self._due else None)

    def _loop(self) -> None:
        while True:
            command_id, due = self._next()
            try:
                if self._issue(command_id, due):
                    self._publish([command_id])
            except Exception:  # the database or broker away: the sweep issues it later
                log.warning(
                    "could not issue parked command %s; the reaper will",
                    command_id,
                    exc_info=True,
                    extra=of_command(command_id),
                )


def released_before(command: ClaimedCommand) -> bool:
    """Whether an earlier park of this item run already gave its window slot back (its
    resume says so: a reaper's next attempt copies it)."""
    waits = (command.resume or {}).get("parked")
    return isinstance(waits, dict) and bool(waits.get("released"))


def releases(command: ClaimedCommand, parked: Parked) -> dict[str, Any] | None:
    """The `item.throttled` payload when this park gives a loop item's window slot back
    (orchestrator.loops.on_parked): a wait for a rate_limit key's send slot (not a run
    slot: those waits are short and repeat; not a retry's delay) of a loop item whose
    earlier parks did not, booked when the key's rate had settled (not cut for
    keyed_pacing.SETTLED_SECONDS: while it is still being cut the item keeps its slot,
    so the loop books the key shallow and its 429s come soon); None otherwise."""
    if not parked.turn or not parked.settled or command.iteration is None:
        return None
    if released_before(command):
        return None
    return {"key": parked.throttled, "delay": round(parked.delay, 3)}


def resume_of(parked: Parked, released: bool = False) -> dict[str, Any]:
    """The `resume` a parked command is stored with: its run state and what it waits
    for (`released`: its loop window slot was given back)."""
    waits: dict[str, Any] = {"task": parked.task, "delay": parked.delay}
    if parked.booked is not None:  # a rate_limit turn (worker.throttle)
        waits["booked"] = parked.booked
        waits["throttled"] = parked.throttled
    if released:
        waits["released"] = True
    return {"continuation": parked.continuation, "parked": waits}


def park(
    store: Store,
    command: ClaimedCommand,
    parked: Parked,
    capture: logcapture.Capture | None,
    wakeups: Wakeups | None = None,
) -> bool:
    """Park `command` until its delay is over; False when it was no longer ours (the
    row had been cancelled or taken over: nothing is written, nothing comes back)."""
    throttled = releases(command, parked)
    # its window slot is given back once per item run
    resume = resume_of(parked, released=throttled is not None or released_before(command))
    store.history.write_logs(LogSink.command_rows(capture, command))
    due = store.parking.park(command.command_id, resume, parked.delay, throttled)
    if due is None:
        log.info(
            "command %s was no longer running when it was to wait %.3gs: dropped",
            command.command_id,
            parked.delay,
            extra=of_command(command.command_id),
        )
        return False
    if wakeups is not None:
        wakeups.at(command.command_id, due, parked.delay)
    log.info(
        "command %s: task '%s' %s in %.3gs; parked until %s (the slot is free)",
        command.command_id,
        parked.task,
        "retries" if parked.booked is None else "waits for its rate_limit turn, due",
        parked.delay,
        due.isoformat(timespec="milliseconds"),
        extra=of_command(command.command_id),
    )
    return True
