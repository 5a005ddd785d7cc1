"""A real `noetl-celery serve` process for HTTP tests."""

from __future__ import annotations

import os
import sys
import time
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path

import httpx

from tests.support.private_services import free_port
from tests.support.workers import WorkerProcess

ROOT = Path(__file__).resolve().parents[2]


def embedded_env(database_url: str, home: Path) -> dict[str, str]:
    """`serve` on `database_url` with in-process workers (no broker), loopback, no auth."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("NOETL_")}
    env["PYTHONPATH"] = str(ROOT) + os.pathsep + env.get("PYTHONPATH", "")
    env.update(NOETL_DATABASE_URL=database_url, NOETL_HOME=str(home))
    return env


class ServeProcess(WorkerProcess):
    """`noetl-celery serve` on a free loopback port; `url` is its base address."""

    def __init__(
        self,
        env: Mapping[str, str],
        port: int | None = None,
        extra: list[str] | None = None,
        program: list[str] | None = None,
    ) -> None:
        """`program` is the noetl-celery command (default: this interpreter's module;
        an installed console script for the install tests)."""
        import tempfile

        self.name = "serve"
        self.env = dict(env)
        self.port = port or free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.log = Path(tempfile.mkstemp(prefix="noetl-serve-", suffix=".log")[1])
        program = program or [sys.executable, "-m", "noetl_celery.cli.main"]
        cmd = [*program, "serve", "--port", str(self.port)]
        self._start([*cmd, *(extra or [])], "noetl-celery serve on")

    def wait_ready(self, timeout: float = 60.0) -> None:
        super().wait_ready(timeout)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            try:
                if httpx.get(f"{self.url}/api/health", timeout=2).status_code == 200:
                    return
            except httpx.TransportError:
                pass
            if self.proc.poll() is not None:
                break
            time.sleep(0.1)
        raise RuntimeError(f"serve not answering after {timeout}s: {self.tail()}")


@contextmanager
def serving(env: Mapping[str, str], **kwargs: object) -> Iterator[ServeProcess]:
    server = ServeProcess(env, **kwargs)  # type: ignore[arg-type]
    try:
        server.wait_ready()
        yield server
    finally:
        server.stop()
