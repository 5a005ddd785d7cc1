"""A pytest plugin that records every orchestration pass of a test run (for the replay
suite, tests/fixtures/passes): `NOETL_RECORD_PASSES=<dir> pytest -p
tests.support.record_passes ...`. Test engines build their settings explicitly and test
workers start with the NOETL_ variables stripped, so both are given the directory
here; without the variable the plugin changes nothing."""

from __future__ import annotations

import dataclasses
import os
from typing import Any

from noetl_celery.engine.service import Engine
from tests.support.workers import WorkerProcess

DIRECTORY = os.environ.get("NOETL_RECORD_PASSES", "").strip()

if DIRECTORY:
    _engine_init = Engine.__init__
    _worker_start = WorkerProcess._start

    def _recording_engine(self: Engine, settings: Any, **kwargs: Any) -> None:
        _engine_init(self, dataclasses.replace(settings, record_passes=DIRECTORY), **kwargs)

    def _recording_worker(self: WorkerProcess, cmd: list[str], ready: str) -> None:
        self.env["NOETL_RECORD_PASSES"] = DIRECTORY
        _worker_start(self, cmd, ready)

    Engine.__init__ = _recording_engine  # type: ignore[method-assign]
    WorkerProcess._start = _recording_worker  # type: ignore[method-assign]
