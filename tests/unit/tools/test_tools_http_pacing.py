"""The http tool's per-host pacer (tools.http_pacing) on a fake clock."""

from __future__ import annotations

import collections
import heapq
import itertools
import logging
import random
import threading
from collections.abc import Callable

import pytest

from noetl_celery.errors import ConfigurationError
from noetl_celery.settings import Settings, parse_rate_limits
from noetl_celery.tools.http_pacing import (
    CUT_FACTOR,
    FORGET_SECONDS,
    MAX_BLOCK,
    MIN_SIGNAL,
    Booking,
    HttpPacer,
    Ticket,
    host_key,
    route_key,
)

HOST = "api.example:443"


class Clock:
    """A fake monotonic clock; `sleep` advances it."""

    def __init__(self) -> None:
        self.now = 1000.0
        self.slept: list[float] = []

    def __call__(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.slept.append(seconds)
        self.now += seconds


def pacer(
    clock: Clock, declared: dict[str, float] | None = None, max_wait: float = 1.0
) -> HttpPacer:
    return HttpPacer(declared, max_wait=max_wait, clock=clock, sleep=clock.sleep)


def accepted_burst(p: HttpPacer, clock: Clock, count: int, spread: float = 0.5) -> None:
    """`count` requests answered 200, evenly over `spread` seconds."""
    for _ in range(count):
        p.observe(p.wait(HOST), 200, None)
        clock.now += spread / count


def test_host_key() -> None:
    assert host_key("https://API.example/v1?x=1") == "api.example:443"
    assert host_key("http://127.0.0.1:5555/api") == "127.0.0.1:5555"
    assert host_key("http://h/") == "h:80"
    assert host_key("not a url") == ""


def test_a_host_that_never_answers_429_is_never_slowed() -> None:
    clock = Clock()
    p = pacer(clock)
    accepted_burst(p, clock, 5000, spread=1.0)  # 5,000 requests in one second
    assert clock.slept == []
    assert p.rate(HOST) is None
    # other errors do not pace either
    p.observe(Ticket(HOST, "", clock.now), 503, 5.0)
    assert p.wait(HOST).sent_at == clock.now and clock.slept == []


def test_a_429_paces_the_host_at_what_was_accepted() -> None:
    clock = Clock()
    p = pacer(clock)
    accepted_burst(p, clock, 100, spread=0.5)
    p.observe(p.wait(HOST), 429, 1.0)
    assert p.rate(HOST) == pytest.approx(CUT_FACTOR * 100)
    # the burst filled the server's window: the host waits out its Retry-After once
    before = clock.now
    p.observe(p.wait(HOST), 200, None)
    assert clock.now - before == pytest.approx(1.0)
    # then requests go out one interval apart: 10 requests wait 10 intervals
    rate = p.rate(HOST)
    assert rate is not None
    start = clock.now
    for _ in range(10):
        p.observe(p.wait(HOST), 200, None)
    assert clock.now - start == pytest.approx(10 / rate, rel=0.03)


def test_the_same_overshoot_cuts_once_and_a_later_429_again() -> None:
    clock = Clock()
    p = pacer(clock)
    accepted_burst(p, clock, 100, spread=0.5)
    burst = [p.reserve(HOST)[1] for _ in range(5)]  # the rest of the burst: all 429
    for sent in burst:
        p.observe(sent, 429, 1.0)
    first = p.rate(HOST)
    assert first is not None and first == pytest.approx(CUT_FACTOR * 100)
    # sent within a second of the cut: the window still held the burst, no second cut
    # (though 100 requests were accepted in the second before it)
    p.observe(Ticket(HOST, "", clock.now), 429, 1.0)
    assert p.rate(HOST) == first
    clock.now += 1.5
    accepted_burst(p, clock, 60, spread=0.9)
    p.observe(p.wait(HOST), 429, 1.0)
    second = p.rate(HOST)
    assert second is not None and second < first
    assert second == pytest.approx(CUT_FACTOR * 60, rel=0.05)
    # a later cut of a paced host does not pause it: it only slows down
    before = clock.now
    p.wait(HOST)
    assert clock.now - before <= 1 / second + 1e-9


def test_few_requests_and_a_429_do_not_pace() -> None:
    """One 429 among a handful of requests (a test endpoint, a quota) is left to the
    retry policy: the host stays unpaced."""
    clock = Clock()
    p = pacer(clock)
    accepted_burst(p, clock, MIN_SIGNAL - 1)
    p.observe(p.wait(HOST), 429, 30.0)
    assert p.rate(HOST) is None
    assert p.wait(HOST).sent_at == clock.now and clock.slept == []


def paced_after_a_burst(clock: Clock) -> tuple[HttpPacer, float]:
    """A pacer whose host a 429 paced after 100 requests were accepted in half a
    second, and the rate that 429 cut it to."""
    p = pacer(clock)
    accepted_burst(p, clock, 100, spread=0.5)
    p.observe(p.wait(HOST), 429, 1.0)
    cut = p.rate(HOST)
    assert cut is not None
    return p, cut


def cut_then_busy(seconds: float) -> tuple[float, float]:
    """(the rate a 429 after a burst cut to, the rate after `seconds` of requests sent
    as fast as the pacer lets them go, all answered 200)."""
    clock = Clock()
    p, cut = paced_after_a_burst(clock)
    end = clock.now + seconds
    while clock.now < end:
        p.observe(p.wait(HOST), 200, None)
    raised = p.rate(HOST)
    assert raised is not None
    return cut, raised


def test_pacing_probes_upward_while_it_binds() -> None:
    cut, raised = cut_then_busy(5)
    assert cut < raised < cut * 1.2


def test_probing_speeds_up_when_no_429_comes() -> None:
    """Near the cut rate the probe is gentle; seconds later without a 429 (the limit went
    up, or an unlimited path of the host is busy) it doubles each second."""
    cut, raised = cut_then_busy(10)
    assert raised > 2 * cut


def test_no_probing_while_demand_is_below_the_rate() -> None:
    clock = Clock()
    p, cut = paced_after_a_burst(clock)
    for _ in range(50):  # 10 requests a second, far below the rate
        clock.now += 0.1
        p.observe(p.wait(HOST), 200, None)
    assert p.rate(HOST) == cut


def test_a_learned_rate_is_forgotten_without_429s() -> None:
    clock = Clock()
    p = pacer(clock)
    accepted_burst(p, clock, 100, spread=0.5)
    p.observe(p.wait(HOST), 429, 1.0)
    assert p.rate(HOST) is not None
    clock.now += FORGET_SECONDS + 0.1
    slept = len(clock.slept)
    p.wait(HOST)
    p.wait(HOST)
    assert p.rate(HOST) is None and len(clock.slept) == slept


def test_declared_rate_paces_from_the_start_and_caps_probing() -> None:
    clock = Clock()
    p = pacer(clock, {HOST: 50.0})
    start = clock.now
    end = start + 10
    sent = 0
    while clock.now < end:
        p.observe(p.wait(HOST), 200, None)
        sent += 1
    assert sent == pytest.approx(500, abs=2)
    assert p.rate(HOST) == 50.0
    # a 429 cuts below the declared rate; without 429s it comes back to it
    p.observe(p.wait(HOST), 429, 1.0)
    assert p.rate(HOST) == pytest.approx(CUT_FACTOR * 50, rel=0.05)
    clock.now += FORGET_SECONDS + 0.1
    p.wait(HOST)
    assert p.rate(HOST) == 50.0


def test_long_retry_after_pauses_the_host_but_never_beyond_max_wait() -> None:
    clock = Clock()
    p = pacer(clock, max_wait=1.0)
    accepted_burst(p, clock, 100, spread=0.5)
    p.observe(p.wait(HOST), 429, 30.0)
    before = clock.now
    p.wait(HOST)
    assert clock.now - before == pytest.approx(1.0)  # capped: then sent, 429 retried as before
    clock.now += 30
    before = clock.now
    p.wait(HOST)
    assert clock.now - before < 0.1


def test_hosts_are_paced_apart() -> None:
    clock = Clock()
    p = pacer(clock)
    accepted_burst(p, clock, 100, spread=0.5)
    p.observe(p.wait(HOST), 429, 1.0)
    other = "other.example:80"
    for _ in range(100):
        p.wait(other)
    assert p.rate(other) is None


def test_threads_share_one_schedule() -> None:
    """16 threads reserving at once get distinct send times one interval apart."""
    clock = Clock()
    p = HttpPacer({HOST: 100.0}, clock=clock, sleep=lambda _s: None)
    times: list[float] = []
    lock = threading.Lock()
    barrier = threading.Barrier(16)

    def go() -> None:
        barrier.wait()
        for _ in range(10):
            _delay, ticket = p.reserve(HOST)
            with lock:
                times.append(ticket.sent_at)

    threads = [threading.Thread(target=go) for _ in range(16)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    times.sort()
    # 160 sends at 100/s: the first 101 one interval apart (no two threads got one
    # slot), the rest held at max_wait (1 s) ahead of the clock
    assert len(times) == 160
    gaps = [b - a for a, b in itertools.pairwise(times[:101])]
    assert gaps == pytest.approx([0.01] * 100)
    assert times[100:] == pytest.approx([times[0] + 1.0] * 60)


def test_rate_limits_setting() -> None:
    assert parse_rate_limits("") == ()
    assert parse_rate_limits("API.x:8080=300, h=2.5") == (("api.x:8080", 300.0), ("h:80", 2.5))
    for bad in ("h:80", "h:80=0", "=5", "h=fast", "h=inf"):
        with pytest.raises(ConfigurationError, match="NOETL_HTTP_RATE_LIMITS"):
            parse_rate_limits(bad)
    settings = Settings.from_env({"NOETL_HTTP_RATE_LIMITS": "127.0.0.1:5555=150"})
    assert settings.http_rate_limits == (("127.0.0.1:5555", 150.0),)
    assert settings.http_pacing == "on"
    assert Settings.from_env({"NOETL_HTTP_PACING": "OFF"}).http_pacing == "off"
    with pytest.raises(ConfigurationError, match="NOETL_HTTP_PACING"):
        Settings.from_env({"NOETL_HTTP_PACING": "maybe"})


def test_switched_off_never_waits() -> None:
    clock = Clock()
    p = HttpPacer({HOST: 1.0}, clock=clock, sleep=clock.sleep, enabled=False)
    for _ in range(10):
        p.observe(p.wait(HOST), 429, 5.0)
    assert clock.slept == []


def test_two_processes_settle_near_a_shared_limit() -> None:
    """Two worker processes (a pacer each, 16 threads each) against one server that
    allows 300 requests per sliding second, simulated on a fake clock for 60 s: each
    thread sends, gets its answer 3 ms later, works 5 ms and sends again; a 429 sleeps
    its thread for the Retry-After (1 s). Paced, the limit is used as well as unpaced
    (where sleeping threads throttle themselves: 16,800 accepted) with a tenth of the
    429s or fewer (unpaced: 1,792, one request in ten)."""
    limit, seconds, threads = 300, 60.0, 16
    clock = Clock()
    pacers = [HttpPacer(clock=clock, sleep=lambda _s: None) for _ in range(2)]
    window: collections.deque[float] = collections.deque()
    events = [(0.001 * t, n) for n in range(2) for t in range(threads)]
    heapq.heapify(events)
    codes = collections.Counter[int]()
    while events:
        at, n = heapq.heappop(events)
        if at > seconds:
            break
        clock.now = at
        _delay, ticket = pacers[n].reserve(HOST)
        sent = ticket.sent_at
        while window and sent - window[0] >= 1.0:
            window.popleft()
        code = 200 if len(window) < limit else 429
        if code == 200:
            window.append(sent)
        codes[code] += 1
        clock.now = sent + 0.003
        pacers[n].observe(ticket, code, 1.0)
        heapq.heappush(events, (clock.now + (0.005 if code == 200 else 1.0), n))
    assert codes[200] >= 0.93 * limit * seconds, codes
    assert codes[429] <= 0.01 * codes[200], codes


def test_bursts_below_the_rate_do_not_raise_it() -> None:
    """Requests that come in small bursts wait their turn now and then, yet the process
    sends far less than its rate (the tail of a drain): the rate is not probed upward,
    or the next stage's burst would go out into 429s at a rate nothing tested."""
    clock = Clock()
    p, cut = paced_after_a_burst(clock)
    for _ in range(40):  # 20 s of 5 requests at once every half second: 10 a second
        for _ in range(5):
            p.observe(p.wait(HOST), 200, None)
        clock.now += 0.5
    assert clock.slept, "the bursts waited for their turn"
    assert p.rate(HOST) == cut


def drain_stages(
    stages: list[int],
    seed: int,
    limit: int = 300,
    pacers: Callable[[Clock], list[HttpPacer]] | None = None,
    route: Callable[[int], str] = lambda _stage: "",
    limited: Callable[[str], bool] = lambda _route: True,
    share: float = 0.5,
) -> tuple[float, int]:
    """Two worker processes (a pacer each, 16 threads each) drain `stages` of requests
    one after another (a PFT facility: one queue per data type, 0.15 s between two)
    against a server that allows `limit` requests per sliding second to its `limited`
    routes, on a fake clock: a thread sends, gets its answer 3-9 ms later, works 2-6 ms
    and sends the next; a 429 holds its request for the Retry-After (1 s), as the
    playbook's retry does. Stage i requests `route(i)`; the first process takes `share`
    of each stage's requests. (seconds from the first request to the last answer, 429s)"""
    rnd = random.Random(seed)
    clock = Clock()
    start = clock.now
    procs = (
        pacers(clock)
        if pacers is not None
        else [HttpPacer(clock=clock, sleep=clock.sleep) for _ in range(2)]
    )
    window: collections.deque[float] = collections.deque()
    order = itertools.count()  # ties in time keep the order they were pushed in
    rejected = 0
    nothing = Ticket("", "", 0.0)
    for stage, total in enumerate(stages):
        first = round(total * share)
        todo = [first, total - first]
        # (time, order, what, process, the request's ticket and answer)
        events: list[tuple[float, int, str, int, tuple[Ticket, int]]] = [
            (clock.now + rnd.random() * 0.02, next(order), "ready", n, (nothing, 0))
            for n in range(2)
            for _ in range(16)
        ]
        heapq.heapify(events)
        while events:
            at, _, what, n, (ticket, code) = heapq.heappop(events)
            clock.now = at
            if what in ("ready", "retry"):
                if what == "ready":
                    if not todo[n]:
                        continue  # this thread idles until the next stage
                    todo[n] -= 1
                _delay, ticket = procs[n].reserve(HOST, route(stage))
                heapq.heappush(events, (ticket.sent_at, next(order), "send", n, (ticket, 0)))
            elif what == "send":
                code = 200
                if limited(ticket.route):
                    while window and at - window[0] >= 1.0:
                        window.popleft()
                    code = 200 if len(window) < limit else 429
                    if code == 200:
                        window.append(at)
                answer = at + 0.003 * (1 + 2 * rnd.random())
                heapq.heappush(events, (answer, next(order), "answer", n, (ticket, code)))
            else:
                procs[n].observe(ticket, code, None if code == 200 else 1.0)
                if code == 200:
                    then = at + 0.002 * (1 + 2 * rnd.random())
                    heapq.heappush(events, (then, next(order), "ready", n, (nothing, 0)))
                else:
                    rejected += 1
                    heapq.heappush(events, (at + 1.0, next(order), "retry", n, (nothing, 0)))
        clock.now += 0.15
    return clock.now - 0.15 - start, rejected


def test_two_processes_drain_stage_after_stage_near_the_limit() -> None:
    """Stages of a drain one after another (the shape of PFT: each stage starts with a
    burst after a pause) use the shared limit to within a tenth of the bound (requests
    / limit), with 429s for fewer than one request in 250. A rate cut to 0.9 of what was
    accepted, and probed upward while a stage's tail sent far less than it, took 1.15x
    the bound with twice the 429s."""
    stages = [3000, 2000, 2500, 1000, 1000] * 3
    bound = sum(stages) / 300
    runs = [drain_stages(stages, seed) for seed in (1, 2, 3)]
    assert sum(seconds for seconds, _ in runs) / len(runs) <= 1.10 * bound, runs
    assert all(rejected <= sum(stages) / 250 for _, rejected in runs), runs


def test_the_operator_reads_when_and_how_an_api_is_paced(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """The first 429 that paces a host, a long Retry-After and the end of pacing are
    INFO lines naming the host and the rate; the cuts of a paced host (every few
    seconds at the limit) are DEBUG only."""
    caplog.set_level(logging.DEBUG, logger="noetl_celery.http")
    clock = Clock()
    p = pacer(clock)
    accepted_burst(p, clock, 100, spread=0.5)
    p.observe(p.wait(HOST), 429, 1.0)
    clock.now += 2.0
    accepted_burst(p, clock, 60, spread=0.9)
    p.observe(p.wait(HOST), 429, 1.0)  # a paced host's cut
    p.observe(p.wait(HOST), 429, 20.0)  # a quota: wait 20 s
    clock.now += FORGET_SECONDS + 0.1
    p.wait(HOST)
    lines = [(r.levelno, r.getMessage()) for r in caplog.records]
    assert lines == [
        (
            logging.INFO,
            f"{HOST} answered 429 with 100 requests from this worker accepted in the last "
            "second: its requests are paced at 95/s from now, after a pause of 1s "
            "(Retry-After), probed upward while no 429 comes",
        ),
        (logging.DEBUG, f"{HOST} answered 429: pacing cut from 95 to 57/s"),
        (
            logging.INFO,
            f"{HOST} answered 429 with Retry-After 20s: its requests from this worker wait for it",
        ),
        (
            logging.INFO,
            f"{HOST}: no 429 for {FORGET_SECONDS:g}s; its requests from this "
            "worker are no longer paced",
        ),
    ]


def test_route_key_leaves_out_what_names_one_record() -> None:
    assert route_key("https://h/api/v1/patient/123/assessments?page=2") == (
        "/api/v1/patient/*/assessments"
    )
    assert route_key("http://h/api/v1/mds/assessment/MDS-1234-7") == "/api/v1/mds/assessment/*"
    assert route_key("http://h/v2/users/3f2b8c1e-9a4d-4f6e-8b2a-1c3d5e7f9a0b/orders") == (
        "/v2/users/*/orders"
    )
    assert route_key("http://h/api/v1/patient/demographics") == "/api/v1/patient/demographics"
    assert route_key("http://h/v1/items/0123456789abcdef0123") == "/v1/items/*"
    assert route_key("http://h") == ""


def test_only_the_routes_that_answered_429_are_paced() -> None:
    """An API that limits `/patient/...` but not `/mds/...`: once a patient route
    answers 429 its requests are paced, while the MDS route goes out at once; when the
    MDS route answers 429 too (the limit is the host's) it joins the host's schedule."""
    clock = Clock()
    p = pacer(clock)
    patient, mds = "/api/v1/patient/*/assessments", "/api/v1/mds/assessment/*"
    for _ in range(100):
        p.observe(p.wait(HOST, patient), 200, None)
        clock.now += 0.005
    p.observe(p.wait(HOST, patient), 429, 1.0)
    assert p.rate(HOST) == pytest.approx(CUT_FACTOR * 100)
    clock.now += 1.0
    slept = len(clock.slept)
    for _ in range(50):
        assert p.reserve(HOST, mds)[0] == 0.0  # MDS: never held back
    waits = [p.reserve(HOST, patient)[0] for _ in range(50)]
    assert waits[-1] > 0.4 and len(clock.slept) == slept  # patient: spaced at the rate
    for _ in range(30):
        p.observe(p.wait(HOST, mds), 200, None)
    p.observe(p.wait(HOST, mds), 429, 1.0)
    assert p.reserve(HOST, mds)[0] > 0.0


class RecordingLedger:
    """A PaceLedger that records the calls and answers as told (the pacer's side of the
    contract; the Postgres ledger is tests/integration/store/test_http_pace.py)."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, ...]] = []
        self.rate: float | None = 100.0
        self.fail = False

    def book(self, host: str, count: int = 1) -> Booking | None:
        self.calls.append(("book", host, str(count)))
        if self.fail:
            raise ConnectionError("engine database unreachable")
        return None if self.rate is None else Booking(0.25, self.rate, 0.01, count)

    def cut(self, host: str, *, unbooked: int, sent_age: float, retry_after: float | None) -> float:
        self.calls.append(("cut", host, str(unbooked)))
        if self.fail:
            raise ConnectionError("engine database unreachable")
        assert self.rate is not None
        return self.rate

    def declare(self, host: str, rate: float) -> None:
        self.calls.append(("declare", host, f"{rate:g}"))


def test_with_a_ledger_only_a_paced_host_costs_a_call() -> None:
    """A host that never answered 429 costs the ledger nothing; the 429 that paces it
    is reported once per overshoot with the requests accepted without a slot from the
    ledger; from then on its paced routes book their slots there; when the ledger has
    forgotten the host (no 429 for FORGET_SECONDS), it stops calling."""
    clock = Clock()
    ledger = RecordingLedger()
    p = HttpPacer(clock=clock, sleep=clock.sleep, ledger=ledger)
    accepted_burst(p, clock, 100, spread=0.5)
    assert ledger.calls == []
    burst = [p.reserve(HOST)[1] for _ in range(5)]
    for ticket in burst:
        p.observe(ticket, 429, 1.0)
    assert ledger.calls == [("cut", HOST, "100")]
    ticket = p.wait(HOST)
    assert ticket.booked and clock.slept == [0.25] and ledger.calls[-1][:2] == ("book", HOST)
    assert p.reserve(HOST, "/other")[0] == 0.0 and len(ledger.calls) == 2
    ledger.rate = None
    # the slots left of the block booked above are taken first, then one booking finds
    # the host forgotten, and no wait after it calls the ledger
    for _ in range(MAX_BLOCK + 2):
        p.wait(HOST)
    assert [c[0] for c in ledger.calls] == ["cut", "book", "book"]


def test_an_unreachable_ledger_never_fails_a_request(caplog: pytest.LogCaptureFixture) -> None:
    """The engine database down: requests go out unpaced (the pacer only ever delays),
    and the worker log says so once a minute, not once a request."""
    caplog.set_level(logging.WARNING, logger="noetl_celery.http")
    clock = Clock()
    ledger = RecordingLedger()
    p = HttpPacer({HOST: 50.0}, clock=clock, sleep=clock.sleep, ledger=ledger)
    ledger.fail = True
    for _ in range(10):
        ticket = p.wait(HOST)
        assert not ticket.booked
        p.observe(ticket, 429, 1.0)
    assert clock.slept == []
    assert ledger.calls[0] == ("declare", HOST, "50")
    warnings = [r.getMessage() for r in caplog.records]
    assert len(warnings) == 1 and "could not be reached" in warnings[0], warnings
