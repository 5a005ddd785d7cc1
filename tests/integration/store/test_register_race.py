"""Concurrent registrations of one catalog path (what `run` and `submit` do first):
never an error; the same content gets one version, other content consecutive ones."""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from noetl_celery.store.database import Database, SchemaMode
from noetl_celery.store.repository import Store

THREADS, CALLS = 8, 5


def playbook(n: int) -> str:
    return (
        "apiVersion: noetl.io/v2\nkind: Playbook\nmetadata: {name: race, path: tests/race}\n"
        f"workload: {{n: {n}}}\nworkflow:\n  - step: start\n    tool: {{kind: noop}}\n"
    )


@pytest.fixture
def store(store_url: str) -> Iterator[Store]:
    database = Database(store_url)
    database.prepare(SchemaMode.MIGRATE)
    yield Store(database)
    database.dispose()


def hammer(call: Callable[[int, int], Any]) -> tuple[list[Any], list[BaseException]]:
    """THREADS threads, CALLS calls each, released together."""
    start = threading.Barrier(THREADS)
    results: list[Any] = []
    errors: list[BaseException] = []
    lock = threading.Lock()

    def work(t: int) -> None:
        start.wait()
        for c in range(CALLS):
            try:
                value = call(t, c)
            except BaseException as exc:
                with lock:
                    errors.append(exc)
            else:
                with lock:
                    results.append(value)

    threads = [threading.Thread(target=work, args=(t,)) for t in range(THREADS)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)
    return results, errors


def test_the_same_content_gets_one_version_for_every_caller(store: Store) -> None:
    results, errors = hammer(lambda t, c: store.register("tests/race", "race", playbook(c)))
    assert errors == []
    assert len(results) == THREADS * CALLS
    # every caller that registered content k got the version that content k holds now
    # (identical content reuses the latest version; a change makes the next one)
    versions = {(e.version, e.catalog_id) for e in results}
    assert len({v for v, _ in versions}) == len(versions)  # one catalog row per version
    numbers = sorted(v for v, _ in versions)
    assert numbers == list(range(1, len(numbers) + 1))  # consecutive, no gaps


def test_identical_concurrent_first_registrations(store: Store) -> None:
    results, errors = hammer(lambda t, c: store.register("tests/race", "race", playbook(0)))
    assert errors == []
    assert {(e.version, e.catalog_id) for e in results} == {(1, results[0].catalog_id)}
    assert sum(e.created for e in results) == 1  # exactly one caller created it


def test_different_content_gets_consecutive_versions(store: Store) -> None:
    results, errors = hammer(
        lambda t, c: store.register("tests/race", "race", playbook(1000 + t * CALLS + c))
    )
    assert errors == []
    assert sorted(e.version for e in results) == list(range(1, THREADS * CALLS + 1))
