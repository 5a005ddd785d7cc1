"""`noetl-celery rerun ID`: run an ended execution again (same catalog version, same
payload plus --set), from the start, from a step, or over its loops' failed items."""

from __future__ import annotations

import contextlib
import sys
from collections.abc import Callable

import click

from noetl_celery.cli.common import InvalidInput, build_engine, dump_json, load_settings
from noetl_celery.cli.follow import follow, interrupt_policy, report
from noetl_celery.cli.inputs import parse_sets
from noetl_celery.engine.bootstrap import Role
from noetl_celery.engine.service import Engine
from noetl_celery.errors import BrokerUnavailable, ExecutionNotFound
from noetl_celery.passes.rerun import RerunError


@click.command()
@click.argument("execution_id")
@click.option(
    "--from",
    "from_step",
    metavar="STEP",
    help="Start at STEP, with the variables and earlier results it saw in the original.",
)
@click.option(
    "--failed-items",
    is_flag=True,
    help="Run only the failed items of the original's loops, then go on along the flow.",
)
@click.option(
    "--set", "sets", multiple=True, metavar="KEY=VALUE", help="Override a value (YAML-typed)."
)
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object on stdout.")
@click.option(
    "--timeout", type=click.FloatRange(min=0), default=None, help="Stop waiting after S seconds."
)
@click.option("--no-wait", is_flag=True, help="Print the new execution's id and return.")
@click.option("--cancel-on-interrupt", is_flag=True, help="Ctrl-C cancels without asking.")
def rerun(
    execution_id: str,
    from_step: str | None,
    failed_items: bool,
    sets: tuple[str, ...],
    as_json: bool,
    timeout: float | None,
    no_wait: bool,
    cancel_on_interrupt: bool,
) -> None:
    """Start a new execution repeating the ended execution ID (recorded as its rerun)
    and wait for it like `run` (same output and exit codes)."""
    overrides = parse_sets(sets)
    run_linked(
        execution_id,
        "rerun",
        lambda engine: engine.rerun(
            execution_id, from_step=from_step, failed_items=failed_items, overrides=overrides
        ),
        as_json=as_json,
        timeout=timeout,
        no_wait=no_wait,
        cancel_on_interrupt=cancel_on_interrupt,
    )


def run_linked(
    execution_id: str,
    what: str,
    start: Callable[[Engine], str],
    *,
    as_json: bool,
    timeout: float | None,
    no_wait: bool,
    cancel_on_interrupt: bool,
) -> None:
    """Start a new execution linked to the ended `execution_id` (`what`: a rerun or a
    redrive; `start` makes it and answers its id), then wait for it like `run` (same
    output and exit codes), or print its id with `no_wait`."""
    stdout = sys.stdout
    settings = load_settings()
    if no_wait and settings.embedded:
        raise InvalidInput(
            f"--no-wait needs workers (NOETL_BROKER_URL): an embedded {what} runs on this "
            "process's threads and would stop when it exits"
        )
    engine = build_engine(settings, Role.CLIENT)
    try:
        engine.check_broker()  # nothing is created while the broker cannot be reached
        with contextlib.redirect_stdout(sys.stderr):  # python steps print; stdout is ours
            try:
                new_id = start(engine)
            except (ExecutionNotFound, RerunError) as exc:
                raise InvalidInput(str(exc)) from exc
            except BrokerUnavailable as exc:
                if exc.execution_id is None:
                    raise
                # the broker went away since the check: recorded, published when back
                new_id = exc.execution_id
                click.echo(str(exc), err=True)
            if no_wait:
                summary = None
            else:
                if not as_json:
                    click.echo(f"execution {new_id} started ({what} of {execution_id})", err=True)
                try:
                    follow(
                        engine,
                        new_id,
                        timeout=timeout,
                        live=not as_json and sys.stderr.isatty(),
                        interrupt=interrupt_policy(cancel_on_interrupt),
                        owns_workers=engine.settings.embedded,
                    )
                except TimeoutError as exc:
                    click.echo(str(exc), err=True)
                summary = engine.summary(new_id)
    finally:
        engine.close()
    if summary is None:
        if as_json:
            dump_json({"execution_id": new_id, "rerun_of": execution_id}, stdout)
        else:
            click.echo(new_id, file=stdout)
        return
    sys.exit(report(summary, as_json=as_json, stdout=stdout))
