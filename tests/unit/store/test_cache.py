"""store.cache.ImmutableCache: a value loaded once, even for threads that miss it at once."""

from __future__ import annotations

import threading
import time

import pytest

from noetl_celery.store.cache import ImmutableCache


def test_threads_that_miss_a_key_at_once_share_one_load() -> None:
    cache: ImmutableCache[str, int] = ImmutableCache(4)
    loads: list[int] = []
    start = threading.Barrier(8)
    seen: list[int] = []

    def load() -> int:
        loads.append(1)
        time.sleep(0.2)  # the other threads miss the key meanwhile
        return 42

    def reader() -> None:
        start.wait()
        seen.append(cache.get_or_load("result", load))

    threads = [threading.Thread(target=reader) for _ in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert seen == [42] * 8 and len(loads) == 1
    assert cache.get_or_load("result", lambda: 0) == 42  # cached


def test_a_failed_load_is_not_shared_waiters_load_themselves() -> None:
    cache: ImmutableCache[str, int] = ImmutableCache(4)
    first = threading.Event()
    calls: list[str] = []

    def failing() -> int:
        calls.append("failing")
        first.set()
        time.sleep(0.1)
        raise OSError("database away")

    errors: list[BaseException] = []

    def loader() -> None:
        try:
            cache.get_or_load("k", failing)
        except OSError as exc:
            errors.append(exc)

    thread = threading.Thread(target=loader)
    thread.start()
    first.wait()

    def working() -> int:
        calls.append("working")
        return 7

    assert cache.get_or_load("k", working) == 7  # waited for the failure, then loaded
    thread.join()
    assert calls == ["failing", "working"] and len(errors) == 1


def test_the_oldest_key_is_dropped_past_its_size() -> None:
    cache: ImmutableCache[int, int] = ImmutableCache(2)
    for key in range(3):
        cache.get_or_load(key, lambda key=key: key * 10)  # type: ignore[misc]
    with pytest.raises(LookupError):
        cache.get_or_load(0, _missing)
    assert cache.get_or_load(2, _missing) == 20


def _missing() -> int:
    raise LookupError("not cached")
