"""`noetl-celery schedule add | list | remove | pause | resume | trigger` as a user calls
it."""

from __future__ import annotations

import datetime as dt
import json
from pathlib import Path
from typing import Any

import pytest

from tests.support.workers import run_cli

ROOT = Path(__file__).resolve().parents[2]
HELLO = ROOT / "playbooks" / "examples" / "hello_world.yaml"
pytestmark = pytest.mark.acceptance


def test_schedule_a_file_list_and_remove(embedded_env: dict[str, str]) -> None:
    added = run_cli(
        [
            "schedule",
            "add",
            str(HELLO),
            "--cron",
            "0 9 * * 1-5",
            "--timezone",
            "Europe/Berlin",
            "--payload",
            '{"names": ["Ada"]}',
            "--json",
        ],
        embedded_env,
    )
    assert added.returncode == 0, added.stderr
    row = json.loads(added.stdout)
    assert row["path"] == "examples/hello_world" and row["timezone"] == "Europe/Berlin"
    assert row["payload"] == {"names": ["Ada"]} and row["next_fire_at"].endswith("Z")

    listed = run_cli(["schedule", "list", "--json"], embedded_env)
    assert [r["schedule_id"] for r in json.loads(listed.stdout)] == [row["schedule_id"]]

    bad = run_cli(["schedule", "add", str(HELLO), "--cron", "61 * * * *"], embedded_env)
    assert bad.returncode == 1 and "is not valid" in bad.stderr

    gone = run_cli(["schedule", "remove", str(row["schedule_id"]), "--json"], embedded_env)
    assert gone.returncode == 0 and json.loads(gone.stdout)["removed"] is True
    again = run_cli(["schedule", "remove", str(row["schedule_id"])], embedded_env)
    assert again.returncode == 2
    assert again.stderr == f"no schedule {row['schedule_id']} (see `noetl-celery schedule list`)\n"
    assert json.loads(run_cli(["schedule", "list", "--json"], embedded_env).stdout) == []


def cli_json(args: list[str], env: dict[str, str]) -> Any:
    proc = run_cli(args, env)
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout)


def test_pause_resume_and_trigger(embedded_env: dict[str, str]) -> None:
    add = ["schedule", "add", str(HELLO), "--cron", "0 6 * * *", "--payload", '{"names": ["L"]}']
    row = cli_json([*add, "--json"], embedded_env)
    sid = str(row["schedule_id"])
    paused = cli_json(["schedule", "pause", sid, "--json"], embedded_env)
    assert paused["enabled"] is False and paused["changed"] is True
    assert paused["next_fire_at"] is None  # no next firing while paused
    again = run_cli(["schedule", "pause", sid], embedded_env)
    assert again.returncode == 0 and again.stdout == f"schedule {sid} was paused\n"
    table = run_cli(["schedule", "list"], embedded_env).stdout
    [line] = [x for x in table.splitlines() if "examples/hello_world" in x]
    assert "paused" in line and "0 6 * * *" in line

    triggered = cli_json(["schedule", "trigger", sid, "--json"], embedded_env)
    # embedded, the run executes in the CLI's process: trigger waits for its end
    assert triggered["schedule_id"] == row["schedule_id"]
    assert triggered["status"] == "COMPLETED"
    eid = triggered["execution_id"]
    summary = cli_json(["status", eid, "--json"], embedded_env)
    assert summary["status"] == "COMPLETED"

    manual = cli_json(["run", str(HELLO), "--json"], embedded_env)
    lines = cli_json(["executions", "--json"], embedded_env)
    assert [(x["execution_id"], x["trigger"]) for x in lines] == [
        (manual["execution_id"], "manual"),
        (eid, "schedule"),
    ]
    detail = lines[1]["trigger_detail"]
    assert detail["schedule_id"] == row["schedule_id"] and detail["manual"] is True
    assert detail["fire_time"].endswith("Z") and lines[1]["rerun_of"] is None
    only = cli_json(["executions", "--trigger", "SCHEDULE", "--json"], embedded_env)
    assert [x["execution_id"] for x in only] == [eid]
    text = run_cli(["executions"], embedded_env).stdout
    assert f"schedule {sid} (by hand)" in text and "manual" in text

    resumed = cli_json(["schedule", "resume", sid, "--json"], embedded_env)
    assert resumed["enabled"] is True and resumed["changed"] is True
    next_fire = dt.datetime.fromisoformat(resumed["next_fire_at"].removesuffix("Z"))
    now = dt.datetime.now(dt.UTC).replace(tzinfo=None)
    assert now < next_fire <= now + dt.timedelta(days=1) and next_fire.hour == 6
    [listed] = cli_json(["schedule", "list", "--json"], embedded_env)
    # triggering by hand is not a firing: the cadence and the last firing are untouched
    assert listed["enabled"] is True and listed["last_fire_at"] is None
    table = run_cli(["schedule", "list"], embedded_env).stdout
    assert "enabled" in table and next_fire.strftime("%Y-%m-%d 06:00:00") in table


@pytest.mark.parametrize("command", ["pause", "resume", "trigger", "remove"])
@pytest.mark.parametrize("as_json", [False, True])
def test_unknown_schedule_ids(embedded_env: dict[str, str], command: str, as_json: bool) -> None:
    proc = run_cli(["schedule", command, "41", *(["--json"] if as_json else [])], embedded_env)
    assert proc.returncode == 2
    assert proc.stderr == "no schedule 41 (see `noetl-celery schedule list`)\n"


@pytest.mark.parametrize("command", ["pause", "resume", "trigger", "remove"])
def test_schedule_ids_are_numbers(embedded_env: dict[str, str], command: str) -> None:
    proc = run_cli(["schedule", command, "daily"], embedded_env)
    assert proc.returncode == 2 and "Traceback" not in proc.stderr
    assert "'daily' is not a valid integer" in proc.stderr


def test_executions_rejects_an_unknown_trigger(embedded_env: dict[str, str]) -> None:
    proc = run_cli(["executions", "--trigger", "cron"], embedded_env)
    assert proc.returncode == 2 and "Traceback" not in proc.stderr
    assert "unknown trigger 'cron' (use manual, parent, rerun, schedule)" in proc.stderr
