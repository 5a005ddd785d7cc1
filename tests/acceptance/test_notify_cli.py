"""The notification and deadline settings at the command line: a bad NOETL_NOTIFY_* value
stops any command in one line, never naming the webhook's secret; `schedule add
--deadline` stores it and refuses a bad one in one line."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.support.notify_receiver import receiving
from tests.support.workers import run_cli

pytestmark = pytest.mark.acceptance
HELLO = str(Path(__file__).resolve().parents[2] / "playbooks" / "examples" / "hello_world.yaml")


@pytest.mark.parametrize(
    ("env", "message"),
    [
        (
            {"NOETL_NOTIFY_ON": "failed,fialed"},
            "NOETL_NOTIFY_ON: 'fialed' is not one of completed, failed, cancelled, deadline",
        ),
        (
            {"NOETL_NOTIFY_URL": "hooks.example/T/B/s3cr3tpath"},
            "NOETL_NOTIFY_URL must be an http:// or https:// URL",
        ),
    ],
)
def test_a_bad_notify_setting_stops_a_command_in_one_line(
    embedded_env: dict[str, str], env: dict[str, str], message: str
) -> None:
    proc = run_cli(["executions"], {**embedded_env, **env})
    assert proc.returncode != 0
    assert "Traceback" not in proc.stderr + proc.stdout
    lines = [ln for ln in proc.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1 and message in lines[0], proc.stderr
    assert "s3cr3tpath" not in proc.stderr + proc.stdout


def test_schedule_add_with_a_deadline(embedded_env: dict[str, str]) -> None:
    base = ["schedule", "add", HELLO, "--cron", "0 3 * * *", "--timezone", "Europe/Paris"]
    added = run_cli([*base, "--deadline", "06:00", "--json"], embedded_env)
    assert added.returncode == 0, added.stderr
    assert json.loads(added.stdout)["deadline"] == "06:00"
    bad = run_cli([*base, "--deadline", "6 oclock"], embedded_env)
    assert bad.returncode == 1
    assert bad.stderr.strip() == (
        "Error: --deadline: '6 oclock' is neither a duration (use a number of seconds or "
        "500ms, 30s, 5m, 2h) nor a time of day (HH:MM, e.g. 06:00)"
    )


def test_an_embedded_run_delivers_its_failure_before_it_exits(
    embedded_env: dict[str, str], tmp_path: Path
) -> None:
    playbook = tmp_path / "fails.yaml"
    playbook.write_text(
        "apiVersion: noetl.io/v2\nkind: Playbook\n"
        "metadata: {name: f, path: tests/cli_fails}\n"
        "workflow:\n"
        "  - step: boom\n"
        "    tool: {kind: python, code: \"raise RuntimeError('no space left')\"}\n"
    )
    with receiving() as receiver:
        env = {
            **embedded_env,
            "NOETL_NOTIFY_URL": receiver.url(),
            "NOETL_NOTIFY_SECRET": "cli-secret-77",
        }
        proc = run_cli(["run", str(playbook), "--json"], env)
        assert json.loads(proc.stdout)["status"] == "FAILED", proc.stderr
        # the process has exited: what it delivered is all there is
        got = receiver.accepted()
    assert len(got) == 1, [d.json for d in receiver.all()]
    body = got[0].json
    assert body["path"] == "tests/cli_fails" and body["status"] == "failed"
    assert "no space left" in body["text"]
    assert "cli-secret-77" not in proc.stdout + proc.stderr
