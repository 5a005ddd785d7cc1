"""Real workers and a beat at the default log level: beat's every-second ticks leave no
line per tick, while what a tick does (a schedule firing) and ordinary tasks still show."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import pytest

from tests.support.engines import celery_engine
from tests.support.workers import BeatProcess

pytestmark = pytest.mark.integration

PLAYBOOK = """apiVersion: noetl.io/v2
kind: Playbook
metadata: {name: quiet_tick, path: tests/quiet_tick}
workflow:
  - step: only
    tool: {kind: python, code: "result = {'ran': True}"}
"""


def test_ticks_leave_no_lines_at_the_default_level(
    distributed: dict[str, Any], tmp_path: Path
) -> None:
    workers = distributed["workers"]  # started with the default `-l INFO`
    offsets = [w.log.stat().st_size for w in workers]
    env = {
        **distributed["env"],
        "NOETL_SCHEDULE_TICK_SECONDS": "0.5",
        "NOETL_REAPER_INTERVAL_SECONDS": "1",
    }
    engine = celery_engine(distributed["url"], distributed["redis_url"], tmp_path)
    engine.register_text(PLAYBOOK)
    row = engine.schedules.add("tests/quiet_tick", "* * * * * */2")  # every 2 seconds
    beat = BeatProcess(env)
    try:
        beat.wait_ready()
        deadline = time.monotonic() + 30
        # ~12 schedule ticks and ~6 reaper sweeps go by while it fires three times
        while len(engine.schedules.firings(row.schedule_id)) < 3:
            assert time.monotonic() < deadline, beat.tail()
            time.sleep(0.2)
        engine.schedules.remove(row.schedule_id)
        runs = [eid for _, eid in engine.schedules.firings(row.schedule_id)]
        for eid in runs:
            assert eid is not None and engine.wait(eid, 30).status == "COMPLETED"
    finally:
        beat.stop()
        engine.close()
    logs = []
    for worker, offset in zip(workers, offsets, strict=True):
        with worker.log.open(errors="replace") as fh:
            fh.seek(offset)
            logs.append(fh.read())
    worker_log = "\n".join(logs)
    # the workers processed the ticks that started the firings; none left a line
    for tick in ("noetl.fire_schedules[", "noetl.reap["):
        assert tick not in worker_log, worker_log
    assert "Sending due task" not in beat.log.read_text(), beat.tail()
    # what the ticks did is still told, and so is every other task
    for eid in runs:
        assert f"schedule {row.schedule_id} fired for" in worker_log
        assert f"execution {eid}" in worker_log
    assert "Task noetl.execute_command[" in worker_log
