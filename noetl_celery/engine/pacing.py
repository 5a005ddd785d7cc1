"""The http tool's `PaceLedger` on the engine database (tools.http_pacing, store.pacing):
the rules' constants go to the SQL from the one module that defines them."""

from __future__ import annotations

from collections.abc import Callable

from noetl_celery.store.pacing import PaceRules, PacingManager
from noetl_celery.tools import http_pacing as rules
from noetl_celery.tools import keyed_pacing as keyed
from noetl_celery.tools.http_pacing import Booking

RULES = PaceRules(
    window=rules.WINDOW_SECONDS,
    forget=rules.FORGET_SECONDS,
    raise_fraction=rules.RAISE_FRACTION,
    max_raise=rules.MAX_RAISE_FRACTION,
    accelerate=rules.ACCELERATE_AFTER,
    cut_factor=rules.CUT_FACTOR,
    min_rate=rules.MIN_RATE,
    learned_for=keyed.LEARNED_SECONDS,
)


def _database_clock() -> float | None:
    return None  # the statements read the database's clock


class FleetPaceLedger:
    """tools.http_pacing.PaceLedger (and tools.keyed_pacing.KeyLedger) over
    `store.pacing` (Postgres). `now` gives the statements their clock (epoch seconds;
    None: the database's, as workers on several machines must agree on it): tests
    replay a drain on a fake one."""

    def __init__(
        self, pacing: PacingManager, now: Callable[[], float | None] = _database_clock
    ) -> None:
        self._pacing = pacing
        self._now = now

    def book(self, host: str, count: int = 1, tolerance: float = 0.0) -> Booking | None:
        booked = self._pacing.book(host, RULES, now=self._now(), count=count, tolerance=tolerance)
        if booked is None or booked[0] is None:
            return None
        return Booking(wait=booked[1], rate=booked[0], interval=booked[2], slots=count)

    def book_key(self, key: str, declared: float, tolerance: float = 0.0) -> Booking | None:
        """A keyed limit's send slot; its row re-created at `declared` if it is gone."""
        booked = self._pacing.book_key(key, declared, RULES, now=self._now(), tolerance=tolerance)
        if booked is None or booked[0] is None:
            return None
        return Booking(
            wait=booked[1], rate=booked[0], interval=booked[2], slots=1, since_cut=booked[3]
        )

    def cut(self, host: str, *, unbooked: int, sent_age: float, retry_after: float | None) -> float:
        return self._pacing.cut(
            host,
            RULES,
            unbooked=unbooked,
            sent_age=sent_age,
            retry_after=retry_after,
            now=self._now(),
        )

    def cut_key(
        self,
        key: str,
        *,
        target: float,
        learned: float,
        sent_age: float,
        retry_after: float | None,
    ) -> float | None:
        """A keyed limit's 429 (tools.keyed_pacing): the rate becomes `target`, and is
        probed no higher than `learned` while the cut is fresh."""
        return self._pacing.cut_key(
            key,
            RULES,
            target=target,
            learned=learned,
            sent_age=sent_age,
            retry_after=retry_after,
            now=self._now(),
        )

    def schedule_key(self, key: str) -> tuple[float, float] | None:
        """A keyed limit's rate and last cut (epoch seconds), None when not paced."""
        return self._pacing.schedule_key(key)

    def declare(self, host: str, rate: float) -> None:
        self._pacing.declare(host, rate)
