"""Bad input through the real CLI (design invariant 8): one line naming the input and the
limit, exit 2, one JSON object with `--json`, no traceback, and nothing written (no
execution, no catalog entry, no schedule). Each case was found by an adversarial run
that used to end in a traceback, a MemoryError or an execution left RUNNING."""

from __future__ import annotations

import codecs
import json
import resource
import sqlite3
import time
from pathlib import Path
from typing import Any

import pytest

from tests.support.workers import run_cli

ROOT = Path(__file__).resolve().parents[2]
HELLO = ROOT / "playbooks" / "examples" / "hello_world.yaml"
RUN_KEYS = {
    "execution_id",
    "status",
    "result",
    "error",
    "errors",
    "quarantined",
    "duration_seconds",
    "steps",
}
pytestmark = pytest.mark.acceptance

HEAD = "apiVersion: noetl.io/v2\nkind: Playbook\nmetadata: {name: bad, path: tests/bad}\n"
TAIL = "workflow:\n  - step: start\n    tool: {kind: noop}\n"
BOMB = (
    HEAD
    + "workload:\n"
    + '  a: &a ["lol","lol","lol","lol","lol","lol","lol","lol","lol"]\n'
    + "".join(
        f"  {n}: &{n} [{','.join([f'*{p}'] * 9)}]\n"
        for p, n in zip("abcdefgh", "bcdefghi", strict=True)
    )
    + TAIL
)
UTF8 = "save the playbook as UTF-8"


def deep_json(depth: int) -> str:
    return '{"a": ' + "[" * depth + "]" * depth + "}"


def one_json_line(stdout: str) -> Any:
    lines = stdout.strip().splitlines()
    assert len(lines) == 1, f"stdout must be exactly one JSON line: {stdout!r}"
    return json.loads(lines[0])


def assert_nothing_written(env: dict[str, str]) -> None:
    """No execution (as `executions --json` shows it), no catalog entry, no schedule."""
    proc = run_cli(["executions", "--json"], env)
    assert proc.returncode == 0 and one_json_line(proc.stdout) == []
    proc = run_cli(["schedule", "list", "--json"], env)
    assert proc.returncode == 0 and one_json_line(proc.stdout) == []
    database = Path(env["NOETL_HOME"]) / "noetl.sqlite3"
    if database.exists():  # (reads never create it: no file is nothing written too)
        with sqlite3.connect(database) as conn:
            assert conn.execute("SELECT count(*) FROM catalog").fetchone() == (0,)


class Timed:
    """CPU seconds of the CLI processes run inside (interpreter start included), and
    wall seconds. CPU time is the bound: other test runs share this machine's cores, so
    the wall time of a 1 s refusal varies; a hang still shows in the wall time."""

    def __enter__(self) -> Timed:
        self._cpu = _children_cpu()
        self._wall = time.monotonic()
        return self

    def __exit__(self, *exc: object) -> None:
        self.cpu = _children_cpu() - self._cpu
        self.wall = time.monotonic() - self._wall


def _children_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def assert_at_once(timed: Timed) -> None:
    """The alias bomb took 27 s of CPU and died with MemoryError before."""
    assert timed.cpu < 2.0 and timed.wall < 15.0, f"cpu {timed.cpu:.2f}s wall {timed.wall:.2f}s"


def assert_refused_by_run(args: list[str], env: dict[str, str], message: str) -> Timed:
    """`run --json` and plain `run`: exit 2, the one line, no traceback; returns the
    time the `--json` run took."""
    with Timed() as timed:
        proc = run_cli(["run", *args, "--json"], env)
    assert proc.returncode == 2, proc.stderr
    out = one_json_line(proc.stdout)
    assert set(out) == RUN_KEYS
    assert out["status"] == "FAILED" and out["execution_id"] is None
    assert out["error"] == message
    assert "Traceback" not in proc.stderr
    plain = run_cli(["run", *args], env)
    assert plain.returncode == 2 and plain.stdout == ""
    assert plain.stderr.strip() == message and "Traceback" not in plain.stderr
    return timed


# name: (run arguments after FILE, extra environment, the error line)
PAYLOADS: dict[str, tuple[list[str], dict[str, str], str]] = {
    "--payload 10,000 deep (json.loads recursion)": (
        ["--payload", deep_json(10_000)],
        {},
        "--payload: nested deeper than the limit of 64 levels",
    ),
    "--payload 500 deep (left an execution RUNNING)": (
        ["--payload", deep_json(500)],
        {},
        "payload.a[0][0][0][0][0][0][0][0][0]…(64 keys deep): nested deeper than the "
        "limit of 64 levels",
    ),
    "--set 500 deep": (
        ["--set", "a=" + "[" * 500 + "]" * 500],
        {},
        "--set a: YAML nested deeper than the limit of 64 levels",
    ),
    "--set alias bomb": (
        [
            "--set",
            "a={x: &x [1,1,1,1,1,1,1,1,1], y: &y [*x,*x,*x,*x,*x,*x,*x,*x,*x], "
            "z: &z [*y,*y,*y,*y,*y,*y,*y,*y,*y], w: &w [*z,*z,*z,*z,*z,*z,*z,*z,*z], "
            "v: &v [*w,*w,*w,*w,*w,*w,*w,*w,*w], u: [*v,*v,*v,*v,*v,*v,*v,*v,*v]}",
        ],
        {},
        "--set a: YAML aliases (*name) expand this document past the limit of 100,000 "
        "nodes (an alias bomb?); it was not expanded",
    ),
    "NUL (a raw psycopg DataError before)": (
        ["--payload", '{"a": {"b": [0, 1, 2, "x\\u0000y"]}}'],
        {},
        "payload.a.b[3]: contains a NUL character (\\u0000), which Postgres cannot store",
    ),
    "lone surrogate": (
        ["--payload", '{"a": "\\ud800"}'],
        {},
        "payload.a: contains a lone surrogate (\\ud800), which is not valid Unicode text "
        "and Postgres cannot store it",
    ),
    "NUL in a key, from --set": (
        ["--set", 'm={"k\\0": 1}'],
        {},
        'payload.m: the key "k\\u0000" contains a NUL character (\\u0000), which Postgres '
        "cannot store",
    ),
    "NaN": (
        ["--payload", '{"ratio": NaN}'],
        {},
        "payload.ratio: is nan (not a finite number), which JSON cannot carry and Postgres "
        "cannot store",
    ),
    "--payload past NOETL_MAX_PAYLOAD_BYTES": (
        ["--payload", '{"a": "' + "x" * 200 + '"}'],
        {"NOETL_MAX_PAYLOAD_BYTES": "100"},
        "--payload: larger than the limit of 100 bytes (NOETL_MAX_PAYLOAD_BYTES)",
    ),
    "--set past NOETL_MAX_PAYLOAD_BYTES": (
        ["--set", "a=" + "x" * 200],
        {"NOETL_MAX_PAYLOAD_BYTES": "100"},
        "payload: larger than the limit of 100 bytes as JSON (NOETL_MAX_PAYLOAD_BYTES)",
    ),
}


@pytest.mark.parametrize("name", sorted(PAYLOADS))
def test_bad_payloads_are_refused_by_run(name: str, embedded_env: dict[str, str]) -> None:
    args, extra, message = PAYLOADS[name]
    env = {**embedded_env, **extra}
    assert_refused_by_run([str(HELLO), *args], env, message)
    assert_nothing_written(env)


SCHEDULE_PAYLOADS = {
    "deep": (deep_json(10_000), "--payload: nested deeper than the limit of 64 levels"),
    "NUL": (
        '{"a": ["\\u0000"]}',
        "payload.a[0]: contains a NUL character (\\u0000), which Postgres cannot store",
    ),
}


@pytest.mark.parametrize("name", sorted(SCHEDULE_PAYLOADS))
def test_bad_payloads_are_refused_by_schedule_add(name: str, embedded_env: dict[str, str]) -> None:
    """Refused before the playbook FILE is registered on the way."""
    payload, message = SCHEDULE_PAYLOADS[name]
    args = ["schedule", "add", str(HELLO), "--cron", "0 6 * * *", "--payload", payload]
    proc = run_cli([*args, "--json"], embedded_env)
    assert proc.returncode == 2 and "Traceback" not in proc.stderr
    assert one_json_line(proc.stdout) == {"schedule_id": None, "error": message}
    plain = run_cli(args, embedded_env)
    assert plain.returncode == 2 and plain.stdout == ""
    assert plain.stderr.strip() == f"Error: {message}"
    assert_nothing_written(embedded_env)


# name: (file bytes, the error line after `FILE:` or `FILE:LINE:`, the line or None)
FILES: dict[str, tuple[bytes, str, int | None]] = {
    "not UTF-8": (
        b"apiVersion: \xff\n" + TAIL.encode(),
        f"not UTF-8 text (byte 0xff at offset 12); {UTF8}",
        None,
    ),
    "UTF-16 (an editor's Unicode setting)": (
        codecs.BOM_UTF16_LE + (HEAD + TAIL).encode("utf-16-le"),
        f"UTF-16 text found (byte-order mark 0xff 0xfe), not UTF-8; {UTF8}",
        None,
    ),
    "alias bomb (27 s and a MemoryError before)": (
        BOMB.encode(),
        "YAML aliases (*name) expand this document past the limit of 100,000 nodes (an "
        "alias bomb?); it was not expanded",
        10,  # `f:`, the first level past 100,000 nodes (9^6); nothing below it is read
    ),
    "larger than 1 MiB": (
        (HEAD + TAIL).encode() + b"#" * (1 << 20),
        "larger than the limit of 1 MiB for a playbook file",
        None,
    ),
}


def where(path: Path, line: int | None) -> str:
    return f"{path}:{line}" if line is not None else str(path)


@pytest.mark.parametrize("name", sorted(FILES))
def test_bad_playbook_files_are_refused_by_run_and_validate(
    name: str, embedded_env: dict[str, str], tmp_path: Path
) -> None:
    data, reason, line = FILES[name]
    path = tmp_path / "bad.yaml"
    path.write_bytes(data)
    message = f"{where(path, line)}: {reason}"
    assert_at_once(assert_refused_by_run([str(path)], embedded_env, message))

    with Timed() as timed:
        proc = run_cli(["validate", str(path), "--json"], embedded_env)
    assert_at_once(timed)
    assert proc.returncode == 2 and "Traceback" not in proc.stderr
    assert one_json_line(proc.stdout) == [
        {
            "file": str(path),
            "line": line,
            "step": None,
            "field": None,
            "message": reason,
            "severity": "error",
        }
    ]
    plain = run_cli(["validate", str(path)], embedded_env)
    assert plain.returncode == 2 and plain.stderr.strip() == message
    assert "Traceback" not in plain.stderr
    assert_nothing_written(embedded_env)


@pytest.mark.parametrize("name", sorted(FILES))
def test_bad_playbook_files_are_refused_by_catalog_register_and_schedule_add(
    name: str, embedded_env: dict[str, str], tmp_path: Path
) -> None:
    data, reason, line = FILES[name]
    path = tmp_path / "bad.yaml"
    path.write_bytes(data)
    message = f"{where(path, line)}: {reason}"

    proc = run_cli(["catalog", "register", str(path), "--json"], embedded_env)
    assert proc.returncode == 2 and "Traceback" not in proc.stderr
    (entry,) = one_json_line(proc.stdout)
    assert entry["skipped"] is True and [p["message"] for p in entry["problems"]] == [reason]
    plain = run_cli(["catalog", "register", str(path)], embedded_env)
    lines = [line.strip() for line in plain.stderr.splitlines()]
    assert plain.returncode == 2 and message in lines
    assert lines[-1] == "0 registered, 0 unchanged, 1 skipped"

    args = ["schedule", "add", str(path), "--cron", "0 6 * * *"]
    proc = run_cli([*args, "--json"], embedded_env)
    assert proc.returncode == 2 and "Traceback" not in proc.stderr
    assert one_json_line(proc.stdout) == {"schedule_id": None, "error": message}
    plain = run_cli(args, embedded_env)
    assert plain.returncode == 2 and plain.stderr.strip() == f"Error: {message}"
    assert_nothing_written(embedded_env)


@pytest.mark.integration
def test_nul_payload_on_postgres_is_refused_before_writing(
    embedded_env: dict[str, str], pg_url: str
) -> None:
    """Where the NUL used to reach psycopg (DataError with the SQL on stderr)."""
    env = {**embedded_env, "NOETL_DATABASE_URL": pg_url}
    message = "payload.a: contains a NUL character (\\u0000), which Postgres cannot store"
    assert_refused_by_run([str(HELLO), "--payload", '{"a": "\\u0000"}'], env, message)
    proc = run_cli(["executions", "--json"], env)
    assert proc.returncode == 0 and one_json_line(proc.stdout) == []


def test_a_failing_python_step_names_its_line(embedded_env: dict[str, str], tmp_path: Path) -> None:
    path = tmp_path / "fail.yaml"
    path.write_text(
        HEAD + "workflow:\n  - step: start\n    tool:\n      kind: python\n"
        "      input: {x: 0}\n      code: |\n        def main(x):\n"
        "            y = 2\n            return 1 / x\n"
    )
    proc = run_cli(["run", str(path), "--json"], embedded_env)
    assert proc.returncode == 1, proc.stderr
    out = one_json_line(proc.stdout)
    assert out["status"] == "FAILED"
    assert "ZeroDivisionError: division by zero (line 3: return 1 / x)" in out["error"]


@pytest.mark.parametrize("kind", ["missing", "directory"])
def test_unreadable_playbook_paths_are_one_line(
    kind: str, embedded_env: dict[str, str], tmp_path: Path
) -> None:
    path = tmp_path / "flows"
    if kind == "directory":
        path.mkdir()
    # `run PATH` takes a path that is no file for a catalog path (cli.targets)
    message = (
        f"{path} is not a playbook file, and no playbook is registered at catalog path '{path}'"
        if kind == "missing"
        else f"{path} is a directory; give a playbook file or a catalog path"
    )
    assert_refused_by_run([str(path)], embedded_env, message)
    assert_nothing_written(embedded_env)
