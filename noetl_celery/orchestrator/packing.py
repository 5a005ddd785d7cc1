"""How the command ids one publish names are split into broker messages (worker.batch).

A message carries at most `size` ids. The ids are spread evenly over as few messages as
that allows (60 ids at size 50: 30 + 30, not 50 + 10), so the worker processes that take
the messages get similar shares. Order is kept, and an id named twice goes once (a
duplicate would only be dropped by its second claim).
"""

from __future__ import annotations

from collections.abc import Sequence


def pack(command_ids: Sequence[str], size: int) -> list[list[str]]:
    """`command_ids` split into messages of at most `size` ids, as even as possible."""
    if size < 1:
        raise ValueError(f"a batch holds at least one command id, got size {size}")
    ids = list(dict.fromkeys(command_ids))
    if not ids:
        return []
    count = -(-len(ids) // size)  # ceil
    base, extra = divmod(len(ids), count)
    messages, start = [], 0
    for n in range(count):
        stop = start + base + (1 if n < extra else 0)
        messages.append(ids[start:stop])
        start = stop
    return messages
