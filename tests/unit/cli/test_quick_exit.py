"""A short command's process ends without the interpreter's teardown (cli.quick_exit),
and loses nothing by it: its output, its exit status, its `atexit` handlers."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from noetl_celery.cli.quick_exit import exit_status
from tests.support.fresh_python import ROOT, python_c

HELLO = ROOT / "playbooks" / "examples" / "hello_world.yaml"


@pytest.mark.parametrize(
    ("code", "status", "printed"),
    [
        (None, 0, ""),
        (0, 0, ""),
        (2, 2, ""),
        (130, 130, ""),
        ("Error: no such file", 1, "Error: no such file\n"),
    ],
)
def test_the_status_is_the_one_sys_exit_gives(
    code: str | int | None, status: int, printed: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert exit_status(code) == status
    assert capsys.readouterr().err == printed


# the console script's entry point, with an atexit handler that writes a marker file,
# and os._exit wrapped to say it was the way out (the quick exit's last call)
SCRIPT = """
import atexit, os, sys, threading, time
from pathlib import Path
from noetl_celery.cli.main import entry
marker, args = Path(sys.argv[1]), sys.argv[2:]
atexit.register(lambda: marker.write_text("atexit ran"))
real_exit = os._exit
def noted_exit(status):
    os.write(2, b"quick exit\\n")
    real_exit(status)
os._exit = noted_exit
if args[0] == "--with-thread":  # a thread the interpreter must wait for
    args = args[1:]
    def late():
        time.sleep(0.3)
        (marker.parent / "thread").write_text("done")
    threading.Thread(target=late).start()
sys.argv = ["noetl-celery", *args]
entry()
"""


def run_entry(tmp_path: Path, *args: str) -> tuple[subprocess.CompletedProcess[str], Path]:
    marker = tmp_path / "marker"
    done = python_c(SCRIPT, [str(marker), *args], tmp_path, must_succeed=False)
    return done, marker


def test_a_run_ends_without_teardown_its_output_status_and_atexit_kept(tmp_path: Path) -> None:
    done, marker = run_entry(tmp_path, "run", str(HELLO), "--json")
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["status"] == "COMPLETED"
    assert marker.read_text() == "atexit ran"
    assert "quick exit" in done.stderr  # finalization was skipped


def test_a_failed_run_keeps_its_exit_status(tmp_path: Path) -> None:
    done, marker = run_entry(tmp_path, "run", str(tmp_path / "missing.yaml"), "--json")
    assert done.returncode == 2
    assert json.loads(done.stdout)["status"] == "FAILED"
    assert marker.read_text() == "atexit ran"
    assert "quick exit" in done.stderr


def test_a_thread_still_running_is_waited_for_as_the_interpreter_would(tmp_path: Path) -> None:
    done, marker = run_entry(tmp_path, "--with-thread", "run", str(HELLO), "--json")
    assert done.returncode == 0, done.stderr
    assert (tmp_path / "thread").read_text() == "done"  # waited for, not cut off
    assert marker.read_text() == "atexit ran"
    assert "quick exit" in done.stderr


def test_no_command_looked_up_gets_the_ordinary_exit(tmp_path: Path) -> None:
    done, marker = run_entry(tmp_path, "--version")
    assert done.returncode == 0
    assert done.stdout.startswith("noetl-celery ")
    assert marker.read_text() == "atexit ran"
    assert "quick exit" not in done.stderr
