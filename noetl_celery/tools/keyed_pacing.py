"""The send schedule of keyed `rate_limit`s (models.rate_limit, worker.throttle): the
http pacer's rules (tools.http_pacing) applied to a key a playbook names instead of a
host, in the same fleet ledger (a `http_pace` row named `key:<key>`).

- A key is declared at its `per_second` (the ceiling: probing never passes it) the
  first time this process books for it; every run of a body under the key books one
  send slot, and a booking that finds the key's row gone (the prune removes a key idle
  past the retention age: its learned rate is forgotten) declares it again at the
  ceiling first, in the booking's transaction. `burst` lets that many go at once
  after a quiet spell (GCRA's tolerance, `(burst - 1)` intervals), then they are
  spaced at the rate.
- The wait a booking gives is *not* capped here (the host pacer sends after
  `max_wait`): the worker parks the command for a long one, its slot kept (`Booked`).
- Learning below the ceiling: the http tool reports every answer to a request sent
  under a key (`observe`, with the `KeyedTurn` the worker set for the body). The host
  pacer waits for `MIN_SIGNAL` accepted requests before it reads a rate from a 429; a
  declared key has a rate already, so every 429 is a signal, and what it says is how
  far above the real limit that rate is: of the key's answers in the last
  `SIGNAL_WINDOW` seconds the server accepted a share `s`, so it accepts about
  `rate x s` per second. The key's rate is cut to `CUT_FACTOR` of that (never by more
  than MAX_CUT_SHARE at once; by CUT_FACTOR alone when fewer than MIN_SHARE_ANSWERS
  answers say what the share is, or when nearly all were accepted, JITTER_SHARE), at
  most once per overshoot, and probed back upward by the
  ledger's rules while its schedule binds, no higher than that estimate (`rate x s`)
  for LEARNED_SECONDS after the cut, and while the key's schedule is booked more than
  LEARNED_SECONDS ahead (loop items parked for far turns: a probe's 429s would come
  only when those slots are sent): the key sits just under its limit rather than
  probing into 429s every few seconds. An overshoot is every slot booked before
  the cut that answered it: a body parked for its slot was booked at the old rate, and
  its 429 is that cut's, not a new one (so `KeyedTurn.booked_at`, not the send time,
  is what is checked against the last cut). A limit that
  changes is found again the same way: LEARNED_SECONDS after the last cut the
  estimate no longer caps the probing (the rate is not reset to the declared one, as
  a host's is: that jump would be a storm of 429s).

Without a ledger (an SQLite engine: one process) the same rules run on this process's
own schedule. A ledger that cannot be reached leaves the key unpaced (pacing only ever
delays; the playbook's retry policy still handles a 429). Pure, clock injected.
"""

from __future__ import annotations

import collections
import contextvars
import logging
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import NamedTuple, Protocol

from noetl_celery.tools.http_pacing import (
    CUT_FACTOR,
    MIN_RATE,
    WINDOW_SECONDS,
    Booking,
    _raise_fraction,
)

log = logging.getLogger("noetl_celery.http")

# the answers a 429's accepted share is read from (seconds before its request was sent)
SIGNAL_WINDOW = 5.0 * WINDOW_SECONDS
# a cut never takes more than this share of the rate away at once: a share read at a
# 429 reads low (the 429s of an overshoot come in bunches), and the probing that found
# the limit overshot it by less than this; a declared rate far above the real one takes
# a few cuts, within its first seconds
MAX_CUT_SHARE = 0.25
# fewer answers than this in the signal window say too little about the accepted share:
# the 429 cuts the rate by CUT_FACTOR alone
MIN_SHARE_ANSWERS = 8
# a share at least this high is the jitter of a rate at (or just over) the limit, not a
# measure of how far above it the rate is: the 429 cuts by CUT_FACTOR alone, and the rate
# it was sent at is the estimate (a request or two refused among many says nothing more)
JITTER_SHARE = 0.85
# for this long after a cut the key's rate is probed no higher than the limit that cut
# estimated (the key sits just under its limit instead of probing into 429s); then the
# probing goes on from where the rate is. Short: an estimate read at a 429 is rough
LEARNED_SECONDS = 10.0
# a key not cut for this long has a settled rate: a loop item parked for its send slot
# may then give its window slot back (worker.parking.releases), and the loop books the
# key's turns far ahead. While the key is still being cut, far turns would keep the
# spacing of a rate already known too high (they are refused when sent) and the 429s
# that teach the rate would come only as late as they are sent; an item keeping its
# window slot keeps the bookings shallow and the feedback fast. LEARNED_SECONDS: after
# it the probe is no longer capped by the last cut's estimate either, and a key booked
# shallow (as it is while unsettled) sends at its rate for that long without a 429
SETTLED_SECONDS = LEARNED_SECONDS


class KeyedSlot(NamedTuple):
    """A booked send slot: seconds until it, the key's rate, and whether that rate has
    settled (no cut of the key for SETTLED_SECONDS; a key never cut is settled)."""

    wait: float
    rate: float
    settled: bool = True


class KeyedTurn(NamedTuple):
    """One body's pass under a keyed limit: the ledger key, the rate its send slot was
    booked at (None: only `concurrency` is limited, nothing to learn) and when it was
    booked (epoch seconds: a slot booked before the last cut is that cut's overshoot)."""

    key: str
    rate: float | None
    booked_at: float = 0.0


_ACTIVE: contextvars.ContextVar[KeyedTurn | None] = contextvars.ContextVar(
    "noetl_keyed_turn", default=None
)


def current() -> KeyedTurn | None:
    """The keyed limit the running body is under (the http tool reports to it)."""
    return _ACTIVE.get()


@contextmanager
def under(turn: KeyedTurn) -> Iterator[None]:
    token = _ACTIVE.set(turn)
    try:
        yield
    finally:
        _ACTIVE.reset(token)


class KeyLedger(Protocol):
    """The fleet's schedule of a key (engine.pacing.FleetPaceLedger)."""

    def declare(self, host: str, rate: float) -> None: ...

    def book_key(self, key: str, declared: float, tolerance: float = 0.0) -> Booking | None: ...

    def cut_key(
        self,
        key: str,
        *,
        target: float,
        learned: float,
        sent_age: float,
        retry_after: float | None,
    ) -> float | None: ...

    def schedule_key(self, key: str) -> tuple[float, float] | None: ...


@dataclass
class KeyPace:
    """A key's state in this process (guarded by the pacer's lock)."""

    ceiling: float
    rate: float
    declared: bool = False  # the ledger knows the ceiling
    tat: float = float("-inf")  # local schedule: the next free slot
    last_cut: float = float("-inf")
    cut_at: float = float("-inf")  # the last cut this process made (epoch seconds)
    last_raise: float = float("-inf")
    learned: float = float("inf")  # the estimate of the real limit, while fresh
    answers: collections.deque[tuple[float, bool]] = field(default_factory=collections.deque)


def accepted_share(answers: list[tuple[float, bool]]) -> float:
    """The share of `answers` ((sent_at, accepted)) the server accepted (1.0: too few
    to tell, MIN_SHARE_ANSWERS; or so many that the 429 is jitter, JITTER_SHARE)."""
    if len(answers) < MIN_SHARE_ANSWERS:
        return 1.0
    share = sum(ok for _, ok in answers) / len(answers)
    return 1.0 if share >= JITTER_SHARE else share


def accepted_rate(rate: float, share: float) -> float:
    """What the server accepts of a key sent at `rate` (`rate x share`, the share
    bounded by MAX_CUT_SHARE: a share read from few answers is rough): the estimate of
    the key's real limit a 429 gives, above which the rate is not probed while the
    cut is fresh."""
    return max(MIN_RATE, rate * max(share, 1.0 - MAX_CUT_SHARE))


def cut_target(rate: float, share: float) -> float:
    """The rate a 429 cuts a key to: CUT_FACTOR of what the server accepts, never
    below MIN_RATE."""
    return max(MIN_RATE, CUT_FACTOR * accepted_rate(rate, share))


class KeyedPacer:
    """Per-key schedules of this process (thread-safe); with a ledger, the fleet's."""

    def __init__(
        self,
        ledger: KeyLedger | None = None,
        *,
        clock: Callable[[], float] = time.monotonic,
        wall: Callable[[], float] = time.time,
    ) -> None:
        self._ledger = ledger
        self._clock = clock
        self._wall = wall
        self._lock = threading.Lock()
        self._keys: dict[str, KeyPace] = {}
        self._failed = float("-inf")

    def _pace(self, key: str, per_second: float) -> KeyPace:
        pace = self._keys.get(key)
        if pace is None or pace.ceiling != per_second:
            pace = self._keys[key] = KeyPace(ceiling=per_second, rate=per_second)
        return pace

    def rate(self, key: str, per_second: float) -> float:
        """The key's rate as this process last saw it (`per_second` when unseen)."""
        with self._lock:
            return self._pace(key, per_second).rate

    def book(self, key: str, per_second: float, burst: int = 1) -> KeyedSlot:
        """Book one send slot of `key` (declared at `per_second`)."""
        with self._lock:
            pace = self._pace(key, per_second)
            tolerance = (max(1, burst) - 1) / pace.rate
            if self._ledger is None:
                settled = self._clock() - pace.last_cut >= SETTLED_SECONDS
                return KeyedSlot(self._book_local(pace, tolerance), pace.rate, settled)
            declare = not pace.declared
        try:
            if declare:
                self._ledger.declare(key, per_second)
                pace.declared = True
            # a row gone since (pruned idle, a reset ledger) is declared again by the
            # booking itself: this process's `declared` stays true
            booking = self._ledger.book_key(key, per_second, tolerance)
        except Exception as exc:  # pacing never fails a body: it goes unpaced
            self._unreachable(key, exc)
            return KeyedSlot(0.0, pace.rate)
        if booking is None:  # not paced (cannot be once declared): declare next time
            pace.declared = False
            return KeyedSlot(0.0, pace.rate)
        with self._lock:
            pace.rate = booking.rate
        return KeyedSlot(booking.wait, booking.rate, booking.since_cut >= SETTLED_SECONDS)

    def _book_local(self, pace: KeyPace, tolerance: float) -> float:
        now = self._clock()
        binds = pace.tat >= now
        if (
            binds
            and now - pace.last_raise >= WINDOW_SECONDS
            and now - pace.last_cut >= WINDOW_SECONDS
        ):
            raised = pace.rate * (1.0 + _raise_fraction(now - pace.last_cut))
            # the estimate caps the probe while fresh, and while the schedule is booked
            # far ahead (the answers to a higher rate would come that late)
            capped = now - pace.last_cut <= LEARNED_SECONDS or pace.tat - now > LEARNED_SECONDS
            learned = pace.learned if capped else pace.ceiling
            pace.rate = max(pace.rate, min(raised, pace.ceiling, learned))
            pace.last_raise = now
        start = max(pace.tat - tolerance, now)
        pace.tat = max(pace.tat, now) + 1.0 / pace.rate
        return start - now

    def observe(
        self, turn: KeyedTurn, status: int, retry_after: float | None, sent_at: float
    ) -> None:
        """The answer to a request sent at `sent_at` (this pacer's clock) under `turn`."""
        if turn.rate is None:
            return
        with self._lock:
            pace = self._keys.get(turn.key)
            if pace is None:
                return
            now = self._clock()
            answers = pace.answers
            while answers and answers[0][0] <= now - 2 * SIGNAL_WINDOW:
                answers.popleft()
            answers.append((sent_at, status != 429))
            if status != 429 or turn.booked_at < pace.cut_at + WINDOW_SECONDS:
                # accepted, or booked before (or just after) this process's last cut: the
                # overshoot that cut answered, still in the schedule
                return
            share = accepted_share([a for a in answers if sent_at - SIGNAL_WINDOW < a[0]])
            target = cut_target(turn.rate, share)
            learned = accepted_rate(turn.rate, share)
            pace.last_cut = now
            pace.learned = learned
            pace.cut_at = self._wall()
            booked_age = max(0.0, pace.cut_at - turn.booked_at)
            if self._ledger is None:
                was, pace.rate = pace.rate, min(pace.rate, target)
                # the slots booked past the cut stretched to the new rate (their
                # holders move theirs the same way: respaced)
                if pace.tat > now:
                    pace.tat = now + (pace.tat - now) * was / pace.rate
                pace.tat = max(pace.tat, now)
                rate: float | None = pace.rate
        if self._ledger is not None:
            try:
                # the fleet's last cut is checked against when the slot was booked
                rate = self._ledger.cut_key(
                    turn.key,
                    target=target,
                    learned=learned,
                    sent_age=booked_age,
                    retry_after=retry_after,
                )
            except Exception as exc:  # the next 429 reports again
                self._unreachable(turn.key, exc)
                return
            was = turn.rate
            if rate is not None:
                with self._lock:
                    pace.rate = rate
        if rate is not None and rate < was:
            accepted = f"{share:.0%}" if share < 1.0 else "nearly all"
            log.info(
                "%s answered 429 (%s of its recent requests accepted): its rate is "
                "cut from %.3g to %.3g/s (declared %g/s)",
                turn.key,
                accepted,
                was,
                rate,
                pace.ceiling,
            )

    def cut_since(self, key: str, placed_at: float) -> bool:
        """This process cut (or tried to cut) `key` after `placed_at` (epoch seconds):
        a slot placed then may have moved (respaced)."""
        with self._lock:
            pace = self._keys.get(key)
            return pace is not None and pace.cut_at > placed_at

    def respaced(
        self, key: str, slot_at: float, placed_at: float, rate_then: float
    ) -> tuple[float, float]:
        """(when to send, the rate it is spaced at) for a slot placed at `slot_at`
        (epoch seconds) at `placed_at` while the key's rate was `rate_then`, now that the
        key may have been cut since: a cut stretches the schedule past it to the new
        rate (CUT_KEY, `observe`), so the slot moves as far past the cut as it was,
        times the old rate over the new. Only the last cut is known: a slot placed
        before two moves as if the rate had dropped at once at the second. The ledger
        unreachable: the slot as placed."""
        if self._ledger is not None:
            try:
                schedule = self._ledger.schedule_key(key)
            except Exception as exc:
                self._unreachable(key, exc)
                return slot_at, rate_then
            if schedule is None:
                return slot_at, rate_then
            rate, cut = schedule
        else:
            with self._lock:
                pace = self._keys.get(key)
                if pace is None:
                    return slot_at, rate_then
                rate, cut = pace.rate, pace.cut_at
        if cut <= placed_at or slot_at <= cut or rate >= rate_then:
            return slot_at, rate_then
        return cut + (slot_at - cut) * rate_then / rate, rate

    def _unreachable(self, key: str, exc: Exception) -> None:
        now = self._clock()
        with self._lock:
            if now - self._failed < 60.0:
                return
            self._failed = now
        log.warning(
            "%s: the shared rate-limit schedule could not be reached (%s): its bodies run "
            "unpaced until it can",
            key,
            exc,
        )
