"""The embedded default's dispatcher: commands run on a thread pool in this process."""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from concurrent.futures import Future, ThreadPoolExecutor

log = logging.getLogger("noetl_celery.inprocess")


class InProcessDispatcher:
    def __init__(self, workers: int) -> None:
        self._pool = ThreadPoolExecutor(max_workers=workers, thread_name_prefix="noetl-worker")
        self._execute: Callable[[str], object] | None = None
        self._drive: Callable[[str], object] | None = None

    def bind(self, execute: Callable[[str], object], drive: Callable[[str], object]) -> None:
        self._execute, self._drive = execute, drive

    def publish(self, command_ids: Sequence[str]) -> None:
        assert self._execute is not None, "dispatcher not bound to an engine"
        for command_id in command_ids:
            self._pool.submit(self._execute, command_id).add_done_callback(_report)

    def wake(self, execution_id: str) -> None:
        assert self._drive is not None, "dispatcher not bound to an engine"
        self._pool.submit(self._drive, execution_id).add_done_callback(_report)

    def shutdown(self) -> None:
        self._pool.shutdown(wait=True, cancel_futures=True)


def _report(future: Future[object]) -> None:
    exc = future.exception()
    if exc is not None:
        log.error("in-process task failed: %s", exc, exc_info=exc)
