"""Local continuation of a cursor lane with `frame.process: frame`, or whose claims run
their frames' per-row bodies themselves (worker.frames; worker.execute): the close of
one of its commands claims the lane's next command in the same transaction, and this
process runs it next instead of publishing it."""

from __future__ import annotations

from noetl_celery.orchestrator.ids import parse_claim
from noetl_celery.store.rows import ClaimedCommand


def may_follow(command: ClaimedCommand) -> bool:
    """A command of a cursor lane with `frame.process: frame` (its claim or its body), or
    a claim that may run its frame's per-row bodies itself (`process: rows`)."""
    return (command.meta or {}).get("process") in ("frame", "rows")


def next_here(command: ClaimedCommand, publish: list[str]) -> str | None:
    """The command to run here next, unpublished, after a command of a cursor lane with
    `frame.process: frame` (its claim or its body): its lane's next claim when the pass
    issued it, else the first command the pass issued (a frame's body, or another lane's
    next command: work this process would take from the broker anyway)."""
    meta = command.meta or {}
    if not publish or not may_follow(command):
        return None
    item = command.item if isinstance(command.item, dict) else {}
    lane = meta.get("lane", item.get("lane"))
    for cid in publish:
        coordinate = parse_claim(cid)
        if coordinate is not None and coordinate[0] == lane:
            return cid
    return publish[0]
