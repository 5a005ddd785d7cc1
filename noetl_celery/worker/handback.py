"""A batch hands its unstarted commands back while a slow one still runs (docs/design.md §10).

A batch runs its commands one after another. Checking the clock only between commands
let one slow command (an API that takes seconds to answer) hold the batch's other
commands until it ended, while other worker processes or threads idled. Here the batch's
unstarted commands sit in an `Unstarted` queue the batch takes them from one at a time;
a `Watchdog` (one daemon thread per process, ticking only while a batch runs) takes what
is left of a queue whose running command has run for longer than the slow threshold and
hands it to a callback (worker.batch: run them side by side in this process when the slow
command waits rather than computes, else release the claims and publish them again, one
per message). `Unstarted` tells the two apart by the running command's share of CPU
(the process's CPU time against the wall clock). Whoever takes a command — the batch, to
run it, or the watchdog, to hand it back — takes it under the queue's lock, so no
command is both run and handed back.
"""

from __future__ import annotations

import logging
import os
import threading
import time
from collections import deque
from collections.abc import Callable, Iterable

from noetl_celery.store.rows import ClaimedCommand

log = logging.getLogger("noetl_celery.worker")

HandBack = Callable[[list[ClaimedCommand]], None]

# a command during which its process used less than this share of one CPU waits (on an
# API, a pacer, a database): the rest of its batch can run beside it here, in threads.
# The process's CPU, not the thread's: a python tool may compute on a thread of its own,
# and where other commands run in the process too (threads pool, embedded) their CPU
# counts, so a doubt means "computes" and the rest is handed back as it always was
WAITING_CPU_SHARE = 0.5


class Unstarted:
    """A batch's commands not started yet, and when the running one started."""

    def __init__(self, commands: Iterable[ClaimedCommand]) -> None:
        self._lock = threading.Lock()
        self._rest: deque[ClaimedCommand] = deque(commands)
        self._running_since: float | None = None  # monotonic; None: none running
        self._running_cpu = 0.0  # the process's CPU time when it started
        self.running: ClaimedCommand | None = None  # the command the batch runs now
        self.handed_back: set[str] = set()  # ids no longer this batch's
        self.watchdog_took = False  # the watchdog took the rest (its call decides it)

    def next(self, now: float) -> ClaimedCommand | None:
        """The next command to run (marked as running from `now`), or None."""
        with self._lock:
            if not self._rest:
                self._running_since = self.running = None
                return None
            self._running_since = now
            self._running_cpu = time.process_time()
            self.running = self._rest.popleft()
            return self.running

    def running_waits(self, now: float) -> bool:
        """While the running command ran, its process used less than WAITING_CPU_SHARE
        of a CPU: it waits on I/O."""
        with self._lock:
            since, cpu = self._running_since, self._running_cpu
        if since is None or now <= since:
            return False
        return time.process_time() - cpu < WAITING_CPU_SHARE * (now - since)

    def take_rest(self) -> list[ClaimedCommand]:
        """Everything not started yet, now handed back (the batch stops here)."""
        with self._lock:
            return self._take()

    def take_if_slow(self, now: float, slow: float) -> list[ClaimedCommand]:
        """The rest, if the running command has run for `slow` seconds or more."""
        with self._lock:
            since = self._running_since
            if since is None or now - since < slow:
                return []
            rest = self._take()
            self.watchdog_took = bool(rest)
            return rest

    def _take(self) -> list[ClaimedCommand]:
        rest = list(self._rest)
        self._rest.clear()
        self.handed_back.update(c.command_id for c in rest)
        return rest


class Watchdog:
    """Hands back the rest of every watched batch whose running command is slow.

    One daemon thread per process, started on first use (again in a forked child); it
    sleeps on a condition while no batch is watched and ticks every `slow / 2` seconds
    while one is, so a slow command's batch is handed back between `slow` and 1.5x
    `slow` after the command started."""

    def __init__(self, slow: float) -> None:
        self.slow = slow
        self._watched: dict[int, tuple[Unstarted, HandBack]] = {}
        self._cond = threading.Condition()
        self._thread: threading.Thread | None = None
        self._pid = 0

    def watch(self, queue: Unstarted, hand_back: HandBack) -> None:
        with self._cond:
            idle = not self._watched
            self._watched[id(queue)] = (queue, hand_back)
            if self._thread is None or self._pid != os.getpid() or not self._thread.is_alive():
                self._pid = os.getpid()
                self._thread = threading.Thread(
                    target=self._loop, name="noetl-batch-watchdog", daemon=True
                )
                self._thread.start()
            if idle:  # the thread sleeps until a batch is watched; ticking, it finds it
                self._cond.notify()

    def unwatch(self, queue: Unstarted) -> None:
        with self._cond:
            self._watched.pop(id(queue), None)

    def _due(self) -> list[tuple[list[ClaimedCommand], HandBack]]:
        """Wait for the next tick; the rests taken from slow batches."""
        with self._cond:
            while not self._watched:
                self._cond.wait()
            self._cond.wait(self.slow / 2)
            now = time.monotonic()
            due = []
            for key, (queue, hand_back) in list(self._watched.items()):
                rest = queue.take_if_slow(now, self.slow)
                if rest:
                    del self._watched[key]  # nothing is left to hand back
                    due.append((rest, hand_back))
            return due

    def _loop(self) -> None:
        while True:
            for rest, hand_back in self._due():
                try:
                    hand_back(rest)
                except Exception:  # the leases run out and the reaper runs them again
                    log.warning(
                        "handing %d commands of a slow batch back failed; their leases "
                        "expire and the reaper issues them again",
                        len(rest),
                        exc_info=True,
                    )
