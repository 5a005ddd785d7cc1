"""The embedded default's dispatcher: commands run on daemon threads in this process.

Daemon threads, not a ThreadPoolExecutor: a command stuck in a tool after its step timed
out (Python cannot stop a thread) must not keep the process from exiting once the
execution has ended; its late outcome would be dropped anyway.
"""

from __future__ import annotations

import logging
import queue
import threading
import time
from collections.abc import Callable, Sequence

log = logging.getLogger("noetl_celery.inprocess")

Job = tuple[Callable[[str], object], str]


class InProcessDispatcher:
    def __init__(self, workers: int) -> None:
        self._jobs: queue.SimpleQueue[Job | None] = queue.SimpleQueue()
        self._execute: Callable[[str], object] | None = None
        self._drive: Callable[[str], object] | None = None
        # set after every job: a waiter (`run` following its execution) looks at the
        # database again at once instead of at its next poll
        self._progressed = threading.Event()
        self._threads = [
            threading.Thread(target=self._work, name=f"noetl-worker-{n}", daemon=True)
            for n in range(workers)
        ]
        for thread in self._threads:
            thread.start()

    def bind(self, execute: Callable[[str], object], drive: Callable[[str], object]) -> None:
        self._execute, self._drive = execute, drive

    def publish(self, command_ids: Sequence[str]) -> None:
        assert self._execute is not None, "dispatcher not bound to an engine"
        for command_id in command_ids:
            self._jobs.put((self._execute, command_id))

    def wake(self, execution_id: str) -> None:
        assert self._drive is not None, "dispatcher not bound to an engine"
        self._jobs.put((self._drive, execution_id))

    def wait_progress(self, timeout: float) -> None:
        """Return when a job has finished since the last call, or after `timeout`."""
        if self._progressed.wait(timeout):
            self._progressed.clear()

    def shutdown(self, timeout: float = 5.0) -> None:
        """Drop queued jobs (their commands stay `issued` in the database), let running
        ones finish for up to `timeout` seconds, then abandon the rest."""
        while True:
            try:
                self._jobs.get_nowait()
            except queue.Empty:
                break
        for _ in self._threads:
            self._jobs.put(None)
        deadline = time.monotonic() + timeout
        for thread in self._threads:
            thread.join(max(0.0, deadline - time.monotonic()))

    def _work(self) -> None:
        while (job := self._jobs.get()) is not None:
            run, argument = job
            try:
                run(argument)
            except Exception:
                log.exception(
                    "in-process task %s(%s) failed", getattr(run, "__name__", run), argument
                )
            self._progressed.set()
