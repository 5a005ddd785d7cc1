"""Packing a publish's command ids into broker messages (orchestrator.packing)."""

from __future__ import annotations

import pytest

from noetl_celery.orchestrator.packing import pack


def ids(n: int) -> list[str]:
    return [f"c{i}" for i in range(n)]


@pytest.mark.parametrize(
    ("count", "size", "sizes"),
    [
        (0, 50, []),
        (1, 50, [1]),
        (50, 50, [50]),
        (51, 50, [26, 25]),
        (60, 50, [30, 30]),
        (100, 50, [50, 50]),
        (101, 50, [34, 34, 33]),
        (3, 1, [1, 1, 1]),
        (25, 10, [9, 8, 8]),
    ],
)
def test_messages_are_at_most_size_and_even(count: int, size: int, sizes: list[int]) -> None:
    messages = pack(ids(count), size)
    assert [len(m) for m in messages] == sizes
    assert [c for m in messages for c in m] == ids(count)  # order kept, nothing lost


def test_an_id_named_twice_goes_once() -> None:
    assert pack(["a", "b", "a", "c", "b"], 2) == [["a", "b"], ["c"]]


def test_a_size_below_one_is_refused() -> None:
    with pytest.raises(ValueError, match="at least one command id, got size 0"):
        pack(["a"], 0)
