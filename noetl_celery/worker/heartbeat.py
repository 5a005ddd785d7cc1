"""Leases of the commands this process runs, renewed by one daemon thread.

A command's lease (`commands.lease_until`) is set by its claim. A command still running
after a third of its lease gets it extended every third of a lease; short commands never
cost a write. When a renewal finds the command no longer `running` (cancelled, or taken
over after this process was presumed dead) the command is marked lost: pipelines stop at
their next task boundary and the result is dropped at close.
"""

from __future__ import annotations

import logging
import os
import threading
import time
from collections.abc import Callable

from noetl_celery.logcontext import of_command

log = logging.getLogger("noetl_celery.heartbeat")

# renew(command_id) -> still ours?
Renew = Callable[[str], bool]


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
        with self._lock:
            self._active[command_id] = time.monotonic()
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
            for command_id in self._due():
                try:
                    ours = self._renew(command_id)
                except Exception:  # the database is away: try again next tick
                    # this thread runs outside any command's log context
                    log.warning(
                        "lease renewal of %s failed",
                        command_id,
                        exc_info=True,
                        extra=of_command(command_id),
                    )
                    continue
                with self._lock:
                    if command_id not in self._active:
                        continue
                    self._active[command_id] = time.monotonic()
                    if not ours:
                        self._lost.add(command_id)
