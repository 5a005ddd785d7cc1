"""The close window (worker.close_window): closes submitted within its bounded window
are recorded together, at most `most` at a time, and every caller gets its own result
or the recording's exception."""

from __future__ import annotations

import threading
import time

import pytest

from noetl_celery.worker.close_window import CloseWindow


class Recording:
    def __init__(self, fail: bool = False) -> None:
        self.groups: list[list[int]] = []
        self.fail = fail
        self.lock = threading.Lock()

    def __call__(self, items: list[int]) -> list[int]:
        with self.lock:
            self.groups.append(list(items))
        if self.fail:
            raise RuntimeError("database away")
        return [item * 10 for item in items]


def test_closes_within_the_window_are_recorded_together_each_with_its_result() -> None:
    record = Recording()
    window = CloseWindow(record, seconds=0.2, most=50)
    futures = [window.submit(n) for n in range(5)]
    assert [f.result(timeout=5) for f in futures] == [0, 10, 20, 30, 40]
    assert record.groups == [[0, 1, 2, 3, 4]]
    assert (window.groups, window.recorded) == (1, 5)


def test_a_lone_close_waits_no_longer_than_the_window() -> None:
    window = CloseWindow(Recording(), seconds=0.05, most=50)
    started = time.monotonic()
    assert window.submit(7).result(timeout=5) == 70
    assert time.monotonic() - started < 1.0


def test_most_closes_are_recorded_at_once_without_waiting_out_the_window() -> None:
    record = Recording()
    window = CloseWindow(record, seconds=30.0, most=3)
    started = time.monotonic()
    futures = [window.submit(n) for n in range(3)]
    assert [f.result(timeout=5) for f in futures] == [0, 10, 20]
    assert time.monotonic() - started < 5.0  # not the 30 s window
    assert record.groups == [[0, 1, 2]]


def test_no_group_is_larger_than_most() -> None:
    record = Recording()
    window = CloseWindow(record, seconds=0.1, most=4)
    futures = [window.submit(n) for n in range(10)]
    assert [f.result(timeout=5) for f in futures] == [n * 10 for n in range(10)]
    assert all(len(g) <= 4 for g in record.groups)
    assert sorted(n for g in record.groups for n in g) == list(range(10))


def test_a_zero_window_records_each_close_as_it_comes() -> None:
    record = Recording()
    window = CloseWindow(record, seconds=0.0, most=50)
    for n in range(3):
        assert window.submit(n).result(timeout=5) == n * 10
    assert record.groups == [[0], [1], [2]]


def test_a_failed_recording_raises_for_every_close_of_its_group_and_the_window_goes_on() -> None:
    failing = Recording(fail=True)
    window = CloseWindow(failing, seconds=0.1, most=50)
    futures = [window.submit(n) for n in range(3)]
    for future in futures:
        with pytest.raises(RuntimeError, match="database away"):
            future.result(timeout=5)
    failing.fail = False
    assert window.submit(9).result(timeout=5) == 90  # the thread is still there


def test_a_window_groups_at_least_one_close() -> None:
    with pytest.raises(ValueError, match="at least one"):
        CloseWindow(Recording(), seconds=0.1, most=0)
