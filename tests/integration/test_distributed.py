"""The engine on Postgres + Redis + two real `noetl-celery worker` processes."""

from __future__ import annotations

import re
import time
from pathlib import Path
from typing import Any

import psycopg
import pytest

from noetl_celery.engine.service import Engine
from tests.support.engines import celery_engine
from tests.support.http_server import http_api

PLAYBOOKS = Path(__file__).resolve().parents[1] / "playbooks"
pytestmark = pytest.mark.integration


@pytest.fixture
def engine(engine_on_workers: Engine) -> Engine:
    return engine_on_workers


def nothing_left_running(engine: Engine, execution_id: str) -> None:
    counts = engine.store.command_counts(execution_id)
    assert counts.issued == 0 and counts.running == 0 and counts.planned == 0, counts


def test_chain_and_loop(engine: Engine) -> None:
    eid = engine.start_text(
        (Path(__file__).parents[2] / "playbooks/examples/hello_world.yaml").read_text()
    )
    row = engine.wait(eid, 60)
    assert row.status == "COMPLETED", row.error
    summary = engine.summary(eid)
    assert summary["result"]["lines"] == [
        "Hello World, Ada!",
        "Hello World, Grace!",
        "Hello World, Edsger!",
    ]
    assert summary["steps"]["greet_each"]["stats"] == {"total": 3, "success": 3, "failed": 0}
    nothing_left_running(engine, eid)


def test_each_iteration_runs_exactly_once(engine: Engine, data_db: str) -> None:
    eid = engine.start_text((PLAYBOOKS / "side_effect_loop.yaml").read_text(), {"n": 300})
    row = engine.wait(eid, 120)
    assert row.status == "COMPLETED", row.error
    assert engine.summary(eid)["result"]["rows"] == [{"runs": 300, "items": 300}]
    events = engine.events(eid)
    terminals = [e for e in events if e["type"] in ("command.completed", "command.failed")]
    assert len(terminals) == 300 + 3  # one per iteration + start, make, count
    assert [e["type"] for e in events].count("loop.done") == 1
    nothing_left_running(engine, eid)


def test_duplicate_delivery_changes_nothing(
    distributed: dict[str, Any], credentials_file: Path, tmp_path: Path, data_db: str
) -> None:
    engine = celery_engine(
        distributed["url"], distributed["redis_url"], tmp_path, credentials_file, duplicate=True
    )
    try:
        eid = engine.start_text(
            (PLAYBOOKS / "side_effect_loop.yaml").read_text(), {"n": 120, "window": 10}
        )
        row = engine.wait(eid, 120)
        assert row.status == "COMPLETED", row.error
        assert engine.summary(eid)["result"]["rows"] == [{"runs": 120, "items": 120}]
        stats = engine.summary(eid)["steps"]["each"]["stats"]
        assert stats == {"total": 120, "success": 120, "failed": 0}
    finally:
        engine.close()
    with psycopg.connect(data_db) as conn:
        runs = conn.execute(
            "SELECT count(*) FROM public.it_runs WHERE execution_id = %s", (eid,)
        ).fetchone()
    assert runs == (120,)


@pytest.mark.parametrize(
    ("case", "fragment"),
    [
        ("python", "ValueError: the python step broke on purpose"),
        ("sql", 'relation "public.no_such_table_for_tests" does not exist'),
        ("http", "HTTP 500"),
        ("template", "not_defined_anywhere"),
    ],
)
def test_runtime_failures_end_failed_with_a_clear_message(
    engine: Engine, case: str, fragment: str
) -> None:
    with http_api() as api:
        eid = engine.start_text(
            (PLAYBOOKS / "negative_runtime.yaml").read_text(), {"case": case, "api": api}
        )
        row = engine.wait(eid, 60)
    assert row.status == "FAILED"
    summary = engine.summary(eid)
    assert fragment in str(summary["error"]), summary["error"]
    assert "step '" in str(summary["error"])  # names the step
    nothing_left_running(engine, eid)


def test_worker_log_lines_name_execution_step_and_command(
    engine: Engine, distributed: dict[str, Any]
) -> None:
    """`noetl-celery worker` keeps the CLI's root logger (worker_hijack_root_logger off):
    a line a worker logs while it runs a command ends with what it is about."""
    eid = engine.start_text(
        (Path(__file__).parents[2] / "playbooks/examples/hello_world.yaml").read_text()
    )
    assert engine.wait(eid, 60).status == "COMPLETED"
    pattern = re.compile(
        rf"INFO noetl_celery\.orchestrate: execution {eid} COMPLETED "
        rf"\[execution_id={eid} step=(\w+) command_id={eid}:\1:\S+\]$"
    )
    deadline = time.monotonic() + 10  # the worker may flush its line after our commit
    while time.monotonic() < deadline:
        lines = [
            line
            for worker in distributed["workers"]
            for line in worker.log.read_text(errors="replace").splitlines()
            if f"execution {eid} COMPLETED" in line
        ]
        if lines:
            break
        time.sleep(0.1)
    assert len(lines) == 1 and pattern.search(lines[0]), lines


def fan_in_playbook(branches: int) -> str:
    """`start` forks `branches` branches that each sleep until the same instant (so
    their completions race into the orchestrator together), then join."""
    names = [f"b{i}" for i in range(branches)]
    fork = "".join(f"        - step: {n}\n" for n in names)
    steps = "".join(
        f"""  - step: {n}
    tool:
      kind: python
      input: {{at: "{{{{ at }}}}"}}
      code: |
        import time
        time.sleep(max(0.0, float(at) - time.time()))
        result = {{"branch": "{n}"}}
    next:
      arcs:
        - step: join
"""
        for n in names
    )
    seen = ", ".join(f"{n}: '{{{{ {n}.branch }}}}'" for n in names)
    return f"""apiVersion: noetl.io/v2
kind: Playbook
metadata: {{name: fan_in_{branches}, path: tests/fan_in_{branches}}}
workload: {{at: 0}}
workflow:
  - step: start
    tool: {{kind: noop}}
    next:
      spec: {{mode: inclusive}}
      arcs:
{fork}{steps}  - step: join
    tool:
      kind: python
      input: {{seen: {{{seen}}}}}
      code: |
        result = seen
"""


@pytest.mark.parametrize("branches", [2, 3])
def test_fan_in_issues_the_joined_step_once(
    engine: Engine, distributed: dict[str, Any], branches: int
) -> None:
    """Branches completing at the same instant on two workers: their wake-ups race, the
    passes are serialized per execution, and the joined step has exactly one command
    (the barrier holds arrivals in the snapshot; the command id is deterministic)."""
    eid = engine.start_text(fan_in_playbook(branches), {"at": time.time() + 2.0})
    row = engine.wait(eid, 60)
    assert row.status == "COMPLETED", row.error
    assert engine.summary(eid)["result"] == {f"b{i}": f"b{i}" for i in range(branches)}
    dsn = distributed["url"].replace("postgresql+psycopg://", "postgresql://")
    with psycopg.connect(dsn) as conn:
        rows = conn.execute(
            "SELECT step, count(*) FROM commands WHERE execution_id = %s GROUP BY step",
            (eid,),
        ).fetchall()
    counts: dict[str, int] = {str(step): int(n) for step, n in rows}
    assert counts.pop("join") == 1
    assert counts == {"start": 1, **{f"b{i}": 1 for i in range(branches)}}
    nothing_left_running(engine, eid)
