"""Leases of the commands this process runs, renewed by one daemon thread.

A command's lease (`commands.lease_until`) is set by its claim. A command still running
after a third of its lease gets it extended every third of a lease; short commands never
cost a write. The commands due at one beat are renewed together, in one statement: a
batch (worker.batch) claims many commands at once, and those not started yet need their
leases kept too. When a renewal finds a command no longer `running` (cancelled, or taken
over after this process was presumed dead) the command is marked lost: pipelines stop at
their next task boundary and the result is dropped at close.
"""

from __future__ import annotations

import logging
import os
import threading
import time
from collections.abc import Callable, Collection, Iterable, Sequence

log = logging.getLogger("noetl_celery.heartbeat")

# renew(command_ids) -> those still ours
Renew = Callable[[Sequence[str]], Collection[str]]


class Heartbeats:
    def __init__(self, renew: Renew, lease_seconds: float) -> None:
        self._renew = renew
        self._every = max(0.5, lease_seconds / 3)
        self._active: dict[str, float] = {}  # command id -> monotonic time of last renewal
        self._lost: set[str] = set()
        self._lock = threading.Lock()
        self._thread: threading.Thread | None = None
        self._pid = 0

    def start(self, command_id: str) -> None:
        self.start_many([command_id])

    def start_many(self, command_ids: Iterable[str]) -> None:
        with self._lock:
            now = time.monotonic()
            for command_id in command_ids:
                self._active[command_id] = now
                self._lost.discard(command_id)
            if self._thread is None or self._pid != os.getpid() or not self._thread.is_alive():
                self._pid = os.getpid()  # a forked child needs its own thread
                self._thread = threading.Thread(
                    target=self._loop, name="noetl-heartbeat", daemon=True
                )
                self._thread.start()

    def stop(self, command_id: str) -> None:
        with self._lock:
            self._active.pop(command_id, None)
            self._lost.discard(command_id)

    def lost(self, command_id: str) -> bool:
        with self._lock:
            return command_id in self._lost

    def _due(self) -> list[str]:
        now = time.monotonic()
        with self._lock:
            return [c for c, last in self._active.items() if now - last >= self._every]

    def _loop(self) -> None:
        while True:
            time.sleep(self._every / 2)
            due = self._due()
            if not due:
                continue
            try:
                ours = self._renew(due)
            except Exception:  # the database is away: try again next tick
                log.warning("lease renewal of %d commands failed", len(due), exc_info=True)
                continue
            with self._lock:
                now = time.monotonic()
                for command_id in due:
                    if command_id not in self._active:
                        continue
                    self._active[command_id] = now
                    if command_id not in ours:
                        self._lost.add(command_id)
