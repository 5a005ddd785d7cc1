"""Engine-wide counters the reaper keeps in the `counters` table (exported by `/metrics`
as Prometheus counters): each is bumped in the transaction of what it counts, so a
count is never ahead of or behind the work it describes."""

from __future__ import annotations

from typing import Final

COUNTER_REPUBLISHED: Final = "reaper_republished"  # issued commands published again
COUNTER_REISSUED: Final = "reaper_reissued"  # lost runs replaced by their next attempt
COUNTER_LEASES_EXPIRED: Final = "leases_expired"  # runs whose worker was lost
COUNTER_TIMEOUTS: Final = "step_timeouts"  # runs failed past their step's `spec.timeout`

# what `give_up(kind)` counts: a timeout, or one more lost worker (the last attempt)
_GIVE_UP: Final = {"timeout": COUNTER_TIMEOUTS}


def give_up_counter(kind: str) -> str:
    return _GIVE_UP.get(kind, COUNTER_LEASES_EXPIRED)
