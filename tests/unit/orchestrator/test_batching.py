"""The deferral rule by table: never defer when a stall is possible."""

from __future__ import annotations

import pytest

from noetl_celery.constants import ExecutionStatus
from noetl_celery.orchestrator.batching import (
    EpochBacklog,
    backlog_needs_pass,
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
    """Simulate a window finishing in any order, one close at a time: the last
    completion always folds (closers in parallel: test_closers_in_parallel_...)."""
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


def _epoch(waiting: int, in_flight: int = 120, **kw: object) -> EpochBacklog:
    fields: dict[str, object] = {"status": "RUNNING", "other": False, "window": 120}
    fields.update(kw)
    return EpochBacklog(waiting=waiting, in_flight=in_flight, **fields)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("backlog", "expected"),
    [
        ([], False),  # nothing waits
        ([_epoch(40)], False),  # 80 still run: they come back
        ([_epoch(59)], False),
        ([_epoch(60)], True),  # half the window left: fold
        ([_epoch(120)], True),  # the race: every closer deferred, nothing runs
        ([_epoch(40), _epoch(1, window=None)], True),  # a completion outside any loop
        ([_epoch(40, other=True)], True),  # a non-iteration completion of the epoch
        ([_epoch(40, done=True)], True),
        ([_epoch(40, status="CANCELLED")], True),  # a pass consumes late completions
        ([_epoch(2, in_flight=6, window=6)], True),  # too small a window never defers
    ],
)
def test_a_committed_backlog_needs_a_pass_where_a_pass_would_not_defer(
    backlog: list[EpochBacklog], expected: bool
) -> None:
    assert backlog_needs_pass(backlog) is expected


@pytest.mark.parametrize("parties", [2, 3, 4, 8])
@pytest.mark.parametrize("window", [8, 20, 120])
def test_closers_in_parallel_can_all_defer_but_the_committed_backlog_folds(
    parties: int, window: int
) -> None:
    """Every split of a full window among closers that commit together: whenever each
    one's own count lets it defer, the committed backlog (all of them) needs a pass."""
    share, rest = divmod(window, parties)
    shares = [share + (1 if k < rest else 0) for k in range(parties)]
    each_deferred = all(may_defer_window(window, window, s) for s in shares)
    assert backlog_needs_pass([_epoch(window, in_flight=window, window=window)])
    if parties > 2 and window >= 20:
        assert each_deferred  # the race is real for three or more closers
