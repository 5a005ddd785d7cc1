"""Schedules on the real store (both backends): every firing starts exactly one run,
however many firers race for it; missed firings are coalesced; `catalog register`
keeps a playbook's declared schedule current."""

from __future__ import annotations

import datetime as dt
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest
from sqlalchemy import update

from noetl_celery.engine.service import Engine
from noetl_celery.settings import Settings
from noetl_celery.store.database import SchemaMode
from noetl_celery.store.schema import schedules, utcnow

PLAYBOOK = """apiVersion: noetl.io/v2
kind: Playbook
metadata: {name: tick, path: tests/tick}
workload: {day: none}
workflow:
  - step: only
    tool: {kind: noop}
"""


def make_engine(url: str, home: Path) -> Engine:
    return Engine(Settings(home=home, database_url=url), schema=SchemaMode.MIGRATE)


@pytest.fixture
def engine(store_url: str, tmp_path: Path) -> Iterator[Engine]:
    built = make_engine(store_url, tmp_path)
    built.register_text(PLAYBOOK)
    yield built
    built.close()


def due_since(engine: Engine, schedule_id: int, when: dt.datetime) -> None:
    with engine.database.engine.begin() as conn:
        conn.execute(
            update(schedules)
            .where(schedules.c.schedule_id == schedule_id)
            .values(next_fire_at=when)
        )


def test_a_firing_starts_one_run_however_many_firers_race(
    engine: Engine, store_url: str, tmp_path: Path
) -> None:
    row = engine.schedules.add("tests/tick", "* * * * *", payload={"day": "2026-11-23"})
    assert row.next_fire_at > utcnow()  # the first firing is in the future
    assert engine.schedules.fire_due() == []
    due_since(engine, row.schedule_id, utcnow() - dt.timedelta(seconds=1))

    firers = [make_engine(store_url, tmp_path / f"f{n}") for n in range(4)]
    started: list[list[str]] = []
    barrier = threading.Barrier(len(firers))

    def fire(firer: Engine) -> None:
        barrier.wait()
        started.append(firer.schedules.fire_due())

    threads = [threading.Thread(target=fire, args=(f,)) for f in firers]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(30)
    for firer in firers:
        firer.close()

    runs = [eid for batch in started for eid in batch]
    assert len(runs) == 1
    [(fire_time, execution_id)] = engine.schedules.firings(row.schedule_id)
    assert execution_id == runs[0]
    assert engine.summary(execution_id)["status"] in ("RUNNING", "COMPLETED")
    assert engine.store.execution(execution_id).payload == {"day": "2026-11-23"}
    [after] = engine.schedules.all()
    assert after.next_fire_at > fire_time and after.last_fire_at == fire_time
    assert engine.schedules.fire_due() == []  # nothing more is due


def test_missed_firings_run_once(engine: Engine) -> None:
    row = engine.schedules.add("tests/tick", "* * * * *")
    due_since(engine, row.schedule_id, utcnow() - dt.timedelta(minutes=30))
    assert len(engine.schedules.fire_due()) == 1
    assert engine.schedules.fire_due() == []
    [(fire_time, _)] = engine.schedules.firings(row.schedule_id)
    assert utcnow() - fire_time < dt.timedelta(minutes=1)  # for the latest missed time


def test_remove_and_bad_input(engine: Engine) -> None:
    from noetl_celery.errors import CatalogNotFound, ConfigurationError

    with pytest.raises(ConfigurationError, match="needs 5 fields"):
        engine.schedules.add("tests/tick", "every minute")
    with pytest.raises(CatalogNotFound):
        engine.schedules.add("tests/nowhere", "* * * * *")
    assert engine.schedules.all() == []  # nothing written for bad input
    row = engine.schedules.add("tests/tick", "*/2 * * * *", timezone="Europe/Berlin")
    assert engine.schedules.remove(row.schedule_id)
    assert not engine.schedules.remove(row.schedule_id)
    assert engine.schedules.all() == []


def test_register_installs_the_declared_schedule(engine: Engine) -> None:
    declared = PLAYBOOK.replace(
        "metadata: {name: tick, path: tests/tick}",
        "metadata: {name: tick, path: tests/tick, schedule: '*/5 * * * *'}",
    )
    engine.register_text(declared)  # a plain registration (`run` does it) installs nothing
    assert engine.schedules.all() == []
    engine.register_text(declared, install_schedule=True)
    engine.register_text(declared.replace("*/5", "*/10"), install_schedule=True)
    [row] = engine.schedules.all()
    assert (row.name, row.path, row.cron) == ("catalog:tests/tick", "tests/tick", "*/10 * * * *")
    engine.register_text(PLAYBOOK, install_schedule=True)  # no longer declared: removed
    assert engine.schedules.all() == []
