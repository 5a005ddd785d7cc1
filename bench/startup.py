"""Embedded mode start-up: wall time of `noetl-celery run hello_world --json`, process
start to exit, on a machine with no services, against the bare interpreter start
measured in the same run.

    python -m bench.startup [--runs 7] [--no-bytecode]

Target (issue 15): median <= 0.3 s on an existing home (a fresh home is printed too).

Python's bytecode cache is on, in a temporary PYTHONPYCACHEPREFIX warmed by one run
first: an installed wheel ships compiled modules (pip compiles them), so compiling
every module on every start (PYTHONDONTWRITEBYTECODE, set in some shells) is not what
a user waits for. `--no-bytecode` measures that case. CPU seconds (user + system of the
child) are printed beside the wall time: on a loaded machine they move less.

A second baseline is the floor the run's libraries set: importing SQLAlchemy (with its
SQLite dialect), pydantic, jinja2, PyYAML and click and nothing else, the collector off
as `noetl-celery` has it during its imports, and defining one pydantic model (pydantic
loads its model machinery on the first model, as the DSL's models make it do). No
embedded run can start faster than that.

Where the time goes: each of those libraries imported alone, and every module the `run`
command imports (libraries and the engine's own, nothing run); the last lines split the
median run into the libraries' floor, the engine's own modules (its imports less the
floor: the engine's code, and the few standard modules it alone imports) and the run
itself (the run less its imports).
"""

from __future__ import annotations

import argparse
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
HELLO = ROOT / "playbooks" / "examples" / "hello_world.yaml"
TARGET_SECONDS = 0.3
# the libraries an embedded run cannot do without, imported as the CLI imports them
NO_GC = "import gc; gc.disable()\n"
ONE_MODEL = "class Model(pydantic.BaseModel):\n    x: int\n"
FLOOR = (
    NO_GC
    + "import sqlalchemy, sqlalchemy.dialects.sqlite, pydantic, jinja2, yaml, click\n"
    + ONE_MODEL
)
# each library of the floor alone (the shares overlap a little: they share stdlib modules)
LIBRARIES = {
    "sqlalchemy + sqlite dialect": "import sqlalchemy, sqlalchemy.dialects.sqlite\n",
    "pydantic, one model": "import pydantic\n" + ONE_MODEL,
    "jinja2": "import jinja2\n",
    "yaml": "import yaml\n",
    "click": "import click\n",
}
# what `noetl-celery run` imports before it runs anything (cli.main loads cli.run lazily)
RUN_IMPORTS = NO_GC + "import noetl_celery.cli.main, noetl_celery.cli.run\n"


def timed(cmd: list[str], env: dict[str, str]) -> tuple[float, float]:
    """(wall seconds, CPU seconds) of one run of `cmd`."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    started = time.perf_counter()
    subprocess.run(cmd, env=env, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    wall = time.perf_counter() - started
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return wall, cpu


def base_environment(bytecode: bool, cache: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("NOETL_")}
    if bytecode:
        env.pop("PYTHONDONTWRITEBYTECODE", None)
        env["PYTHONPYCACHEPREFIX"] = cache
    else:
        env["PYTHONDONTWRITEBYTECODE"] = "1"
    return env


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--runs", type=int, default=7)
    parser.add_argument(
        "--no-bytecode", action="store_true", help="compile every module on every start"
    )
    args = parser.parse_args()
    cli = [sys.executable, "-m", "noetl_celery.cli.main", "run", str(HELLO), "--json"]
    bare_cmd = [sys.executable, "-c", "pass"]
    floor_cmd = [sys.executable, "-c", FLOOR]
    imports = {name: [sys.executable, "-c", NO_GC + code] for name, code in LIBRARIES.items()}
    imports["library imports alone (floor)"] = floor_cmd
    imports["the run command's imports"] = [sys.executable, "-c", RUN_IMPORTS]
    bare: list[tuple[float, float]] = []
    fresh: list[tuple[float, float]] = []
    existing: list[tuple[float, float]] = []
    imported: dict[str, list[tuple[float, float]]] = {name: [] for name in imports}
    rows = {
        "python -c pass (baseline)": bare,
        **{(f"  import {n}" if n in LIBRARIES else n): v for n, v in imported.items()},
        "hello_world, fresh home": fresh,
        "hello_world, existing home": existing,
    }
    with tempfile.TemporaryDirectory() as cache:
        base_env = base_environment(not args.no_bytecode, cache)
        with tempfile.TemporaryDirectory() as home:  # warm-up: fills the bytecode cache
            timed(cli, {**base_env, "NOETL_HOME": home})
            timed(bare_cmd, base_env)
            for cmd in imports.values():
                timed(cmd, base_env)
        for _ in range(args.runs):
            with tempfile.TemporaryDirectory() as home:
                env = {**base_env, "NOETL_HOME": home}
                fresh.append(timed(cli, env))  # first run: creates the SQLite database
                existing.append(timed(cli, env))  # later runs on the same embedded database
            bare.append(timed(bare_cmd, base_env))
            for name, cmd in imports.items():
                imported[name].append(timed(cmd, base_env))
    base = statistics.median(w for w, _ in bare)
    mode = "no bytecode cache" if args.no_bytecode else "bytecode cached"
    print(f"{args.runs} runs each, {mode}")
    print(f"{'what':36} {'median s':>9} {'min s':>7} {'x baseline':>11} {'cpu s':>7}")
    for name, values in rows.items():
        walls = [w for w, _ in values]
        med = statistics.median(walls)
        cpu = statistics.median(c for _, c in values)
        print(f"{name:36} {med:9.3f} {min(walls):7.3f} {med / base:11.1f} {cpu:7.3f}")
    result = statistics.median(w for w, _ in existing)
    floor = statistics.median(w for w, _ in imported["library imports alone (floor)"])
    own = statistics.median(w for w, _ in imported["the run command's imports"])
    print(
        f"where an existing home's {result:.3f} s goes: libraries {floor:.3f} s "
        f"(interpreter start included), the engine's own modules {own - floor:.3f} s, "
        f"the run itself {result - own:.3f} s"
    )
    verdict = "meets" if result <= TARGET_SECONDS else "MISSES"
    print(f"target median <= {TARGET_SECONDS} s on an existing home: {verdict} ({result:.3f} s)")


if __name__ == "__main__":
    main()
