"""`noetl-celery quarantine list|show|redrive`: the loop items an execution set aside (a
`do: quarantine` policy, `loop.spec.on_item_error: quarantine`), with their input,
error and runs, and a redrive running them again in a new execution linked to it."""

from __future__ import annotations

import json
from typing import Any

import click
from rich.table import Table

from noetl_celery.cli.common import build_engine, dump_json, load_settings
from noetl_celery.cli.inputs import parse_sets
from noetl_celery.cli.renderables import stdout_console
from noetl_celery.cli.rerun import run_linked
from noetl_celery.engine.bootstrap import Role
from noetl_celery.engine.summaries import preview

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
    overrides = parse_sets(sets)
    run_linked(
        execution_id,
        "redrive",
        lambda engine: engine.redrive(
            execution_id, step=step, kind=kind, items=items, overrides=overrides
        ),
        as_json=as_json,
        timeout=timeout,
        no_wait=no_wait,
        cancel_on_interrupt=cancel_on_interrupt,
    )
