"""Quarantine and redrive at scale (issue 35 item 2): a parallel loop of `--items`
items (default 10,000) of which `--poisoned` (default 20, spread evenly) fail and are
quarantined by their body's policy; the run completes; the cause is fixed by the
payload (`--set bad=[]`) and the quarantined items redriven. Checks that every item
is counted once across both executions and that the redrive is linked to the original,
and prints the time of each phase.

    python -m bench.quarantine_redrive [--items 10000] [--poisoned 20]

Embedded (SQLite under a fresh NOETL_HOME, commands on threads), through the CLI as a
user runs it.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]

PLAYBOOK = """apiVersion: noetl.io/v2
kind: Playbook
metadata: {name: bench_quarantine, path: bench/quarantine}
workload: {n: 1000, bad: []}
workflow:
  - step: each
    loop:
      in: "{{ range(n) | list }}"
      iterator: x
      spec: {mode: parallel, max_in_flight: 100}
    tool:
      kind: python
      input: {x: "{{ iter.x }}", bad: "{{ bad }}"}
      code: |
        assert x not in bad, f"item {x} is poisoned"
        result = x
      spec:
        policy:
          rules:
            - when: "{{ output.status == 'error' }}"
              then: {do: quarantine}
"""


def cli(env: dict[str, str], *args: str) -> tuple[float, Any]:
    """(seconds, the one JSON object printed) of one CLI command."""
    started = time.perf_counter()
    done = subprocess.run(
        [sys.executable, "-m", "noetl_celery.cli.main", *args],
        env=env,
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=False,
    )
    seconds = time.perf_counter() - started
    if done.returncode != 0:
        raise SystemExit(f"{' '.join(args)} exited {done.returncode}: {done.stderr[-2000:]}")
    return seconds, json.loads(done.stdout.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--items", type=int, default=10_000)
    parser.add_argument("--poisoned", type=int, default=20)
    args = parser.parse_args()
    n, k = args.items, args.poisoned
    bad = [i * (n // k) + n // (2 * k) for i in range(k)]
    env = {key: v for key, v in os.environ.items() if not key.startswith("NOETL_")}
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT), env.get("PYTHONPATH", "")]).rstrip(os.pathsep)
    with tempfile.TemporaryDirectory(prefix="bench-quarantine-") as home:
        env["NOETL_HOME"] = home
        playbook = Path(home) / "quarantine.yaml"
        playbook.write_text(PLAYBOOK)
        sets = ["--set", f"n={n}", "--set", f"bad={json.dumps(bad)}"]
        ran, first = cli(env, "run", str(playbook), *sets, "--json")
        eid = first["execution_id"]
        listed_s, listed = cli(env, "quarantine", "list", eid, "--json")
        redrive_s, second = cli(env, "quarantine", "redrive", eid, "--set", "bad=[]", "--json")
        _, after = cli(env, "quarantine", "list", eid, "--json")
        _, executions = cli(env, "executions", "--trigger", "rerun", "--json")
    one, two = first["steps"]["each"]["stats"], second["steps"]["each"]["stats"]
    checks = {
        "original COMPLETED": first["status"] == "COMPLETED",
        f"original: {n - k} success, {k} quarantined, 0 failed": one
        == {"total": n, "success": n - k, "failed": 0, "quarantined": k},
        f"listed: exactly the {k} poisoned items": sorted(i["item"] for i in listed["items"])
        == bad,
        "redrive COMPLETED": second["status"] == "COMPLETED",
        f"redrive: {k} success": two == {"total": k, "success": k, "failed": 0},
        "every item counted once across both": one["success"] + two["success"] == n,
        "every quarantined item marked redriven by the redrive": {
            i["redriven_by"] for i in after["items"]
        }
        == {second["execution_id"]},
        "the redrive linked to the original": [e["rerun_of"] for e in executions] == [eid],
    }
    print(f"items {n}, poisoned {k}")
    print(f"run (quarantines):    {ran:7.2f} s")
    print(f"quarantine list:      {listed_s:7.2f} s")
    print(f"quarantine redrive:   {redrive_s:7.2f} s")
    for name, passed in checks.items():
        print(f"  {'ok  ' if passed else 'FAIL'} {name}")
    if not all(checks.values()):
        raise SystemExit(1)


if __name__ == "__main__":
    main()
