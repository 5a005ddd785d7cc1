"""worker.throttle's gates, with the process's own slots and schedule (an SQLite
engine) and a clock the test sets: what a body waits for, when it parks, what it keeps."""

from __future__ import annotations

from typing import Any

import pytest

from noetl_celery.errors import RateLimitKeyError
from noetl_celery.models.rate_limit import RateLimit
from noetl_celery.templating import STRICT
from noetl_celery.tools.keyed_pacing import SETTLED_SECONDS, KeyedPacer, KeyedTurn, current
from noetl_celery.worker.throttle import (
    CONCURRENCY_RETRY,
    WAKE_LEAD,
    CommandThrottle,
    LocalSlots,
    Throttled,
)


class Clock:
    def __init__(self) -> None:
        self.now = 500.0
        self.slept: list[float] = []

    def __call__(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.slept.append(seconds)
        self.now += seconds


def throttle(
    command: str, clock: Clock, slots: LocalSlots, pacer: KeyedPacer, **kw: Any
) -> CommandThrottle:
    return CommandThrottle(
        slots,
        pacer,
        command,
        STRICT,
        park_after=kw.pop("park_after", 1.0),
        sleep=clock.sleep,
        clock=clock,
        wall=clock,
        **kw,
    )


CONTEXT = {"iter": {"shop": {"tenant": "acme"}}}
BY_TENANT = RateLimit(key="{{ iter.shop.tenant }}", per_second=2.0, concurrency=1)


def test_a_body_runs_under_its_rendered_key_and_gives_its_slot_back() -> None:
    clock, slots = Clock(), LocalSlots()
    gate = throttle("c1", clock, slots, KeyedPacer(clock=clock, wall=clock))
    with gate.gate(BY_TENANT, CONTEXT, "step 's'") as key:
        assert key == "key:acme"
        turn = current()
        assert turn is not None and turn.key == "key:acme" and turn.rate == 2.0
        assert slots.held() == {"key:acme": 1}
    assert slots.held() == {}
    assert current() is None


def test_a_short_wait_is_slept_and_a_long_one_parks_with_its_turn_kept() -> None:
    clock, slots = Clock(), LocalSlots()
    pacer = KeyedPacer(clock=clock, wall=clock)
    limit = RateLimit(key="k", per_second=2.0)
    for name in ("c1", "c2", "c3"):  # turns at 0, 0.5 (slept), 1.0 (slept: not above 1 s)
        with throttle(name, clock, slots, pacer).gate(limit, {}, "s"):
            pass
    assert clock.slept == pytest.approx([0.5, 0.5])
    clock.slept.clear()
    # three more turns booked without running: the next is 1.5 s away
    for _ in range(3):
        pacer.book("key:k", 2.0)
    gate = throttle("c4", clock, slots, pacer)
    with pytest.raises(Throttled) as parked, gate.gate(limit, {}, "s"):
        pytest.fail("the body ran before its turn")
    # parked until WAKE_LEAD before its turn, which stays booked with its send time
    assert parked.value.delay == pytest.approx(2.0 - WAKE_LEAD)
    assert parked.value.booked == {"key:k": [clock.now, 2.0, clock.now + 2.0, clock.now]}
    assert clock.slept == []
    # woken far too early (a sweep's clock, a retried wake-up): parked again, same turn
    clock.now += 0.25
    early = throttle("c4", clock, slots, pacer, booked=parked.value.booked)
    with pytest.raises(Throttled) as again, early.gate(limit, {}, "s"):
        pytest.fail("the body ran before its turn")
    assert again.value.delay == pytest.approx(1.75 - WAKE_LEAD)
    # the same slot (its send time placed again now, no cut having moved it)
    assert again.value.booked["key:k"][:3] == parked.value.booked["key:k"][:3]
    # woken on time: it sleeps the lead out and runs on its turn, booking nothing more
    clock.now += again.value.delay
    resumed = throttle("c4", clock, slots, pacer, booked=again.value.booked)
    with resumed.gate(limit, {}, "s"):
        pass
    assert clock.slept == pytest.approx([WAKE_LEAD])
    assert pacer.book("key:k", 2.0)[0] == pytest.approx(0.5)  # c4 took no new slot


def test_a_parked_turn_woken_late_runs_at_once_and_an_old_resume_is_taken() -> None:
    clock, slots = Clock(), LocalSlots()
    pacer = KeyedPacer(clock=clock, wall=clock)
    limit = RateLimit(key="k", per_second=2.0)
    late = throttle("c1", clock, slots, pacer, booked={"key:k": [400.0, 2.0, 499.0]})
    with late.gate(limit, {}, "s"):
        pass
    # a resume stored before send times were kept: its turn is taken as due
    old = throttle("c2", clock, slots, pacer, booked={"key:k": [400.0, 2.0]})
    with old.gate(limit, {}, "s"):
        pass
    assert clock.slept == []


def test_with_parking_sooner_than_the_lead_the_resumed_run_still_sleeps_the_rest() -> None:
    clock, slots = Clock(), LocalSlots()
    pacer = KeyedPacer(clock=clock, wall=clock)
    limit = RateLimit(key="k", per_second=2.0)
    pacer.book("key:k", 2.0)
    gate = throttle("c1", clock, slots, pacer, park_after=0.2)
    with pytest.raises(Throttled) as parked, gate.gate(limit, {}, "s"):
        pytest.fail("the body ran before its turn")
    assert parked.value.delay == pytest.approx(0.5 - 0.2)  # the lead is park_after's at most
    clock.now += parked.value.delay
    resumed = throttle("c1", clock, slots, pacer, park_after=0.2, booked=parked.value.booked)
    with resumed.gate(limit, {}, "s"):
        pass
    assert clock.slept == pytest.approx([0.2])


@pytest.mark.parametrize(
    ("since_cut", "settled"), [(None, True), (1.0, False), (SETTLED_SECONDS, True)]
)
def test_a_park_for_a_turn_says_whether_the_keys_rate_had_settled(
    since_cut: float | None, settled: bool
) -> None:
    """`Throttled.settled` (worker.parking.releases gives a loop item's window slot
    back only then): the key not cut for SETTLED_SECONDS at the booking, or never."""
    clock, slots = Clock(), LocalSlots()
    pacer = KeyedPacer(clock=clock, wall=clock)
    limit = RateLimit(key="k", per_second=2.0)
    pacer.book("key:k", 2.0)
    if since_cut is not None:
        pacer.observe(KeyedTurn("key:k", 2.0, clock.now), 429, None, clock.now)
        clock.now += since_cut
    for _ in range(4):  # the next turn is more than park_after away
        pacer.book("key:k", 2.0)
    with (
        pytest.raises(Throttled) as parked,
        throttle("c1", clock, slots, pacer).gate(limit, {}, "s"),
    ):
        pytest.fail("the body ran before its turn")
    assert parked.value.turn and parked.value.settled is settled


def test_all_run_slots_held_parks_after_polling() -> None:
    clock, slots = Clock(), LocalSlots()
    pacer = KeyedPacer(clock=clock, wall=clock)
    limit = RateLimit(key="k", concurrency=1)
    with throttle("c1", clock, slots, pacer).gate(limit, {}, "s"):
        second = throttle("c2", clock, slots, pacer)
        with pytest.raises(Throttled) as parked, second.gate(limit, {}, "s"):
            pytest.fail("two bodies of a one-slot key ran at once")
        assert parked.value.delay == CONCURRENCY_RETRY
        assert sum(clock.slept) == pytest.approx(1.0, abs=0.06)  # polled park_after
    with throttle("c2", clock, slots, pacer).gate(limit, {}, "s"):
        assert slots.held() == {"key:k": 1}


def test_without_parking_a_body_waits_for_a_run_slot_in_its_worker() -> None:
    clock, slots = Clock(), LocalSlots()
    pacer = KeyedPacer(clock=clock, wall=clock)
    slots.acquire("key:k", 1, "other")
    waits = 0

    def sleep(seconds: float) -> None:
        nonlocal waits
        waits += 1
        if waits == 3:
            slots.release("key:k", "other")

    gate = CommandThrottle(slots, pacer, "c1", STRICT, park_after=None, sleep=sleep, clock=clock)
    with gate.gate(RateLimit(key="k", concurrency=1), {}, "s"):
        assert waits == 3


@pytest.mark.parametrize(
    ("limit", "words"),
    [
        (RateLimit(key="{{ iter.shop.region }}", concurrency=1), "rendered empty"),
        (RateLimit(key="k", per_second="{{ iter.shop.tenant }}"), "must be a number above 0"),
        (RateLimit(key="k", concurrency="{{ 0 }}"), "whole number of 1 or more"),
    ],
)
def test_a_key_or_number_unusable_for_an_item_is_its_error(limit: RateLimit, words: str) -> None:
    clock = Clock()
    gate = throttle("c1", clock, LocalSlots(), KeyedPacer(clock=clock, wall=clock))
    context = {"iter": {"shop": {"tenant": "acme", "region": ""}}}
    with (
        pytest.raises(RateLimitKeyError, match=words) as raised,
        gate.gate(limit, context, "step 's'"),
    ):
        pytest.fail("the body ran")
    assert str(raised.value).startswith("step 's': `rate_limit.")


def test_an_outer_turn_is_kept_when_an_inner_gate_parks() -> None:
    clock, slots = Clock(), LocalSlots()
    pacer = KeyedPacer(clock=clock, wall=clock)
    outer = RateLimit(key="o", per_second=1.0)
    inner = RateLimit(key="i", concurrency=1)
    slots.acquire("key:i", 1, "other")
    gate = throttle("c1", clock, slots, pacer)
    with pytest.raises(Throttled) as parked, gate.gate(outer, {}, "s"), gate.gate(inner, {}, "s"):
        pytest.fail("ran")
    assert set(parked.value.booked) == {"key:o"}
