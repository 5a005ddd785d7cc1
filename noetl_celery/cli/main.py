"""The `noetl-celery` command.

Every error the engine raises on purpose (`NoetlError`: a bad setting, a database that
cannot be used, tables at another revision, ...) is printed here, once, as one line, with
exit code 2 and no traceback; commands only handle the ones they turn into their own
output (`run --json` prints its JSON object).

Each command's module is imported only when that command runs (`LazyGroup`): `run` of
an embedded playbook must not pay for Celery, Flower, the web server, rich tables or
the catalog commands it never uses (issue 15: a cold start in a blink).
"""

from __future__ import annotations

import gc
import importlib
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import click

from noetl_celery import __version__
from noetl_celery.cli import helptext, quick_exit
from noetl_celery.cli.common import EXIT_INVALID, setup_logging
from noetl_celery.errors import NoetlError

# commands whose logging Celery configures (levels from its own options)
CELERY_COMMANDS = frozenset({"worker", "beat", "flower"})
# commands that run until stopped: they end through their own shutdown and the
# interpreter's, never `quick_exit` (its saving is for the commands a user waits on)
SERVICES = frozenset({*CELERY_COMMANDS, "serve", "example-api"})


# name -> "module:attribute" of every command (`--help` lists them by section:
# cli.helptext.SECTIONS)
COMMANDS = {
    "run": "noetl_celery.cli.run:run",
    "watch": "noetl_celery.cli.watch:watch",
    "rerun": "noetl_celery.cli.rerun:rerun",
    "quarantine": "noetl_celery.cli.quarantine:quarantine",
    "validate": "noetl_celery.cli.catalog:validate",
    "status": "noetl_celery.cli.inspect:status",
    "executions": "noetl_celery.cli.inspect:executions",
    "events": "noetl_celery.cli.history:events",
    "logs": "noetl_celery.cli.history:logs",
    "cancel": "noetl_celery.cli.inspect:cancel",
    "catalog": "noetl_celery.cli.catalog:catalog",
    "schedule": "noetl_celery.cli.schedule:schedule",
    "worker": "noetl_celery.cli.admin:worker",
    "beat": "noetl_celery.cli.admin:beat",
    "flower": "noetl_celery.cli.flower:flower",
    "serve": "noetl_celery.cli.serve:serve",
    "db": "noetl_celery.cli.admin:db",
    "example-api": "noetl_celery.cli.example_api:example_api",
}


class LazyGroup(click.Group):
    """A group whose commands are imported by name when one is asked for (to run it,
    or to list it in `--help`), never all at start."""

    def __init__(self, *args: Any, lazy: Mapping[str, str], **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.lazy = dict(lazy)

    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted({*self.lazy, *super().list_commands(ctx)})

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        target = self.lazy.get(cmd_name)
        if target is None or cmd_name in self.commands:
            return super().get_command(ctx, cmd_name)
        module, _, attribute = target.partition(":")
        command = getattr(importlib.import_module(module), attribute)
        _started()
        if not isinstance(command, click.Command):  # a wrong table entry, not user input
            raise TypeError(f"{target} is not a click command")
        helptext.teach(command, cmd_name)
        self.commands[cmd_name] = command
        return command

    def format_commands(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        helptext.format_sections(self, ctx, formatter)


# `-h` everywhere: subcommands inherit the root context's help option names
@click.group(
    cls=LazyGroup,
    lazy=COMMANDS,
    context_settings={"help_option_names": ["-h", "--help"]},
    epilog="\b\nExample:\n  noetl-celery run playbooks/examples/hello_world.yaml\n\n"
    "Run `noetl-celery COMMAND -h` for a command's options and an example.",
)
# the package's location too: "which install is this?" is the first question when a
# deployment misbehaves (an editable checkout, a wheel, a stale copy)
@click.version_option(
    __version__,
    prog_name="noetl-celery",
    message=f"%(prog)s %(version)s ({Path(__file__).resolve().parents[1]})",
)
@click.option("-v", "--verbose", count=True, help="More logging on stderr (-vv for debug).")
@click.pass_context
def cli(ctx: click.Context, verbose: int) -> None:
    """Run NoETL DSL v2 playbooks on Celery workers with Postgres as the source of truth.

    With no NOETL_DATABASE_URL / NOETL_BROKER_URL everything runs in this process on an
    embedded SQLite database (~/.noetl-celery/noetl.sqlite3).
    """
    setup_logging(verbose, capture=ctx.invoked_subcommand not in CELERY_COMMANDS)
    global _short
    _short = ctx.invoked_subcommand not in SERVICES


# True from `main` until the command's module is imported: the collector is off meanwhile
_starting = False
# True once the command invoked is a short one (not in SERVICES): `entry` ends the
# process without the interpreter's teardown
_short = False


def _started() -> None:
    """The command's module is imported: let the collector run again, the modules and
    classes made so far moved out of its way (`gc.freeze`: they live as long as the
    process, so scanning them in every later full collection would be wasted)."""
    global _starting
    if _starting:
        _starting = False
        gc.freeze()
        gc.enable()


def one_line(exc: BaseException) -> str:
    return " ".join(str(exc).split()) or type(exc).__name__


def main() -> None:
    # Importing a command (SQLAlchemy, pydantic's models, jinja2) allocates hundreds of
    # thousands of objects that all live on; the collector's passes over them while they
    # are made find nothing to free and cost ~15% of the CPU of an embedded hello_world
    # run (issue 15). Off until the command's module is in (LazyGroup.get_command), or
    # until the command ends.
    global _starting
    _starting = gc.isenabled()
    gc.disable()
    try:
        cli(prog_name="noetl-celery")
    except NoetlError as exc:
        click.echo(f"Error: {one_line(exc)}", err=True)
        sys.exit(EXIT_INVALID)
    finally:
        _started()


def entry() -> None:
    """The console script and `python -m noetl_celery.cli.main`: `main`, then a short
    command's process ends without the interpreter's teardown (cli.quick_exit), its
    output flushed and its `atexit` handlers run. Anything but an exit (a crash, ^C)
    takes the ordinary path, traceback and all."""
    try:
        main()
        code: quick_exit.ExitCode = 0
    except SystemExit as exc:
        code = exc.code
    if not _short:
        sys.exit(code)
    quick_exit.end_now(code)


if __name__ == "__main__":
    entry()
