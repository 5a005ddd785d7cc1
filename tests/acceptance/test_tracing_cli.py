"""Tracing from the CLI (noetl_celery.tracing): an embedded `run` (SQLite, in-process
workers) exporting to an OTLP receiver and to the console, and a bad `OTEL_*` value
refused at start with one line."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from noetl_celery import tracing
from tests.support.otlp_receiver import otlp_receiver
from tests.support.workers import run_cli

pytestmark = pytest.mark.acceptance

PLAYBOOK = """apiVersion: noetl.io/v2
kind: Playbook
metadata: {name: traced_cli, path: tests/traced_cli}
workflow:
  - step: start
    tool: {kind: python, code: "result = {'n': 1}"}
    next: {arcs: [{step: end}]}
  - step: end
    tool: {kind: noop}
"""


def test_an_embedded_run_exports_one_trace(embedded_env: dict[str, str], tmp_path: Path) -> None:
    playbook = tmp_path / "traced.yaml"
    playbook.write_text(PLAYBOOK)
    with otlp_receiver() as receiver:
        env = {**embedded_env, "OTEL_EXPORTER_OTLP_ENDPOINT": receiver.url}
        proc = run_cli(["run", str(playbook), "--json"], env)
        assert proc.returncode == 0, proc.stderr
        eid = json.loads(proc.stdout)["execution_id"]
        # the process flushed its spans before it exited: no waiting here
        spans = receiver.snapshot()
    assert {s.trace_id for s in spans} == {tracing.trace_id_of(eid)}
    assert sorted(s.name for s in spans) == [
        "command end",
        "command start",
        "execution tests/traced_cli",
        "step end",
        "step start",
        "tool noop",
        "tool python",
    ]
    status = json.loads(run_cli(["status", eid, "--json"], embedded_env).stdout)
    assert status["trace_id"] == tracing.trace_id_of(eid)


def test_console_spans_go_to_stderr_not_into_json(
    embedded_env: dict[str, str], tmp_path: Path
) -> None:
    playbook = tmp_path / "traced.yaml"
    playbook.write_text(PLAYBOOK)
    env = {**embedded_env, "OTEL_TRACES_EXPORTER": "console"}
    proc = run_cli(["run", str(playbook), "--json"], env)
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout)["status"] == "COMPLETED"
    assert proc.stderr.count('"name": "command ') == 2


@pytest.mark.parametrize(
    ("env", "says"),
    [
        ({"OTEL_TRACES_EXPORTER": "zipkin"}, "OTEL_TRACES_EXPORTER='zipkin' is not supported"),
        (
            {"OTEL_EXPORTER_OTLP_ENDPOINT": "http://x:4317", "OTEL_EXPORTER_OTLP_PROTOCOL": "grpc"},
            "OTLP protocol 'grpc' is not supported",
        ),
    ],
)
def test_a_bad_otel_setting_stops_the_run_with_one_line(
    embedded_env: dict[str, str], tmp_path: Path, env: dict[str, str], says: str
) -> None:
    playbook = tmp_path / "traced.yaml"
    playbook.write_text(PLAYBOOK)
    proc = run_cli(["run", str(playbook)], {**embedded_env, **env})
    assert proc.returncode == 2, proc.stderr
    assert says in proc.stderr and "Traceback" not in proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1, proc.stderr


def test_a_worker_with_a_bad_otel_setting_does_not_start(distributed: dict[str, Any]) -> None:
    """The pool's processes build their engines later: the worker command itself checks
    the OTEL_* variables and stops in one line before Celery starts."""
    env = {**distributed["env"], "OTEL_TRACES_EXPORTER": "zipkin"}
    proc = run_cli(["worker", "-c", "1"], env, timeout=60)
    assert proc.returncode == 2, proc.stderr
    assert "OTEL_TRACES_EXPORTER='zipkin' is not supported" in proc.stderr
    assert "Traceback" not in proc.stderr
