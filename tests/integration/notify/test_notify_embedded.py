"""Notifications on the engine with its real store (both backends), in-process workers
and a real local webhook receiver: a failed run, a cancelled run and a missed deadline
each deliver one notification id, signed; a receiver that fails or is down gets it
after; a playbook's own target; nothing delivered twice once accepted."""

from __future__ import annotations

import hashlib
import hmac
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from noetl_celery.engine.service import Engine
from noetl_celery.errors import ConfigurationError
from noetl_celery.settings import Settings
from noetl_celery.settings_notify import NotifySettings
from noetl_celery.store.database import SchemaMode
from noetl_celery.web.pages.site import Site
from tests.support.notify_receiver import Delivery, Receiver, receiving

SECRET = "notify-secret-3f9a"
HEAD = "apiVersion: noetl.io/v2\nkind: Playbook\n"
FAILING = (
    HEAD
    + """metadata: {name: f, path: tests/notify_fails}
workflow:
  - step: boom
    tool: {kind: python, code: "raise RuntimeError('disk full')"}
"""
)
SLEEPER = (
    HEAD
    + """metadata: {name: s, path: tests/notify_sleeps}
workflow:
  - step: nap
    tool: {kind: python, code: "import time\\ntime.sleep(30)\\nresult = {}"}
"""
)
OK = (
    HEAD
    + """metadata: {name: o, path: tests/notify_ok}
workflow:
  - step: fine
    tool: {kind: python, code: "result = {'x': 1}"}
"""
)


def engine_for(store_url: str, home: Path, notify: NotifySettings, **extra: Any) -> Engine:
    settings = Settings(
        home=home,
        database_url=store_url,
        embedded_workers=4,
        reaper_interval_seconds=0.2,
        notify=notify,
        **extra,
    )
    built = Engine(settings, schema=SchemaMode.MIGRATE)
    built.use_in_process_workers()
    return built


@pytest.fixture
def receiver() -> Iterator[Receiver]:
    with receiving() as r:
        yield r


def fast(receiver: Receiver, **changes: Any) -> NotifySettings:
    """Engine-wide target, signed, with a short backoff (tests only)."""
    values: dict[str, Any] = {
        "url": receiver.url(),
        "secret": SECRET,
        "backoff_seconds": 0.05,
        "backoff_max_seconds": 0.2,
        "public_url": "http://noetl.example:8000",
    }
    values.update(changes)
    return NotifySettings(**values)


def verified(delivery: Delivery, secret: str = SECRET) -> dict[str, Any]:
    expected = "sha256=" + hmac.new(secret.encode(), delivery.body, hashlib.sha256).hexdigest()
    assert hmac.compare_digest(delivery.headers["x-noetl-signature"], expected)
    body = delivery.json
    assert delivery.headers["x-noetl-notification-id"] == body["id"]
    return body


def one_delivered(engine: Engine, eid: str) -> dict[str, Any]:
    """The execution's single notification row, delivered (a delivered row is never
    claimed again: no later POST of it can come)."""
    rows = engine.detail(eid)["notifications"]
    assert len(rows) == 1, rows
    assert rows[0]["delivered_at"] is not None, rows
    return dict(rows[0])


def test_a_failed_run_delivers_one_signed_notification(
    store_url: str, tmp_path: Path, receiver: Receiver
) -> None:
    engine = engine_for(store_url, tmp_path, fast(receiver))
    try:
        eid = engine.start_text(FAILING)
        engine.wait(eid, 30)
        got = receiver.wait_for(lambda d: len(d) >= 1)
        body = verified(got[0])
        assert body["id"] == f"{eid}.failed.engine"
        assert body["execution_id"] == eid
        assert body["path"] == "tests/notify_fails"
        assert body["status"] == "failed"
        assert "disk full" in body["error"]
        assert body["errors"] and "disk full" in body["errors"][0]["message"]
        assert body["trigger"] == "manual"
        assert body["url"] == f"http://noetl.example:8000/executions/{eid}"
        assert body["started_at"].endswith("Z") and body["finished_at"].endswith("Z")
        assert body["text"].startswith("noetl: tests/notify_fails FAILED after ")
        assert "disk full" in body["text"]
        row = one_delivered(engine, eid)
        assert row["attempts"] == 1
        assert [d.json["id"] for d in receiver.all()] == [body["id"]]
    finally:
        engine.close()


def test_a_completed_run_is_not_notified_by_default(
    store_url: str, tmp_path: Path, receiver: Receiver
) -> None:
    engine = engine_for(store_url, tmp_path, fast(receiver))
    try:
        eid = engine.start_text(OK)
        engine.wait(eid, 30)
        assert engine.summary(eid)["status"] == "COMPLETED"
        assert engine.detail(eid)["notifications"] == []  # no row: nothing to deliver
    finally:
        engine.close()


def test_a_cancelled_run_delivers_one_notification(
    store_url: str, tmp_path: Path, receiver: Receiver
) -> None:
    engine = engine_for(store_url, tmp_path, fast(receiver))
    try:
        eid = engine.start_text(SLEEPER)
        assert engine.cancel(eid, "stopped by the operator")
        got = receiver.wait_for(lambda d: len(d) >= 1)
        body = verified(got[0])
        assert body["id"] == f"{eid}.cancelled.engine"
        assert body["status"] == "cancelled"
        assert body["error"] == "stopped by the operator"
        assert "CANCELLED" in body["text"]
        one_delivered(engine, eid)
    finally:
        engine.close()


def test_a_receiver_down_then_answering_500_gets_it_after(
    store_url: str, tmp_path: Path, receiver: Receiver
) -> None:
    receiver.down()  # its port is known; nothing listens there for a while
    engine = engine_for(store_url, tmp_path, fast(receiver))
    try:
        eid = engine.start_text(FAILING)
        engine.wait(eid, 30)
        stop = time.monotonic() + 60
        rows: list[Any] = []
        while time.monotonic() < stop:  # tries fail while it is down
            rows = engine.detail(eid)["notifications"]
            if rows and rows[0]["attempts"] >= 2:
                break
            time.sleep(0.05)
        assert rows[0]["delivered_at"] is None and rows[0]["attempts"] >= 2
        assert "ConnectError" in rows[0]["last_error"]
        assert receiver.url() not in rows[0]["last_error"]
        # back up, but answering 500 twice first
        receiver.failures = 2
        receiver.up()
        got = receiver.wait_for(lambda d: len(d) >= 1)
        assert [d.answered for d in receiver.all()] == [500, 500, 200]
        assert {d.json["id"] for d in receiver.all()} == {f"{eid}.failed.engine"}
        assert len(got) == 1
        verified(got[0])
        row = one_delivered(engine, eid)
        assert row["attempts"] >= 5
    finally:
        engine.close()


def test_a_playbook_declares_its_own_target(
    store_url: str, tmp_path: Path, receiver: Receiver
) -> None:
    # no engine-wide target; the playbook wants `completed` on its own url and secret
    engine = engine_for(store_url, tmp_path, fast(receiver, url=""))
    text = OK.replace(
        "metadata: {name: o, path: tests/notify_ok}",
        "metadata:\n  name: o\n  path: tests/notify_ok\n"
        f"  notify: {{url: '{receiver.url('/own')}', on: [completed], secret: pb-secret}}",
    )
    try:
        eid = engine.start_text(text)
        engine.wait(eid, 30)
        got = receiver.wait_for(lambda d: len(d) >= 1)
        body = verified(got[0], "pb-secret")
        assert got[0].path == "/own"
        assert body["id"] == f"{eid}.completed.playbook"
        assert body["status"] == "completed" and body["error"] is None
        one_delivered(engine, eid)
        # the API shows the notification, never the url or the secret
        shown = str(engine.detail(eid))
        assert "pb-secret" not in shown and "/own" not in shown
    finally:
        engine.close()


def test_a_missed_deadline_is_recorded_once_and_notified(
    store_url: str, tmp_path: Path, receiver: Receiver
) -> None:
    engine = engine_for(store_url, tmp_path, fast(receiver))
    text = SLEEPER.replace(
        "metadata: {name: s, path: tests/notify_sleeps}",
        "metadata: {name: s, path: tests/notify_sleeps, deadline: 1s}",
    )
    try:
        eid = engine.start_text(text)
        got = receiver.wait_for(lambda d: len(d) >= 1)
        body = verified(got[0])
        assert body["id"] == f"{eid}.deadline.missed.engine"
        assert body["status"] == "deadline.missed"
        assert "MISSED its deadline" in body["text"]
        view = engine.detail(eid)
        assert [d["event"] for d in view["deadline"]] == ["deadline.missed"]
        assert view["status"] == "RUNNING"  # a deadline tells; it does not stop the run
        # more sweeps pass: still one event, one notification
        engine.reaper.sweep()
        engine.reaper.sweep()
        assert len(engine.detail(eid)["deadline"]) == 1
        # serve's execution page shows the deadline and the notification, not the target
        page = Site(engine).execution(eid, {})
        assert page.status == 200, page.body[:300]
        assert "Deadline missed" in page.body and "Notifications" in page.body
        assert receiver.url() not in page.body and SECRET not in page.body
        assert engine.cancel(eid)
        receiver.wait_for(lambda d: len(d) >= 2)
        ids = sorted(d.json["id"] for d in receiver.accepted())
        assert ids == sorted([f"{eid}.deadline.missed.engine", f"{eid}.cancelled.engine"])
    finally:
        engine.close()


def test_rows_the_delivering_settings_do_not_want_are_skipped(
    store_url: str, tmp_path: Path, receiver: Receiver
) -> None:
    # a process that defers the engine-wide decision writes a row for every end; this
    # deliverer's NOETL_NOTIFY_ON has only `failed`: the completed run's row is skipped
    engine = engine_for(store_url, tmp_path, fast(receiver, on=frozenset({"failed"})))
    engine.defer_engine_notifications()
    try:
        ok = engine.start_text(OK)
        bad = engine.start_text(FAILING)
        engine.wait(ok, 30)
        engine.wait(bad, 30)
        receiver.wait_for(lambda d: len(d) >= 1)
        stop = time.monotonic() + 30
        while not engine.store.notifications.of_execution(ok)[0].skipped:
            assert time.monotonic() < stop
            time.sleep(0.05)
        assert engine.detail(ok)["notifications"] == []  # skipped rows are not listed
        assert [d.json["id"] for d in receiver.all()] == [f"{bad}.failed.engine"]
    finally:
        engine.close()


def test_a_loop_whose_eta_passes_the_deadline_is_at_risk_then_missed(
    store_url: str, tmp_path: Path, receiver: Receiver
) -> None:
    # 40 items of 0.5 s one after the other (~20 s); the deadline is 12 s: as soon as a
    # few items are done the ETA says ~20 s, past it; then it passes while running
    text = (
        HEAD
        + """metadata: {name: r, path: tests/notify_at_risk, deadline: 12s}
workflow:
  - step: each
    loop:
      in: "{{ range(40) | list }}"
      iterator: i
      spec: {mode: sequential}
    tool: {kind: python, code: "import time\\ntime.sleep(0.5)\\nresult = {}"}
"""
    )
    engine = engine_for(store_url, tmp_path, fast(receiver))
    try:
        eid = engine.start_text(text)
        receiver.wait_for(lambda d: len(d) >= 2, timeout=60)
        events = engine.detail(eid)["deadline"]
        assert [e["event"] for e in events] == ["deadline.at_risk", "deadline.missed"]
        assert events[0]["eta_at"] > events[0]["deadline_at"]
        ids = [d.json["id"] for d in receiver.accepted()]
        assert ids == [f"{eid}.deadline.at_risk.engine", f"{eid}.deadline.missed.engine"]
        assert "AT RISK" in receiver.accepted()[0].json["text"]
        engine.cancel(eid)
    finally:
        engine.close()


def test_a_schedule_deadline_applies_to_the_runs_it_starts(
    store_url: str, tmp_path: Path, receiver: Receiver
) -> None:
    engine = engine_for(store_url, tmp_path, fast(receiver))
    try:
        engine.register_text(SLEEPER)  # the playbook itself declares no deadline
        with pytest.raises(ConfigurationError, match="--deadline: 'soon' is neither"):
            engine.schedules.add("tests/notify_sleeps", "0 3 * * *", deadline="soon")
        row = engine.schedules.add("tests/notify_sleeps", "0 3 * * *", deadline="1s")
        assert row.to_json()["deadline"] == "1s"
        eid = engine.schedules.trigger(row.schedule_id)
        got = receiver.wait_for(lambda d: len(d) >= 1)
        body = verified(got[0])
        assert body["id"] == f"{eid}.deadline.missed.engine"
        assert body["trigger"] == "schedule"
        # a manual run of the same playbook has no deadline: never flagged
        manual = engine.start_path("tests/notify_sleeps")
        time.sleep(1.5)  # past what the schedule's deadline would be
        engine.reaper.sweep()
        assert engine.detail(manual)["deadline"] == []
        engine.cancel(eid)
        engine.cancel(manual)
    finally:
        engine.close()
