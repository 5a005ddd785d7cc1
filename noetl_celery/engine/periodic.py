"""A daemon thread that calls one function every few seconds until stopped: the embedded
reaper's sweep (engine.sweeper) and every process's outbox relay (engine.outbox).

A call that raises is logged and the next one runs on time (what fails there is mostly
the engine database away for a moment); `quiet_seconds` keeps a failure that repeats
every tick to one line per that many seconds.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable


class Periodic:
    def __init__(
        self,
        name: str,
        interval: float,
        call: Callable[[], object],
        log: logging.Logger,
        failure: str,
        quiet_seconds: float = 0.0,
    ) -> None:
        self._interval = interval
        self._call = call
        self._log = log
        self._failure = failure  # the line logged (with the traceback) when `call` raises
        self._quiet = quiet_seconds
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name=name, daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(timeout=5)

    def _loop(self) -> None:
        failed_at: float | None = None
        while not self._stop.wait(self._interval):
            try:
                self._call()
                failed_at = None
            except Exception:
                now = time.monotonic()
                if failed_at is None or now - failed_at >= self._quiet:
                    failed_at = now
                    self._log.warning(self._failure, exc_info=True)
