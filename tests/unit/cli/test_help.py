"""`--help` teaches: the root groups its commands by what a user is doing, every command
and subcommand shows one example, `-h` works everywhere, and `worker -h` names the Celery
options a deployment sets (the others still go to Celery)."""

from __future__ import annotations

import os
import subprocess
import sys

import click
import pytest
from click.testing import CliRunner

from noetl_celery.cli import helptext
from noetl_celery.cli.docgen import walk
from noetl_celery.cli.main import COMMANDS, cli

WORKER_OPTIONS = (
    "-c, --concurrency",
    "-P, --pool",
    "-Q, --queues",
    "-n, --hostname",
    "-l, --loglevel",
)


def commands() -> list[tuple[str, click.Context]]:
    return list(walk(cli))


def test_the_root_groups_its_commands() -> None:
    result = CliRunner().invoke(cli, ["-h"])
    assert result.exit_code == 0, result.output
    out = result.output
    titles = [f"{title}:" for title, _ in helptext.SECTIONS]
    positions = [out.index(f"\n{title}\n") for title in titles]
    assert positions == sorted(positions)  # in SECTIONS' order
    assert "\nOther:\n" not in out and "\nCommands:\n" not in out
    for (_, members), start, end in zip(
        helptext.SECTIONS, positions, [*positions[1:], len(out)], strict=True
    ):
        block = out[start:end]
        for name in members:
            assert f"\n  {name} " in block, (name, block)


def test_every_command_sits_in_one_section() -> None:
    placed = [name for _, members in helptext.SECTIONS for name in members]
    assert sorted(placed) == sorted(COMMANDS)


@pytest.mark.parametrize("args", [["-h"], ["--help"]])
def test_h_works_everywhere(args: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    for path, ctx in commands():
        with pytest.raises(click.exceptions.Exit) as exited:
            ctx.command.parse_args(ctx, list(args))
        assert exited.value.exit_code == 0, path
        out = capsys.readouterr().out
        assert out.startswith(f"Usage: {path} "), (path, out[:80])
        assert "-h, --help" in out, path


def test_every_command_shows_one_example() -> None:
    found = commands()
    paths = {path.removeprefix("noetl-celery ") for path, _ in found[1:]}
    assert set(helptext.EXAMPLES) == paths  # none missing, none left over
    for path, ctx in found:
        text = ctx.command.get_help(ctx)
        assert text.count("Example:") == 1, path
        example = text.split("Example:\n", 1)[1].splitlines()[0].strip()
        words = example.split()
        start = next(i for i, w in enumerate(words) if w == "noetl-celery")
        assert " ".join(words[start:]).startswith(path), (path, example)


def test_a_missing_example_is_caught() -> None:
    command = click.Command("nothing")
    helptext.teach(command, "nothing")
    assert command.epilog is None
    helptext.teach(command, "run")
    assert command.epilog is not None and "noetl-celery run" in command.epilog


def test_worker_help_names_the_options_users_need() -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("NOETL_")}
    for flag in ("-h", "--help"):
        proc = subprocess.run(
            [sys.executable, "-m", "noetl_celery.cli.main", "worker", flag],
            env=env,
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert proc.returncode == 0, proc.stderr
        assert "Traceback" not in proc.stderr
        assert proc.stdout.startswith("Usage: noetl-celery worker [OPTIONS] [CELERY OPTIONS]...")
        for option in WORKER_OPTIONS:
            assert option in proc.stdout, option
        assert "goes to Celery" in " ".join(proc.stdout.split())


def test_worker_options_still_go_to_celery() -> None:
    root = dict(commands())["noetl-celery"]
    worker = cli.get_command(root, "worker")
    assert worker is not None
    args = [
        "-c",
        "4",
        "--pool",
        "threads",
        "-Q",
        "q1",
        "-n",
        "w1@%h",
        "-l",
        "DEBUG",
        "--autoscale=10,3",
    ]
    ctx = worker.make_context("worker", list(args), parent=root)
    assert ctx.params["celery_args"] == tuple(args)
