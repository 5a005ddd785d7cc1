"""A batch's unstarted commands are handed back while a slow one runs (worker.handback):
each command is taken once, either to run or to hand back, and the watchdog takes the
rest of a slow batch only."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable

from noetl_celery.store.rows import ClaimedCommand
from noetl_celery.worker.handback import Unstarted, Watchdog


def commands(n: int) -> list[ClaimedCommand]:
    return [ClaimedCommand(f"c{i}", "e", 1, "s", "noop", 1, i, 1, 0, None, None) for i in range(n)]


def test_the_rest_is_taken_only_while_a_command_has_run_for_the_slow_threshold() -> None:
    queue = Unstarted(commands(3))
    assert queue.take_if_slow(now=100.0, slow=0.5) == []  # nothing runs yet
    first = queue.next(now=100.0)
    assert first is not None and first.command_id == "c0"
    assert queue.take_if_slow(now=100.25, slow=0.5) == []
    rest = queue.take_if_slow(now=100.5, slow=0.5)
    assert [c.command_id for c in rest] == ["c1", "c2"]
    assert queue.handed_back == {"c1", "c2"}
    assert queue.next(now=100.1) is None  # the batch stops: nothing is run twice


def test_a_new_command_restarts_the_clock_and_the_last_one_stops_it() -> None:
    queue = Unstarted(commands(2))
    queue.next(now=0.0)
    queue.next(now=1.0)
    assert queue.take_if_slow(now=1.01, slow=0.05) == []  # the second just started
    assert queue.next(now=1.02) is None
    assert queue.take_if_slow(now=9.0, slow=0.05) == []  # none left, none running
    assert queue.handed_back == set()


def test_take_rest_hands_back_everything_left() -> None:
    queue = Unstarted(commands(3))
    queue.next(now=0.0)
    assert [c.command_id for c in queue.take_rest()] == ["c1", "c2"]
    assert queue.take_rest() == []


def test_the_watchdog_hands_back_a_slow_batch_while_its_command_runs_and_not_a_fast_one() -> None:
    handed: dict[str, list[str]] = {}
    done = threading.Event()

    def hand_back_to(name: str) -> Callable[[list[ClaimedCommand]], None]:
        def hand_back(rest: list[ClaimedCommand]) -> None:
            handed[name] = [c.command_id for c in rest]
            done.set()

        return hand_back

    watchdog = Watchdog(slow=0.05)
    slow, fast = Unstarted(commands(4)), Unstarted(commands(2))
    watchdog.watch(slow, hand_back_to("slow"))
    watchdog.watch(fast, hand_back_to("fast"))
    slow.next(time.monotonic())  # the slow batch's first command "runs" from now on
    assert done.wait(5.0), "the watchdog did not hand the slow batch back"
    watchdog.unwatch(fast)  # the fast batch ended before its command was slow
    watchdog.unwatch(slow)
    assert handed == {"slow": ["c1", "c2", "c3"]}
    assert slow.next(time.monotonic()) is None
    assert fast.next(time.monotonic()) is not None  # untouched


def test_a_failing_hand_back_does_not_stop_the_watchdog() -> None:
    calls: list[int] = []
    second = threading.Event()

    def hand_back(rest: list[ClaimedCommand]) -> None:
        calls.append(len(rest))
        if len(calls) == 1:
            raise RuntimeError("broker away")
        second.set()

    watchdog = Watchdog(slow=0.02)
    for _ in range(2):
        queue = Unstarted(commands(2))
        watchdog.watch(queue, hand_back)
        queue.next(time.monotonic())
        if not calls:
            deadline = time.monotonic() + 5
            while not calls and time.monotonic() < deadline:
                time.sleep(0.01)
    assert second.wait(5.0)
    assert calls == [1, 1]
