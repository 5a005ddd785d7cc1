"""A Redis and a Postgres of the chaos suite's own, on free loopback ports, that a test
may flush, kill and restart without touching the machine's shared services.

Both are started from the binaries the machine already runs (`redis-server`, Postgres'
`initdb`/`pg_ctl`); a missing binary fails the run with a message, nothing is skipped.
"""

from __future__ import annotations

import contextlib
import glob
import os
import shutil
import socket
import subprocess
import tempfile
import time
from pathlib import Path

import psycopg
import pytest
import redis


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _wait(check: object, what: str, timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    last: Exception | None = None
    while time.monotonic() < deadline:
        try:
            if check():  # type: ignore[operator]
                return
        except Exception as exc:  # not up yet
            last = exc
        time.sleep(0.1)
    raise RuntimeError(f"{what} did not come up in {timeout}s: {last}")


class PrivateRedis:
    def __init__(self) -> None:
        binary = shutil.which("redis-server")
        if binary is None:
            pytest.fail("redis-server is required for the chaos suite", pytrace=False)
        self.binary = binary
        self.port = free_port()
        self.dir = Path(tempfile.mkdtemp(prefix="noetl-chaos-redis-"))
        self.proc: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def client(self) -> redis.Redis:
        return redis.Redis(host="127.0.0.1", port=self.port, socket_connect_timeout=2)

    def start(self) -> None:
        cmd = [self.binary, "--bind", "127.0.0.1", "--port", str(self.port), "--save", ""]
        cmd += ["--appendonly", "no", "--dir", str(self.dir)]
        self.proc = subprocess.Popen(
            cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True
        )
        _wait(lambda: self.client().ping(), f"redis on {self.port}")

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(10)
        self.proc = None

    def restart(self, down_seconds: float = 1.0) -> None:
        """A crash and a restart: no persistence, so every message is gone."""
        self.stop()
        time.sleep(down_seconds)
        self.start()


class PrivatePostgres:
    """A throwaway cluster owned by the `postgres` user (initdb refuses root)."""

    def __init__(self) -> None:
        bins = sorted(glob.glob("/usr/lib/postgresql/*/bin/pg_ctl"))
        if not bins:
            pytest.fail("Postgres binaries (pg_ctl, initdb) are required", pytrace=False)
        self.bin = Path(bins[-1]).parent
        self.port = free_port()
        self.dir = Path(tempfile.mkdtemp(prefix="noetl-chaos-pg-"))
        self.data = self.dir / "data"
        self._as_postgres = os.geteuid() == 0

    def _run(self, *args: str) -> None:
        cmd = [str(self.bin / args[0]), *args[1:]]
        if self._as_postgres:
            cmd = ["runuser", "-u", "postgres", "--", *cmd]
        subprocess.run(cmd, check=True, capture_output=True, timeout=120)

    def init(self, extra: tuple[str, ...] = ()) -> None:
        """`extra`: more postgresql.conf lines (a later line wins: `fsync = on`)."""
        if self._as_postgres:
            shutil.chown(self.dir, "postgres", "postgres")
        self._run("initdb", "-D", str(self.data), "-A", "trust", "-U", "postgres", "--no-sync")
        conf = "\n".join(
            [
                "listen_addresses = '127.0.0.1'",
                f"port = {self.port}",
                f"unix_socket_directories = '{self.dir}'",
                "fsync = off",
                "max_connections = 200",
                "shared_buffers = 128MB",
                *extra,
            ]
        )
        with (self.data / "postgresql.conf").open("a") as fh:
            fh.write("\n" + conf + "\n")

    def start(self) -> None:
        self._run("pg_ctl", "-D", str(self.data), "-l", str(self.dir / "log"), "-w", "start")

    def stop(self, mode: str = "fast") -> None:
        self._run("pg_ctl", "-D", str(self.data), "-m", mode, "-w", "stop")

    def restart(self, down_seconds: float = 2.0) -> None:
        """Stop with `immediate` (a crash: no clean shutdown), stay down, start again."""
        self.stop("immediate")
        time.sleep(down_seconds)
        self.start()

    def dsn(self, dbname: str = "postgres") -> str:
        return f"postgresql://postgres@127.0.0.1:{self.port}/{dbname}"

    def url(self, dbname: str) -> str:
        return f"postgresql+psycopg://postgres@127.0.0.1:{self.port}/{dbname}"

    def create_database(self, name: str, template: str | None = None) -> None:
        with psycopg.connect(self.dsn(), autocommit=True) as conn:
            conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
            suffix = f' TEMPLATE "{template}"' if template else ""
            conn.execute(f'CREATE DATABASE "{name}"{suffix}')

    def destroy(self) -> None:
        with contextlib.suppress(subprocess.CalledProcessError):
            self.stop("immediate")
        shutil.rmtree(self.dir, ignore_errors=True)
