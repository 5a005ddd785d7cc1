"""`noetl-celery quarantine list|show|redrive`: the loop items an execution set aside (a
`do: quarantine` policy, `loop.spec.on_item_error: quarantine`), with their input,
error and runs, and a redrive running them again in a new execution linked to it."""

from __future__ import annotations

import contextlib
import json
import sys
from typing import Any

import click
from rich.table import Table

from noetl_celery.cli.common import InvalidInput, build_engine, dump_json, load_settings
from noetl_celery.cli.follow import follow, interrupt_policy, report
from noetl_celery.cli.inputs import parse_sets
from noetl_celery.cli.renderables import stdout_console
from noetl_celery.engine.bootstrap import Role
from noetl_celery.engine.summaries import preview
from noetl_celery.errors import BrokerUnavailable, ExecutionNotFound
from noetl_celery.passes.rerun import RerunError

# characters of an error message one `list` row shows (`show` prints it whole)
MESSAGE_CHARS = 80


@click.group()
def quarantine() -> None:
    """Quarantined loop items of an execution."""


@quarantine.command("list")
@click.argument("execution_id")
@click.option("--step", metavar="S", help="Only the items of loop step S.")
@click.option("--kind", metavar="K", help="Only the items whose error kind is K (timeout, ...).")
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object on stdout.")
def list_items(execution_id: str, step: str | None, kind: str | None, as_json: bool) -> None:
    """List the quarantined items of EXECUTION_ID: id (step:epoch:iteration), error kind
    and message, runs, and a preview of the item."""
    engine = build_engine(load_settings(), Role.READER)
    try:
        page = engine.quarantine(execution_id, step=step, kind=kind)
    finally:
        engine.close()
    if as_json:
        dump_json(page)
        return
    if not page["items"]:
        click.echo(f"execution {execution_id} has no quarantined items", err=True)
        return
    table = Table()
    for column in ("id", "kind", "runs", "item", "message", "redriven by"):
        table.add_column(column, no_wrap=column in ("id", "kind", "redriven by"))
    for item in page["items"]:
        message = item["message"]
        if len(message) > MESSAGE_CHARS:
            message = message[: MESSAGE_CHARS - 1] + "…"
        runs = "-" if item["runs"] is None else str(item["runs"])
        by = item["redriven_by"] or "-"
        table.add_row(item["id"], item["kind"], runs, preview(item["item"]), message, by)
    stdout_console().print(table)
    click.echo(f"{page['total']} quarantined", err=True)


@quarantine.command()
@click.argument("execution_id")
@click.argument("item_id", metavar="ITEM")
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object on stdout.")
def show(execution_id: str, item_id: str, as_json: bool) -> None:
    """Show one quarantined item of EXECUTION_ID in full: ITEM is its id
    (step:epoch:iteration, as `list` shows it)."""
    engine = build_engine(load_settings(), Role.READER)
    try:
        found = engine.quarantined_item(execution_id, item_id)
    finally:
        engine.close()
    if as_json:
        dump_json(found)
        return
    lines: list[tuple[str, Any]] = [
        ("id", found["id"]),
        ("kind", found["kind"]),
        ("message", found["message"]),
        ("runs", found["runs"]),
        ("attempt", found["attempt"]),
        ("quarantined at", found["quarantined_at"]),
        ("redriven by", found["redriven_by"]),
    ]
    for label, value in lines:
        click.echo(f"{label}: {'-' if value is None else value}")
    click.echo("item:")
    click.echo(json.dumps(found["item"], indent=2, default=str, ensure_ascii=False))
    click.echo("error:")
    click.echo(json.dumps(found["error"], indent=2, default=str, ensure_ascii=False))


@quarantine.command()
@click.argument("execution_id")
@click.argument("items", nargs=-1, metavar="[ITEM]...")
@click.option("--step", metavar="S", help="Only the items of loop step S.")
@click.option("--kind", metavar="K", help="Only the items whose error kind is K.")
@click.option(
    "--set", "sets", multiple=True, metavar="KEY=VALUE", help="Override a value (YAML-typed)."
)
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object on stdout.")
@click.option(
    "--timeout", type=click.FloatRange(min=0), default=None, help="Stop waiting after S seconds."
)
@click.option("--no-wait", is_flag=True, help="Print the new execution's id and return.")
@click.option("--cancel-on-interrupt", is_flag=True, help="Ctrl-C cancels without asking.")
def redrive(
    execution_id: str,
    items: tuple[str, ...],
    step: str | None,
    kind: str | None,
    sets: tuple[str, ...],
    as_json: bool,
    timeout: float | None,
    no_wait: bool,
    cancel_on_interrupt: bool,
) -> None:
    """Run the quarantined items of the ended execution EXECUTION_ID again, in a new
    execution linked to it (its rerun): the ITEMs named (step:epoch:iteration), or every
    one of --step / --kind not yet redriven. Waits like `run` (same output and exit
    codes)."""
    stdout = sys.stdout
    overrides = parse_sets(sets)
    settings = load_settings()
    if no_wait and settings.embedded:
        raise InvalidInput(
            "--no-wait needs workers (NOETL_BROKER_URL): an embedded redrive runs on this "
            "process's threads and would stop when it exits"
        )
    engine = build_engine(settings, Role.CLIENT)
    try:
        engine.check_broker()  # nothing is created while the broker cannot be reached
        with contextlib.redirect_stdout(sys.stderr):  # python steps print; stdout is ours
            try:
                new_id = engine.redrive(
                    execution_id, step=step, kind=kind, items=items, overrides=overrides
                )
            except (ExecutionNotFound, RerunError) as exc:
                raise InvalidInput(str(exc)) from exc
            except BrokerUnavailable as exc:
                if exc.execution_id is None:
                    raise
                new_id = exc.execution_id  # recorded, published when the broker is back
                click.echo(str(exc), err=True)
            if no_wait:
                summary = None
            else:
                if not as_json:
                    click.echo(f"execution {new_id} started (redrive of {execution_id})", err=True)
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
