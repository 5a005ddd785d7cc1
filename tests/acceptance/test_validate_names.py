"""`validate` and `run` report names templates read that nothing defines (subprocesses).

The embedded test environment's credentials file defines `pg_test`, `pg_local` and
`unused_canary` (tests/conftest.py).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.support.workers import run_cli, run_json

pytestmark = pytest.mark.acceptance

NAMES = """\
apiVersion: noetl.io/v2
kind: Playbook
metadata: {name: names}
workload:
  cities: [Oslo, Lima]
  limit: 3
workflow:
  - step: start
    tool: {kind: noop}
    next:
      arcs:
        - step: each
          when: "{{ event.name == 'call.don' }}"
  - step: each
    loop: {in: "{{ workload.cities }}", iterator: city}
    tool:
      kind: postgres
      auth: pg_tst
      command: |
        SELECT '{{ iter.cty }}' AS city,
               {{ limt }} AS lim
"""


def test_validate_reports_each_name_with_file_line_step_and_field(
    embedded_env: dict[str, str], tmp_path: Path
) -> None:
    pb = tmp_path / "names.yaml"
    pb.write_text(NAMES)
    proc = run_cli(["validate", str(pb)], embedded_env)
    assert proc.returncode == 2 and proc.stdout == ""
    assert proc.stderr.splitlines() == [
        f"{pb}:13: step 'start': field 'next.arcs[0].when': `event.name` is compared with "
        "`call.don`, which no event is called; arcs here see `call.done`, `call.error`; did "
        "you mean `call.done`?",
        f"{pb}:18: step 'each': field 'tool.auth': credential `pg_tst` is not in credentials "
        f"file {embedded_env['NOETL_CREDENTIALS_FILE']}; did you mean `pg_test`?",
        f"{pb}:20: step 'each': field 'tool.command': `iter.cty` is not defined: this loop's "
        "iterator is `city` (`iter.city`) and no `set` writes `iter.cty`; did you mean "
        "`iter.city`?",
        f"{pb}:21: step 'each': field 'tool.command': warning: `limt` is not defined in this "
        "playbook (no workload key, step, `set` key, loop iterator or input is called so); "
        "unless the execution payload supplies it, rendering fails; did you mean `limit`?",
    ]
    rc, problems, _ = run_json(["validate", str(pb), "--json"], embedded_env)
    assert rc == 2
    assert [(p["line"], p["step"], p["field"], p["severity"]) for p in problems] == [
        (13, "start", "next.arcs[0].when", "error"),
        (18, "each", "tool.auth", "error"),
        (20, "each", "tool.command", "error"),
        (21, "each", "tool.command", "warning"),
    ]


def test_without_a_credentials_file_aliases_are_a_warning(
    embedded_env: dict[str, str], tmp_path: Path
) -> None:
    pb = tmp_path / "pg.yaml"
    pb.write_text(
        "apiVersion: noetl.io/v2\nkind: Playbook\nmetadata: {name: pg}\nworkflow:\n"
        "  - step: q\n    tool: {kind: postgres, auth: pg_test, command: select 1}\n"
    )
    env = {k: v for k, v in embedded_env.items() if k != "NOETL_CREDENTIALS_FILE"}
    proc = run_cli(["validate", str(pb)], env)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.splitlines() == [
        f"{pb}:6: step 'q': field 'tool.auth': warning: credential `pg_test` is not checked: "
        "NOETL_CREDENTIALS_FILE is not set (workers need a credentials file that defines it)",
        f"{pb}: ok",
    ]
    assert run_cli(["validate", str(pb)], embedded_env).stdout == f"{pb}: ok\n"


def test_an_unreadable_credentials_file_is_one_line(
    embedded_env: dict[str, str], tmp_path: Path
) -> None:
    pb = tmp_path / "pg.yaml"
    pb.write_text(
        "apiVersion: noetl.io/v2\nkind: Playbook\nmetadata: {name: pg}\nworkflow:\n"
        "  - step: q\n    tool: {kind: noop}\n"
    )
    bad = tmp_path / "creds.json"
    bad.write_text("{not json")
    proc = run_cli(["validate", str(pb)], {**embedded_env, "NOETL_CREDENTIALS_FILE": str(bad)})
    assert proc.returncode == 2 and "Traceback" not in proc.stderr
    assert proc.stderr.splitlines() == [
        f"Error: credentials file {bad}: invalid JSON at line 1 column 2"
    ]


def test_run_prints_name_warnings_at_start(embedded_env: dict[str, str], tmp_path: Path) -> None:
    pb = tmp_path / "who.yaml"
    pb.write_text(
        "apiVersion: noetl.io/v2\nkind: Playbook\nmetadata: {name: who}\nworkflow:\n"
        "  - step: hi\n    tool:\n      kind: python\n      input: {name: '{{ who }}'}\n"
        "      code: \"result = {'hi': name}\"\n"
    )
    rc, out, err = run_json(["run", str(pb), "--json", "--set", "who=Ada"], embedded_env)
    assert rc == 0 and out["status"] == "COMPLETED" and out["result"] == {"hi": "Ada"}
    warning = (
        f"{pb}:8: step 'hi': field 'tool.input.name': warning: `who` is not defined in this "
        "playbook"
    )
    first = err.splitlines()[0]
    assert first.startswith(warning), err
    assert json.dumps(out)  # stdout stayed one JSON object


def test_run_refuses_an_iterator_typo_before_anything_runs(
    embedded_env: dict[str, str], tmp_path: Path
) -> None:
    items = Path(__file__).resolve().parents[1] / "playbooks" / "items_fail.yaml"
    typo = tmp_path / "typo.yaml"
    typo.write_text(items.read_text().replace('x: "{{ iter.x }}"', 'x: "{{ iter.y }}"'))
    rc, out, _ = run_json(["run", str(typo), "--json"], embedded_env)
    assert (rc, out["status"], out["execution_id"]) == (2, "FAILED", None)
    assert out["error"] == (
        f"{typo}:16: step 'each': field 'tool[0].input.x': `iter.y` is not defined: this loop's "
        "iterator is `x` (`iter.x`) and no `set` writes `iter.y`; use `iter.x.y` for a field "
        "of the item"
    )
