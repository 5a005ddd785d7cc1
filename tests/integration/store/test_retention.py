"""Retention on the real store (both backends): `noetl-celery db prune` deletes exactly
the ended executions older than the age, with their rows in every table, and nothing of
newer, running or linked executions; a dry run changes nothing; the CLI's outputs."""

from __future__ import annotations

import datetime as dt
import json
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import select

from noetl_celery.engine.retention import LEASE, PruneBusy, Pruner
from noetl_celery.engine.service import Engine
from noetl_celery.settings import Settings
from noetl_celery.store.database import SchemaMode, open_database
from noetl_celery.store.repository import Store
from noetl_celery.store.schema import executions, utcnow
from tests.support import retention as support
from tests.support.workers import run_cli

PLAYBOOKS = Path(__file__).resolve().parents[2] / "playbooks"
LOOP = """apiVersion: noetl.io/v2
kind: Playbook
metadata: {name: kept_loop, path: tests/retention_loop}
workflow:
  - step: start
    tool: {kind: noop}
    next: {arcs: [{step: each}]}
  - step: each
    loop: {in: "{{ range(6) | list }}", iterator: x, spec: {mode: parallel, max_in_flight: 3}}
    tool:
      kind: python
      input: {x: "{{ iter.x }}"}
      code: |
        def main(x):
            print(f"item {x}")
            return x * 2
    next: {arcs: [{step: end, when: "{{ event.name == 'loop.done' }}"}]}
  - step: end
    tool: {kind: noop}
"""
PARENT = """apiVersion: noetl.io/v2
kind: Playbook
metadata: {name: retention_parent, path: tests/retention_parent}
workflow:
  - step: call
    tool: {kind: playbook, path: tests/child_double, return_step: double, input: {x: 4}}
"""
DAY = dt.timedelta(days=1)


@pytest.fixture
def store(store_url: str, tmp_path: Path) -> Iterator[Store]:
    """The engine's store, with no engine running on it (no reaper thread, no workers:
    the seeded running executions must stay exactly as written)."""
    database = open_database(store_url, SchemaMode.MIGRATE)
    yield Store(database)
    database.dispose()


def ids(prefix: str, n: int) -> list[str]:
    return [f"{prefix}-{i:05d}" for i in range(n)]


def run_for_real(url: str, home: Path) -> list[str]:
    """A loop and a parent with its child, really run on an embedded engine (closed
    after); then every row they wrote is made old."""
    engine = Engine(
        Settings(home=home, database_url=url, embedded_workers=4), schema=SchemaMode.MIGRATE
    )
    try:
        engine.use_in_process_workers()
        engine.register_file(PLAYBOOKS / "child_double.yaml")
        loop = engine.start_text(LOOP)
        parent = engine.start_text(PARENT)
        for eid in (loop, parent):
            assert engine.wait(eid, 120).status == "COMPLETED"
        with engine.database.read() as conn:
            children = list(
                conn.execute(
                    select(executions.c.execution_id).where(
                        executions.c.parent_execution_id == parent
                    )
                ).scalars()
            )
        assert len(children) == 1
        real = [loop, parent, *children]
        support.backdate(engine.database, real, utcnow() - 41 * DAY, utcnow() - 40 * DAY)
    finally:
        engine.close()
    return real


def populate(
    store: Store, real: list[str], old_n: int = 2000, new_n: int = 200
) -> dict[str, list[str]]:
    """Old ended executions (seeded, and `real` ones really run), newer ones, and old
    ended ones that must stay because they are linked to a running one."""
    db = store.db
    now = utcnow()
    old = ids("old", old_n)
    third = old_n // 3
    support.seed(
        db,
        old[:third],
        status="COMPLETED",
        created_at=now - 31 * DAY,
        finished_at=now - 30 * DAY - dt.timedelta(hours=2),
    )
    support.seed(
        db,
        old[third : 2 * third],
        status="FAILED",
        created_at=now - 60 * DAY,
        finished_at=now - 59 * DAY,
    )
    support.seed(
        db,
        old[2 * third :],
        status="CANCELLED",
        created_at=now - 400 * DAY,
        finished_at=now - 399 * DAY,
    )
    # an old ended family that goes whole: parent, child, grandchild
    support.seed(
        db, ["fam-p"], status="COMPLETED", created_at=now - 50 * DAY, finished_at=now - 49 * DAY
    )
    support.seed(
        db,
        ["fam-c"],
        status="COMPLETED",
        created_at=now - 50 * DAY,
        finished_at=now - 49 * DAY,
        parent="fam-p",
    )
    support.seed(
        db,
        ["fam-g"],
        status="FAILED",
        created_at=now - 50 * DAY,
        finished_at=now - 49 * DAY,
        parent="fam-c",
    )
    new = ids("new", new_n)
    support.seed(
        db, new, status="COMPLETED", created_at=now - 40 * DAY, finished_at=now - 29 * DAY
    )  # started long ago, ended within the age
    # a running execution with an ended child (the child stays) and a running child
    support.seed(db, ["run-p"], status="RUNNING", created_at=now - 90 * DAY, finished_at=None)
    support.seed(
        db,
        ["run-c-ended"],
        status="COMPLETED",
        created_at=now - 90 * DAY,
        finished_at=now - 89 * DAY,
        parent="run-p",
    )
    support.seed(
        db, ["run-c"], status="RUNNING", created_at=now - 90 * DAY, finished_at=None, parent="run-p"
    )
    # an ended parent whose child still runs stays, and so does its ended sibling
    support.seed(
        db, ["end-p"], status="COMPLETED", created_at=now - 90 * DAY, finished_at=now - 89 * DAY
    )
    support.seed(
        db,
        ["end-p-running"],
        status="RUNNING",
        created_at=now - 90 * DAY,
        finished_at=None,
        parent="end-p",
    )
    support.seed(
        db,
        ["end-p-sibling"],
        status="COMPLETED",
        created_at=now - 90 * DAY,
        finished_at=now - 89 * DAY,
        parent="end-p",
    )
    # a long-ended parent whose detached child ended within the age: both stay
    support.seed(
        db, ["det-p"], status="COMPLETED", created_at=now - 90 * DAY, finished_at=now - 89 * DAY
    )
    support.seed(
        db,
        ["det-c"],
        status="COMPLETED",
        created_at=now - 90 * DAY,
        finished_at=now - DAY,
        parent="det-p",
    )
    # the original of a running rerun stays (the rerun reads it as it starts)
    support.seed(
        db, ["orig"], status="FAILED", created_at=now - 90 * DAY, finished_at=now - 89 * DAY
    )
    support.seed(
        db, ["rerun"], status="RUNNING", created_at=now - DAY, finished_at=None, rerun_of="orig"
    )
    linked_kept = ["run-c-ended", "end-p", "end-p-sibling", "det-p", "orig"]
    stay = [*new, "run-p", "run-c", "end-p-running", "det-c", "rerun", *linked_kept]
    return {
        "gone": [*old, "fam-p", "fam-c", "fam-g", *real],
        "stay": stay,
        "linked_kept": linked_kept,
    }


def test_prune_deletes_exactly_the_old_ended_executions_from_every_table(
    store_url: str, tmp_path: Path, store: Store
) -> None:
    db = store.db
    sets = populate(store, run_for_real(store_url, tmp_path))
    gone_before = support.counts(db, sets["gone"])
    stay_before = support.counts(db, sets["stay"])
    totals_before = support.totals(db)
    kept_before = support.kept_rows(db)
    # every table that belongs to executions has rows of the old ones (the really run
    # ones among them wrote theirs through the engine)
    assert all(n > 0 for n in gone_before.values()), gone_before
    real = sets["gone"][-3:]
    real_rows = support.counts(db, real)
    for table in ("commands", "events", "results", "contexts", "loops", "command_logs"):
        assert real_rows[table] > 0, (table, real_rows)

    dry = Pruner(store).prune(30 * 86400, dry_run=True)
    assert support.totals(db) == totals_before  # a dry run changes nothing
    assert dry.executions == len(sets["gone"])
    assert dry.rows == gone_before
    assert dry.kept == len(sets["linked_kept"])

    report = Pruner(store, row_chunk=700).prune(30 * 86400)
    assert report.executions == len(sets["gone"])
    assert report.rows == gone_before  # what it says it removed, per table
    assert report.kept == len(sets["linked_kept"])
    assert report.transactions > len(support.OWNED)  # chunked: more than one per table
    assert support.counts(db, sets["gone"]) == dict.fromkeys(support.OWNED, 0)
    assert support.counts(db, sets["stay"]) == stay_before  # nothing of them touched
    after = support.totals(db)
    for table, n in gone_before.items():
        assert after[table] == totals_before[table] - n, table
    assert support.kept_rows(db) == kept_before  # catalog, schedules, counters, ...
    # a second prune finds nothing more
    again = Pruner(store).prune(30 * 86400)
    assert again.executions == 0 and not any(again.rows.values())
    # the running ones go on: the engine still reads them
    assert store.execution("run-p").status == "RUNNING"


def test_one_prune_at_a_time_and_the_daily_prune_runs_once(store: Store) -> None:
    db = store.db
    now = utcnow()
    support.seed(
        db, ids("old", 5), status="COMPLETED", created_at=now - 9 * DAY, finished_at=now - 8 * DAY
    )
    other = Pruner(store, owner="someone-else")
    assert store.retention.take_lease(LEASE, other.owner, 60)
    with pytest.raises(PruneBusy, match="another prune is running"):
        Pruner(store).prune(86400)
    assert Pruner(store).daily(86400) is None  # busy: not run, tried again later
    store.retention.release_lease(LEASE, other.owner)
    first = Pruner(store).daily(86400)
    assert first is not None and first.executions == 5
    support.seed(
        db, ids("later", 3), status="COMPLETED", created_at=now - 9 * DAY, finished_at=now - 8 * DAY
    )
    # however many beats send the task, and to whichever worker: once a day
    assert Pruner(store).daily(86400) is None
    assert Pruner(store, owner="beat-2").daily(86400) is None
    assert support.counts(db, ids("later", 3))["executions"] == 3


def _cli_env(url: str, home: Path) -> dict[str, str]:
    from tests.conftest import _env

    return _env(NOETL_DATABASE_URL=url, NOETL_HOME=str(home))


def test_the_command_prints_per_table_and_json(store_url: str, tmp_path: Path) -> None:
    built = Engine(Settings(home=tmp_path, database_url=store_url), schema=SchemaMode.MIGRATE)
    now = utcnow()
    try:
        support.seed(
            built.database,
            ids("old", 30),
            status="COMPLETED",
            created_at=now - 3 * DAY,
            finished_at=now - 2 * DAY,
        )
        support.seed(
            built.database,
            ids("new", 4),
            status="COMPLETED",
            created_at=now - 3 * DAY,
            finished_at=now - dt.timedelta(hours=1),
        )
        expected = support.counts(built.database, ids("old", 30))
    finally:
        built.close()
    env = _cli_env(store_url, tmp_path / "home")

    dry = run_cli(["db", "prune", "--older-than", "1d", "--dry-run"], env)
    assert dry.returncode == 0, dry.stderr
    lines = dry.stdout.splitlines()
    assert lines[0].startswith("would delete 30 executions that ended before ")
    assert "(older than 1d)" in lines[0]
    shown = {ln.split()[0]: int(ln.split()[1]) for ln in lines[1:] if ln.startswith("  ")}
    assert shown == expected

    out = run_cli(["db", "prune", "--older-than", "36h", "--json"], env)
    assert out.returncode == 0, out.stderr
    body: dict[str, Any] = json.loads(out.stdout)
    assert out.stdout.count("\n") == 1
    assert body["dry_run"] is False and body["older_than"] == "36h"
    assert body["executions"] == 30 and body["rows"] == expected
    assert body["transactions"] >= len(support.OWNED)
    assert body["longest_transaction_ms"] > 0 and body["kept"] == 0
    assert body["longest_table"] in support.OWNED

    text = run_cli(["db", "prune", "--older-than", "30m"], env)
    assert text.returncode == 0, text.stderr
    assert text.stdout.startswith("deleted 4 executions that ended before ")
    assert "transactions, longest" in text.stdout


@pytest.mark.parametrize("age", ["30", "30x", "0d", "-1d", "d", "1.5 weeks"])
def test_a_bad_age_is_one_line_and_exit_2(age: str, sqlite_url: str, tmp_path: Path) -> None:
    proc = run_cli(["db", "prune", "--older-than", age], _cli_env(sqlite_url, tmp_path))
    assert proc.returncode == 2
    assert proc.stderr.strip().splitlines() == [
        f"Error: --older-than: {age!r} is not an age: use a number with a unit: "
        "30d, 12h, 90m or 45s"
    ]
    assert proc.stdout == ""


@pytest.mark.parametrize("command", ["beat", "worker"])
def test_a_bad_retention_stops_beat_and_workers_at_start(command: str, tmp_path: Path) -> None:
    from tests.conftest import _env

    env = _env(
        NOETL_DATABASE_URL="postgresql://postgres@127.0.0.1:5432/unused",
        NOETL_BROKER_URL="redis://127.0.0.1:6379/5",
        NOETL_HOME=str(tmp_path),
        NOETL_RETENTION="30",
    )
    proc = run_cli([command], env, timeout=60)
    assert proc.returncode == 2
    assert proc.stderr.strip().splitlines() == [
        "Error: NOETL_RETENTION: '30' is not an age: use a number with a unit: 30d, 12h, "
        "90m or 45s (unset: never prune)"
    ]


def test_a_worker_with_noetl_retention_prunes_when_beat_asks(pg_url: str, tmp_path: Path) -> None:
    """The task beat sends (`noetl.prune`) on a real worker process started with
    NOETL_RETENTION: the old executions go, the newer stay, the day's lease is taken."""
    from noetl_celery.constants import TASK_PRUNE
    from noetl_celery.engine.retention import DAILY_LEASE
    from noetl_celery.tasks.app import make_app
    from tests.conftest import _env
    from tests.support import services
    from tests.support.workers import WorkerProcess

    # a broker of its own: on the session's, its workers (another engine database) would
    # take the prune, refuse it as foreign and put it back, racing this worker for it
    redis_url = services.SPARE_REDIS_URL
    services.redis_client(redis_url).flushdb()
    database = open_database(pg_url, SchemaMode.REQUIRE)
    store = Store(database)
    now = utcnow()
    try:
        support.seed(
            database,
            ids("old", 40),
            status="COMPLETED",
            created_at=now - 9 * DAY,
            finished_at=now - 8 * DAY,
        )
        support.seed(
            database,
            ids("new", 5),
            status="FAILED",
            created_at=now - 9 * DAY,
            finished_at=now - DAY,
        )
        new_rows = support.counts(database, ids("new", 5))
        env = _env(
            NOETL_DATABASE_URL=pg_url,
            NOETL_BROKER_URL=redis_url,
            NOETL_HOME=str(tmp_path / "home"),
            NOETL_RETENTION="2d",
        )
        worker = WorkerProcess("pruner", env)
        try:
            worker.wait_ready()
            app = make_app(Settings(broker_url=redis_url))
            # as beat sends it: naming the database, so a worker of another one refuses it
            app.send_task(TASK_PRUNE, kwargs={"db": database.database_id})
            deadline = time.monotonic() + 120
            while support.counts(database, ids("old", 40))["executions"]:
                assert time.monotonic() < deadline, worker.tail()
                time.sleep(0.2)
        finally:
            worker.stop()
        assert support.counts(database, ids("old", 40)) == dict.fromkeys(support.OWNED, 0)
        # the worker's relay and wake-ups clear the seeded outbox and inbox rows of ended
        # executions (its own work); every other row of the newer ones is there
        moved = ("inbox", "publish_outbox")
        left = support.counts(database, ids("new", 5))
        assert {t: n for t, n in left.items() if t not in moved} == {
            t: n for t, n in new_rows.items() if t not in moved
        }
        assert left["executions"] == 5
        assert store.retention.lease_holder(DAILY_LEASE) is not None
    finally:
        database.dispose()
