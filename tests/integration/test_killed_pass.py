"""An orchestration pass killed between its writes and its commit changes nothing: the
transaction is rolled back, the next pass redoes the work, counts stay exact."""

from __future__ import annotations

import os
import select
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import psycopg
import pytest

from tests.support.engines import celery_engine

PLAYBOOKS = Path(__file__).resolve().parents[1] / "playbooks"
pytestmark = pytest.mark.integration

# iterations: enough that the loop still runs when the killer (a new process: imports, an
# engine) has taken the lock; batched workers finish 400 before it does, now and then
N = 4000


def _first_line(proc: subprocess.Popen[str], timeout: float) -> str:
    """The process's first line of output, or a failure naming the wait (a killer that
    hangs must fail this test, not hold the suite until pytest's timeout)."""
    assert proc.stdout is not None
    ready, _, _ = select.select([proc.stdout], [], [], timeout)
    assert ready, f"the pass killer printed nothing in {timeout:g}s"
    return proc.stdout.readline()


def test_pass_killed_before_commit(
    distributed: dict[str, Any], credentials_file: Path, tmp_path: Path, data_db: str
) -> None:
    engine = celery_engine(distributed["url"], distributed["redis_url"], tmp_path, credentials_file)
    # a window wider than two batches: workers then close fewer than half of it at once,
    # leave their completions for a later pass (orchestrator.batching), and the killer
    # below finds some to fold
    try:
        eid = engine.start_text(
            (PLAYBOOKS / "side_effect_loop.yaml").read_text(), {"n": N, "window": 120}
        )
        killer = subprocess.Popen(
            [sys.executable, "-m", "tests.support.kill_in_pass", eid, distributed["url"]],
            stdout=subprocess.PIPE,
            text=True,
            env=distributed["env"],
            start_new_session=True,
        )
        try:
            line = _first_line(killer, timeout=120)
            assert line.startswith("APPLIED"), line
            assert int(line.split()[1]) > 0  # the killed pass had issued new commands
        finally:
            os.killpg(killer.pid, signal.SIGKILL)
            killer.wait(10)
            if killer.stdout is not None:
                killer.stdout.close()  # left open it is a ResourceWarning (an error in tests)
        time.sleep(0.5)
        # the killed pass left no trace: the marker written in its transaction is absent
        assert "test.killed_pass_marker" not in {e["type"] for e in engine.events(eid)}
        engine.orchestrator.dispatcher.wake(eid)  # what the reconcile sweep does
        row = engine.wait(eid, 300)
        assert row.status == "COMPLETED", row.error
        summary = engine.summary(eid)
        assert summary["result"]["rows"] == [{"runs": N, "items": N}]
        assert summary["steps"]["each"]["stats"] == {"total": N, "success": N, "failed": 0}
        assert [e["type"] for e in engine.events(eid)].count("loop.done") == 1
        assert not engine.store.has_unhandled(eid)
    finally:
        engine.close()
    with psycopg.connect(data_db) as conn:
        runs = conn.execute(
            "SELECT count(*), count(DISTINCT i) FROM public.it_runs WHERE execution_id = %s", (eid,)
        ).fetchone()
    assert runs == (N, N)
