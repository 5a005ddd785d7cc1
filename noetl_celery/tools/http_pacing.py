"""A client-side request pacer per host, shared by the threads of one worker process.

An API that allows N requests per second answers the excess with 429 and `Retry-After`;
every 429 costs its command a retry wait (a worker slot sleeping, or a parked command).
Worker threads that fire as fast as they can trip the server's window again and again.
The pacer spaces this process's requests to a host instead, so they wait their turn
briefly *before* being sent:

- A host that never answered 429 (and has no declared limit) is not paced at all: the
  request goes out at once, at the cost of one lock and one dict lookup.
- The first 429 of a busy host (`MIN_SIGNAL`) gives it a rate: about what the server
  accepted from this process in the last second (`CUT_FACTOR` of it). Further 429s of
  requests sent within a second of that cut are the same overshoot (the server's window
  still holds it) and change nothing; a later 429 cuts again. While the pacer is what
  holds requests back (a request had to wait, and the server accepted nearly the rate
  from this process in the last second), the rate is probed upward by `RAISE_FRACTION`
  of itself each second (additive increase, multiplicative decrease: processes that
  share one server's limit settle near it), faster after `ACCELERATE_AFTER` seconds
  without a 429. A process sending less than its rate (the tail of a drain, a pause
  between two stages) does not probe: a rate raised while nothing tested it would let
  the next stage's burst into 429s, and each 429 holds its request for the Retry-After.
  `FORGET_SECONDS` without a 429 and the host is no longer paced.
- Such a 429 pauses the whole host for its `Retry-After` when the host was not paced yet
  (the burst that tripped the window fills it that long: what is sent meanwhile is
  refused) or when the wait is longer than a second (a quota, not a per-second window):
  its other requests wait instead of being sent into certain 429s.
- `NOETL_HTTP_RATE_LIMITS` declares rates per host (`host:port=300`): the starting rate and
  a ceiling the probing never passes. A declared rate is per worker process.

No request waits in the pacer longer than `max_wait` (the same threshold at which a
retry parks its command instead of sleeping); after that it is sent, and a 429 it gets
is retried by the playbook's policy as before. The pacer only ever delays requests: it
never drops, repeats or fails one. Pure code with an injected clock (unit-tested).
"""

from __future__ import annotations

import collections
import logging
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from urllib.parse import urlsplit

log = logging.getLogger("noetl_celery.http")

# a 429 sets the rate to this share of what the server accepted in the last second
# (processes sharing a limit see its 429s together, so their sum drops to this share of
# the limit: 0.9 left a tenth of it unused for seconds after every cut)
CUT_FACTOR = 0.95
# the rate is probed upward only while the server accepted at least this share of it
# from this process in the last second (the rate, not the demand, held requests back)
BUSY_SHARE = 0.9
# while pacing binds, the rate grows by this share of itself once per second
RAISE_FRACTION = 0.02
# ... for ACCELERATE_AFTER seconds after a cut; then it doubles each second, up to this
ACCELERATE_AFTER = 4.0
MAX_RAISE_FRACTION = 0.25
# the rate never drops below this (requests per second)
MIN_RATE = 1.0
WINDOW_SECONDS = 1.0
# a 429 paces the host only when this process had at least this many requests accepted
# in the second before it: one 429 among a handful of requests (a test endpoint, a
# quota) says nothing about a rate, and is left to the retry policy as before
MIN_SIGNAL = 20
# a learned rate is forgotten after this long without a 429 (a declared one is restored):
# limits change, and a rate learned in a burst must not hold a host back for good
FORGET_SECONDS = 30.0


def host_key(url: str) -> str:
    """`host:port` of a URL (the port defaulted from the scheme), lower case."""
    try:
        parts = urlsplit(url)
        host = (parts.hostname or "").lower()
        port = parts.port or (443 if parts.scheme.lower() == "https" else 80)
    except ValueError:
        return ""
    return f"{host}:{port}" if host else ""


@dataclass
class HostPace:
    """The pacing state of one host (guarded by its pacer's lock)."""

    rate: float | None = None  # requests per second; None: not paced
    ceiling: float | None = None  # a declared rate: never probe above it
    next_send: float = float("-inf")  # the earliest time the next request may go
    paused_until: float = float("-inf")  # Retry-After of the host
    last_cut: float = float("-inf")  # when the rate was last cut (by a 429)
    last_raise: float = float("-inf")
    waited: bool = False  # a request waited since the last raise: pacing binds
    accepted: collections.deque[float] = field(default_factory=collections.deque)
    cuts: int = 0  # how many times a 429 cut the rate


def _recent(accepted: collections.deque[float], now: float) -> int:
    """How many of `accepted` (send times, oldest first) were sent in the last window."""
    count = 0
    for sent in reversed(accepted):
        if sent <= now - WINDOW_SECONDS:
            break
        count += 1
    return count


def _raise_fraction(quiet: float) -> float:
    """How much the rate grows after `quiet` seconds without a 429: RAISE_FRACTION for
    the first ACCELERATE_AFTER seconds (near the rate that was cut), then doubling each
    second up to MAX_RAISE_FRACTION (the limit went up, or a path of the host that is
    not limited is busy)."""
    doublings = max(0.0, quiet - ACCELERATE_AFTER)
    return float(min(MAX_RAISE_FRACTION, RAISE_FRACTION * 2.0 ** min(doublings, 16.0)))


class HttpPacer:
    """Per-host pacing for the requests of one process (thread-safe)."""

    def __init__(
        self,
        declared: Mapping[str, float] | None = None,
        *,
        max_wait: float = 1.0,
        clock: Callable[[], float] = time.monotonic,
        sleep: Callable[[float], None] = time.sleep,
        enabled: bool = True,
    ) -> None:
        self.enabled = enabled
        self._declared = dict(declared or {})
        self._max_wait = max(0.0, max_wait)
        self._clock = clock
        self._sleep = sleep
        self._lock = threading.Lock()
        self._hosts: dict[str, HostPace] = {}

    def _host(self, key: str) -> HostPace:
        pace = self._hosts.get(key)
        if pace is None:
            declared = self._declared.get(key)
            pace = self._hosts[key] = HostPace(rate=declared, ceiling=declared)
        return pace

    def reserve(self, key: str) -> tuple[float, float]:
        """Book this request's send time: (seconds to wait first, the send time)."""
        forgotten = None
        with self._lock:
            now = self._clock()
            pace = self._host(key)
            if pace.rate != pace.ceiling and now - pace.last_cut > FORGET_SECONDS:
                forgotten, pace.rate = pace.rate, pace.ceiling
            if pace.rate is None and pace.paused_until <= now:
                start = now  # not paced: the common case
            else:
                start = max(now, pace.next_send, pace.paused_until)
                start = min(start, now + self._max_wait)
                if pace.rate is not None:
                    pace.next_send = max(pace.next_send, start) + 1.0 / pace.rate
                    self._maybe_raise(pace, now, waited=start > now)
        if forgotten is not None:
            log.info(
                "%s: no 429 for %gs; its requests from this worker are %s",
                key,
                FORGET_SECONDS,
                "no longer paced"
                if pace.ceiling is None
                else f"paced at the declared {pace.ceiling:g}/s again (NOETL_HTTP_RATE_LIMITS)",
            )
        return start - now, start

    def _maybe_raise(self, pace: HostPace, now: float, waited: bool) -> None:
        pace.waited = pace.waited or waited
        if now - pace.last_raise < WINDOW_SECONDS:
            return
        if (
            pace.waited
            and pace.rate is not None
            and now - pace.last_cut >= WINDOW_SECONDS
            and _recent(pace.accepted, now) >= BUSY_SHARE * pace.rate
        ):
            raised = pace.rate * (1.0 + _raise_fraction(now - pace.last_cut))
            pace.rate = min(raised, pace.ceiling) if pace.ceiling else raised
        pace.last_raise = now
        pace.waited = False

    def wait(self, key: str) -> float:
        """Wait for this request's turn; returns the send time to pass to `observe`."""
        if not key or not self.enabled:
            return self._clock()
        delay, start = self.reserve(key)
        if delay > 0:
            self._sleep(delay)
        return start

    def observe(self, key: str, sent_at: float, status: int, retry_after: float | None) -> None:
        """Learn from the answer to a request sent at `sent_at` (from `wait`)."""
        if not key or not self.enabled:
            return
        with self._lock:
            said = self._observe(key, sent_at, status, retry_after)
        if said is not None:
            log.log(*said)

    def _observe(
        self, key: str, sent_at: float, status: int, retry_after: float | None
    ) -> tuple[int, str] | None:
        """observe() under the lock; what to log about it, if anything (level, line)."""
        now = self._clock()
        pace = self._host(key)
        accepted = pace.accepted
        while accepted and accepted[0] <= now - 2 * WINDOW_SECONDS:
            accepted.popleft()
        if status != 429:
            accepted.append(sent_at)
            return None
        in_window = sum(1 for t in accepted if sent_at - WINDOW_SECONDS < t <= sent_at)
        if in_window < MIN_SIGNAL:
            return None
        paused = None
        if retry_after and (pace.rate is None or retry_after > WINDOW_SECONDS):
            # the burst that tripped an unpaced host's window fills it for as long
            # as the server says; a longer wait is a quota, not a per-second limit:
            # honour the server's Retry-After for the whole host
            if now + retry_after > pace.paused_until:
                paused = retry_after
            pace.paused_until = max(pace.paused_until, now + retry_after)
        if sent_at < pace.last_cut + WINDOW_SECONDS:
            # sent while the server's window still held the overshoot the last cut
            # answered: at most one cut per window
            if paused is None:
                return None
            return logging.INFO, (
                f"{key} answered 429 with Retry-After {paused:g}s: its requests from this "
                "worker wait for it"
            )
        rate = max(MIN_RATE, CUT_FACTOR * in_window)
        was = pace.rate
        if was is not None:
            rate = min(rate, was)  # a cut never raises the rate
        pace.rate = rate
        pace.last_cut = now
        pace.cuts += 1
        pace.next_send = max(pace.next_send, now)
        pause = f", after a pause of {paused:g}s (Retry-After)" if paused else ""
        if was is None:  # an operator's first sign that an API holds a drain back
            return logging.INFO, (
                f"{key} answered 429 with {in_window} requests from this worker "
                f"accepted in the last second: its requests are paced at {rate:.0f}/s "
                f"from now{pause}, probed upward while no 429 comes"
            )
        return (
            logging.DEBUG,
            f"{key} answered 429: pacing cut from {was:.0f} to {rate:.0f}/s{pause}",
        )

    def rate(self, key: str) -> float | None:
        """The host's current rate (None: not paced)."""
        with self._lock:
            pace = self._hosts.get(key)
            return pace.rate if pace is not None else self._declared.get(key)
