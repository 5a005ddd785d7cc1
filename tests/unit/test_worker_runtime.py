"""What a worker process sets up from its pool when Celery's `worker_init` tells it
(tasks.runtime): the database pool's size and the GIL's switch interval."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from dataclasses import dataclass

import pytest

from noetl_celery.tasks import runtime


@dataclass
class Sender:  # what Celery's worker_init passes: the WorkController
    pool_cls: str
    concurrency: int


@pytest.fixture
def restored(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    monkeypatch.setattr(runtime, "_threads", 0)
    monkeypatch.setattr(runtime, "_pool", "prefork")
    before = sys.getswitchinterval()
    try:
        yield
    finally:
        sys.setswitchinterval(before)


@pytest.mark.usefixtures("restored")
def test_a_threads_worker_hands_the_gil_over_sooner_and_sizes_its_pool() -> None:
    sys.setswitchinterval(0.005)
    runtime._size_for_pool(Sender("threads", 8))
    assert sys.getswitchinterval() == pytest.approx(runtime.THREADS_SWITCH_SECONDS)
    assert runtime.THREADS_SWITCH_SECONDS < 0.005
    assert runtime._threads == 8
    assert runtime.runs_tasks_here()


@pytest.mark.usefixtures("restored")
@pytest.mark.parametrize("pool", ["prefork", "solo", "gevent"])
def test_other_pools_keep_the_interpreters_switch_interval(pool: str) -> None:
    sys.setswitchinterval(0.005)
    runtime._size_for_pool(Sender(pool, 4))
    assert sys.getswitchinterval() == pytest.approx(0.005)
