"""The embedded dispatcher hands a publish to its threads packed as the broker's
messages are: several ids as one batch job, a lone id as a single command (issue 34)."""

from __future__ import annotations

import threading

import pytest

from noetl_celery.engine.inprocess import InProcessDispatcher


class _Recorder:
    def __init__(self, expected: int) -> None:
        self.singles: list[str] = []
        self.batches: list[list[str]] = []
        self.drives: list[str] = []
        self._lock = threading.Lock()
        self._left = expected
        self.done = threading.Event()

    def _count(self, n: int) -> None:
        with self._lock:
            self._left -= n
            if self._left <= 0:
                self.done.set()

    def single(self, command_id: str) -> None:
        with self._lock:
            self.singles.append(command_id)
        self._count(1)

    def batch(self, command_ids: list[str]) -> None:
        with self._lock:
            self.batches.append(list(command_ids))
        self._count(len(command_ids))

    def drive(self, execution_id: str) -> None:
        with self._lock:
            self.drives.append(execution_id)
        self._count(1)


def _run(pool: InProcessDispatcher, rec: _Recorder, *publishes: list[str]) -> None:
    try:
        for ids in publishes:
            pool.publish(ids)
        assert rec.done.wait(10), "the worker threads did not run every job"
    finally:
        pool.shutdown()


def test_a_publish_runs_as_batches_of_at_most_the_batch_size_and_a_lone_id_alone() -> None:
    ids = [f"e:s:1:{i}" for i in range(120)]
    rec = _Recorder(expected=121)
    pool = InProcessDispatcher(workers=3, batch_size=50)
    pool.bind(rec.single, rec.drive, rec.batch)
    _run(pool, rec, ids, ["e:t:1"])

    assert sorted(len(b) for b in rec.batches) == [40, 40, 40]  # even, as packing splits
    assert sorted(i for b in rec.batches for i in b) == sorted(ids)  # each id once
    assert rec.singles == ["e:t:1"]


def test_without_a_batch_function_or_with_size_one_every_id_is_its_own_job() -> None:
    rec = _Recorder(expected=3)
    pool = InProcessDispatcher(workers=2, batch_size=50)
    pool.bind(rec.single, rec.drive)
    _run(pool, rec, ["a", "b", "c"])
    rec2 = _Recorder(expected=3)
    pool2 = InProcessDispatcher(workers=2, batch_size=1)
    pool2.bind(rec2.single, rec2.drive, rec2.batch)
    _run(pool2, rec2, ["a", "b", "c"])

    assert sorted(rec.singles) == ["a", "b", "c"] and rec.batches == []
    assert sorted(rec2.singles) == ["a", "b", "c"] and rec2.batches == []


def test_a_batch_size_below_one_is_refused() -> None:
    with pytest.raises(ValueError, match="at least one command id"):
        InProcessDispatcher(workers=1, batch_size=0)
