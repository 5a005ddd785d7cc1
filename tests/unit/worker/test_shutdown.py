"""A stopping worker's hand-back (worker.shutdown): released ids are published again in
messages of at most `per_message`; a failed publish is left to the reaper."""

from __future__ import annotations

from collections.abc import Sequence

import pytest

from noetl_celery.worker.shutdown import hand_back


def test_released_commands_are_published_again() -> None:
    asked: list[list[str]] = []
    published: list[list[str]] = []

    def release(workers: Sequence[str]) -> list[str]:
        asked.append(list(workers))
        return [f"e:s:1:{i}" for i in range(5)]

    count = hand_back(["h:1", "h:2"], release, lambda ids: published.append(list(ids)), 2)
    assert count == 5
    assert asked == [["h:1", "h:2"]]
    assert sorted(i for ids in published for i in ids) == [f"e:s:1:{i}" for i in range(5)]
    assert max(len(ids) for ids in published) <= 2


def test_nothing_released_publishes_nothing() -> None:
    published: list[Sequence[str]] = []
    assert hand_back(["h:1"], lambda w: [], published.append, 10) == 0
    assert published == []


def test_a_failed_publish_is_logged_not_raised(caplog: pytest.LogCaptureFixture) -> None:
    def publish(ids: Sequence[str]) -> None:
        raise ConnectionError("broker away")

    assert hand_back(["h:1"], lambda w: ["e:s:1"], publish, 10) == 1
    assert "the reaper publishes them again" in caplog.text
