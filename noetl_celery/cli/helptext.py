"""What `--help` teaches: the commands grouped by what a user is doing, and one example
per command (shown under its help, and in the generated CLI reference of the docs).

Kept in one table so a test can hold it to the command tree: every command and
subcommand has an example, every example names a real command, every top-level command
sits in a section.
"""

from __future__ import annotations

import click

# the root's `--help`, in this order; a command in none lands under "Other" (a test
# refuses that)
SECTIONS: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("Run and watch", ("run", "watch", "rerun", "cancel", "validate")),
    ("Inspect", ("status", "executions", "events", "logs", "quarantine")),
    ("Catalog and schedules", ("catalog", "schedule")),
    ("Operate", ("worker", "beat", "serve", "flower", "db", "example-api")),
)

# "command path" -> one example command line (what a user types)
EXAMPLES: dict[str, str] = {
    "run": "noetl-celery run playbooks/examples/hello_world.yaml --set names='[Ada]' --json",
    "watch": "noetl-celery watch 383736883467033663",
    "rerun": "noetl-celery rerun 383736883467033663 --failed-items --set strict=false",
    "cancel": "noetl-celery cancel 383736883467033663 --json",
    "validate": "noetl-celery validate playbooks/examples/*.yaml",
    "status": "noetl-celery status 383736883467033663",
    "executions": "noetl-celery executions --status FAILED --limit 20",
    "events": "noetl-celery events 383736883467033663 --failed --step fetch",
    "logs": "noetl-celery logs 383736883467033663 --step fetch --follow",
    "quarantine": "noetl-celery quarantine list 383736883467033663 --kind timeout",
    "quarantine list": "noetl-celery quarantine list 383736883467033663 --step fetch --json",
    "quarantine show": "noetl-celery quarantine show 383736883467033663 fetch:1:17",
    "quarantine redrive": "noetl-celery quarantine redrive 383736883467033663 --step fetch "
    "--set strict=false",
    "catalog": "noetl-celery catalog register playbooks/examples",
    "catalog register": "noetl-celery catalog register playbooks/examples",
    "catalog list": "noetl-celery catalog list --json",
    "catalog show": "noetl-celery catalog show examples/hello_world@1 > hello_world.yaml",
    "schedule": 'noetl-celery schedule add flows/daily.yaml --cron "0 6 * * *"',
    "schedule add": 'noetl-celery schedule add flows/daily.yaml --cron "0 6 * * *" '
    "--timezone Europe/Berlin",
    "schedule list": "noetl-celery schedule list",
    "schedule pause": "noetl-celery schedule pause 3",
    "schedule resume": "noetl-celery schedule resume 3",
    "schedule trigger": "noetl-celery schedule trigger 3 --wait",
    "schedule remove": "noetl-celery schedule remove 3",
    "worker": "noetl-celery worker --pool threads -c 32 -n api@%h",
    "beat": "noetl-celery beat",
    "serve": "NOETL_API_TOKEN=s3cret noetl-celery serve --host 0.0.0.0",
    "flower": "NOETL_FLOWER_BASIC_AUTH=admin:s3cret noetl-celery flower",
    "db": "noetl-celery db upgrade",
    "db upgrade": "noetl-celery db upgrade --json",
    "db prune": "noetl-celery db prune --older-than 30d --dry-run",
    "example-api": "noetl-celery example-api --port 8765 &",
}


def example_epilog(path: str) -> str | None:
    """The epilog of the command at `path` ("schedule add"): its example, kept as
    written (click rewraps no paragraph that starts with \\b)."""
    example = EXAMPLES.get(path)
    return None if example is None else f"\b\nExample:\n  {example}"


def teach(command: click.Command, path: str) -> None:
    """Give `command` (and its subcommands) their examples, once, where no epilog was
    written by hand."""
    if command.epilog is None:
        command.epilog = example_epilog(path)
    if isinstance(command, click.Group):
        for name, sub in command.commands.items():
            teach(sub, f"{path} {name}")


def format_sections(group: click.Group, ctx: click.Context, formatter: click.HelpFormatter) -> None:
    """The root's command list, one definition list per section, in SECTIONS' order
    (a command in no section comes last, under "Other")."""
    names = group.list_commands(ctx)
    placed = [n for _, members in SECTIONS for n in members]
    order = [(title, [n for n in members if n in names]) for title, members in SECTIONS]
    order.append(("Other", [n for n in names if n not in placed]))
    width = formatter.width - 6 - max((len(n) for n in names), default=0)
    for title, members in order:
        rows = []
        for name in members:
            command = group.get_command(ctx, name)
            if command is not None and not command.hidden:
                rows.append((name, command.get_short_help_str(width)))
        if rows:
            with formatter.section(title):
                formatter.write_dl(rows)
