"""engine.ratelimits: the keyed rate limits' rows, their current rate from the ledger's
buckets, and the bounded set of keys `/metrics` labels series with."""

from __future__ import annotations

import datetime as dt

import pytest

from noetl_celery.engine import ratelimits
from noetl_celery.engine.metrics import families
from noetl_celery.engine.ratelimits import OTHER, RateLimitRow, bounded, current_rate, rows
from noetl_celery.store.metrics import MetricsSnapshot
from noetl_celery.store.throttle import KeyState, ThrottleSnapshot

NOW = 1_800_000_000.0


def state(key: str, at: float, n: int, prev: int, rate: float = 3.0) -> KeyState:
    return KeyState(key, rate, 6.0, at, n, prev)


@pytest.mark.parametrize(
    ("age", "n", "prev", "rate"),
    [
        (0.25, 4, 8, 4 + 8 * 0.75),  # this second's bookings and 3/4 of the one before
        (1.5, 4, 8, 4 * 0.5),  # the last bucket, half still in the window
        (2.5, 4, 8, 0.0),  # nothing booked for two seconds
        (-0.1, 4, 8, 4.0),  # a clock behind the database's
    ],
)
def test_the_current_rate_is_the_last_seconds_bookings(
    age: float, n: int, prev: int, rate: float
) -> None:
    assert current_rate(state("key:a", NOW - age, n, prev), NOW) == pytest.approx(rate)


def test_a_row_per_key_paced_holding_slots_or_waiting() -> None:
    snapshot = ThrottleSnapshot(
        states=[state("key:a", NOW, 3, 0)],
        held={"key:a": 2, "key:b": 1},
        waiting={"key:c": 4},
    )
    assert rows(snapshot, NOW) == [
        RateLimitRow(key="a", declared=6.0, limit=3.0, current_rate=3.0, in_flight=2, waiting=0),
        RateLimitRow(key="b", declared=None, limit=None, current_rate=0.0, in_flight=1, waiting=0),
        RateLimitRow(key="c", declared=None, limit=None, current_rate=0.0, in_flight=0, waiting=4),
    ]


def row(key: str, activity: int) -> RateLimitRow:
    return RateLimitRow(
        key=key, declared=5.0, limit=4.0, current_rate=0.0, in_flight=activity, waiting=1
    )


def test_the_most_active_keys_are_kept_and_the_rest_summed_as_other() -> None:
    found = [row(f"t{i:02}", i) for i in range(30)]
    kept = bounded(found, top=20)
    assert len(kept) == 21
    assert [r["key"] for r in kept[:20]] == [f"t{i:02}" for i in range(29, 9, -1)]
    other = kept[20]
    assert other["key"] == OTHER
    assert other["in_flight"] == sum(range(10)) and other["waiting"] == 10
    assert other["declared"] == 50.0 and other["limit"] == 40.0


def test_few_keys_need_no_other() -> None:
    found = [row("a", 1), row("b", 2)]
    assert [r["key"] for r in bounded(found, top=20)] == ["b", "a"]


def test_metrics_label_at_most_top_keys_plus_other() -> None:
    states = [state(f"key:t{i}", NOW, i, 0) for i in range(50)]
    snapshot = MetricsSnapshot(throttles=ThrottleSnapshot(states=states))
    now = dt.datetime.fromtimestamp(NOW, dt.UTC).replace(tzinfo=None)
    by_name = {f.name: f for f in families(snapshot, now)}
    rate = by_name["noetl_rate_limit_current_rate"]
    labels = {labels[0] for labels, _ in rate.samples}
    assert len(labels) == ratelimits.TOP_KEYS + 1 and OTHER in labels
    assert dict(rate.samples)[("t49",)] == 49.0
    assert dict(rate.samples)[(OTHER,)] == float(sum(range(50 - ratelimits.TOP_KEYS)))
    assert {labels[0] for labels, _ in by_name["noetl_rate_limit_in_flight"].samples} == labels
