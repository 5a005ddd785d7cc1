"""The http tool's shared pacing schedule (`store.pacing` opens the transactions; the
rules are tools.http_pacing's, passed in as `PaceRules`). Postgres only: worker processes
on SQLite are one process, which paces on its own.

Times are the database clock's epoch seconds (`:now` overrides it in tests), so the
workers of several machines agree on a slot. Every statement reads the row `FOR UPDATE`
in a CTE and writes it from that read: under READ COMMITTED the lock returns the newest
version, so two bookings never get one slot.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

from sqlalchemy import Connection, text


@dataclass(frozen=True)
class PaceRules:
    """tools.http_pacing's constants, for the SQL."""

    window: float  # WINDOW_SECONDS
    forget: float  # FORGET_SECONDS
    raise_fraction: float  # RAISE_FRACTION
    max_raise: float  # MAX_RAISE_FRACTION
    accelerate: float  # ACCELERATE_AFTER
    cut_factor: float  # CUT_FACTOR
    min_rate: float  # MIN_RATE
    learned_for: float  # tools.keyed_pacing.LEARNED_SECONDS


_NOW = """t AS (SELECT coalesce(CAST(:now AS double precision),
                        extract(epoch FROM clock_timestamp())::double precision) AS now)"""

# the fleet's send rate in the last second, from the slots booked in the current second
# (`bucket_*`) and the one before (`prev_n`), the older one weighted by its share
_BOOKED = """CASE WHEN t.now - old.bucket_at < :window
             THEN old.bucket_n + old.prev_n * (1 - (t.now - old.bucket_at) / :window)
             WHEN t.now - old.bucket_at < 2 * :window
             THEN old.bucket_n * (2 - (t.now - old.bucket_at) / :window)
             ELSE 0 END"""

# `:count` send slots, one interval of the rate apart, from the next free one (after a
# Retry-After pause). A learned rate is forgotten FORGET_SECONDS after the last cut (a
# declared one comes back); it is raised once a second while the schedule binds (no slot
# went unused for a whole second, this one included: demand, not the rate, is short
# otherwise) and no 429 came for a second: RAISE_FRACTION, doubling each second after
# ACCELERATE_AFTER up to MAX_RAISE_FRACTION, never above the ceiling, nor above a
# keyed limit's learned estimate while its last cut is fresh or while its schedule is
# booked more than LEARNED_SECONDS ahead (parked loop items: the answers to a higher rate
# would come only when those far slots are sent, after the probe had gone on unchecked).
# `:tolerance` (seconds; 0 for a host) lets a keyed limit's `burst` go before the schedule's next
# slot: GCRA's tolerance, (burst - 1) intervals of the rate. `since_cut`: seconds since the
# row's last cut (a row never cut: since the epoch), so a keyed limit's caller can tell a
# settled rate from one still being learned (worker.parking.releases).
BOOK = text(
    f"""
WITH {_NOW},
old AS (SELECT * FROM http_pace WHERE host = :host AND rate IS NOT NULL FOR UPDATE)
UPDATE http_pace AS p SET
  rate = CASE
    WHEN old.rate IS DISTINCT FROM old.ceiling AND t.now - old.last_cut > :forget
         AND old.learned IS NULL
      THEN old.ceiling
    WHEN old.tat >= t.now AND t.now - old.slack_at >= :window
         AND t.now - old.last_raise >= :window AND t.now - old.last_cut >= :window
      THEN least(
        old.rate * (1 + least(:max_raise, :raise_fraction
          * power(2, least(16, greatest(0, t.now - old.last_cut - :accelerate))))),
        coalesce(old.ceiling, 'Infinity'::double precision),
        CASE WHEN t.now - old.last_cut <= :learned_for OR old.tat - t.now > :learned_for
             THEN coalesce(old.learned, 'Infinity'::double precision)
             ELSE 'Infinity'::double precision END)
    ELSE old.rate END,
  last_raise = CASE WHEN t.now - old.last_raise >= :window THEN t.now ELSE old.last_raise END,
  tat = greatest(old.tat, t.now, old.paused_until) + :count / old.rate,
  slack_at = CASE WHEN old.tat < t.now THEN t.now ELSE old.slack_at END,
  bucket_n = CASE WHEN t.now - old.bucket_at < :window THEN old.bucket_n + :count
                  ELSE :count END,
  prev_n = CASE WHEN t.now - old.bucket_at < :window THEN old.prev_n
                WHEN t.now - old.bucket_at < 2 * :window THEN old.bucket_n ELSE 0 END,
  bucket_at = CASE WHEN t.now - old.bucket_at < :window THEN old.bucket_at ELSE t.now END
FROM t, old
WHERE p.host = old.host
RETURNING p.rate, greatest(old.tat - :tolerance, t.now, old.paused_until) - t.now AS wait,
          1.0 / old.rate AS spacing, t.now - old.last_cut AS since_cut
"""
)

# A 429 of a keyed limit (`key:<key>`, worker.throttle): the rate becomes `:target`, what
# the reporting process estimates the key's real limit to be (the rate the request was
# sent at times the share of that key's recent requests the server accepted), when the
# request was sent a window or more after the last cut (within it: the overshoot already
# answered, nothing changes). Never above the rate before, never below MIN_RATE.
# `learned` keeps the estimate of the limit itself: BOOK probes the rate no higher while
# the cut is fresh (LEARNED_SECONDS), so a key sits just under its limit instead of
# probing into 429s every few seconds; once it is stale, probing goes on upward from
# the key's rate (a key's rate is not reset to the ceiling, as a host's is: a jump to
# a declared rate far above the real one would be a storm of 429s). A host's row has
# no `learned` (NULL). The slots already booked past the cut are stretched with it: the
# schedule's end (`tat`) moves to where those slots end at the new rate, and each
# holder moves its own slot the same way when it comes to send (SCHEDULE_KEY,
# tools.keyed_pacing.respaced); else every far turn booked at the old rate (loop items
# parked for them) would go at the spacing the server just refused.
CUT_KEY = text(
    f"""
WITH {_NOW},
old AS (SELECT * FROM http_pace WHERE host = :host AND rate IS NOT NULL FOR UPDATE),
n AS (SELECT greatest(:min_rate, least(old.rate, :target)) AS rate FROM old)
UPDATE http_pace AS p SET
  rate = n.rate,
  tat = CASE WHEN old.tat > t.now THEN t.now + (old.tat - t.now) * old.rate / n.rate
             ELSE old.tat END,
  learned = greatest(:min_rate, :learned),
  last_cut = t.now,
  epoch_at = t.now,
  slack_at = t.now,
  paused_until = CASE WHEN coalesce(:retry_after, 0) > :window
    THEN greatest(old.paused_until, t.now + :retry_after) ELSE old.paused_until END
FROM t, old, n
WHERE p.host = old.host AND t.now - :age >= old.last_cut + :window
RETURNING p.rate
"""
)

# A keyed limit's rate and last cut (epoch seconds; 0: never cut): a holder of a slot
# booked before that cut moves it as the cut stretched the schedule (CUT_KEY)
SCHEDULE_KEY = text("SELECT rate, last_cut FROM http_pace WHERE host = :host")

ENSURE = text("INSERT INTO http_pace (host) VALUES (:host) ON CONFLICT (host) DO NOTHING")

# A 429. Within a window of the cut that answered an overshoot, another process's report
# of it only adds the requests it sent unbooked (`join`); a request sent a window or more
# after the last cut starts a new cut (`new`): CUT_FACTOR of the fleet's send rate (the
# slots booked in the last second, plus what the reporting processes sent unbooked),
# never above the rate before it. Anything else is the overshoot already answered. The
# host pauses for the Retry-After of the 429 that paced it, and of any longer one.
CUT = text(
    f"""
WITH {_NOW},
old AS (
  SELECT p.*, (p.rate IS NULL OR (p.rate IS DISTINCT FROM p.ceiling
                                  AND t.now - p.last_cut > :forget)) AS unpaced
  FROM http_pace p, t WHERE p.host = :host FOR UPDATE OF p),
d AS (
  SELECT old.host,
    CASE WHEN NOT old.unpaced AND t.now - old.epoch_at < :window THEN 'join'
         WHEN old.unpaced OR t.now - :age >= old.last_cut + :window THEN 'new'
         ELSE 'same' END AS kind,
    CASE WHEN old.unpaced THEN old.ceiling ELSE old.rate END AS before,
    {_BOOKED} AS booked
  FROM old, t),
n AS (
  SELECT d.host, d.kind,
    CASE d.kind WHEN 'new' THEN d.before ELSE old.rate_before END AS rate_before,
    CASE d.kind WHEN 'new' THEN d.booked + :unbooked
                WHEN 'join' THEN old.epoch_count + :unbooked
                ELSE old.epoch_count END AS epoch_count
  FROM d, old)
UPDATE http_pace AS p SET
  rate_before = n.rate_before,
  epoch_count = n.epoch_count,
  rate = CASE n.kind WHEN 'same' THEN old.rate
    ELSE greatest(:min_rate, least(coalesce(n.rate_before, 'Infinity'::double precision),
                                   :cut_factor * n.epoch_count)) END,
  epoch_at = CASE n.kind WHEN 'new' THEN t.now ELSE old.epoch_at END,
  last_cut = CASE n.kind WHEN 'new' THEN t.now ELSE old.last_cut END,
  slack_at = CASE n.kind WHEN 'same' THEN old.slack_at ELSE t.now END,
  tat = CASE n.kind WHEN 'same' THEN old.tat ELSE greatest(old.tat, t.now) END,
  paused_until = CASE
    WHEN coalesce(:retry_after, 0) > 0 AND (old.unpaced OR :retry_after > :window)
      THEN greatest(old.paused_until, t.now + :retry_after)
    ELSE old.paused_until END
FROM t, old, n
WHERE p.host = old.host AND n.host = old.host
RETURNING p.rate
"""
)

# NOETL_HTTP_RATE_LIMITS: paced from the start at the declared rate, never probed above it
DECLARE = text(
    """
INSERT INTO http_pace (host, rate, ceiling) VALUES (:host, :rate, :rate)
ON CONFLICT (host) DO UPDATE SET
  ceiling = excluded.ceiling,
  rate = least(coalesce(http_pace.rate, excluded.rate), excluded.rate)
"""
)


def _params(rules: PaceRules, **values: Any) -> dict[str, Any]:
    return {**asdict(rules), **values}


def book(
    conn: Connection,
    host: str,
    rules: PaceRules,
    now: float | None,
    count: int = 1,
    tolerance: float = 0.0,
) -> tuple[float | None, float, float, float] | None:
    """(the host's rate after the booking, seconds to the first slot, seconds between
    two slots, seconds since its last cut); None: not paced."""
    params = _params(rules, host=host, now=now, count=count, tolerance=tolerance)
    row = conn.execute(BOOK, params).first()
    if row is None:
        return None
    rate = None if row[0] is None else float(row[0])
    return rate, max(0.0, float(row[1])), float(row[2]), float(row[3])


def cut(
    conn: Connection,
    host: str,
    rules: PaceRules,
    *,
    unbooked: int,
    sent_age: float,
    retry_after: float | None,
    now: float | None,
) -> float:
    conn.execute(ENSURE, {"host": host})
    params = _params(
        rules, host=host, unbooked=unbooked, age=sent_age, retry_after=retry_after, now=now
    )
    return float(conn.execute(CUT, params).scalar_one())


def declare(conn: Connection, host: str, rate: float) -> None:
    conn.execute(DECLARE, {"host": host, "rate": rate})


def cut_key(
    conn: Connection,
    host: str,
    rules: PaceRules,
    *,
    target: float,
    learned: float,
    sent_age: float,
    retry_after: float | None,
    now: float | None,
) -> float | None:
    """A keyed limit's 429 (CUT_KEY): its rate after the cut; None when nothing was cut
    (the key is not paced, or the 429 is the overshoot the last cut answered)."""
    params = _params(
        rules,
        host=host,
        target=target,
        learned=learned,
        age=sent_age,
        retry_after=retry_after,
        now=now,
    )
    rate = conn.execute(CUT_KEY, params).scalar()
    return None if rate is None else float(rate)


def schedule_key(conn: Connection, key: str) -> tuple[float, float] | None:
    """(the key's rate, its last cut); None: not paced."""
    row = conn.execute(SCHEDULE_KEY, {"host": key}).first()
    if row is None or row[0] is None:
        return None
    return float(row[0]), float(row[1])
