"""Real `noetl-celery worker` processes for integration tests."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any


class WorkerProcess:
    def __init__(
        self,
        name: str,
        env: Mapping[str, str],
        concurrency: int = 2,
        extra: list[str] | None = None,
        module: str = "noetl_celery.cli.main",
    ) -> None:
        """`module` runs the CLI (`python -m <module words>`); tests may give a wrapper
        that patches the engine first (tests/chaos/worker_wrappers.py)."""
        self.name = name
        self.env = dict(env)
        self.log = Path(tempfile.mkstemp(prefix=f"noetl-{name}-", suffix=".log")[1])
        cmd = [
            sys.executable,
            "-m",
            *module.split(),
            "worker",
            "-c",
            str(concurrency),
            "-n",
            f"{name}@%h",
            *(extra or []),
        ]
        self._start(cmd, " ready.")

    def _start(self, cmd: list[str], ready: str) -> None:
        self.cmd = cmd
        self._ready = ready
        self._offset = self.log.stat().st_size  # readiness is looked for after this
        self._fh = self.log.open("a")
        self.proc = subprocess.Popen(
            cmd, env=self.env, stdout=self._fh, stderr=subprocess.STDOUT, start_new_session=True
        )

    def wait_ready(self, timeout: float = 60.0) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"worker {self.name} exited: {self.tail()}")
            with self.log.open(errors="replace") as fh:
                fh.seek(self._offset)
                if self._ready in fh.read():
                    return
            time.sleep(0.1)
        raise RuntimeError(f"worker {self.name} not ready after {timeout}s: {self.tail()}")

    def tail(self, lines: int = 30) -> str:
        return "\n".join(self.log.read_text(errors="replace").splitlines()[-lines:])

    def kill(self, sig: int = signal.SIGKILL) -> None:
        """Signal the whole process group (a prefork parent and its children)."""
        if self.proc.poll() is None:
            os.killpg(self.proc.pid, sig)
            if sig == signal.SIGKILL:
                self.proc.wait(10)

    def terminate(self) -> None:
        """SIGTERM to the main process only, as Kubernetes stops a pod's process: the
        worker's graceful stop (tasks.shutdown)."""
        if self.proc.poll() is None:
            os.kill(self.proc.pid, signal.SIGTERM)

    def wait_exit(self, timeout: float) -> int:
        """The exit code, once the main process has exited (its pool with it)."""
        code = self.proc.wait(timeout=timeout)
        self._fh.close()
        return code

    def restart(self) -> None:
        """Start the same command again (after a kill), appending to the same log."""
        self._fh.close()
        self._start(self.cmd, self._ready)
        self.wait_ready()

    def stop(self) -> None:
        if self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGTERM)
            try:
                self.proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait(timeout=10)
        self._fh.close()


class BeatProcess(WorkerProcess):
    """`noetl-celery beat`: sends the reaper task on its schedule."""

    def __init__(self, env: Mapping[str, str], module: str = "noetl_celery.cli.main") -> None:
        self.name = "beat"
        self.env = dict(env)
        self.log = Path(tempfile.mkstemp(prefix="noetl-beat-", suffix=".log")[1])
        self._start([sys.executable, "-m", *module.split(), "beat"], "beat: Starting")


def run_cli(
    args: list[str], env: Mapping[str, str], timeout: float = 120, cwd: str | None = None
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "noetl_celery.cli.main", *args],
        env=dict(env),
        capture_output=True,
        text=True,
        timeout=timeout,
        cwd=cwd,
    )


def run_json(args: list[str], env: Mapping[str, str], timeout: float = 120) -> tuple[int, Any, str]:
    """Run the CLI; its stdout must be exactly one JSON line: (exit code, value, stderr)."""
    proc = run_cli(args, env, timeout)
    lines = proc.stdout.strip().splitlines()
    assert len(lines) == 1, f"stdout must be exactly one JSON line: {proc.stdout!r} {proc.stderr}"
    return proc.returncode, json.loads(lines[0]), proc.stderr
