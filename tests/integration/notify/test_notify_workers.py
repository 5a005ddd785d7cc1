"""Notifications with real Celery worker processes (a private Redis, a cloned Postgres):
the worker whose pass ends a run writes the notification in that transaction, and a
worker's deliverer thread POSTs it (this test process delivers nothing); a playbook's
target read from the credentials file; a missed deadline swept on the shared database."""

from __future__ import annotations

import hashlib
import hmac
import json
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from noetl_celery.engine.service import Engine
from tests.conftest import _env
from tests.support import services
from tests.support.engines import celery_engine
from tests.support.notify_receiver import Delivery, Receiver, receiving
from tests.support.private_services import PrivateRedis
from tests.support.workers import WorkerProcess

SECRET = "fleet-secret-51c2"
HOOK_SECRET = "cred-hook-secret-0a7e"
HEAD = "apiVersion: noetl.io/v2\nkind: Playbook\n"
FAILING = (
    HEAD
    + """metadata: {name: f, path: tests/notify_fleet_fails}
workflow:
  - step: boom
    tool: {kind: python, code: "raise RuntimeError('queue table missing')"}
"""
)


@dataclass
class Fleet:
    engine: Engine
    receiver: Receiver
    worker: WorkerProcess


@pytest.fixture
def fleet(template_db: str, tmp_path: Path) -> Iterator[Fleet]:
    redis = PrivateRedis()
    redis.start()
    with receiving() as receiver, services.cloned_database(template_db, prefix="noetl_ntf") as db:
        creds = tmp_path / "credentials.json"
        hook = {"url": receiver.url("/from-credential"), "secret": HOOK_SECRET}
        creds.write_text(json.dumps({"ops_hook": hook}))
        url = services.sqlalchemy_url(db)
        env = _env(
            NOETL_DATABASE_URL=url,
            NOETL_BROKER_URL=redis.url,
            NOETL_CREDENTIALS_FILE=str(creds),
            NOETL_HOME=str(tmp_path / "home"),
            NOETL_NOTIFY_URL=receiver.url(),
            NOETL_NOTIFY_SECRET=SECRET,
            NOETL_NOTIFY_BACKOFF_SECONDS="0.1",
            NOETL_NOTIFY_BACKOFF_MAX_SECONDS="0.5",
        )
        worker = WorkerProcess("ntf", env, concurrency=2)
        engine: Engine | None = None
        try:
            worker.wait_ready()
            # this process plays a client outside the fleet (no NOETL_NOTIFY_* of its
            # own): what it ends or sweeps is notified as the worker's settings say
            engine = celery_engine(url, redis.url, tmp_path, creds)
            engine.defer_engine_notifications()
            yield Fleet(engine, receiver, worker)
        finally:
            if engine is not None:
                engine.close()
            worker.stop()
            redis.stop()


def verified(delivery: Delivery, secret: str) -> dict[str, object]:
    expected = "sha256=" + hmac.new(secret.encode(), delivery.body, hashlib.sha256).hexdigest()
    assert delivery.headers["x-noetl-signature"] == expected
    return delivery.json


def test_a_failed_run_on_workers_is_delivered_by_a_worker(fleet: Fleet) -> None:
    fleet.receiver.failures = 1  # the first POST fails: the worker tries again
    eid = fleet.engine.start_text(FAILING)
    fleet.engine.wait(eid, 60)
    ok = fleet.engine.start_text(
        FAILING.replace("raise RuntimeError('queue table missing')", "result = 1")
    )
    fleet.engine.wait(ok, 60)
    got = fleet.receiver.wait_for(lambda d: len(d) >= 1, timeout=60)
    body = verified(got[0], SECRET)
    assert body["id"] == f"{eid}.failed.engine"
    assert "queue table missing" in str(body["error"])
    assert {d.json["id"] for d in fleet.receiver.all()} == {body["id"]}
    rows = fleet.engine.detail(eid)["notifications"]
    assert len(rows) == 1 and rows[0]["delivered_at"] and rows[0]["attempts"] == 2
    assert "HTTP 500" in str(rows[0]["last_error"])
    # the completed run ended in a worker's pass: its settings do not want `completed`
    assert fleet.engine.summary(ok)["status"] == "COMPLETED"
    assert fleet.engine.store.notifications.of_execution(ok) == []
    assert all(d.json["execution_id"] != ok for d in fleet.receiver.all())


def test_a_credential_target_and_a_missed_deadline_on_workers(fleet: Fleet) -> None:
    text = (
        HEAD
        + """metadata:
  name: d
  path: tests/notify_fleet_deadline
  deadline: 1s
  notify: {credential: ops_hook, on: [deadline]}
workflow:
  - step: nap
    tool: {kind: python, code: "import time\\ntime.sleep(30)\\nresult = {}"}
"""
    )
    eid = fleet.engine.start_text(text)

    # the deadline passes while the step sleeps; the sweep (beat's, run here on the
    # shared database) records it; the worker delivers it to both targets
    def missed() -> bool:
        fleet.engine.reaper.sweep()
        return bool(fleet.engine.detail(eid)["deadline"])

    poll(missed)
    got = fleet.receiver.wait_for(lambda d: len(d) >= 2, timeout=60)
    by_path = {d.path: d for d in got}
    own = verified(by_path["/from-credential"], HOOK_SECRET)
    fleet_wide = verified(by_path["/hook"], SECRET)
    assert own["id"] == f"{eid}.deadline.missed.playbook"
    assert fleet_wide["id"] == f"{eid}.deadline.missed.engine"
    # cancelled here, delivered by the worker (its NOETL_NOTIFY_ON has `cancelled`)
    assert fleet.engine.cancel(eid)
    got = fleet.receiver.wait_for(lambda d: len(d) >= 3, timeout=60)
    assert f"{eid}.cancelled.engine" in {d.json["id"] for d in got}


def poll(check: Callable[[], bool], timeout: float = 30.0) -> None:
    stop = time.monotonic() + timeout
    while time.monotonic() < stop:
        if check():
            return
        time.sleep(0.2)
    raise AssertionError(f"{check.__name__}: not within {timeout}s")
