"""When may a finished loop iteration leave its completion in the inbox for a later pass?

Folding every completion immediately costs a full orchestration pass per iteration.
Deferring is safe when enough iterations of the same epoch are *genuinely* still running
(in flight per the snapshot, minus completions already waiting in the inbox): each of
them will finish and come here again, and when few are left every completion folds, so
the last ones always fold everything. Loop counts stay exact (they come from the inbox,
which is only ever marked handled by a pass); only the refill of the window is batched.

"The last ones fold" holds for one closer at a time, not for closers in parallel: each
transaction counts the inbox as committed before it plus its own completions, so three
batches finishing together can each see fewer than half the window waiting, each defer,
and leave the whole window unfolded with nothing left running. So whoever deferred looks
again once committed (`backlog_needs_pass`, on what is committed then): the last of them
to commit sees every completion and drives the execution.
"""

from __future__ import annotations

from dataclasses import dataclass

from noetl_celery.constants import RUNNING
from noetl_celery.orchestrator.state import ExecutionState, LoopProgress

# Windows this small always fold: a deferred refill would idle most of the window.
MIN_BATCHED_WINDOW = 8


def may_defer_all(state: ExecutionState, waiting: list[tuple[str, int, int, bool]]) -> bool:
    """`waiting`: the inbox grouped as (step, epoch, count, has_non_iteration). True when
    every waiting completion is a deferrable loop iteration (an empty inbox is not)."""
    return bool(waiting) and all(
        not other and may_defer(state, step, epoch, count) for step, epoch, count, other in waiting
    )


def could_defer(state: ExecutionState) -> bool:
    """False when no completion of this state may be deferred whatever the inbox holds
    (no running loop has a window wide enough): a pass then need not count the inbox."""
    return state.status == RUNNING and any(
        st.loop is not None and not st.loop.done and st.loop.window >= MIN_BATCHED_WINDOW
        for st in state.steps.values()
    )


def may_defer(state: ExecutionState, step: str, epoch: int, waiting: int) -> bool:
    """`waiting`: unhandled completions of this loop epoch, the caller's included."""
    if state.status != RUNNING:
        return False
    st = state.steps.get(step)
    return may_defer_loop(st.loop if st is not None else None, epoch, waiting)


def may_defer_loop(loop: LoopProgress | None, epoch: int, waiting: int) -> bool:
    """The rule on one loop's progress; the progress and `waiting` must come from one
    consistent snapshot (then `in_flight - waiting` is exactly what still runs)."""
    if loop is None or loop.done or loop.epoch != epoch:
        return False
    return may_defer_window(loop.window, loop.in_flight, waiting)


def may_defer_window(window: int, in_flight: int, waiting: int) -> bool:
    """The rule on a running epoch's counters (a worker's close reads them from the
    epoch's `loops` row): `in_flight` and `waiting` from one consistent snapshot."""
    if window < MIN_BATCHED_WINDOW:
        return False
    still_running = in_flight - waiting
    return still_running > window // 2


@dataclass(frozen=True)
class EpochBacklog:
    """One (step, epoch) of an execution's inbox as committed, with its `loops` row's
    counters (window None: not a loop epoch, or no row) and the execution's status."""

    status: str
    waiting: int
    other: bool  # an entry that is not a loop iteration
    done: bool = False
    window: int | None = None
    in_flight: int = 0


def backlog_needs_pass(backlog: list[EpochBacklog]) -> bool:
    """After a deferral committed: True when a completion waits that no running command
    will come back for (the rule of `may_defer_all`, on the committed inbox)."""
    return any(
        epoch.status != RUNNING
        or epoch.other
        or epoch.window is None
        or epoch.done
        or not may_defer_window(epoch.window, epoch.in_flight, epoch.waiting)
        for epoch in backlog
    )
