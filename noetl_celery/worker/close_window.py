"""The closes of a worker process, grouped over a bounded window (issue 34).

A command's close is a transaction (its row, terminal event and inbox entry) and, unless
its loop's window may wait, an orchestration pass. The commands of a slow batch that run
side by side in one process (worker.batch) finish a few milliseconds apart: closed one
by one, each paid for a transaction and a pass of its own. Here they queue for one
closing thread per process, which records whatever is waiting once the oldest has waited
`seconds`, or at once when `most` are waiting, in one call (worker.batch `_record`: one
transaction, one closing statement, one pass per execution). Each caller gets a future
of its command's report, so a delivery still reports what was recorded for it.

Nothing is lost or doubled by waiting: a command waiting here is still `running` under
its lease; a process killed meanwhile leaves it to the reaper (lease expired: run again
as its next attempt), exactly as a command killed while it ran. The window is bounded,
so a close waits at most `seconds` plus the recording ahead of it.
"""

from __future__ import annotations

import logging
import os
import threading
import time
from collections.abc import Callable
from concurrent.futures import Future
from typing import Generic, TypeVar

log = logging.getLogger("noetl_celery.worker")

T = TypeVar("T")
R = TypeVar("R")


class CloseWindow(Generic[T, R]):
    """Items recorded in groups by one daemon thread per process (started on first use,
    again in a forked child). `record(items)` returns one result per item, in order; if
    it raises, every item of the group gets the exception."""

    def __init__(self, record: Callable[[list[T]], list[R]], seconds: float, most: int) -> None:
        if most < 1:
            raise ValueError(f"a close window groups at least one close, got {most}")
        self._record = record
        self.seconds = max(0.0, seconds)
        self.most = most
        # (item, its future, the monotonic time it arrived)
        self._waiting: list[tuple[T, Future[R], float]] = []
        self._cond = threading.Condition()
        self._thread: threading.Thread | None = None
        self._pid = 0
        self.groups = 0  # recordings made (for tests and the log)
        self.recorded = 0  # items recorded

    def submit(self, item: T) -> Future[R]:
        future: Future[R] = Future()
        with self._cond:
            self._waiting.append((item, future, time.monotonic()))
            if self._thread is None or self._pid != os.getpid() or not self._thread.is_alive():
                self._pid = os.getpid()
                self._thread = threading.Thread(
                    target=self._loop, name="noetl-close-window", daemon=True
                )
                self._thread.start()
            self._cond.notify()
        return future

    def _take(self) -> list[tuple[T, Future[R], float]]:
        """Wait until a group is due: `most` waiting, or the oldest waited `seconds`."""
        with self._cond:
            while True:
                if self._waiting:
                    left = self._waiting[0][2] + self.seconds - time.monotonic()
                    if len(self._waiting) >= self.most or left <= 0:
                        group = self._waiting[: self.most]
                        del self._waiting[: self.most]
                        return group
                    self._cond.wait(left)
                else:
                    self._cond.wait()

    def _loop(self) -> None:
        while True:
            group = self._take()
            try:
                results = self._record([item for item, _, _ in group])
            except BaseException as exc:  # each waiting delivery raises it, as its own close would
                log.warning("recording a group of %d closes failed", len(group), exc_info=True)
                for _, future, _ in group:
                    future.set_exception(exc)
                continue
            self.groups += 1
            self.recorded += len(group)
            for (_, future, _), result in zip(group, results, strict=True):
                future.set_result(result)
