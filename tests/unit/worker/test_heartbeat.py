"""worker.heartbeat: one status poll for every watched command of a process."""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Collection, Sequence

import pytest

from noetl_celery.worker.heartbeat import Heartbeats

POLL = 0.05


class Statuses:
    """What the poll sees: the ids cancelled so far are not running; every call kept."""

    def __init__(self) -> None:
        self.cancelled: set[str] = set()
        self.calls: list[list[str]] = []
        self.fail = False
        self.lock = threading.Lock()

    def poll(self, ids: Sequence[str]) -> Collection[str]:
        with self.lock:
            self.calls.append(sorted(ids))
            if self.fail:
                raise OSError("database away")
            return {i for i in ids if i not in self.cancelled}


def beats(statuses: Statuses) -> Heartbeats:
    # a long lease: renewals never happen during these tests
    return Heartbeats(lambda ids: set(ids), 600, poll=statuses.poll, poll_seconds=POLL)


def wait_for(condition: object, seconds: float = 3.0) -> None:
    deadline = time.monotonic() + seconds
    while not condition():  # type: ignore[operator]
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.01)


def test_a_cancelled_command_is_found_lost_and_the_others_are_not() -> None:
    statuses = Statuses()
    hb = beats(statuses)
    hb.start_many(["a", "b", "c"])
    for cid in ("a", "b", "c"):
        hb.watch(cid)
    statuses.cancelled.add("b")
    wait_for(lambda: hb.lost("b"))
    assert not hb.lost("a") and not hb.lost("c")
    # every watched command is looked up in the same statement
    assert ["a", "b", "c"] in statuses.calls


def test_one_statement_per_period_however_many_commands_are_watched() -> None:
    statuses = Statuses()
    hb = beats(statuses)
    ids = [f"c{i}" for i in range(32)]
    hb.start_many(ids)
    for cid in ids:
        hb.watch(cid)
    time.sleep(POLL * 10)
    calls = len(statuses.calls)
    assert 3 <= calls <= 12, calls  # about one per period, not one per command
    assert all(call == sorted(ids) for call in statuses.calls)


def test_a_short_command_costs_no_statement_and_unwatched_ones_are_never_polled() -> None:
    statuses = Statuses()
    hb = beats(statuses)
    hb.start_many(["quick", "plain"])
    hb.watch("quick")
    hb.stop("quick")  # ended before a poll period passed
    time.sleep(POLL * 4)
    assert statuses.calls == []  # "plain" was never watched


def test_watching_keeps_on_with_new_commands_arriving_faster_than_a_period() -> None:
    """A process that starts a pipeline every few milliseconds still polls on time."""
    statuses = Statuses()
    hb = beats(statuses)
    hb.start("long")
    hb.watch("long")
    statuses.cancelled.add("long")
    deadline = time.monotonic() + 1.0
    n = 0
    while time.monotonic() < deadline and not hb.lost("long"):
        cid = f"short{n}"
        hb.start(cid)
        hb.watch(cid)
        time.sleep(0.005)
        hb.stop(cid)
        n += 1
    assert hb.lost("long")


def test_a_failed_poll_loses_nothing_and_the_next_one_counts(
    caplog: pytest.LogCaptureFixture,
) -> None:
    statuses = Statuses()
    statuses.fail = True
    hb = beats(statuses)
    hb.start("a")
    hb.watch("a")
    statuses.cancelled.add("a")
    caplog.set_level(logging.INFO, logger="noetl_celery.heartbeat")
    wait_for(lambda: len(statuses.calls) >= 5)
    assert not hb.lost("a")  # a failed lookup says nothing about the command
    failures = [r for r in caplog.records if "status poll of 1 commands failed" in r.message]
    assert len(failures) == 1, [r.message for r in failures]  # not one per tick
    assert "database away" in failures[0].message
    statuses.fail = False
    wait_for(lambda: hb.lost("a"))
    assert "status poll works again" in caplog.text


def test_watch_needs_a_poll_and_a_started_command() -> None:
    with pytest.raises(RuntimeError, match="without a status poll"):
        Heartbeats(lambda ids: set(ids), 600).watch("x")
    statuses = Statuses()
    hb = beats(statuses)
    hb.watch("never-started")  # not running here: nothing to watch
    time.sleep(POLL * 3)
    assert statuses.calls == []


class CountingEvent(threading.Event):
    """The heartbeat's wake event, counting the wake-ups asked for."""

    def __init__(self) -> None:
        super().__init__()
        self.sets = 0

    def set(self) -> None:
        self.sets += 1
        super().set()


def test_a_watch_wakes_the_thread_only_when_it_sleeps_until_a_renewal() -> None:
    statuses = Statuses()
    # the thread on the short cadence waits 0.5 s between looks
    hb = Heartbeats(lambda ids: set(ids), 600, poll=statuses.poll, poll_seconds=0.5)
    wake = CountingEvent()
    hb._wake = wake
    hb.start_many(["a", "b"])
    hb.watch("a")  # nothing watched before: the thread sleeps until a renewal (100 s away)
    assert wake.sets == 1
    wait_for(lambda: not wake.is_set())  # the thread woke up: on the short cadence now
    time.sleep(0.1)  # ... and waiting its 0.5 s there
    hb.stop("a")
    hb.watch("b")  # a first watch again, but the thread looks within the period anyway
    assert wake.sets == 1  # (it was woken for every first watch: 2 % of a worker's CPU)
    wait_for(lambda: ["b"] in statuses.calls, seconds=5.0)
    hb.stop("b")
    wait_for(lambda: hb._sleeping_long, seconds=5.0)  # nothing watched: asleep until a renewal
    hb.start("c")
    hb.watch("c")
    assert wake.sets == 2
    # polled a period after the watch, not at the renewal 100 s away: the wake-up worked
    wait_for(lambda: ["c"] in statuses.calls, seconds=5.0)
