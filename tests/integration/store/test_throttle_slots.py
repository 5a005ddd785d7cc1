"""Run slots of keyed `rate_limit.concurrency` on Postgres (store.throttle): a slot is its
command's while that command runs with a live lease; a lease that lapsed (its worker
killed) frees it; many acquirers at once never hold more than the cap."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from pathlib import Path

import pytest
from sqlalchemy import text

from noetl_celery.engine.service import Engine
from noetl_celery.settings import Settings
from noetl_celery.store.database import SchemaMode

pytestmark = pytest.mark.integration

LOOP = """apiVersion: noetl.io/v2
kind: Playbook
metadata: {name: slots}
workflow:
  - step: each
    loop: {in: "{{ range(12) | list }}", iterator: x, spec: {mode: parallel, max_in_flight: 12}}
    tool: {kind: noop}
"""


class _NoBroker:
    def publish(self, command_ids: object, queue: str | None = None) -> None:
        return None

    def wake(self, execution_id: str) -> None:
        return None


@pytest.fixture
def engine(pg_url: str, tmp_path: Path) -> Iterator[Engine]:
    built = Engine(Settings(home=tmp_path, database_url=pg_url), schema=SchemaMode.MIGRATE)
    built.use_broker(_NoBroker())
    yield built
    built.close()


def _running(engine: Engine, count: int) -> list[str]:
    """`count` commands claimed (running, a 60 s lease) by one worker."""
    eid = engine.start_text(LOOP, {})
    ids = [f"{eid}:each:1:{i}" for i in range(count)]
    rows = engine.store.db
    with rows.read() as conn:
        found = [
            r[0]
            for r in conn.execute(
                text("SELECT command_id FROM commands WHERE execution_id = :e ORDER BY iteration"),
                {"e": eid},
            )
        ]
    ids = found[:count]
    for command_id in ids:
        assert engine.store.claim(command_id, "host:1", 60) is not None
    return ids


def test_a_slot_is_held_while_its_command_runs_and_freed_by_a_lapsed_lease(
    engine: Engine,
) -> None:
    slots = engine.store.throttle
    a, b, c = _running(engine, 3)
    assert slots.acquire("key:t", 2, a) == 0
    assert slots.acquire("key:t", 2, a) == 0  # its own again: not a second slot
    assert slots.acquire("key:t", 2, b) == 1
    assert slots.acquire("key:t", 2, c) is None  # both held by running commands
    assert slots.held() == {"key:t": 2}
    slots.release("key:t", a)
    assert slots.acquire("key:t", 2, c) == 0
    # b's worker is killed: its lease lapses, and its slot with it
    with engine.store.db.write() as conn:
        conn.execute(
            text(
                "UPDATE commands SET lease_until = lease_until - interval '1 hour' "
                "WHERE command_id = :c"
            ),
            {"c": b},
        )
    assert slots.held() == {"key:t": 1}
    assert slots.acquire("key:t", 2, a) == 1


def test_concurrent_acquirers_never_exceed_the_cap(engine: Engine) -> None:
    slots = engine.store.throttle
    ids = _running(engine, 12)
    won: list[int] = []
    lock = threading.Lock()
    start = threading.Barrier(len(ids))

    def take(command_id: str) -> None:
        start.wait()
        slot = slots.acquire("key:race", 3, command_id)
        if slot is not None:
            with lock:
                won.append(slot)

    threads = [threading.Thread(target=take, args=(i,)) for i in ids]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert sorted(won) == [0, 1, 2]
