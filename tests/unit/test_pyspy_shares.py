"""bench.pyspy: shares read from py-spy's collapsed stacks."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from bench.pyspy import callers, children, inclusive, stacks

RUN = "run (threading.py:1)"
EXECUTE = "execute (/x/noetl_celery/worker/execute.py:10)"
CLAIM = "claim (/x/noetl_celery/store/queries/commands.py:3)"
RAW = "\n".join(
    [
        f"{RUN};{EXECUTE};request (/x/site-packages/httpx/_client.py:5) 6",
        f"{RUN};{EXECUTE};{CLAIM};execute (/x/site-packages/sqlalchemy/engine/base.py:9) 3",
        f"{RUN};poll (/x/site-packages/kombu/hub.py:2) 1",
    ]
)


def test_shares_children_and_callers(tmp_path: Path) -> None:
    raw = tmp_path / "w.raw"
    raw.write_text(RAW)
    shares, total = inclusive(stacks([raw]))
    assert total == 10
    assert shares["execute (noetl_celery/worker/execute.py)"] == 9
    assert shares["request (httpx/_client.py)"] == 6
    assert shares["run (threading.py)"] == 10  # a frame counts once per stack

    below, _ = children(stacks([raw]), "execute (noetl_celery/worker")
    assert below == {
        "request (httpx/_client.py)": 6,
        "claim (noetl_celery/store/queries/commands.py)": 3,
    }
    above, _ = callers(stacks([raw]), "execute (sqlalchemy")
    assert above == {"claim (noetl_celery/store/queries/commands.py)": 3}
    leaf, _ = children(stacks([raw]), "poll (")
    assert leaf == {"<self>": 1}


def test_a_missing_file_is_named_with_exit_code_2(tmp_path: Path) -> None:
    missing = tmp_path / "w1.raw"
    done = subprocess.run(
        [sys.executable, "-m", "bench.pyspy", "children", "X", str(missing)],
        capture_output=True,
        text=True,
        cwd=Path(__file__).resolve().parents[2],
    )
    assert done.returncode == 2
    assert f"no such py-spy raw file: {missing}" in done.stderr
    assert "Traceback" not in done.stderr
