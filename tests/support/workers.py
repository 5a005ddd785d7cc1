"""Real `noetl-celery worker` processes for integration tests."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Mapping
from pathlib import Path


class WorkerProcess:
    def __init__(
        self,
        name: str,
        env: Mapping[str, str],
        concurrency: int = 2,
        extra: list[str] | None = None,
    ) -> None:
        self.name = name
        self.log = Path(tempfile.mkstemp(prefix=f"noetl-{name}-", suffix=".log")[1])
        cmd = [
            sys.executable,
            "-m",
            "noetl_celery.cli.main",
            "worker",
            "-c",
            str(concurrency),
            "-n",
            f"{name}@%h",
            *(extra or []),
        ]
        self._fh = self.log.open("w")
        self.proc = subprocess.Popen(
            cmd, env=dict(env), stdout=self._fh, stderr=subprocess.STDOUT, start_new_session=True
        )

    def wait_ready(self, timeout: float = 60.0) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"worker {self.name} exited: {self.tail()}")
            if " ready." in self.log.read_text(errors="replace"):
                return
            time.sleep(0.1)
        raise RuntimeError(f"worker {self.name} not ready after {timeout}s: {self.tail()}")

    def tail(self, lines: int = 30) -> str:
        return "\n".join(self.log.read_text(errors="replace").splitlines()[-lines:])

    def kill(self, sig: int = signal.SIGKILL) -> None:
        if self.proc.poll() is None:
            os.killpg(self.proc.pid, sig)

    def stop(self) -> None:
        if self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGTERM)
            try:
                self.proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait(timeout=10)
        self._fh.close()


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
