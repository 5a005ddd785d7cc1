"""Two `noetl-celery beat` processes and two workers: a schedule that fires every 4 s,
left on for three firings, starts exactly three executions."""

from __future__ import annotations

import datetime as dt
import time
from pathlib import Path
from typing import Any

import pytest

from noetl_celery.store.schema import utcnow
from tests.support.engines import celery_engine
from tests.support.workers import BeatProcess

pytestmark = pytest.mark.integration

PLAYBOOK = """apiVersion: noetl.io/v2
kind: Playbook
metadata: {name: beat_tick, path: tests/beat_tick}
workflow:
  - step: only
    tool: {kind: python, code: "result = {'ran': True}"}
"""


def test_two_beats_start_each_firing_once(distributed: dict[str, Any], tmp_path: Path) -> None:
    env = {**distributed["env"], "NOETL_SCHEDULE_TICK_SECONDS": "0.5"}
    beats = [BeatProcess(env) for _ in range(2)]
    engine = celery_engine(distributed["url"], distributed["redis_url"], tmp_path)
    try:
        for beat in beats:
            beat.wait_ready()
        engine.register_text(PLAYBOOK)
        row = engine.schedules.add("tests/beat_tick", "* * * * * */4")  # every 4 seconds
        expected = [row.next_fire_at + dt.timedelta(seconds=4 * k) for k in range(3)]
        # leave it on until just after the third firing, well before the fourth
        while utcnow() < expected[-1] + dt.timedelta(seconds=2):
            time.sleep(0.1)
        assert engine.schedules.remove(row.schedule_id)
        firings = engine.schedules.firings(row.schedule_id)
    finally:
        for beat in beats:
            beat.stop()
    assert [f for f, _ in firings] == expected
    runs = [eid for _, eid in firings]
    assert len(set(runs)) == 3 and all(runs)
    for eid in runs:
        assert eid is not None
        assert engine.wait(eid, 60).status == "COMPLETED"
    engine.close()


def wait_for(predicate: Any, timeout: float = 20.0) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.1)


def test_beat_skips_a_paused_schedule_and_resumes_without_a_backlog(
    distributed: dict[str, Any], tmp_path: Path
) -> None:
    env = {**distributed["env"], "NOETL_SCHEDULE_TICK_SECONDS": "0.5"}
    beat = BeatProcess(env)
    engine = celery_engine(distributed["url"], distributed["redis_url"], tmp_path)
    try:
        beat.wait_ready()
        engine.register_text(PLAYBOOK.replace("tests/beat_tick", "tests/beat_pause"))
        row = engine.schedules.add("tests/beat_pause", "* * * * * *")  # every second
        sid = row.schedule_id
        wait_for(lambda: len(engine.schedules.firings(sid)) >= 2)
        engine.schedules.pause(sid)
        paused_at = utcnow()
        time.sleep(0.6)  # a firing that had read the schedule before the pause settles
        count = len(engine.schedules.firings(sid))
        time.sleep(3)  # six ticks of beat
        assert len(engine.schedules.firings(sid)) == count
        resumed_at = utcnow()
        engine.schedules.resume(sid)
        wait_for(lambda: len(engine.schedules.firings(sid)) > count)
        engine.schedules.remove(sid)
        firings = engine.schedules.firings(sid)
    finally:
        beat.stop()
    before = [f for f, _ in firings if f <= paused_at]
    after = [f for f, _ in firings[count:]]
    # nothing was fired for the seconds the schedule was paused, not even on resuming
    assert before and after and all(f > resumed_at for f in after)
    for _, eid in firings:
        assert eid is not None and engine.wait(eid, 60).status == "COMPLETED"
    engine.close()
