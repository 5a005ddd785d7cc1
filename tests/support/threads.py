"""Run callables on threads at once and report what any of them raised."""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any


def all_at_once(jobs: list[Callable[[], Any]], timeout: float = 60) -> list[BaseException]:
    """Start every job on its own thread, join them all, and return what they raised
    (a thread's exception is otherwise lost); the caller asserts on the list."""
    errors: list[BaseException] = []

    def run(job: Callable[[], Any]) -> None:
        try:
            job()
        except BaseException as exc:  # returned: a thread's error is otherwise lost
            errors.append(exc)

    threads = [threading.Thread(target=run, args=(job,)) for job in jobs]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout)
    assert not any(thread.is_alive() for thread in threads), f"a job ran past {timeout:g}s"
    return errors
