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
from noetl_celery.models.filters import ExecutionFilter
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
    # yearly: the firing after the forced one cannot fall due while the test runs (an
    # every-minute schedule did when the firers took the test past a minute's boundary)
    row = engine.schedules.add("tests/tick", "0 0 1 1 *", payload={"day": "2026-11-23"})
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


def test_a_paused_schedule_does_not_fire_and_resumes_without_a_backlog(engine: Engine) -> None:
    row = engine.schedules.add("tests/tick", "* * * * *")
    paused, changed = engine.schedules.pause(row.schedule_id)
    assert changed and not paused.enabled and paused.to_json()["next_fire_at"] is None
    assert engine.schedules.pause(row.schedule_id)[1] is False  # already paused: no change
    due_since(engine, row.schedule_id, utcnow() - dt.timedelta(minutes=30))
    assert engine.schedules.fire_due() == []
    assert engine.schedules.firings(row.schedule_id) == []

    before = utcnow()
    resumed, changed = engine.schedules.resume(row.schedule_id)
    # the next cron time after now: the 30 minutes it missed are not made up
    assert changed and resumed.enabled
    assert before < resumed.next_fire_at <= before + dt.timedelta(minutes=1)
    assert resumed.next_fire_at.second == 0
    assert engine.schedules.fire_due() == []
    assert engine.schedules.resume(row.schedule_id)[1] is False  # already running
    assert engine.schedules.get(row.schedule_id).next_fire_at == resumed.next_fire_at


def test_a_pause_wins_over_a_firer_that_read_the_schedule_before_it(engine: Engine) -> None:
    row = engine.schedules.add("tests/tick", "* * * * *")
    due_since(engine, row.schedule_id, utcnow() - dt.timedelta(seconds=1))
    [stale] = engine.store.schedules.due(utcnow())  # a beat read it as due ...
    engine.schedules.pause(row.schedule_id)  # ... and the operator paused it meanwhile
    entry = engine.store.resolve_catalog("tests/tick")
    fired = engine.store.schedules.fire(
        stale, stale.next_fire_at, utcnow(), entry, "383000000000000001", {}
    )
    assert fired is False
    assert engine.schedules.firings(row.schedule_id) == []
    assert engine.executions() == []


def test_trigger_starts_a_schedule_run_now_and_keeps_the_cadence(engine: Engine) -> None:
    from noetl_celery.errors import ScheduleNotFound

    row = engine.schedules.add("tests/tick", "0 6 * * *", payload={"day": "2026-11-23"})
    engine.schedules.pause(row.schedule_id)  # a paused schedule can still be triggered
    before = utcnow()
    execution_id = engine.schedules.trigger(row.schedule_id)
    run = engine.store.execution(execution_id)
    assert run.trigger == "schedule" and run.payload == {"day": "2026-11-23"}
    detail = run.trigger_detail or {}
    assert detail["schedule_id"] == row.schedule_id and detail["manual"] is True
    assert detail["fire_time"] >= before.isoformat()
    [line] = engine.executions(ExecutionFilter(trigger="schedule"))
    assert line["execution_id"] == execution_id and line["trigger_detail"] == detail
    assert engine.executions(ExecutionFilter(trigger="manual")) == []
    # no firing row, and the next and last firing are where they were
    assert engine.schedules.firings(row.schedule_id) == []
    after = engine.schedules.get(row.schedule_id)
    assert (after.next_fire_at, after.last_fire_at) == (row.next_fire_at, None)
    for call in (
        engine.schedules.pause,
        engine.schedules.resume,
        engine.schedules.trigger,
        engine.schedules.get,
    ):
        with pytest.raises(ScheduleNotFound, match="no schedule 999"):
            call(999)


def test_registering_again_keeps_a_paused_schedule_paused(engine: Engine) -> None:
    declared = PLAYBOOK.replace(
        "metadata: {name: tick, path: tests/tick}",
        "metadata: {name: tick, path: tests/tick, schedule: '*/5 * * * *'}",
    )
    engine.register_text(declared, install_schedule=True)
    [row] = engine.schedules.all()
    engine.schedules.pause(row.schedule_id)
    engine.register_text(declared.replace("*/5", "*/10"), install_schedule=True)
    [again] = engine.schedules.all()
    assert again.schedule_id == row.schedule_id and again.cron == "*/10 * * * *"
    assert not again.enabled  # an operator's pause survives a redeploy
    engine.schedules.resume(row.schedule_id)
    engine.register_text(declared, install_schedule=True)
    assert engine.schedules.all()[0].enabled
    # a declaration that says `enabled: false` installs it paused
    off = declared.replace(
        "schedule: '*/5 * * * *'", "schedule: {cron: '*/5 * * * *', enabled: false}"
    )
    engine.register_text(off, install_schedule=True)
    assert not engine.schedules.all()[0].enabled


def test_a_stored_cron_that_never_fires_is_paused_not_a_failed_tick(engine: Engine) -> None:
    """`0 0 31 2 *` (February 31st) passed the check before it looked for a date: the
    tick pauses it with the reason logged and fires the other schedules."""
    from noetl_celery.errors import ConfigurationError

    with pytest.raises(ConfigurationError, match="never fires"):
        engine.schedules.add("tests/tick", "0 0 31 2 *")
    never = engine.schedules.add("tests/tick", "* * * * *")
    every = engine.schedules.add("tests/tick", "* * * * *")
    with engine.database.engine.begin() as conn:  # as an older version stored it
        conn.execute(
            update(schedules)
            .where(schedules.c.schedule_id == never.schedule_id)
            .values(cron="0 0 31 2 *")
        )
    for row in (never, every):
        due_since(engine, row.schedule_id, utcnow() - dt.timedelta(minutes=5))
    assert len(engine.schedules.fire_due()) == 1
    assert engine.schedules.firings(never.schedule_id) == []
    assert not engine.schedules.get(never.schedule_id).enabled
    assert len(engine.schedules.firings(every.schedule_id)) == 1
    with pytest.raises(ConfigurationError, match="never fires"):
        engine.schedules.resume(never.schedule_id)
