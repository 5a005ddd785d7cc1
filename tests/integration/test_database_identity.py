"""A client and workers on different engine databases, same Redis: the workers refuse
the client's messages without consuming them, answer which database they use, and `run`
fails fast naming both databases (real Postgres, Redis and worker processes)."""

from __future__ import annotations

import re
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import psycopg
import pytest
from psycopg.conninfo import conninfo_to_dict

from noetl_celery.constants import COMPLETED
from noetl_celery.settings import Settings
from noetl_celery.store.database import SchemaMode, open_database
from tests.conftest import _env
from tests.support import services
from tests.support.engines import celery_engine
from tests.support.workers import BeatProcess, WorkerProcess, run_cli

ROOT = Path(__file__).resolve().parents[2]
HELLO = ROOT / "playbooks" / "examples" / "hello_world.yaml"
pytestmark = pytest.mark.integration


@dataclass
class Side:
    """One engine database: its name, a URL with a password in it (trust auth accepts
    any), that URL as messages show it, its identity, and an environment using it."""

    name: str
    url: str
    shown: str
    password: str
    identity: str
    env: dict[str, str]


def make_side(template: str, redis_url: str, home: Path) -> Side:
    name = f"noetl_h1_side_{uuid.uuid4().hex[:10]}"
    services.create_database(name, template)
    params = conninfo_to_dict(services.ADMIN_DSN)
    password = str(params.get("password") or f"canary-{uuid.uuid4().hex[:8]}")
    host, port = params.get("host", "127.0.0.1"), params.get("port", 5432)
    url = f"postgresql://{params.get('user', 'postgres')}:{password}@{host}:{port}/{name}"
    database = open_database(url, SchemaMode.REQUIRE)
    identity = database.database_id
    database.dispose()
    assert identity is not None and identity.endswith(f"/{name}")
    env = _env(NOETL_DATABASE_URL=url, NOETL_BROKER_URL=redis_url, NOETL_HOME=str(home))
    shown = url.replace(f":{password}@", ":***@")
    return Side(name, url, shown, password, identity, env)


@pytest.fixture(scope="module")
def sides(
    template_db: str,
    redis_url: str,
    distributed: dict[str, Any],
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[tuple[Side, Side, list[WorkerProcess]]]:
    """Database A (the client's) and B, copies of one template (so they share the id row
    of engine_info: the database name tells them apart), and two workers on B.

    The session's workers (another database, same Redis) are stopped meanwhile: they would
    take A's messages too, refuse them and put them back, every time after a pause, so
    what a test waits for would depend on which worker the broker picks."""
    for worker in distributed["workers"]:
        worker.stop()
    a = make_side(template_db, redis_url, tmp_path_factory.mktemp("a"))
    b = make_side(template_db, redis_url, tmp_path_factory.mktemp("b"))
    assert a.identity.split("/")[0] == b.identity.split("/")[0] and a.identity != b.identity
    workers = [WorkerProcess(f"h1b{i}", b.env) for i in (1, 2)]
    try:
        for worker in workers:
            worker.wait_ready()
        yield a, b, workers
    finally:
        for worker in workers:
            worker.stop()
        services.drop_database(a.name)
        services.drop_database(b.name)
        for worker in distributed["workers"]:
            worker.restart()


def rows(side: Side, sql: str, *args: object) -> list[tuple[object, ...]]:
    with psycopg.connect(services.dsn_for(side.name), autocommit=True) as conn:
        return conn.execute(sql, args).fetchall()


def wait_until(check: Callable[[], bool], timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if check():
            return
        time.sleep(0.2)
    raise AssertionError(f"not within {timeout}s: {what}")


def test_workers_say_which_database_and_broker_they_serve(
    sides: tuple[Side, Side, list[WorkerProcess]], redis_url: str
) -> None:
    _, b, workers = sides
    banner = (
        f"noetl-celery worker: engine database {b.shown} (identity {b.identity}), "
        f"broker {redis_url}"
    )
    for worker in workers:
        assert banner in worker.log.read_text()
        assert b.password not in worker.log.read_text()
    beat = BeatProcess(b.env)
    try:
        beat.wait_ready()
        log = beat.log.read_text()
        assert f"noetl-celery beat: engine database {b.shown} (identity {b.identity})" in log
        assert b.password not in log
    finally:
        beat.stop()


def test_workers_answer_which_database_they_use(
    sides: tuple[Side, Side, list[WorkerProcess]], redis_url: str
) -> None:
    from noetl_celery.tasks.app import make_app
    from noetl_celery.tasks.fleet import fleet_identities

    _, b, _ = sides
    answers = fleet_identities(make_app(Settings(broker_url=redis_url)), timeout=2.0)
    ours = {a["hostname"].split("@")[0]: a for a in answers if a["hostname"].startswith("h1b")}
    assert set(ours) == {"h1b1", "h1b2"}
    for answer in ours.values():
        assert answer["database_id"] == b.identity and answer["database"] == b.shown


def test_run_against_workers_of_another_database_fails_fast(
    sides: tuple[Side, Side, list[WorkerProcess]], redis_url: str
) -> None:
    a, b, _ = sides
    started = time.monotonic()
    proc = run_cli(["run", str(HELLO)], a.env, timeout=60)
    elapsed = time.monotonic() - started
    print(f"run against workers of another database: exit 2 after {elapsed:.1f} s")
    assert proc.returncode == 2 and elapsed < 15, (elapsed, proc.stderr)
    assert "Traceback" not in proc.stderr
    eid = re.search(r"execution (\d+) started", proc.stderr)
    assert eid is not None, proc.stderr
    errors = [ln for ln in proc.stderr.splitlines() if "another engine database" in ln]
    assert len(errors) == 1
    assert f"the workers on {redis_url} use another engine database: " in errors[0]
    assert f"{b.shown} (identity {b.identity}): h1b1@" in errors[0]
    assert f"this client uses {a.shown} (identity {a.identity})" in errors[0]
    assert a.password not in proc.stderr + proc.stdout
    # its own execution cancelled: nothing left RUNNING; nothing claimed in either database
    assert rows(a, "SELECT status FROM executions WHERE execution_id = %s", eid[1]) == [
        ("CANCELLED",)
    ]
    assert rows(a, "SELECT count(*) FROM commands WHERE started_at IS NOT NULL") == [(0,)]
    assert rows(b, "SELECT count(*) FROM commands WHERE execution_id = %s", eid[1]) == [(0,)]
    assert rows(b, "SELECT count(*) FROM executions WHERE execution_id = %s", eid[1]) == [(0,)]


def test_a_message_without_a_database_identity_is_accepted(
    sides: tuple[Side, Side, list[WorkerProcess]], redis_url: str, tmp_path: Path
) -> None:
    """Messages queued by an older version carry no `db`: workers run them."""
    from noetl_celery.engine.service import Engine
    from noetl_celery.tasks.app import make_app
    from noetl_celery.tasks.dispatcher import CeleryDispatcher

    _, b, _ = sides
    settings = Settings(home=tmp_path, database_url=b.url, broker_url=redis_url)
    engine = Engine(settings, schema=SchemaMode.REQUIRE)
    try:
        engine.use_dispatcher(CeleryDispatcher(make_app(settings), database_id=None))
        eid = engine.start_text(HELLO.read_text())
        assert engine.wait(eid, timeout=60).status == COMPLETED
    finally:
        engine.close()


def test_run_warns_when_no_worker_answers(pg_url: str, tmp_path: Path) -> None:
    """A broker of its own (no worker anywhere): `run` says so once, and keeps waiting."""
    from tests.support.private_services import PrivateRedis

    redis = PrivateRedis()
    redis.start()
    try:
        env = _env(NOETL_DATABASE_URL=pg_url, NOETL_BROKER_URL=redis.url, NOETL_HOME=str(tmp_path))
        proc = run_cli(["run", str(HELLO), "--timeout", "12"], env, timeout=60)
    finally:
        redis.stop()
    assert proc.returncode == 3 and "Traceback" not in proc.stderr  # still RUNNING
    warnings = [ln for ln in proc.stderr.splitlines() if ln.startswith("warning: ")]
    assert warnings[0] == (
        f"warning: waiting for a worker: no noetl-celery worker answers on {redis.url}; "
        "start one with the same NOETL_DATABASE_URL"
    )
    assert warnings[1].startswith("warning: no worker has claimed a command of execution ")
    assert len(warnings) == 2


def test_a_foreign_message_is_refused_and_left_for_a_worker_of_its_database(
    sides: tuple[Side, Side, list[WorkerProcess]], redis_url: str, tmp_path: Path
) -> None:
    a, b, workers = sides
    engine = celery_engine(a.url, redis_url, tmp_path)
    try:
        eid = engine.start_text(HELLO.read_text())
        first = f"{eid}:start:1"

        def refused() -> bool:
            return any(f"refusing command {first}" in w.log.read_text() for w in workers)

        wait_until(refused, 20, f"a worker on B refuses {first}")
        log = next(
            w.log.read_text() for w in workers if f"refusing command {first}" in w.log.read_text()
        )
        line = next(ln for ln in log.splitlines() if f"refusing command {first}" in ln)
        assert " ERROR " in line and a.identity in line and b.identity in line and b.shown in line
        assert b.password not in log
        # refused, not consumed: the command is still issued and unclaimed in A
        assert rows(a, "SELECT status, started_at FROM commands WHERE command_id = %s", first) == [
            ("issued", None)
        ]
        assert rows(b, "SELECT count(*) FROM commands WHERE execution_id = %s", eid) == [(0,)]
        for worker in workers:  # the B workers go; the message is still in the broker
            worker.stop()
        right = WorkerProcess("h1a", a.env)
        try:
            right.wait_ready()
            row = engine.wait(eid, timeout=60)
        finally:
            right.stop()
        assert row.status == COMPLETED
        assert engine.summary(eid)["result"]["greeted"] == 3
    finally:
        engine.close()
