"""What a cursor frame's per-row bodies came to in the worker that claimed the frame
(worker.frames), written with the claim's close (store.queries: BODIES).

A body either finished (its `Outcome`: a finished command row and its terminal event)
or waits out a long retry delay (`ParkedBody`: a parked command row, `delayed` until
`due`, with its run state in `resume`, as the body command's own park leaves it;
worker.parking). A parked body is then a command like any other: issued when due, run
by any worker from where it stopped, closed with a terminal event of its own.
"""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass
from typing import Any

from noetl_celery.models.outcome import Outcome
from noetl_celery.store.rows import ClaimedCommand


@dataclass(frozen=True)
class ParkedBody:
    """A row's body that parked: its continuation (`resume`, masked) and when it is due
    (naive UTC, as the engine stores times)."""

    resume: dict[str, Any]
    due: dt.datetime


BodyRun = Outcome | ParkedBody
# a frame's bodies its claim's worker ran, each with what it came to, in row order
Ran = list[tuple[ClaimedCommand, BodyRun]]
