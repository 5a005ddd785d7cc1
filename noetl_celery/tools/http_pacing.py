"""A client-side request pacer per host: shared by the threads of a worker process, and by
the worker processes of a fleet when the engine database is Postgres (a `PaceLedger`).

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
- Pacing applies to the routes of a host that answered 429 (`route_key`: the path with
  its ids left out), all of them sharing the host's rate: an API that limits one family
  of paths (`/patient/...`) and not another (`/mds/...`) does not hold the other back.
  A route that shares the limit without having answered 429 yet soon does, and joins.
- `NOETL_HTTP_RATE_LIMITS` declares rates per host (`host:port=300`): the starting rate and
  a ceiling the probing never passes, for every route of the host.

With a `PaceLedger` (worker processes on a Postgres engine database) the rate and the
send slots of a paced host live in one row that every process books its requests from
(`store.pacing`): processes that pace their own share of one server window each learn
a share from the same 429s, and one process's unused share cannot go to another that
has requests waiting. The ledger applies the same rules to the fleet's requests (its
SQL says how); this module still decides, per process, which requests are paced and
which 429s are a signal, and a host that never answered 429 costs no database call.
A declared rate is then the fleet's; without a ledger it is per process.

No request waits in the pacer longer than `max_wait` (the same threshold at which a
retry parks its command instead of sleeping); after that it is sent, and a 429 it gets
is retried by the playbook's policy as before. The pacer only ever delays requests: it
never drops, repeats or fails one. Pure code with an injected clock (unit-tested).
"""

from __future__ import annotations

import collections
import heapq
import logging
import re
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import NamedTuple, Protocol
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
# with a ledger, a process books the slots of this long at its rate at once (at most
# MAX_BLOCK), and its threads take them in turn: one statement per request was 8% of a
# worker's CPU on an API-bound flow, and blocks of 20 ms (6 slots at 300/s) still cost
# 4.8% (py-spy, bench.pft_cursor). A slot not taken within STALE_SLOT of its time is
# dropped (sent late, it would add to the next slots' second in the server's window).
BLOCK_SECONDS = 0.05
MAX_BLOCK = 10
STALE_SLOT = 0.05


def host_key(url: str) -> str:
    """`host:port` of a URL (the port defaulted from the scheme), lower case."""
    try:
        parts = urlsplit(url)
        host = (parts.hostname or "").lower()
        port = parts.port or (443 if parts.scheme.lower() == "https" else 80)
    except ValueError:
        return ""
    return f"{host}:{port}" if host else ""


# a path segment that names one record rather than a kind of resource: digits, a UUID,
# a long hex or base64-ish token, or anything with a digit and a separator (MDS-12-3)
_ID_SEGMENT = re.compile(
    r"""^(?:\d+|[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}
        |[0-9a-f]{16,}|[A-Za-z0-9_-]{24,}|.*\d.*[-_.:].*|.*[-_.:].*\d.*)$""",
    re.IGNORECASE | re.VERBOSE,
)


def route_key(url: str) -> str:
    """The route of a URL: its path with the segments that name one record replaced by
    `*` (`/api/v1/patient/*/assessments`), without the query. The pacer paces the routes
    of a host that answered 429, not every request to the host."""
    try:
        path = urlsplit(url).path
    except ValueError:
        return ""
    return "/".join("*" if _ID_SEGMENT.match(part) else part for part in path.split("/"))


class Ticket(NamedTuple):
    """One request's pass through the pacer: `wait` gives it, `observe` takes it back."""

    host: str
    route: str
    sent_at: float  # the process's clock
    booked: bool = False  # its send slot came from the ledger (counted there)


class Booking(NamedTuple):
    wait: float  # seconds until the first slot
    rate: float  # the host's rate after the booking (requests per second, the fleet's)
    interval: float = 0.0  # seconds between two of the slots
    slots: int = 1  # how many were booked
    # seconds since the row's last cut at the booking (a keyed limit's: is its rate
    # settled? tools.keyed_pacing.KeyedPacer.book); infinite: never cut, or not known
    since_cut: float = float("inf")


class PaceLedger(Protocol):
    """The pacing schedule of a fleet: a rate and a sequence of send slots per host, in a
    store every worker process reaches (store.pacing). A method that cannot reach it
    raises; the pacer then sends without pacing (it only ever delays requests)."""

    def book(self, host: str, count: int = 1) -> Booking | None:
        """Book the next `count` send slots of `host`; None when the host is not paced
        (any more: no 429 for FORGET_SECONDS)."""

    def cut(self, host: str, *, unbooked: int, sent_age: float, retry_after: float | None) -> float:
        """A 429 of a request sent `sent_age` seconds ago, reported by a process that had
        `unbooked` requests accepted in the second before it without a slot from the
        ledger: the host's rate after it (CUT_FACTOR of the fleet's accepted requests,
        once per overshoot)."""

    def declare(self, host: str, rate: float) -> None:
        """`host` is paced at `rate` at most (NOETL_HTTP_RATE_LIMITS), from now on."""


class Accepted(NamedTuple):
    sent_at: float
    route: str
    booked: bool  # its slot came from the ledger


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
    # the accepted requests of the last two seconds: the signal a 429 is read against
    accepted: collections.deque[Accepted] = field(default_factory=collections.deque)
    routes: set[str] = field(default_factory=set)  # the routes that answered 429
    slots: list[float] = field(default_factory=list)  # booked from the ledger (a heap)
    cuts: int = 0  # how many times a 429 cut the rate
    declared: bool = False  # the ledger knows the declared rate

    def paces(self, route: str) -> bool:
        return self.ceiling is not None or route in self.routes


def _recent(pace: HostPace, now: float) -> int:
    """How many of the paced routes' accepted requests were sent in the last window."""
    count = 0
    for sent, route, _booked in reversed(pace.accepted):
        if sent <= now - WINDOW_SECONDS:
            break
        count += pace.paces(route)
    return count


def _take_slot(slots: list[float], now: float) -> float | None:
    """The earliest booked slot not yet stale (dropping the stale ones), if any."""
    while slots and slots[0] < now - STALE_SLOT:
        heapq.heappop(slots)
    return heapq.heappop(slots) if slots else None


def _raise_fraction(quiet: float) -> float:
    """How much the rate grows after `quiet` seconds without a 429: RAISE_FRACTION for
    the first ACCELERATE_AFTER seconds (near the rate that was cut), then doubling each
    second up to MAX_RAISE_FRACTION (the limit went up, or a path of the host that is
    not limited is busy)."""
    doublings = max(0.0, quiet - ACCELERATE_AFTER)
    return float(min(MAX_RAISE_FRACTION, RAISE_FRACTION * 2.0 ** min(doublings, 16.0)))


def _forgotten_line(key: str, ceiling: float | None, whose: str) -> str:
    return f"{key}: no 429 for {FORGET_SECONDS:g}s; its requests from {whose} are " + (
        "no longer paced"
        if ceiling is None
        else f"paced at the declared {ceiling:g}/s again (NOETL_HTTP_RATE_LIMITS)"
    )


class HttpPacer:
    """Per-host pacing for the requests of one process (thread-safe); with a `ledger`,
    the schedule of a paced host is the fleet's."""

    def __init__(
        self,
        declared: Mapping[str, float] | None = None,
        *,
        max_wait: float = 1.0,
        clock: Callable[[], float] = time.monotonic,
        sleep: Callable[[float], None] = time.sleep,
        enabled: bool = True,
        ledger: PaceLedger | None = None,
    ) -> None:
        self.enabled = enabled
        self._declared = dict(declared or {})
        self._max_wait = max(0.0, max_wait)
        self._clock = clock
        self._sleep = sleep
        self._lock = threading.Lock()
        self._hosts: dict[str, HostPace] = {}
        self._ledger = ledger
        self._ledger_failed = float("-inf")  # when the ledger last raised (logged once a minute)

    @property
    def shared(self) -> bool:
        """The schedule of a paced host is the fleet's (a ledger), not this process's."""
        return self._ledger is not None

    def _host(self, key: str) -> HostPace:
        pace = self._hosts.get(key)
        if pace is None:
            declared = self._declared.get(key)
            pace = self._hosts[key] = HostPace(rate=declared, ceiling=declared)
        return pace

    def reserve(self, key: str, route: str = "") -> tuple[float, Ticket]:
        """Book this request's send time: (seconds to wait first, its ticket)."""
        if self._ledger is not None:
            return self._reserve_shared(self._ledger, key, route)
        forgotten = None
        with self._lock:
            now = self._clock()
            pace = self._host(key)
            if pace.rate != pace.ceiling and now - pace.last_cut > FORGET_SECONDS:
                forgotten, pace.rate = pace.rate, pace.ceiling
                pace.routes.clear()
            if not pace.paces(route) or (pace.rate is None and pace.paused_until <= now):
                start = now  # not paced: the common case
            else:
                start = max(now, pace.next_send, pace.paused_until)
                start = min(start, now + self._max_wait)
                if pace.rate is not None:
                    pace.next_send = max(pace.next_send, start) + 1.0 / pace.rate
                    self._maybe_raise(pace, now, waited=start > now)
        if forgotten is not None:
            log.info(_forgotten_line(key, pace.ceiling, "this worker"))
        return start - now, Ticket(key, route, start)

    def _reserve_shared(self, ledger: PaceLedger, key: str, route: str) -> tuple[float, Ticket]:
        with self._lock:
            now = self._clock()
            pace = self._host(key)
            if pace.rate is None or not pace.paces(route):
                return 0.0, Ticket(key, route, now)  # not paced: no database call
            slot = _take_slot(pace.slots, now)
            if slot is not None:
                return self._slot_ticket(key, route, slot, now)
            declare = pace.ceiling if not pace.declared else None
            count = max(1, min(MAX_BLOCK, int(pace.rate * BLOCK_SECONDS)))
        try:
            if declare is not None:
                ledger.declare(key, declare)  # twice, by two threads at once: harmless
                pace.declared = True
            booking = ledger.book(key, count)
        except Exception as exc:  # any failure: pacing never fails a request
            self._ledger_unreachable(key, exc)
            return 0.0, Ticket(key, route, self._clock())
        with self._lock:
            now = self._clock()
            if booking is None:  # forgotten by the fleet: no 429 for FORGET_SECONDS
                was, pace.rate = pace.rate, pace.ceiling
                pace.routes.clear()
                pace.slots.clear()
            else:
                pace.rate = booking.rate
                first = now + booking.wait
                for i in range(1, booking.slots):  # the rest for this process's next requests
                    heapq.heappush(pace.slots, first + i * booking.interval)
        if booking is None:
            if was is not None and pace.ceiling is None:
                log.info(_forgotten_line(key, None, "the workers"))
            return 0.0, Ticket(key, route, now)
        return self._slot_ticket(key, route, first, now)

    def _slot_ticket(self, key: str, route: str, slot: float, now: float) -> tuple[float, Ticket]:
        wait = max(0.0, min(slot - now, self._max_wait))
        return wait, Ticket(key, route, now + wait, booked=True)

    def _ledger_unreachable(self, key: str, exc: Exception) -> None:
        now = self._clock()
        with self._lock:
            if now - self._ledger_failed < 60.0:
                return
            self._ledger_failed = now
        log.warning(
            "%s: the shared pacing schedule could not be reached (%s): its requests go "
            "out unpaced until it can",
            key,
            exc,
        )

    def _maybe_raise(self, pace: HostPace, now: float, waited: bool) -> None:
        pace.waited = pace.waited or waited
        if now - pace.last_raise < WINDOW_SECONDS:
            return
        if (
            pace.waited
            and pace.rate is not None
            and now - pace.last_cut >= WINDOW_SECONDS
            and _recent(pace, now) >= BUSY_SHARE * pace.rate
        ):
            raised = pace.rate * (1.0 + _raise_fraction(now - pace.last_cut))
            pace.rate = min(raised, pace.ceiling) if pace.ceiling else raised
        pace.last_raise = now
        pace.waited = False

    def wait(self, key: str, route: str = "") -> Ticket:
        """Wait for this request's turn; returns the ticket to pass to `observe`."""
        if not key or not self.enabled:
            return Ticket(key, route, self._clock())
        delay, ticket = self.reserve(key, route)
        if delay > 0:
            self._sleep(delay)
        return ticket

    def observe(self, ticket: Ticket, status: int, retry_after: float | None) -> None:
        """Learn from the answer to the request of `ticket` (from `wait`)."""
        if not ticket.host or not self.enabled:
            return
        with self._lock:
            said = self._observe(ticket, status, retry_after)
        if isinstance(said, _Report):
            said = self._report(said)
        if said is not None:
            log.log(*said)

    def _observe(
        self, ticket: Ticket, status: int, retry_after: float | None
    ) -> tuple[int, str] | _Report | None:
        """observe() under the lock; what to log about it, if anything (level, line), or
        the 429 to report to the ledger (outside the lock: a database call)."""
        key, route, sent_at = ticket.host, ticket.route, ticket.sent_at
        now = self._clock()
        pace = self._host(key)
        accepted = pace.accepted
        while accepted and accepted[0].sent_at <= now - 2 * WINDOW_SECONDS:
            accepted.popleft()
        if status != 429:
            accepted.append(Accepted(sent_at, route, ticket.booked))
            return None
        window = [a for a in accepted if sent_at - WINDOW_SECONDS < a.sent_at <= sent_at]
        if len(window) < MIN_SIGNAL:
            return None
        pace.routes.add(route)  # this route shares the host's limit
        if pace.rate is not None:
            # what counted against the limit: the routes that share it (every route's,
            # while the host was not paced: which ones share it is not known yet)
            window = [a for a in window if pace.paces(a.route)]
        in_window = len(window)
        if self._ledger is not None:
            if sent_at < pace.last_cut + WINDOW_SECONDS:
                return None  # this process reported this overshoot already
            pace.last_cut = now
            unbooked = sum(not a.booked for a in window)
            return _Report(key, unbooked, now - sent_at, retry_after, in_window)
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
        return _cut_line(key, was, rate, in_window, pause, shared=False)

    def _report(self, report: _Report) -> tuple[int, str] | None:
        """Report a 429 to the ledger (outside the lock); what to log about it."""
        assert self._ledger is not None
        try:
            rate = self._ledger.cut(
                report.host,
                unbooked=report.unbooked,
                sent_age=report.sent_age,
                retry_after=report.retry_after,
            )
        except Exception as exc:  # any failure: pacing never fails a request
            self._ledger_unreachable(report.host, exc)
            return None
        with self._lock:
            pace = self._host(report.host)
            was, pace.rate = pace.rate, rate
            pace.cuts += 1
        # the ledger pauses the host for the Retry-After of the 429 that paced it, and
        # for a longer one (a quota) whenever it comes
        paused = report.retry_after and (was is None or report.retry_after > WINDOW_SECONDS)
        pause = f", after a pause of {report.retry_after:g}s (Retry-After)" if paused else ""
        return _cut_line(report.host, was, rate, report.in_window, pause, shared=True)

    def rate(self, key: str) -> float | None:
        """The host's current rate (None: not paced); with a ledger, the fleet's rate
        this process last booked with."""
        with self._lock:
            pace = self._hosts.get(key)
            return pace.rate if pace is not None else self._declared.get(key)


class _Report(NamedTuple):
    host: str
    unbooked: int
    sent_age: float
    retry_after: float | None
    in_window: int


def _cut_line(
    key: str, was: float | None, rate: float, in_window: int, pause: str, shared: bool
) -> tuple[int, str]:
    if was is None:  # an operator's first sign that an API holds a drain back
        whose = "the workers' requests to it are" if shared else "its requests are"
        return logging.INFO, (
            f"{key} answered 429 with {in_window} requests from this worker "
            f"accepted in the last second: {whose} paced at {rate:.0f}/s from "
            f"now{pause}, probed upward while no 429 comes"
        )
    return (
        logging.DEBUG,
        f"{key} answered 429: pacing cut from {was:.0f} to {rate:.0f}/s{pause}",
    )
