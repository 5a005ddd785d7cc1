"""The CLI reference page of the docs, generated from the click commands themselves (the
docs build calls `reference_markdown`; see `docs/_hooks/generate.py`), so it cannot drift
from what `noetl-celery COMMAND --help` prints."""

from __future__ import annotations

from collections.abc import Iterator

import click

from noetl_celery.cli import helptext
from noetl_celery.cli.main import cli

WIDTH = 88
PROG = "noetl-celery"


def _context(command: click.Command, name: str, parent: click.Context | None) -> click.Context:
    settings = dict(command.context_settings) if parent is None else {}
    return click.Context(
        command,
        info_name=name,
        parent=parent,
        terminal_width=WIDTH,
        max_content_width=WIDTH,
        **settings,
    )


def walk(
    command: click.Command, name: str = PROG, parent: click.Context | None = None
) -> Iterator[tuple[str, click.Context]]:
    """(command path, context) of the command and every command below it, depth first,
    subcommands in the order `--help` lists them."""
    ctx = _context(command, name, parent)
    yield ctx.command_path, ctx
    if isinstance(command, click.Group):
        for sub_name in command.list_commands(ctx):
            sub = command.get_command(ctx, sub_name)
            if sub is not None and not sub.hidden:
                yield from walk(sub, sub_name, ctx)


def _order(names: list[str]) -> list[str]:
    """Top-level commands in the order of the root's `--help` sections."""
    placed = [n for _, members in helptext.SECTIONS for n in members]
    return [n for n in placed if n in names] + [n for n in names if n not in placed]


def reference_markdown() -> str:
    """The whole CLI reference page."""
    root = _context(cli, PROG, None)
    lines = [
        "# CLI reference",
        "",
        "Generated from the commands' own help when the docs are built: this is what",
        "`noetl-celery COMMAND -h` prints. The guide to using them together is",
        "[Running from the command line](../guide/cli.md).",
        "",
        "## `noetl-celery`",
        "",
        "```text",
        cli.get_help(root),
        "```",
        "",
    ]
    for title, members in helptext.SECTIONS:
        lines += [f"**{title}:** " + ", ".join(f"[`{n}`](#{_anchor(n)})" for n in members), ""]
    for top in _order(cli.list_commands(root)):
        command = cli.get_command(root, top)
        if command is None:
            continue
        for path, ctx in walk(command, top, root):
            depth = path.count(" ")  # "noetl-celery run": 1
            heading = "#" * min(depth + 1, 4)
            lines += [f"{heading} `{path}`", "", "```text", ctx.command.get_help(ctx), "```", ""]
    return "\n".join(lines).rstrip() + "\n"


def _anchor(name: str) -> str:
    """The id MkDocs gives the heading "`noetl-celery NAME`"."""
    return f"noetl-celery-{name}"
