"""`noetl-celery schedule add | list | remove` as a user calls it."""

from __future__ import annotations

import json
from pathlib import Path

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
    assert again.returncode == 1
    assert json.loads(run_cli(["schedule", "list", "--json"], embedded_env).stdout) == []
