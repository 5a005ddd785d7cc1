"""A command whose tool failed is a FAILURE to Celery-level observers too (worker.reports,
tasks.tasks.CommandFailed; a batch holding it is a FAILURE naming it), a successful one
a SUCCESS whose result says `completed`; the failed command is acked like any other (the
run ends, nothing is redelivered) and the worker logs it without a traceback."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest

from tests.integration.test_flower import (
    PLAYBOOKS,
    TaskEvents,
    flower_process,
    get,
    poll,
)
from tests.support.engines import celery_engine
from tests.support.private_services import free_port

pytestmark = pytest.mark.integration

# one command per `execute_command` message; `execute_commands` carries a batch, shown
# as `execution=... step=... commands=N first=...` (tasks.dispatcher.readable)
COMMAND_TASKS = ("noetl.execute_command", "noetl.execute_commands")
_BATCH = re.compile(r"commands=(\d+)")


def commands_in(task: dict[str, Any]) -> int:
    found = _BATCH.search(str(task["args"])) if task["name"] == COMMAND_TASKS[1] else None
    return int(found.group(1)) if found else 1


def test_failed_commands_are_failures_in_flower(
    distributed: dict[str, Any], tmp_path: Path
) -> None:
    port = free_port()
    base = f"http://127.0.0.1:{port}"
    engine = celery_engine(distributed["url"], distributed["redis_url"], tmp_path)
    events = TaskEvents(distributed["redis_url"])
    text = (PLAYBOOKS / "items_fail.yaml").read_text()
    try:
        with flower_process(distributed["env"], port, tmp_path / "flower.log"):

            def observed_run() -> str | None:
                # task events flow once Flower's broadcast reached the workers: run until
                # one run is heard
                execution_id = engine.start_text(text, {"n": 10, "bad": 7})
                assert engine.wait(execution_id, 60).status == "FAILED"
                return execution_id if events.heard(execution_id, within=2) else None

            execution_id = poll(observed_run, "a run whose task events flower receives")

            def settled() -> list[dict[str, Any]] | None:
                tasks = (get(f"{base}/api/tasks")[1] or {}).values()
                mine = [t for t in tasks if f"execution={execution_id}" in str(t["args"])]
                every = [t for t in mine if t["name"] in COMMAND_TASKS]
                done = all(t["state"] in ("SUCCESS", "FAILURE") for t in every)
                covered = sum(commands_in(t) for t in every)
                return every if every and done and covered >= 12 else None

            tasks = poll(settled, "the run's commands settled in flower", 20)
        failed = [t for t in tasks if t["state"] == "FAILURE"]
        assert len(failed) == 1, [(t["args"], t["state"]) for t in tasks]
        # the failed command is named: by the task's argument, or (a batch) its failure
        assert ":7" in failed[0]["args"] or ":7)" in failed[0]["exception"], failed[0]
        assert "CommandFailed" in failed[0]["exception"]
        assert "ZeroDivisionError" in failed[0]["exception"]
        assert f"execution {execution_id} step each" in failed[0]["exception"]
        succeeded = [t for t in tasks if t["state"] == "SUCCESS"]
        assert len(succeeded) == len(tasks) - 1
        for task in succeeded:
            assert "'status': 'completed'" in task["result"], task
        # acked: the run ended, and no delivery of the failed command is pending or redone
        assert engine.store.command_counts(execution_id).failed == 1
        logs = "".join(w.log.read_text(errors="replace") for w in distributed["workers"])
        assert "raised expected: CommandFailed" in logs
        assert "Traceback" not in logs.split("raised expected: CommandFailed", 1)[1][:400]
    finally:
        events.close()
        engine.close()
