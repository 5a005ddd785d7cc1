"""The deferral rule by table: never defer when a stall is possible."""

from __future__ import annotations

import pytest

from noetl_celery.constants import ExecutionStatus
from noetl_celery.orchestrator.batching import (
    could_defer,
    may_defer,
    may_defer_all,
    may_defer_window,
)
from noetl_celery.orchestrator.state import ExecutionState, LoopProgress, StepState


def state(
    window: int,
    in_flight: int,
    *,
    done: bool = False,
    epoch: int = 1,
    status: ExecutionStatus = ExecutionStatus.RUNNING,
) -> ExecutionState:
    loop = LoopProgress(
        epoch=epoch,
        total=1000,
        window=window,
        mode="parallel",
        next_index=500,
        in_flight=in_flight,
        done=done,
    )
    return ExecutionState("e", steps={"each": StepState(epoch=epoch, loop=loop)}, status=status)


@pytest.mark.parametrize(
    ("window", "in_flight", "waiting", "expected"),
    [
        (100, 100, 1, True),  # 99 genuinely running > 50
        (100, 100, 49, True),  # 51 running > 50
        (100, 100, 50, False),  # 50 running: fold now, refill
        (100, 60, 5, True),  # 55 running
        (100, 51, 1, False),  # 50 running
        (100, 1, 1, False),  # the last one always folds
        (7, 7, 1, False),  # small windows always fold
        (8, 8, 1, True),  # 7 running > 4
        (8, 8, 4, False),  # 4 running
    ],
)
def test_may_defer(window: int, in_flight: int, waiting: int, expected: bool) -> None:
    assert may_defer(state(window, in_flight), "each", 1, waiting) is expected


def test_never_defers_outside_a_running_loop_epoch() -> None:
    assert may_defer(state(100, 100, done=True), "each", 1, 1) is False
    assert may_defer(state(100, 100), "each", 2, 1) is False  # a stale epoch
    assert may_defer(state(100, 100), "other", 1, 1) is False
    assert may_defer(state(100, 100, status=ExecutionStatus.CANCELLED), "each", 1, 1) is False
    assert may_defer(ExecutionState("e"), "each", 1, 1) is False


def test_a_window_of_deferrals_cannot_stall() -> None:
    """Simulate a window finishing in any order: the last completion always folds."""
    window = 20
    in_flight, waiting, folds = window, 0, 0
    for _ in range(window):  # every running command finishes; no refill in between
        waiting += 1
        if not may_defer(state(window, in_flight), "each", 1, waiting):
            in_flight -= waiting  # a pass folds everything waiting
            waiting, folds = 0, folds + 1
    assert waiting == 0 and in_flight == 0 and folds >= 1


def test_a_pass_counts_the_inbox_only_when_a_loop_could_defer() -> None:
    assert could_defer(state(8, 8)) is True
    assert could_defer(state(7, 7)) is False  # small windows always fold: nothing to count
    assert could_defer(state(100, 100, done=True)) is False
    assert could_defer(state(100, 100, status=ExecutionStatus.CANCELLED)) is False
    assert could_defer(ExecutionState("e")) is False
    assert could_defer(ExecutionState("e", steps={"s": StepState(epoch=1)})) is False


@pytest.mark.parametrize("window", [1, 4, 7, 8, 100])
@pytest.mark.parametrize("done", [False, True])
@pytest.mark.parametrize("status", [ExecutionStatus.RUNNING, ExecutionStatus.CANCELLED])
def test_could_defer_is_never_false_where_a_pass_may_defer(
    window: int, done: bool, status: ExecutionStatus
) -> None:
    st = state(window, window, done=done, status=status)
    if not could_defer(st):
        for waiting in range(1, window + 1):
            assert may_defer_all(st, [("each", 1, waiting, False)]) is False


def test_a_pass_defers_only_if_every_waiting_group_may() -> None:
    st = state(100, 100)
    assert may_defer_all(st, [("each", 1, 3, False)]) is True
    assert may_defer_all(st, [("each", 1, 3, False), ("start", 1, 1, True)]) is False
    assert may_defer_all(st, [("each", 1, 3, True)]) is False  # a non-iteration completion
    assert may_defer_all(st, [("each", 1, 60, False)]) is False
    assert may_defer_all(st, []) is False


@pytest.mark.parametrize(
    ("window", "in_flight", "waiting"),
    [(100, 100, 1), (100, 100, 50), (100, 1, 1), (7, 7, 1), (8, 8, 1), (0, 0, 1)],
)
def test_the_rule_on_a_loops_rows_counters_is_the_rule_on_the_snapshot(
    window: int, in_flight: int, waiting: int
) -> None:
    # the close reads (window, in_flight) from the epoch's loops row: the same rule
    st = state(window, in_flight)
    expected = may_defer(st, "each", 1, waiting)
    assert may_defer_window(window, in_flight, waiting) is expected
