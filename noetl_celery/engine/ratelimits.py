"""What the keyed `rate_limit`s are doing (DSL §1.9): per key, the declared rate, the
limit it is paced at now (learned below the declared one from 429s), the rate of its
runs in the last second, its runs in flight and its commands parked waiting for a
turn or a run slot. Read by `GET /api/v1/rate-limits`, the Rate limits page and
`/metrics` (engine.metrics), from `store.throttle`'s snapshot; pure but for `read`.

`/metrics` labels a series by key, so its cardinality is bounded: the `TOP_KEYS` keys
with the most activity (runs in flight, parked, and runs in the last second) get their
own series, the rest are summed into `key="other"`.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterable

from typing_extensions import TypedDict

from noetl_celery.models.rate_limit import KEY_PREFIX
from noetl_celery.store.repository import Store
from noetl_celery.store.throttle import KeyState, ThrottleSnapshot

TOP_KEYS = 20
OTHER = "other"
WINDOW_SECONDS = 1.0  # tools.http_pacing's window: the ledger's buckets are that long


class RateLimitRow(TypedDict):
    key: str  # as the playbook rendered it (without the ledger's `key:` prefix)
    declared: float | None  # per_second; None: only concurrency is limited
    limit: float | None  # the rate it is paced at now
    current_rate: float  # runs booked in the last second
    in_flight: int  # run slots held
    waiting: int  # commands parked for a turn or a run slot


class RateLimitsPage(TypedDict):
    rate_limits: list[RateLimitRow]


def current_rate(state: KeyState, now: float) -> float:
    """Runs booked in the last second: the current second's bucket and the share of the
    one before that the last second still covers (the ledger's own measure)."""
    age = now - state.bucket_at
    if age < 0:
        return float(state.bucket_n)
    if age < WINDOW_SECONDS:
        return state.bucket_n + state.prev_n * (1.0 - age / WINDOW_SECONDS)
    if age < 2 * WINDOW_SECONDS:
        return state.bucket_n * (2.0 - age / WINDOW_SECONDS)
    return 0.0


def _name(key: str) -> str:
    return key[len(KEY_PREFIX) :] if key.startswith(KEY_PREFIX) else key


def rows(snapshot: ThrottleSnapshot, now: float) -> list[RateLimitRow]:
    """One row per key with a pacing row, a held run slot or a parked command, by key."""
    states = {s.key: s for s in snapshot.states}
    keys = set(states) | set(snapshot.held) | set(snapshot.waiting)
    out: list[RateLimitRow] = []
    for key in sorted(keys):
        state = states.get(key)
        out.append(
            RateLimitRow(
                key=_name(key),
                declared=state.declared if state else None,
                limit=state.rate if state else None,
                current_rate=round(current_rate(state, now), 3) if state else 0.0,
                in_flight=snapshot.held.get(key, 0),
                waiting=snapshot.waiting.get(key, 0),
            )
        )
    return out


def _activity(row: RateLimitRow) -> float:
    return row["in_flight"] + row["waiting"] + row["current_rate"]


def bounded(found: Iterable[RateLimitRow], top: int = TOP_KEYS) -> list[RateLimitRow]:
    """The `top` most active keys (ties by key), then the rest summed as `other`."""
    ranked = sorted(found, key=lambda r: (-_activity(r), r["key"]))
    kept, rest = ranked[:top], ranked[top:]
    if not rest:
        return kept

    def total(values: Iterable[float | None]) -> float | None:
        numbers = [v for v in values if v is not None]
        return sum(numbers) if numbers else None

    other = RateLimitRow(
        key=OTHER,
        declared=total(r["declared"] for r in rest),
        limit=total(r["limit"] for r in rest),
        current_rate=round(sum(r["current_rate"] for r in rest), 3),
        in_flight=sum(r["in_flight"] for r in rest),
        waiting=sum(r["waiting"] for r in rest),
    )
    return [*kept, other]


def epoch(now: dt.datetime) -> float:
    """A naive UTC time (store.schema.utcnow) as epoch seconds (the ledger's clock)."""
    return now.replace(tzinfo=dt.UTC).timestamp()


def read(store: Store, now: dt.datetime) -> RateLimitsPage:
    return RateLimitsPage(rate_limits=rows(store.throttle.snapshot(), epoch(now)))
