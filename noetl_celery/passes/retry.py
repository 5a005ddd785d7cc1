"""Doing a transaction again when the database cut it short (errors.StoreInterrupted).

Postgres rolls back a transaction whose connection it ended (a process that stalled
inside it past `idle_in_transaction_session_timeout`, a restart) or whose statement it
cancelled (timeout, deadlock). Every engine transaction may be done again: closes and
claims are conditional, inserts are `ON CONFLICT DO NOTHING`, a pass folds whatever the
inbox holds then. So the work is tried again on a fresh connection, a few times with a
short backoff, before the error goes up (where the reaper's sweep is the last resort).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Mapping
from typing import TypeVar

from noetl_celery.errors import StoreInterrupted

log = logging.getLogger("noetl_celery.retry")

T = TypeVar("T")

ATTEMPTS = 3
FIRST_DELAY_SECONDS = 0.25


def again_if_interrupted(
    what: str,
    work: Callable[[], T],
    *,
    attempts: int = ATTEMPTS,
    delay: float = FIRST_DELAY_SECONDS,
    extra: Mapping[str, object] | None = None,
) -> T:
    """`work()`, done again (up to `attempts` in all, the wait doubling) while it raises
    StoreInterrupted; `what` names it in the warning."""
    for attempt in range(1, attempts + 1):
        try:
            return work()
        except StoreInterrupted as exc:
            if attempt >= attempts:
                raise
            log.warning(
                "%s was interrupted, trying again (%d of %d): %s",
                what,
                attempt + 1,
                attempts,
                exc,
                extra=dict(extra or {}),
            )
            time.sleep(delay * 2 ** (attempt - 1))
    raise AssertionError("unreachable")  # pragma: no cover
