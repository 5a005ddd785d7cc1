"""A worker process's start-up leaves the collector's way (tasks.runtime.start_soon).

What a pool process holds once its engine is built lives as long as the process: every
full collection walked it again. The engine's start freezes it (`gc.freeze`); later
objects are collected as before. Run in a fresh interpreter on a real Postgres engine
database, as a pool process builds its engine.
"""

from __future__ import annotations

import json
from pathlib import Path

from tests.support.fresh_python import python_c

SCRIPT = """
import gc, json, time
from noetl_celery.tasks import runtime
before = gc.get_freeze_count()
runtime.start_soon()
deadline = time.monotonic() + 60
while gc.get_freeze_count() == before and time.monotonic() < deadline:
    time.sleep(0.05)
engine = runtime._engine
later = [[1], [2]]  # made after the start: lists are always tracked
tracked = {id(o) for o in gc.get_objects()}  # the permanent generation left out
print(json.dumps({
    "before": before,
    "after": gc.get_freeze_count(),
    "engine_built": engine is not None,
    "engine_frozen": engine is not None and id(engine) not in tracked,
    "later_tracked": gc.isenabled() and all(id(o) in tracked for o in later),
}))
"""


def test_the_engine_start_freezes_what_the_process_holds(pg_url: str, tmp_path: Path) -> None:
    done = python_c(SCRIPT, [], tmp_path, settings={"NOETL_DATABASE_URL": pg_url})
    report = json.loads(done.stdout.strip().splitlines()[-1])
    assert report["engine_built"], report
    # the start-up's objects moved to the permanent generation, the engine's among them
    assert report["after"] > report["before"], report
    assert report["engine_frozen"], report
    # the collector still runs, and what comes later is still its to collect
    assert report["later_tracked"], report
