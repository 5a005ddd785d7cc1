"""The embedded default's dispatcher: commands run on daemon threads in this process.

Daemon threads, not a ThreadPoolExecutor: a command stuck in a tool after its step timed
out (Python cannot stop a thread) must not keep the process from exiting once the
execution has ended; its late outcome would be dropped anyway.

A publish is packed as the Celery dispatcher packs it (orchestrator.packing, at most
`batch_size` ids a job): a job of several ids runs as one batch (worker.batch: one claim
statement, one close transaction and one pass for all of them, each command still with
its own row, claim, lease and terminal event), a lone id as `execute_command`. One job
per id made a 10,000-item no-op loop claim, close and fold every item in transactions of
its own, each waiting for SQLite's one write lock: 9x the time of one distributed worker,
which takes batches (issue 34).
"""

from __future__ import annotations

import logging
import queue
import threading
import time
from collections.abc import Callable, Sequence
from typing import Any

from noetl_celery.orchestrator.packing import pack

log = logging.getLogger("noetl_celery.inprocess")

# a function and its argument: a command id, an execution id, or a batch's command ids
Job = tuple[Callable[[Any], object], "str | list[str]"]


class InProcessDispatcher:
    def __init__(self, workers: int, batch_size: int = 1) -> None:
        if batch_size < 1:
            raise ValueError(f"a batch holds at least one command id, got {batch_size}")
        self._batch_size = batch_size
        self._jobs: queue.SimpleQueue[Job | None] = queue.SimpleQueue()
        self._execute: Callable[[str], object] | None = None
        self._execute_batch: Callable[[list[str]], object] | None = None
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

    def bind(
        self,
        execute: Callable[[str], object],
        drive: Callable[[str], object],
        execute_batch: Callable[[list[str]], object] | None = None,
    ) -> None:
        """`execute_batch` runs several ids as one job; without it every id is a job."""
        self._execute, self._drive = execute, drive
        self._execute_batch = execute_batch

    def publish(self, command_ids: Sequence[str]) -> None:
        assert self._execute is not None, "dispatcher not bound to an engine"
        size = self._batch_size if self._execute_batch is not None else 1
        for ids in pack(command_ids, size):
            if len(ids) == 1 or self._execute_batch is None:
                self._jobs.put((self._execute, ids[0]))
            else:
                self._jobs.put((self._execute_batch, ids))

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
                    "in-process task %s(%s) failed",
                    getattr(run, "__name__", run),
                    argument if isinstance(argument, str) else ",".join(argument),
                )
            self._progressed.set()
