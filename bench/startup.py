"""Embedded mode start-up: wall time of `noetl-celery run hello_world --json` on a fresh
machine (no services), against the bare interpreter start measured in the same run.

    python bench/startup.py [--runs 7]

Target (issue 2): median <= 1.5 s.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
HELLO = ROOT / "playbooks" / "examples" / "hello_world.yaml"


def wall(cmd: list[str], env: dict[str, str]) -> float:
    started = time.perf_counter()
    subprocess.run(cmd, env=env, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    return time.perf_counter() - started


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--runs", type=int, default=7)
    args = parser.parse_args()
    base_env = {k: v for k, v in os.environ.items() if not k.startswith("NOETL_")}
    cli = [sys.executable, "-m", "noetl_celery.cli.main", "run", str(HELLO), "--json"]
    cold, warm, bare = [], [], []
    for _ in range(args.runs):
        with tempfile.TemporaryDirectory() as home:
            env = {**base_env, "NOETL_HOME": home}
            cold.append(wall(cli, env))  # first run: creates the SQLite schema
            warm.append(wall(cli, env))  # later runs on the same embedded database
        bare.append(wall([sys.executable, "-c", "pass"], base_env))
    rows = [
        ("python -c pass (baseline)", bare),
        ("hello_world, fresh home", cold),
        ("hello_world, existing home", warm),
    ]
    base = statistics.median(bare)
    print(f"{'what':32} {'median s':>9} {'min s':>7} {'x baseline':>11}")
    for name, values in rows:
        med = statistics.median(values)
        print(f"{name:32} {med:9.3f} {min(values):7.3f} {med / base:11.1f}")
    verdict = "meets" if statistics.median(cold) <= 1.5 else "MISSES"
    print(f"target median <= 1.5 s on a fresh home: {verdict}")


if __name__ == "__main__":
    main()
