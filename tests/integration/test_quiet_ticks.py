"""A real worker and beat at the default log level: beat's every-second ticks leave no
line per tick, while what a tick does (a schedule firing) and ordinary tasks still show."""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest

from tests.support.engines import celery_engine
from tests.support.workers import BeatProcess, WorkerProcess

pytestmark = pytest.mark.integration
ROOT = Path(__file__).resolve().parents[2]

PLAYBOOK = """apiVersion: noetl.io/v2
kind: Playbook
metadata: {name: quiet_tick, path: tests/quiet_tick}
workflow:
  - step: only
    tool: {kind: python, code: "result = {'ran': True}"}
"""


def test_ticks_leave_no_lines_at_the_default_level(
    pg_url: str, redis_url: str, tmp_path: Path
) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("NOETL_")}
    env.update(
        NOETL_DATABASE_URL=pg_url,
        NOETL_BROKER_URL=redis_url,
        NOETL_HOME=str(tmp_path / "home"),
        NOETL_SCHEDULE_TICK_SECONDS="0.5",
        NOETL_REAPER_INTERVAL_SECONDS="1",
        PYTHONPATH=str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", ""),
    )
    engine = celery_engine(pg_url, redis_url, tmp_path)
    engine.register_text(PLAYBOOK)
    row = engine.schedules.add("tests/quiet_tick", "* * * * * */2")  # every 2 seconds
    worker = WorkerProcess("quiet", env, concurrency=1)
    beat = BeatProcess(env)
    try:
        worker.wait_ready()
        beat.wait_ready()
        deadline = time.monotonic() + 30
        # ~12 schedule ticks and ~6 reaper sweeps go by while it fires three times
        while len(engine.schedules.firings(row.schedule_id)) < 3:
            assert time.monotonic() < deadline, worker.tail()
            time.sleep(0.2)
        runs = [eid for _, eid in engine.schedules.firings(row.schedule_id)]
        for eid in runs:
            assert eid is not None and engine.wait(eid, 30).status == "COMPLETED"
    finally:
        beat.stop()
        worker.stop()
        engine.close()
    worker_log = worker.log.read_text()
    beat_log = beat.log.read_text()
    # the firings ran on this worker (nothing else uses this database), so it processed
    # the ticks that started them; none of those ticks left a line
    for tick in ("noetl.fire_schedules[", "noetl.reap["):
        assert tick not in worker_log, worker_log
    assert "Sending due task" not in beat_log, beat_log
    # what the ticks did is still told, and so is every other task
    for eid in runs:
        assert f"schedule {row.schedule_id} fired for" in worker_log
        assert f"execution {eid}" in worker_log
    assert "Task noetl.execute_command[" in worker_log
