"""The http tool's pacing schedule shared by worker processes (store.pacing on Postgres,
engine.pacing's rules), on a clock the test sets: the rows, then pacers of two processes
draining PFT-shaped stages through it."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from sqlalchemy import text

from noetl_celery.engine.pacing import RULES, FleetPaceLedger
from noetl_celery.engine.service import Engine
from noetl_celery.settings import Settings
from noetl_celery.store.database import Database, SchemaMode
from noetl_celery.store.pacing import PacingManager
from noetl_celery.tools.http_pacing import (
    CUT_FACTOR,
    FORGET_SECONDS,
    RAISE_FRACTION,
    HttpPacer,
)
from tests.unit.tools.test_tools_http_pacing import Clock, drain_stages

HOST = "api.example:443"
T0 = 1_800_000_000.0  # epoch seconds: the clock the statements are given


@pytest.fixture
def pacing(pg_url: str) -> Iterator[PacingManager]:
    database = Database(pg_url)
    try:
        yield PacingManager(database)
    finally:
        database.dispose()


def cut(
    p: PacingManager, at: float, unbooked: int, age: float = 0.005, ra: float | None = 1.0
) -> float:
    return p.cut(HOST, RULES, unbooked=unbooked, sent_age=age, retry_after=ra, now=at)


def test_a_host_is_paced_once_it_answers_429(pacing: PacingManager) -> None:
    assert pacing.book(HOST, RULES, now=T0) is None  # never answered 429: no row, no wait
    # two processes report the burst's overshoot: 100 and 60 requests accepted unbooked
    assert cut(pacing, T0, 100) == pytest.approx(CUT_FACTOR * 100)
    assert cut(pacing, T0 + 0.05, 60) == pytest.approx(CUT_FACTOR * 160)
    rate = CUT_FACTOR * 160
    # the first slot after the burst's Retry-After (1 s, from the first report), then one
    # interval of the fleet's rate apart, whichever process books it
    for i in range(3):
        booked = pacing.book(HOST, RULES, now=T0 + 0.1)
        assert booked is not None
        assert booked[0] == pytest.approx(rate) and booked[1] == pytest.approx(0.9 + i / rate)


def test_one_cut_per_overshoot_then_a_later_429_cuts_the_fleet_rate(
    pacing: PacingManager,
) -> None:
    first = cut(pacing, T0, 100)
    # a request sent before the cut, answered 429 after its window: the same overshoot
    assert cut(pacing, T0 + 1.5, 0, age=1.0) == first
    # 60 slots booked over the next second, a 429 at its end: the server's limit is
    # about what the fleet sent, and the rate is cut to CUT_FACTOR of it
    at = T0 + 2.0
    for i in range(60):
        pacing.book(HOST, RULES, now=at + i / 60)
    later = cut(pacing, T0 + 3.0, 0)
    assert later == pytest.approx(CUT_FACTOR * 60, rel=0.05)
    # a process that sent unbooked requests (its route joined only now) adds them
    assert cut(pacing, T0 + 3.1, 40) == pytest.approx(CUT_FACTOR * 100, rel=0.05)
    # never above the rate before the cut, whatever the reports add up to
    assert cut(pacing, T0 + 3.2, 500) == pytest.approx(first)


def test_a_block_of_slots_is_booked_in_one_statement(pacing: PacingManager) -> None:
    rate = cut(pacing, T0, 100)
    booked = pacing.book(HOST, RULES, now=T0 + 2, count=6)
    assert booked is not None and booked[:2] == (rate, 0.0)
    assert booked[2] == pytest.approx(1 / rate)
    # the next booking starts after the six slots
    booked = pacing.book(HOST, RULES, now=T0 + 2)
    # (epoch seconds in double precision: a slot is exact to a microsecond)
    assert booked is not None and booked[1] == pytest.approx(6 / rate, abs=1e-6)


def test_the_rate_is_raised_while_the_schedule_binds_and_only_then(
    pacing: PacingManager,
) -> None:
    rate = cut(pacing, T0, 100)
    # requests queue for the slots for two seconds: the rate is raised
    at = T0 + 1.0
    for _ in range(4 * int(rate)):
        pacing.book(HOST, RULES, now=at)
        at += 0.5 / rate  # twice as many requests as slots: every booking waits
    booked = pacing.book(HOST, RULES, now=at)
    assert booked is not None and booked[0] == pytest.approx(rate * (1 + RAISE_FRACTION))
    # a trickle well below the rate: slots go unused, no raise however long it lasts
    raised = booked[0]
    for i in range(40):
        booked = pacing.book(HOST, RULES, now=at + 5 + i * 0.25)
    assert booked is not None and booked[0] == raised


def test_a_learned_rate_is_forgotten_and_a_declared_one_holds(pacing: PacingManager) -> None:
    rate = cut(pacing, T0, 100)
    booked = pacing.book(HOST, RULES, now=T0 + FORGET_SECONDS + 1)
    assert booked is not None and booked[:3] == (None, 0.0, 1 / rate)
    assert pacing.book(HOST, RULES, now=T0 + FORGET_SECONDS + 2) is None
    pacing.declare(HOST, 50.0)
    for i in range(5):
        booked = pacing.book(HOST, RULES, now=T0 + 100)
        assert booked is not None and booked[0] == 50.0 and booked[1] == pytest.approx(i / 50)
    # a 429 cuts a declared rate; it comes back to the declared one, never above it
    assert cut(pacing, T0 + 101, 30) == pytest.approx(CUT_FACTOR * (5 + 30), rel=0.05)
    booked = pacing.book(HOST, RULES, now=T0 + 101 + FORGET_SECONDS + 1)
    assert booked is not None and booked[:2] == (50.0, 0.0)


def test_a_key_booked_far_ahead_is_probed_no_higher_than_its_learned_limit(
    pacing: PacingManager,
) -> None:
    """Loop items parked for far turns keep a key's schedule booked far ahead: a probe
    above the limit a 429 taught would be answered only when those slots are sent, so
    while the schedule is more than LEARNED_SECONDS ahead the rate stays at most that
    limit, however long ago the cut was (a host's row has no learned limit)."""
    key = "key:deep"
    pacing.declare(key, 6.0)
    assert pacing.book(key, RULES, now=T0) is not None
    cut_to = pacing.cut_key(
        key, RULES, target=2.85, learned=3.0, sent_age=0.0, retry_after=None, now=T0 + 1
    )
    assert cut_to == pytest.approx(2.85)
    rates: list[float] = []
    for second in range(60):  # 20 s of schedule booked at once, then 4 a second
        waits: list[float] = []
        for _ in range(40 if second == 0 else 4):
            booked = pacing.book(key, RULES, now=T0 + 1 + second)
            assert booked is not None and booked[0] is not None
            rates.append(booked[0])
            waits.append(booked[1])
        assert waits[-1] > 10.0  # still booked far ahead
    assert max(rates) == pytest.approx(3.0)  # probed up to the learned limit, no higher


def test_a_booking_returns_the_seconds_since_the_keys_last_cut(pacing: PacingManager) -> None:
    """BOOK's `since_cut` (a loop item parked for its turn gives its window slot back
    only when the key's rate has settled, worker.parking.releases): from the epoch for
    a key never cut, from the last cut after one; a 429 answered within the cut's
    window (its overshoot) does not move it."""
    key = "key:settle"
    pacing.declare(key, 6.0)
    booked = pacing.book(key, RULES, now=T0)
    assert booked is not None and booked[3] == pytest.approx(T0)  # never cut
    assert pacing.cut_key(
        key, RULES, target=4.0, learned=4.5, sent_age=0.0, retry_after=None, now=T0 + 1
    ) == pytest.approx(4.0)
    booked = pacing.book(key, RULES, now=T0 + 3.5)
    assert booked is not None and booked[3] == pytest.approx(2.5)
    assert (
        pacing.cut_key(
            key, RULES, target=3.0, learned=3.5, sent_age=0.0, retry_after=None, now=T0 + 1.2
        )
        is None
    )
    booked = pacing.book(key, RULES, now=T0 + 12)
    assert booked is not None and booked[3] == pytest.approx(11.0)


def test_a_cut_stretches_a_keys_booked_schedule_and_holders_follow(
    pacing: PacingManager,
) -> None:
    """Ten slots of a key booked at 5/s (to T0 + 1.8); a 429 at T0 + 0.5 cuts it to 4/s:
    the schedule's end moves to where those slots end at 4/s, and a holder of a slot
    past the cut, reading the key's rate and cut (SCHEDULE_KEY), moves to the same
    spacing, so the next booking follows the last held slot by one new interval."""
    key = "key:stretch"
    ledger = FleetPaceLedger(pacing, now=lambda: None)
    pacing.declare(key, 5.0)
    for i in range(10):
        booked = pacing.book(key, RULES, now=T0)
        assert booked is not None and booked[1] == pytest.approx(i * 0.2)
    assert pacing.schedule_key(key) == (5.0, 0.0)  # never cut
    assert pacing.cut_key(
        key, RULES, target=4.0, learned=4.5, sent_age=0.5, retry_after=None, now=T0 + 0.5
    ) == pytest.approx(4.0)
    assert pacing.schedule_key(key) == pytest.approx((4.0, T0 + 0.5))
    booked = pacing.book(key, RULES, now=T0 + 0.5)
    assert booked is not None
    # the old end (T0 + 2.0) stretched from the cut: 0.5 + 1.5 x 5/4
    assert booked[1] == pytest.approx(1.5 * 1.25, abs=1e-3)
    assert ledger.schedule_key(key) == pytest.approx((4.0, T0 + 0.5))
    # the holder of the last slot before the cut (T0 + 1.8) moves to T0 + 2.125: one new
    # interval (0.25 s) before that next booking
    cut = T0 + 0.5
    moved = cut + (T0 + 1.8 - cut) * 5.0 / 4.0
    assert T0 + 0.5 + booked[1] - moved == pytest.approx(0.25, abs=1e-3)
    assert pacing.schedule_key("key:never-declared") is None


def fleet(pacing: PacingManager) -> Callable[[Clock], list[HttpPacer]]:
    def make(clock: Clock) -> list[HttpPacer]:
        with pacing.db.write() as conn:  # each drain's clock starts afresh
            conn.execute(text("DELETE FROM http_pace"))
        ledger = FleetPaceLedger(pacing, now=lambda: T0 + clock.now)
        return [HttpPacer(clock=clock, sleep=clock.sleep, ledger=ledger) for _ in range(2)]

    return make


# a PFT facility: four paged data types and demographics, limited, then MDS, which is not
STAGES = [3000, 2000, 2500, 1000, 1000, 1000] * 2
ROUTES = ["/v1/patient/*/assessments"] * 5 + ["/v1/mds/assessment/*"]


def limited_seconds(stages: list[int]) -> float:
    return sum(n for i, n in enumerate(stages) if i % 6 != 5) / 300


def test_two_processes_share_one_schedule_and_an_unlimited_route_is_not_paced(
    pacing: PacingManager,
) -> None:
    """Two processes whose lanes split each stage 70/30 (the frames of a cursor go to
    whichever process is free) drain PFT-shaped stages through the shared schedule
    within 12% of the limited stages' bound on average (the pauses between stages and
    the MDS stages included: 1.08-1.12x for seeds 1-3), with fewer 429s than one request
    in 250; the MDS stages (a route the server does not limit) run unpaced. Pacing per
    process took 1.19-1.24x with twice the 429s: the busier process cannot use the
    other's unused share (at an even split both take 1.09x)."""
    kwargs = dict(
        route=lambda i: ROUTES[i % 6],
        limited=lambda r: "/mds/" not in r,
        share=0.7,
    )
    runs = [
        (
            drain_stages(STAGES, seed, pacers=fleet(pacing), **kwargs),  # type: ignore[arg-type]
            drain_stages(STAGES, seed, **kwargs),  # type: ignore[arg-type]
        )
        for seed in (1, 2)
    ]
    bound = limited_seconds(STAGES)  # the MDS stages' requests are not limited
    shared = (sum(s[0] for s, _ in runs) / 2, max(s[1] for s, _ in runs))
    apart = (sum(a[0] for _, a in runs) / 2, max(a[1] for _, a in runs))
    assert shared[0] <= 1.12 * bound, runs
    assert shared[1] <= sum(STAGES) / 250, runs
    assert shared[0] < 0.95 * apart[0], (shared, apart)


@pytest.mark.parametrize(
    ("backend", "mode", "shared"),
    [("pg", "on", True), ("pg", "process", False), ("sqlite", "on", False)],
)
def test_the_worker_processes_of_a_postgres_engine_share_the_schedule(
    request: pytest.FixtureRequest, tmp_path: Path, backend: str, mode: str, shared: bool
) -> None:
    """NOETL_HTTP_PACING=on shares the schedule on Postgres; `process` keeps it per
    process, as SQLite (one process) always does."""
    url = request.getfixturevalue("pg_url" if backend == "pg" else "sqlite_url")
    settings = Settings(home=tmp_path, database_url=url, http_pacing=mode)
    engine = Engine(settings, schema=SchemaMode.MIGRATE)
    try:
        assert engine.services.http_pacer.shared is shared
        assert engine.services.http_pacer.enabled
    finally:
        engine.close()
