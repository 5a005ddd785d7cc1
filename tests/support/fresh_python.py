"""`python -c` in a fresh interpreter, as a user's shell would start the CLI: no NOETL_
settings, an embedded home of its own, the checkout on the path."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Mapping
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def python_c(
    script: str,
    args: list[str],
    tmp_path: Path,
    *,
    must_succeed: bool = True,
    settings: Mapping[str, str] | None = None,
) -> subprocess.CompletedProcess[str]:
    """Run `python -c script args` in `tmp_path` with NOETL_HOME under it and only the
    NOETL_ `settings` given; with `must_succeed` it must exit 0 (its stderr is the failure
    message)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("NOETL_")}
    env.update(NOETL_HOME=str(tmp_path / "home"), PYTHONPATH=str(ROOT))
    env.update(settings or {})
    done = subprocess.run(
        [sys.executable, "-c", script, *args],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=120,
        env=env,
        check=False,
    )
    if must_succeed:
        assert done.returncode == 0, done.stderr
    return done
