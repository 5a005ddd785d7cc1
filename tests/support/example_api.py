"""`noetl-celery example-api` as a subprocess, started the way the README says."""

from __future__ import annotations

import re
import subprocess
import sys
from collections.abc import Mapping

import httpx


class ExampleApi:
    def __init__(self, env: Mapping[str, str], *args: str) -> None:
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "noetl_celery.cli.main", "example-api", *args],
            env=dict(env),
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            text=True,
        )
        assert self.proc.stdout is not None
        line = self.proc.stdout.readline()  # the first line names the URL
        match = re.fullmatch(r"example API on (http://127\.0\.0\.1:\d+) \(Ctrl-C to stop\)\n", line)
        assert match, line
        self.url = match.group(1)

    def stats(self) -> dict[str, int]:
        return dict(httpx.get(f"{self.url}/stats").json())

    def stop(self) -> None:
        self.proc.terminate()
        self.proc.wait(10)
        if self.proc.stdout is not None:
            self.proc.stdout.close()  # left open it is a ResourceWarning (an error in tests)
