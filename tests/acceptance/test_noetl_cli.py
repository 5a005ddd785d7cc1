"""NoETL's own CLI (`noetl` 5.3.2 from PyPI, unmodified) against `noetl-celery serve`
and real Celery workers: register, run, status, cancel, rerun, through `--server-url`
and through a context. The CLI's printed output and exit codes are what is checked.

The CLI is installed into a venv of its own per session (never into the interpreter
running the tests); when it cannot be installed the session fails with pip's output."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import psycopg
import pytest

from tests.support.noetl_compat import INVALID, failing, hello, slow_loop, unique
from tests.support.server import ServeProcess, serving

pytestmark = [pytest.mark.acceptance, pytest.mark.integration]

NOETL_CLI_VERSION = "5.3.2"
ANSI = re.compile(r"\x1b\[[0-9;]*m")
STARTED = re.compile(r'noetl status "(\d+)"')


@dataclass
class Noetl:
    """The `noetl` executable of the session's venv, run with a private HOME."""

    exe: Path
    home: Path

    def __call__(self, *args: str, timeout: float = 60) -> subprocess.CompletedProcess[str]:
        env = {k: v for k, v in os.environ.items() if not k.startswith("NOETL_")}
        env.update(HOME=str(self.home), NO_COLOR="1", RUST_BACKTRACE="0")
        proc = subprocess.run(
            [str(self.exe), *args], env=env, capture_output=True, text=True, timeout=timeout
        )
        # colours are printed even without a terminal
        proc.stdout, proc.stderr = ANSI.sub("", proc.stdout), ANSI.sub("", proc.stderr)
        return proc


@pytest.fixture(scope="session")
def noetl_exe(tmp_path_factory: pytest.TempPathFactory) -> Path:
    venv = tmp_path_factory.mktemp("noetl-cli") / "venv"
    steps = [
        [sys.executable, "-m", "venv", str(venv)],
        [str(venv / "bin" / "pip"), "install", "--quiet", f"noetl=={NOETL_CLI_VERSION}"],
    ]
    for cmd in steps:
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
        if proc.returncode != 0:
            pytest.fail(
                f"cannot install NoETL's CLI ({' '.join(cmd)}), exit {proc.returncode}:\n"
                f"{proc.stdout}\n{proc.stderr}",
                pytrace=False,
            )
    exe = venv / "bin" / "noetl"
    version = subprocess.run([str(exe), "--version"], capture_output=True, text=True)
    assert version.stdout.strip() == f"noetl {NOETL_CLI_VERSION}", version
    return exe


@pytest.fixture(scope="session")
def server(distributed: dict[str, Any]) -> Iterator[ServeProcess]:
    with serving(distributed["env"]) as served:
        yield served


@pytest.fixture
def noetl(noetl_exe: Path, tmp_path: Path) -> Noetl:
    home = tmp_path / "home"  # ~/.noetl/config.yaml stays private to the test
    home.mkdir()
    return Noetl(noetl_exe, home)


def started_id(proc: subprocess.CompletedProcess[str]) -> str:
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "Execution started:" in proc.stdout, proc.stdout
    found = STARTED.search(proc.stdout)
    assert found, proc.stdout
    return found.group(1)


def status_until(noetl: Noetl, prefix: list[str], eid: str, shown: str, timeout: float = 60) -> str:
    """`noetl status ID` until it prints `Status:    <shown>`; its output then."""
    deadline = time.monotonic() + timeout
    while True:
        proc = noetl(*prefix, "status", eid)
        assert proc.returncode == 0, proc.stdout + proc.stderr
        if f"Status:    {shown}" in proc.stdout:
            return proc.stdout
        if time.monotonic() > deadline:
            raise AssertionError(f"`noetl status {eid}` never showed {shown}: {proc.stdout}")
        time.sleep(0.3)


def stored_payload(distributed: dict[str, Any], eid: str) -> Any:
    dsn = distributed["url"].replace("postgresql+psycopg://", "postgresql://")
    with psycopg.connect(dsn) as conn:
        row = conn.execute("SELECT payload FROM executions WHERE execution_id = %s", (eid,))
        return row.fetchone()[0]  # type: ignore[index]


def test_register_run_status_rerun_with_server_url(
    noetl: Noetl, server: ServeProcess, distributed: dict[str, Any], tmp_path: Path
) -> None:
    at = ["--server-url", server.url]
    path = unique("tests/noetl_hello")
    playbook = tmp_path / "hello.yaml"
    playbook.write_text(hello(path))

    registered = noetl(*at, "catalog", "register", str(playbook))
    assert registered.returncode == 0, registered.stdout + registered.stderr
    assert "Playbook registered successfully:" in registered.stdout
    assert f'"path":"{path}"' in registered.stdout and '"version":1' in registered.stdout

    listed = noetl(*at, "catalog", "list", "Playbook", "--json")
    assert listed.returncode == 0, listed.stderr
    entries = json.loads(listed.stdout)["entries"]
    assert path in {e["path"] for e in entries}

    run = noetl(*at, "run", path, "-r", "distributed", "--set", "who=ada", "--set", "n=3")
    assert "runtime: distributed (--runtime flag)" in run.stderr
    eid = started_id(run)
    out = status_until(noetl, at, eid, "COMPLETED")
    assert f"Execution: {eid}" in out
    assert "Steps:     2 completed" in out
    assert "Completed steps:\n  - start\n  - end" in out
    assert "Error:" not in out
    # --set reached the execution: in its stored payload (typed) and in its result
    assert stored_payload(distributed, eid) == {"who": "ada", "n": 3}
    detail = httpx.get(f"{server.url}/api/executions/{eid}").json()
    assert detail["result"] == {"line": "hello ada", "who": "ada"}

    as_json = noetl(*at, "status", eid, "--json")
    body = json.loads(as_json.stdout)
    assert (body["completed"], body["failed"], body["status"]) == (True, False, "COMPLETED")

    workload = tmp_path / "input.json"
    workload.write_text(json.dumps({"who": "grace"}))
    rerun = noetl(*at, "execute", "rerun", eid, "--input", str(workload))
    assert rerun.returncode == 0, rerun.stdout + rerun.stderr
    assert "Rerun started:" in rerun.stdout
    again = STARTED.search(rerun.stdout)
    assert again and again.group(1) != eid
    status_until(noetl, at, again.group(1), "COMPLETED")
    assert stored_payload(distributed, again.group(1)) == {"who": "grace", "n": 3}


def test_failed_run_through_a_context(noetl: Noetl, server: ServeProcess, tmp_path: Path) -> None:
    added = noetl(
        "context",
        "add",
        "celery",
        "--server-url",
        server.url,
        "--runtime",
        "distributed",
        "--set-current",
    )
    assert added.returncode == 0, added.stdout + added.stderr
    assert "Context 'celery' is now the current context." in added.stdout
    config = (noetl.home / ".noetl" / "config.yaml").read_text()
    assert f"server_url: {server.url}" in config

    path = unique("tests/noetl_failing")
    playbook = tmp_path / "failing.yaml"
    playbook.write_text(failing(path))
    registered = noetl("register", "playbook", "-f", str(playbook))
    assert registered.returncode == 0, registered.stdout + registered.stderr
    assert f'"path":"{path}"' in registered.stdout

    run = noetl("run", path)  # the context says where, and that it is distributed
    assert "runtime: distributed (from context 'celery')" in run.stderr
    eid = started_id(run)
    out = status_until(noetl, [], eid, "FAILED")
    assert "Steps:     1 completed" in out
    error = next(line for line in out.splitlines() if line.startswith("Error:"))
    assert "step 'divide'" in error and "ZeroDivisionError: division by zero" in error


def test_cancel_then_cancel_again(noetl: Noetl, server: ServeProcess, tmp_path: Path) -> None:
    at = ["--server-url", server.url]
    path = unique("tests/noetl_slow")
    playbook = tmp_path / "slow.yaml"
    playbook.write_text(slow_loop(path))
    assert noetl(*at, "catalog", "register", str(playbook)).returncode == 0
    eid = started_id(noetl(*at, "run", path, "-r", "distributed"))
    running = status_until(noetl, at, eid, "RUNNING")
    assert "Current:   " in running

    cancel = noetl(*at, "cancel", eid, "--reason", "enough")
    assert cancel.returncode == 0, cancel.stdout + cancel.stderr
    assert "Status:    CANCELLED" in cancel.stdout
    assert "Cancelled: 1 execution(s)" in cancel.stdout
    assert "Reason:    enough" in cancel.stdout

    again = noetl(*at, "cancel", eid)
    assert again.returncode == 1, again.stdout + again.stderr
    assert "Failed to cancel execution: 409 Conflict" in again.stdout + again.stderr
    assert "already_completed" in again.stdout + again.stderr
    # NoETL's CLI cannot show "cancelled" from /status: it reads ended, not failed
    status_until(noetl, at, eid, "COMPLETED")


def test_unknown_playbook_and_execution(noetl: Noetl, server: ServeProcess) -> None:
    at = ["--server-url", server.url]
    run = noetl(*at, "run", "tests/nope", "-r", "distributed")
    assert run.returncode == 1, run.stdout + run.stderr
    said = run.stdout + run.stderr
    assert (
        'Failed to execute playbook: 404 Not Found - {"detail":"Playbook not found in catalog: '
        'tests/nope"}' in said
    )
    status = noetl(*at, "status", "42")
    assert "Failed to get status: 404 Not Found" in status.stdout + status.stderr


def test_session_token_opens_a_protected_server(noetl: Noetl, distributed: dict[str, Any]) -> None:
    token = "tok-7f3a-noetl-cli"
    with serving({**distributed["env"], "NOETL_API_TOKEN": token}) as protected:
        at = ["--server-url", protected.url]
        refused = noetl(*at, "catalog", "list", "Playbook")
        assert "401 Unauthorized" in refused.stdout + refused.stderr
        allowed = noetl(*at, "--session-token", token, "catalog", "list", "Playbook", "--json")
        assert allowed.returncode == 0, allowed.stdout + allowed.stderr
        assert isinstance(json.loads(allowed.stdout)["entries"], list)
        assert token not in allowed.stdout


def test_catalog_load_reports_the_invalid_file(
    noetl: Noetl, server: ServeProcess, tmp_path: Path
) -> None:
    folder = tmp_path / "pb"
    folder.mkdir()
    path = unique("tests/noetl_loaded")
    (folder / "good.yaml").write_text(hello(path))
    (folder / "bad.yaml").write_text(INVALID)
    loaded = noetl("--server-url", server.url, "catalog", "load", str(folder))
    said = loaded.stdout + loaded.stderr
    assert loaded.returncode == 1, said
    assert re.search(rf"ok\s+\S*good\.yaml -> {re.escape(path)} v1", said), said
    assert re.search(r"FAIL\s+\S*bad\.yaml: .*kind: teleport", said), said
