"""Keyed `rate_limit` on a tool or a step (models.rate_limit), enforced per command run.

A gate (`CommandThrottle.gate`) wraps one body run (a step's body, or one tool):

1. the key is rendered against the command's context (`{{ iter.shop.tenant }}`); a key
   that renders empty is that item's error (`RateLimitKeyError`, naming the key);
2. `per_second`: one send slot of the key is booked on the fleet's schedule
   (tools.keyed_pacing). A wait up to `park_after` is slept here; a longer one parks
   the command until `WAKE_LEAD` before its slot (the slot stays booked with its send
   time: the resumed run sleeps out the rest and takes it without booking again,
   `Throttled.booked`), as a long retry delay does (docs/design.md §2.7). Woken at
   the slot itself, a parked body would send as late as its wake-up, issue and
   delivery took, close behind the next body's on-time slot: the API sees two
   requests where its limit allows one, answers 429, and the key's learned rate is
   cut for nothing. It comes before the run slot, so no run slot is held while a
   body waits for its send slot;
3. `concurrency`: a run slot of the key is taken (store.throttle on Postgres: a row per
   slot that no two commands can hold; in this process's memory on SQLite, one
   process), and given back when the body ends, however it ends. None free: the gate
   polls for `park_after` seconds, then the command parks (`Throttled`, its send slot
   kept) and tries again `CONCURRENCY_RETRY` seconds later, holding no worker slot
   meanwhile. The body then runs under the key (`keyed_pacing.under`), so the http
   tool's 429s teach the key its real rate.

A slot held by a worker that is killed is freed when its command's lease lapses (the
slot's row is its command's only while that command is `running` with a live lease).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from typing import Any, Protocol

from noetl_celery.errors import RateLimitKeyError
from noetl_celery.models.rate_limit import (
    KEY_PREFIX,
    RateLimit,
    Resolved,
    rendered_key_problem,
    resolve,
)
from noetl_celery.templating import Renderer
from noetl_celery.tools.keyed_pacing import KeyedPacer, KeyedTurn, under

# seconds between two tries for a run slot while waiting in the worker's slot
CONCURRENCY_POLL = 0.05
# a command that found no run slot free parks this long before it tries again
CONCURRENCY_RETRY = 0.25
# a command parked for its send slot is woken this long before the slot (at most
# `park_after`, so the resumed run sleeps the rest instead of parking again): more than
# a parked command's wake-up, issue, publish and claim take on a loaded worker (tens
# of milliseconds; a few hundred at worst), little of a worker slot's time
WAKE_LEAD = 0.5


# the send slots a command booked and has not used yet: key -> [when it was booked (epoch
# seconds), the rate it is spaced at, when to send (epoch seconds; absent: now), when
# that send time was placed (absent: when booked)]; plain JSON, kept in a parked
# command's resume
Booked = dict[str, list[float]]


class Throttled(Exception):
    """A body must wait `delay` seconds for its turn: the command parks. `booked`: the
    keys whose send slot it already booked (`Booked`): the resumed run takes them as
    they are."""

    def __init__(
        self,
        delay: float,
        booked: Booked,
        key: str,
        reason: str,
        turn: bool = False,
        settled: bool = True,
    ) -> None:
        super().__init__(reason)
        self.delay = delay
        self.booked = booked
        self.key = key  # the key waited for (the pages count the commands waiting per key)
        self.reason = reason
        # a wait for the key's send slot (per_second), not for a run slot: a loop item
        # parked for it gives its window slot back (worker.parking, loops.on_parked)
        self.turn = turn
        # the key's rate had settled when the turn was booked (keyed_pacing.SETTLED_SECONDS):
        # only then is the window slot given back (a key still being cut keeps it)
        self.settled = settled


class SlotStore(Protocol):
    """Run slots per key (store.throttle.ThrottleManager, or `LocalSlots`)."""

    def acquire(self, key: str, cap: int, command_id: str) -> int | None: ...

    def release(self, key: str, command_id: str) -> None: ...


class LocalSlots:
    """Run slots in this process's memory: an SQLite engine is one process."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._held: dict[str, set[str]] = {}

    def acquire(self, key: str, cap: int, command_id: str) -> int | None:
        with self._lock:
            holders = self._held.setdefault(key, set())
            if command_id not in holders and len(holders) >= cap:
                return None
            holders.add(command_id)
            return len(holders) - 1

    def release(self, key: str, command_id: str) -> None:
        with self._lock:
            self._held.get(key, set()).discard(command_id)

    def held(self) -> dict[str, int]:
        with self._lock:
            return {key: len(holders) for key, holders in self._held.items() if holders}


class CommandThrottle:
    """The gates of one command run (one thread)."""

    def __init__(
        self,
        slots: SlotStore,
        pacer: KeyedPacer,
        command_id: str,
        renderer: Renderer,
        park_after: float | None,
        booked: Booked | None = None,
        sleep: Callable[[float], None] = time.sleep,
        clock: Callable[[], float] = time.monotonic,
        wall: Callable[[], float] = time.time,
    ) -> None:
        self._slots = slots
        self._pacer = pacer
        self._command_id = command_id
        self._renderer = renderer
        self._park_after = park_after
        # send slots booked by an earlier run of this command that parked for them
        self._pending: Booked = {k: list(v) for k, v in (booked or {}).items()}
        self._sleep = sleep
        self._clock = clock
        self._wall = wall

    def key_of(self, limit: RateLimit, context: Mapping[str, Any], where: str) -> str:
        rendered = self._renderer.value(limit.key, context, f"{where} rate_limit.key")
        problem = rendered_key_problem(rendered, limit.key)
        if problem is not None:
            raise RateLimitKeyError(f"{where}: {problem}")
        return KEY_PREFIX + str(rendered).strip()

    def numbers_of(self, limit: RateLimit, context: Mapping[str, Any], where: str) -> Resolved:
        def render(template: str, name: str) -> Any:
            return self._renderer.value(template, context, f"{where} rate_limit.{name}")

        try:
            return resolve(limit, render)
        except ValueError as exc:
            raise RateLimitKeyError(f"{where}: {exc}") from None

    @contextmanager
    def gate(self, limit: RateLimit, context: Mapping[str, Any], where: str) -> Iterator[str]:
        """Run the body under `limit` (yields its ledger key); raises `Throttled` when
        the command must park first, `RateLimitKeyError` (or a TemplateError) when the
        key or a number cannot be rendered."""
        key = self.key_of(limit, context, where)
        numbers = self.numbers_of(limit, context, where)
        # the send slot first: its wait is slept (or parked) holding no run slot
        turn = (
            self._take_turn(key, numbers)
            if numbers.per_second is not None
            else KeyedTurn(key, None)
        )
        if numbers.concurrency is not None:
            self._take_slot(key, numbers.concurrency, turn)
        try:
            with under(turn):
                try:
                    yield key
                except Throttled as inner:  # a gate inside parks: this turn was not used
                    if turn.rate is not None:
                        self._pending[key] = [turn.booked_at, turn.rate]
                        inner.booked = dict(self._pending)
                    raise
        finally:
            if numbers.concurrency is not None:
                self._slots.release(key, self._command_id)

    def _take_slot(self, key: str, cap: int, turn: KeyedTurn) -> None:
        deadline = None if self._park_after is None else self._clock() + self._park_after
        while self._slots.acquire(key, cap, self._command_id) is None:
            if deadline is not None and self._clock() >= deadline:
                if turn.rate is not None:  # its send slot is kept for the resumed run
                    self._pending[turn.key] = [turn.booked_at, turn.rate]
                raise Throttled(
                    CONCURRENCY_RETRY, dict(self._pending), key, f"{key}: all {cap} run slots held"
                )
            self._sleep(CONCURRENCY_POLL)

    def _take_turn(self, key: str, limit: Resolved) -> KeyedTurn:
        assert limit.per_second is not None
        booked = self._pending.pop(key, None)
        if booked is not None:  # booked before this command parked for it
            booked_at, rate = float(booked[0]), float(booked[1])
            # woken WAKE_LEAD early: the rest of the wait is slept (or, woken far too
            # early, parked again for the same slot; its window slot was given back or
            # kept when it first parked, worker.parking.releases); a cut of the key
            # since moved the slot later (respaced)
            slot_at, placed_at = _slot_of(booked)
            if slot_at is not None:
                slot_at, rate = self._pacer.respaced(key, slot_at, placed_at, rate)
            wait = 0.0 if slot_at is None else slot_at - self._wall()
            settled = True
        else:
            booked_at = self._wall()
            wait, rate, settled = self._pacer.book(key, limit.per_second, limit.burst)
        placed_at = self._wall()
        if self._park_after is not None and wait > self._park_after:
            self._pending[key] = [booked_at, rate, placed_at + wait, placed_at]
            lead = min(WAKE_LEAD, self._park_after)
            reason = f"{key}: next send slot in {wait:.3g}s"
            raise Throttled(
                wait - lead, dict(self._pending), key, reason, turn=True, settled=settled
            )
        if wait > 0:
            self._sleep(wait)
            # a 429 this process saw meanwhile cut the key: its slot moved later
            if self._pacer.cut_since(key, placed_at):
                slot_at, rate = self._pacer.respaced(key, placed_at + wait, placed_at, rate)
                if (late := slot_at - self._wall()) > 0:
                    self._sleep(late)
        return KeyedTurn(key, rate, booked_at)


def _slot_of(booked: list[float]) -> tuple[float | None, float]:
    """A kept turn's (send time, when that time was placed): [booked at, rate] (a
    resume stored before send times were kept: due now), [.., send at] (placed when
    booked), [.., send at, placed at]."""
    if len(booked) < 3:
        return None, 0.0
    return float(booked[2]), float(booked[3] if len(booked) > 3 else booked[0])
