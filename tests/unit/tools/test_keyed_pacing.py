"""tools.keyed_pacing: what a 429 says about a key's real rate, and a process's own
schedule of a key (no ledger: an SQLite engine), on a clock the test sets."""

from __future__ import annotations

import itertools

import pytest

from noetl_celery.tools.http_pacing import CUT_FACTOR, MIN_RATE
from noetl_celery.tools.keyed_pacing import (
    MIN_SHARE_ANSWERS,
    SETTLED_SECONDS,
    KeyedPacer,
    KeyedSlot,
    KeyedTurn,
    accepted_share,
    current,
    cut_target,
    under,
)


@pytest.mark.parametrize(
    ("answers", "share"),
    [
        ([], 1.0),
        ([(0.0, False)] * (MIN_SHARE_ANSWERS - 1), 1.0),  # too few to tell
        ([(0.0, True)] * 6 + [(0.0, False)] * 4, 0.6),
        ([(0.0, True)] * 9 + [(0.0, False)] * 1, 1.0),  # jitter at the limit: no measure
        ([(0.0, True)] * 10, 1.0),
        ([(0.0, False)] * 10, 0.0),
    ],
)
def test_the_accepted_share_needs_enough_answers(
    answers: list[tuple[float, bool]], share: float
) -> None:
    assert accepted_share(answers) == pytest.approx(share)


@pytest.mark.parametrize(
    ("rate", "share", "target"),
    [
        (10.0, 0.8, CUT_FACTOR * 8.0),  # the server accepts 8 of 10: 8/s
        (6.0, 1.0, CUT_FACTOR * 6.0),  # too few answers: CUT_FACTOR alone
        (6.0, 0.5, CUT_FACTOR * 4.5),  # never more than a quarter at once
        (1.0, 0.5, MIN_RATE),  # never below MIN_RATE
    ],
)
def test_a_cut_targets_what_the_server_accepts(rate: float, share: float, target: float) -> None:
    assert cut_target(rate, share) == pytest.approx(target)


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def test_a_local_schedule_spaces_runs_at_the_declared_rate_after_a_burst() -> None:
    clock = Clock()
    pacer = KeyedPacer(clock=clock, wall=clock)
    waits = [pacer.book("key:t", 4.0, burst=3)[0] for _ in range(6)]
    # three go at once (the burst), then one every 0.25 s
    assert waits == pytest.approx([0.0, 0.0, 0.0, 0.25, 0.5, 0.75])


def test_a_429_cuts_the_key_to_the_accepted_rate_once_per_overshoot() -> None:
    clock = Clock()
    pacer = KeyedPacer(clock=clock, wall=clock)
    rate = pacer.book("key:t", 10.0).rate
    booked = clock.now
    for _ in range(8):
        pacer.observe(KeyedTurn("key:t", rate, booked), 200, None, clock.now)
    # one 429 among many: jitter at the limit, a cut by CUT_FACTOR alone
    pacer.observe(KeyedTurn("key:t", rate, booked), 429, 1.0, clock.now)
    first = pacer.rate("key:t", 10.0)
    assert first == pytest.approx(CUT_FACTOR * 10.0)
    # another 429 of a slot booked before that cut: its overshoot, nothing more is cut
    for _ in range(1):
        pacer.observe(KeyedTurn("key:t", rate, booked), 429, 1.0, clock.now)
    assert pacer.rate("key:t", 10.0) == first
    # a slot booked after the cut refused too: 8 of the 11 answers accepted, the server
    # takes ~8/11 of the rate the request went at (a cut of a quarter at most)
    clock.now += 2.0
    pacer.observe(KeyedTurn("key:t", first, clock.now), 429, 1.0, clock.now)
    assert pacer.rate("key:t", 10.0) == pytest.approx(CUT_FACTOR * first * 0.75)


def test_a_keys_rate_is_settled_until_a_cut_and_again_settled_seconds_after_it() -> None:
    """A key never cut is settled; a 429's cut unsettles it (a loop item parked for its
    turn then keeps its window slot, worker.parking.releases) for SETTLED_SECONDS."""
    clock = Clock()
    pacer = KeyedPacer(clock=clock, wall=clock)
    assert pacer.book("key:t", 10.0).settled
    pacer.observe(KeyedTurn("key:t", 10.0, clock.now), 429, None, clock.now)
    assert pacer.rate("key:t", 10.0) < 10.0  # cut
    clock.now += SETTLED_SECONDS - 0.5
    assert not pacer.book("key:t", 10.0).settled
    clock.now += 0.5
    assert pacer.book("key:t", 10.0).settled


def test_an_accepted_answer_or_a_concurrency_only_turn_cuts_nothing() -> None:
    clock = Clock()
    pacer = KeyedPacer(clock=clock, wall=clock)
    pacer.book("key:t", 5.0)
    pacer.observe(KeyedTurn("key:t", 5.0, clock.now), 200, None, clock.now)
    pacer.observe(KeyedTurn("key:t", None, clock.now), 429, 1.0, clock.now)
    assert pacer.rate("key:t", 5.0) == 5.0


def test_the_turn_of_a_body_is_visible_to_its_tools_only_inside_it() -> None:
    assert current() is None
    with under(KeyedTurn("key:t", 2.0, 0.0)):
        assert current() == KeyedTurn("key:t", 2.0, 0.0)
    assert current() is None


class FailingLedger:
    def declare(self, host: str, rate: float) -> None:
        raise OSError("database away")

    def book_key(self, key: str, declared: float, tolerance: float = 0.0) -> None:
        raise OSError("database away")

    def cut_key(
        self,
        key: str,
        *,
        target: float,
        learned: float,
        sent_age: float,
        retry_after: float | None,
    ) -> float | None:
        raise OSError("database away")

    def schedule_key(self, key: str) -> tuple[float, float] | None:
        raise OSError("database away")


def test_an_unreachable_ledger_leaves_the_key_unpaced() -> None:
    pacer = KeyedPacer(FailingLedger())
    assert pacer.book("key:t", 5.0) == KeyedSlot(0.0, 5.0, settled=True)
    # a kept slot is sent as placed
    assert pacer.respaced("key:t", 510.0, 500.0, 5.0) == (510.0, 5.0)


def test_a_cut_stretches_the_slots_booked_past_it_to_the_new_rate() -> None:
    """Ten slots booked at 5/s (the last 1.8 s away); a 429 at the first cuts the rate:
    the schedule's end and every held slot past the cut move out to the new spacing,
    in order, so none is sent at the spacing the server refused."""
    clock = Clock()
    pacer = KeyedPacer(clock=clock, wall=clock)
    placed = clock.now
    slots = [placed + pacer.book("key:t", 5.0).wait for _ in range(10)]
    assert slots[-1] - slots[0] == pytest.approx(1.8)
    clock.now += 0.01  # the first one's 429 comes back
    pacer.observe(KeyedTurn("key:t", 5.0, placed), 429, None, placed)
    rate = pacer.rate("key:t", 5.0)
    assert rate < 5.0
    moved = [pacer.respaced("key:t", at, placed, 5.0) for at in slots]
    assert {r for _, r in moved[1:]} == {rate}
    times = [at for at, _ in moved]
    assert times[0] == pytest.approx(slots[0])  # before the cut: sent as booked
    gaps = [b - a for a, b in itertools.pairwise(times)]
    # stretched from the cut (0.01 s into the first gap) on
    assert gaps[1:] == pytest.approx([1.0 / rate] * 8)
    assert 0.2 < gaps[0] < 1.0 / rate
    # the next booking comes after the last stretched slot, at the new spacing
    assert clock.now + pacer.book("key:t", 5.0).wait == pytest.approx(times[-1] + 1.0 / rate)
    # a slot placed after the cut (or at the new rate) is not moved again
    assert pacer.respaced("key:t", times[-1], clock.now + 0.001, rate) == (times[-1], rate)
    assert not pacer.cut_since("key:t", clock.now + 0.001) and pacer.cut_since("key:t", placed - 1)
