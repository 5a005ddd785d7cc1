"""Following executions: `watch` from another process, progress lines off a terminal,
Ctrl-C on `run`, and embedded executions whose process died."""

from __future__ import annotations

import json
import os
import re
import signal
from pathlib import Path
from typing import Any

import pytest

from tests.support.terminal import Spawned
from tests.support.workers import run_cli

pytestmark = pytest.mark.acceptance

ROOT = Path(__file__).resolve().parents[2]
HELLO = ROOT / "playbooks" / "examples" / "hello_world.yaml"


def slow_loop(
    tmp_path: Path, n: int, seconds: float, window: int = 2, name: str = "follow_slow"
) -> Path:
    path = tmp_path / f"{name}_{n}.yaml"
    path.write_text(f"""apiVersion: noetl.io/v2
kind: Playbook
metadata: {{name: slow, path: tests/{name}}}
workload: {{n: {n}}}
workflow:
  - step: crawl
    loop: {{in: "{{{{ range(n) | list }}}}", iterator: i,
            spec: {{mode: parallel, max_in_flight: {window}}}}}
    tool: {{kind: python, code: "import time\\ntime.sleep({seconds})\\nresult = {{}}"}}
""")
    return path


def started_id(proc: Spawned) -> str:
    return proc.expect(r"execution (\d+) started").group(1)


def status_of(execution_id: str, env: dict[str, str]) -> dict[str, Any]:
    proc = run_cli(["status", execution_id, "--json"], env)
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout)


def nothing_left_running(view: dict[str, Any]) -> None:
    counts = view["commands"]
    assert counts["issued"] == counts["running"] == counts["planned"] == 0, counts
    assert counts["waiting"] == 0, counts


# ---- watch ----------------------------------------------------------------------------


@pytest.mark.integration
def test_watch_attaches_from_another_process_on_workers(
    distributed: dict[str, Any], tmp_path: Path
) -> None:
    env = distributed["env"]
    runner = Spawned(["run", str(slow_loop(tmp_path, 24, 0.4))], env, tty=False)
    try:
        eid = started_id(runner)
        live = Spawned(["watch", eid], env, tty=True)
        lines = Spawned(["watch", eid], {**env, "NOETL_PROGRESS_SECONDS": "1"}, tty=False)
        live.expect(r"RUNNING .*running: crawl")
        live.expect(r"crawl .* parallel .* \d+/24")  # the loop's row, with its bar
        assert live.wait() == 0 and lines.wait() == 0 and runner.wait() == 0
    finally:
        runner.kill()
    assert re.search(rf"execution {eid}: COMPLETED in", live.stdout), live.stdout
    assert re.search(rf"execution {eid}: COMPLETED in", lines.stdout), lines.stdout
    # off a terminal: plain progress lines with a rate and an ETA, nothing on stdout
    progress = re.findall(
        r"^RUNNING \d+\.\ds  crawl: (\d+)/24 \(\d+\.\d%\) \d+\.\d/s ETA \S+$",
        lines.stderr,
        re.MULTILINE,
    )
    assert progress, lines.stderr
    assert [int(d) for d in progress] == sorted(int(d) for d in progress)
    assert "RUNNING" not in lines.stdout and "crawl:" not in live.stdout
    # attaching to an ended execution returns at once; --json is one object
    done = run_cli(["watch", eid, "--json"], env)
    assert done.returncode == 0
    summary = json.loads(done.stdout)
    assert summary["status"] == "COMPLETED" and summary["execution_id"] == eid
    assert summary["result"]["stats"] == {"total": 24, "success": 24, "failed": 0}


@pytest.mark.integration
def test_watch_exit_codes(distributed: dict[str, Any], tmp_path: Path) -> None:
    env = distributed["env"]
    failing = tmp_path / "fail.yaml"
    failing.write_text(
        "apiVersion: noetl.io/v2\nkind: Playbook\nmetadata: {name: f, path: tests/watch_f}\n"
        "workflow:\n  - step: a\n    tool: {kind: python, code: \"assert False, 'no'\"}\n"
    )
    failed = json.loads(run_cli(["run", str(failing), "--json"], env).stdout)
    proc = run_cli(["watch", failed["execution_id"]], env)
    assert proc.returncode == 1 and "FAILED" in proc.stdout
    unknown = run_cli(["watch", "12345"], env)
    assert unknown.returncode == 2
    assert unknown.stderr.strip() == "Error: no execution with id 12345"
    bad = run_cli(["watch", failed["execution_id"], "--timeout", "-1"], env)
    assert bad.returncode == 2 and "--timeout" in bad.stderr and "Traceback" not in bad.stderr
    # still running after --timeout: exit 3, the summary says RUNNING
    runner = Spawned(["run", str(slow_loop(tmp_path, 12, 0.5, window=1))], env, tty=False)
    try:
        eid = started_id(runner)
        timed = run_cli(["watch", eid, "--timeout", "1", "--json"], env)
        assert timed.returncode == 3, timed.stderr
        assert json.loads(timed.stdout)["status"] == "RUNNING"
        assert f"execution {eid} still running after 1.0s" in timed.stderr
        assert runner.wait() == 0
    finally:
        runner.kill()


def test_run_prints_progress_lines_off_a_terminal(
    embedded_env: dict[str, str], tmp_path: Path
) -> None:
    env = {**embedded_env, "NOETL_PROGRESS_SECONDS": "1"}
    proc = run_cli(["run", str(slow_loop(tmp_path, 30, 0.2)), "--json"], env)
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout)["status"] == "COMPLETED"  # stdout: one object
    lines = re.findall(r"^RUNNING .*$", proc.stderr, re.MULTILINE)
    loop = r"RUNNING \d+\.\ds  crawl: \d+/30 \(\d+\.\d%\) \d+\.\d/s ETA \S+"
    # a sample taken after the loop's last item and before the step's end names the step,
    # or, once the last item's close has counted it and before the pass that ends the
    # execution, names nothing running (seen once in a full run on a loaded machine)
    ending = r"RUNNING \d+\.\ds  running: (crawl|-)"
    assert len([line for line in lines if re.fullmatch(loop, line)]) >= 2, proc.stderr
    assert all(re.fullmatch(f"{loop}|{ending}", line) for line in lines), lines
    quiet = run_cli(
        ["run", str(slow_loop(tmp_path, 10, 0.2))], {**env, "NOETL_PROGRESS_SECONDS": "0"}
    )
    assert quiet.returncode == 0 and "RUNNING" not in quiet.stderr
    bad = run_cli(["run", str(HELLO)], {**env, "NOETL_PROGRESS_SECONDS": "soon"})
    assert bad.returncode != 0 and "NOETL_PROGRESS_SECONDS must be a number" in bad.stderr
    assert "Traceback" not in bad.stderr


# ---- Ctrl-C -------------------------------------------------------------------------------


def test_ctrl_c_on_a_terminal_asks_and_yes_cancels(
    embedded_env: dict[str, str], tmp_path: Path
) -> None:
    proc = Spawned(["run", str(slow_loop(tmp_path, 60, 0.3))], embedded_env, tty=True)
    try:
        eid = started_id(proc)
        proc.expect(r"running: crawl")
        proc.interrupt()
        proc.expect(rf"Cancel execution {eid}\? \[y/N\]")
        proc.send("y\n")
        assert proc.wait() == 1
    finally:
        proc.kill()
    assert f"execution {eid}: CANCELLED" in proc.stdout
    view = status_of(eid, embedded_env)
    assert view["status"] == "CANCELLED"
    assert view["error"] == "cancelled by Ctrl-C on `noetl-celery run`"
    nothing_left_running(view)


def test_ctrl_c_answered_no_detaches_and_the_next_embedded_run_ends_it(
    embedded_env: dict[str, str], tmp_path: Path
) -> None:
    proc = Spawned(["run", str(slow_loop(tmp_path, 60, 0.3))], embedded_env, tty=True)
    try:
        eid = started_id(proc)
        proc.expect(r"running: crawl")
        proc.interrupt()
        proc.expect(r"\[y/N\]")
        proc.send("n\n")
        assert proc.wait() == 3
    finally:
        proc.kill()
    assert f"re-attach with `noetl-celery watch {eid}`" in proc.stderr
    assert "embedded mode" in proc.stderr and "cannot progress" in proc.stderr
    assert f"execution {eid}: RUNNING" in proc.stdout
    assert status_of(eid, embedded_env)["status"] == "RUNNING"
    # its workers were that process's threads: the next embedded start ends it
    assert run_cli(["run", str(HELLO)], embedded_env).returncode == 0
    view = status_of(eid, embedded_env)
    assert view["status"] == "FAILED" and "is gone" in view["error"]
    nothing_left_running(view)


def test_cancel_on_interrupt_without_a_terminal(
    embedded_env: dict[str, str], tmp_path: Path
) -> None:
    proc = Spawned(
        ["run", str(slow_loop(tmp_path, 60, 0.3)), "--cancel-on-interrupt"],
        embedded_env,
        tty=False,
    )
    try:
        eid = started_id(proc)
        proc.interrupt()
        assert proc.wait() == 1
    finally:
        proc.kill()
    assert f"execution {eid}: CANCELLED" in proc.stdout
    assert "Cancel execution" not in proc.stderr  # nobody was asked
    view = status_of(eid, embedded_env)
    assert view["status"] == "CANCELLED"
    nothing_left_running(view)


@pytest.mark.integration
def test_ctrl_c_without_a_terminal_detaches_and_the_run_goes_on(
    distributed: dict[str, Any], tmp_path: Path
) -> None:
    env = distributed["env"]
    playbook = slow_loop(tmp_path, 40, 0.3, name="follow_detach")
    proc = Spawned(["run", str(playbook), "--json"], env, tty=False)
    try:
        # --json prints no "started" line: find the run by its playbook
        eid = _newest_running(env, "tests/follow_detach")
        proc.interrupt()
        assert proc.wait() == 3
    finally:
        proc.kill()
    summary = json.loads(proc.stdout)  # --json: still exactly one object
    assert summary["execution_id"] == eid and summary["status"] == "RUNNING"
    assert f"re-attach with `noetl-celery watch {eid}`" in proc.stderr
    assert "embedded" not in proc.stderr  # workers run it: it goes on
    watched = run_cli(["watch", eid], env)
    assert watched.returncode == 0 and "COMPLETED" in watched.stdout


def test_watch_ctrl_c_only_detaches(embedded_env: dict[str, str], tmp_path: Path) -> None:
    runner = Spawned(["run", str(slow_loop(tmp_path, 30, 0.2))], embedded_env, tty=False)
    try:
        eid = started_id(runner)
        watcher = Spawned(["watch", eid], embedded_env, tty=True)
        watcher.expect(r"running: crawl")
        watcher.interrupt()
        assert watcher.wait() == 3
        assert "Cancel execution" not in watcher.stderr
        assert f"re-attach with `noetl-celery watch {eid}`" in watcher.stderr
        assert "embedded mode" not in watcher.stderr  # its workers are not the watcher's
        assert runner.wait() == 0  # the run went on
    finally:
        runner.kill()


def _newest_running(env: dict[str, str], path: str) -> str:
    import time

    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        proc = run_cli(["executions", "--playbook", path, "--status", "RUNNING", "--json"], env)
        rows = json.loads(proc.stdout) if proc.returncode == 0 else []
        if rows:
            return str(rows[0]["execution_id"])
        time.sleep(0.2)
    raise AssertionError(f"no RUNNING execution of {path}")


# ---- embedded executions whose process died ------------------------------------------------


def test_an_embedded_run_killed_is_failed_by_the_next_embedded_start(
    embedded_env: dict[str, str], tmp_path: Path
) -> None:
    child = tmp_path / "child.yaml"
    child.write_text("""apiVersion: noetl.io/v2
kind: Playbook
metadata: {name: sleeper, path: tests/sleeper}
workflow:
  - step: nap
    tool: {kind: python, code: "import time\\ntime.sleep(60)\\nresult = {}"}
""")
    parent = tmp_path / "parent.yaml"
    parent.write_text("""apiVersion: noetl.io/v2
kind: Playbook
metadata: {name: caller, path: tests/caller}
workflow:
  - step: call
    tool: {kind: playbook, path: tests/sleeper, return_step: nap}
""")
    assert run_cli(["catalog", "register", str(child)], embedded_env).returncode == 0
    proc = Spawned(["run", str(parent)], embedded_env, tty=False)
    try:
        eid = started_id(proc)
        child_id = _newest_running(embedded_env, "tests/sleeper")
        os.kill(proc.proc.pid, signal.SIGKILL)
        proc.wait()
    finally:
        proc.kill()
    assert status_of(eid, embedded_env)["status"] == "RUNNING"  # nobody ended it
    # any embedded start ends it: FAILED, naming the process; its child CANCELLED
    first = run_cli(["run", str(HELLO)], embedded_env)
    assert first.returncode == 0 and f"execution {eid} FAILED: the process" in first.stderr
    view = status_of(eid, embedded_env)
    assert view["status"] == "FAILED"
    assert f":{proc.proc.pid}:" in view["error"] and "is gone" in view["error"]
    nothing_left_running(view)
    child_view = status_of(child_id, embedded_env)
    assert child_view["status"] == "CANCELLED"
    assert child_view["error"] == f"parent execution {eid} ended"
    nothing_left_running(child_view)
    # the engine's line about it is kept with the execution's logs
    logs = run_cli(["logs", eid], embedded_env)
    assert logs.returncode == 0 and "=== (execution)  engine" in logs.stdout
    assert f"execution {eid} FAILED: the process that ran this embedded execution" in logs.stdout
    # a second start finds nothing more to end
    again = run_cli(["run", str(HELLO)], embedded_env)
    assert again.returncode == 0 and eid not in again.stderr
