"""A CLI process to talk to while it runs: stdin and stderr on a pseudo-terminal (or on
pipes), stdout on a pipe, everything read as it comes on background threads."""

from __future__ import annotations

import fcntl
import os
import pty
import re
import signal
import struct
import subprocess
import sys
import termios
import threading
import time
from collections.abc import Mapping
from typing import IO

_ANSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]|\x1b[()][0-9A-B]|\r")


class Spawned:
    def __init__(self, args: list[str], env: Mapping[str, str], *, tty: bool) -> None:
        self.tty = tty
        self._err = bytearray()
        self._out = bytearray()
        self._lock = threading.Lock()
        self._master_open = tty
        self.stdout_lines: list[tuple[float, str]] = []  # (monotonic time, line)
        cmd = [sys.executable, "-m", "noetl_celery.cli.main", *args]
        full_env = {**env, "TERM": "xterm-256color", "COLUMNS": "120"}
        if tty:
            self._master, slave = pty.openpty()
            fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", 40, 120, 0, 0))
            self.proc = subprocess.Popen(
                cmd, env=full_env, stdin=slave, stdout=subprocess.PIPE, stderr=slave
            )
            os.close(slave)
            self._start(self._read_pty)
        else:
            self.proc = subprocess.Popen(
                cmd,
                env=full_env,
                stdin=subprocess.DEVNULL,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
            )
            assert self.proc.stderr is not None
            self._start(self._read_pipe, self.proc.stderr)
        assert self.proc.stdout is not None
        self._start(self._read_stdout, self.proc.stdout)

    def _start(self, target: object, *args: object) -> None:
        threading.Thread(target=target, args=args, daemon=True).start()  # type: ignore[arg-type]

    # Each reader closes what it reads once the process has closed its end: a pipe left
    # open is a ResourceWarning (an error in the tests) when it is collected.
    def _read_pty(self) -> None:
        while True:
            try:
                chunk = os.read(self._master, 65536)
            except OSError:  # EIO: every writer of the terminal has closed it
                chunk = b""
            if not chunk:
                with self._lock:
                    self._master_open = False
                    os.close(self._master)
                return
            with self._lock:
                self._err += chunk

    def _read_pipe(self, pipe: IO[bytes]) -> None:
        with pipe:
            for chunk in iter(lambda: pipe.read1(65536), b""):  # type: ignore[attr-defined]
                with self._lock:
                    self._err += chunk

    def _read_stdout(self, pipe: IO[bytes]) -> None:
        with pipe:
            for line in iter(pipe.readline, b""):
                with self._lock:
                    self._out += line
                    self.stdout_lines.append((time.monotonic(), line.decode(errors="replace")))

    @property
    def stderr(self) -> str:
        """What the terminal (or the stderr pipe) showed so far, escape codes removed."""
        with self._lock:
            text = self._err.decode(errors="replace")
        return _ANSI.sub("", text)

    @property
    def stdout(self) -> str:
        with self._lock:
            return self._out.decode(errors="replace")

    def expect(self, pattern: str, timeout: float = 60.0) -> re.Match[str]:
        """Wait until stderr matches `pattern`."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            found = re.search(pattern, self.stderr)
            if found:
                return found
            if self.proc.poll() is not None:
                time.sleep(0.2)  # the readers may be behind the exit
                found = re.search(pattern, self.stderr)
                if found:
                    return found
                break
            time.sleep(0.05)
        raise AssertionError(f"{pattern!r} not seen; stderr:\n{self.stderr[-3000:]}")

    def send(self, text: str) -> None:
        assert self.tty, "input goes through the terminal"
        with self._lock:
            assert self._master_open, "the process has closed its terminal"
            os.write(self._master, text.encode())

    def interrupt(self) -> None:
        """Ctrl-C: SIGINT to the process (as the terminal sends to its foreground job)."""
        self.proc.send_signal(signal.SIGINT)

    def wait(self, timeout: float = 120.0) -> int:
        code = self.proc.wait(timeout)
        time.sleep(0.2)  # let the readers drain the last output
        return code

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(10)
