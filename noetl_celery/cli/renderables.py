"""What operators see in a terminal: rich tables for `status` and `executions`, and the
live progress of `run` (pure functions from the engine's views to rich renderables)."""

from __future__ import annotations

import sys
from collections.abc import Mapping, Sequence
from typing import Any

from rich.console import Console, Group, RenderableType
from rich.progress_bar import ProgressBar
from rich.table import Table
from rich.text import Text

from noetl_celery.cli.progress import broker_text, now_text, waiting_text


def stdout_console() -> Console:
    """A terminal gets its own width; a pipe gets room enough that ids and paths are
    never cut (rich would assume 80 columns)."""
    return Console() if sys.stdout.isatty() else Console(width=200)


_STATUS_STYLE = {
    "COMPLETED": "green",
    "FAILED": "red",
    "CANCELLED": "yellow",
    "RUNNING": "cyan",
}


def _status(text: str) -> Text:
    return Text(text or "-", style=_STATUS_STYLE.get(text.upper(), ""))


def _loops(view: Mapping[str, Any], live: bool) -> Table | None:
    loops = [lp for lp in view["loops"] if not (live and lp["finished"])]
    if not loops:
        return None
    table = Table(title="loops", title_justify="left", expand=False)
    # `done` counts failed items too: shown as finished of total, then succeeded and
    # failed apart
    for column in (
        "step",
        "epoch",
        "mode",
        "progress",
        "finished",
        "succeeded",
        "failed",
        "quarantined",
        "in flight",
    ):
        table.add_column(column, justify="right" if column not in ("step", "mode") else "left")
    for lp in loops:
        total = lp["total"]
        bar: RenderableType = (
            ProgressBar(total=max(total, 1), completed=lp["done"], width=24)
            if total
            else Text("claiming" if lp["mode"] == "cursor" else "-")
        )
        table.add_row(
            lp["step"],
            str(lp["epoch"]),
            lp["mode"],
            bar,
            f"{lp['done']}/{'?' if total is None else total}",
            str(lp.get("succeeded", lp["done"] - lp["failed"])),
            str(lp["failed"]),
            str(lp.get("quarantined", 0)),
            str(lp["in_flight"]),
        )
    return table


def status_renderable(view: Mapping[str, Any]) -> RenderableType:
    """`noetl-celery status ID`: the execution, its steps, loops and errors."""
    head = Text.assemble(
        ("execution ", "bold"),
        (view["execution_id"], "bold"),
        "  ",
        _status(view["status"]),
        f"  {view['path']}  {view['duration_seconds']}s",
    )
    if view.get("rerun_of"):
        head.append(f"  rerun of {view['rerun_of']}")
    if view.get("quarantined"):
        head.append(f"  {view['quarantined']} quarantined", style="yellow")
    parts: list[RenderableType] = [head]
    if view.get("trace_id"):
        parts.append(Text(f"trace {view['trace_id']}", style="dim"))
    steps = Table(title="steps", title_justify="left")
    steps.add_column("step", no_wrap=True)
    steps.add_column("status")
    steps.add_column("runs", justify="right")
    steps.add_column("now")
    waiting = {w["step"]: w for w in view.get("waiting") or []}
    for st in view["steps"]:
        now = "running" if st["step"] in view["current"] else ""
        if st["step"] in waiting:
            now = waiting_text(waiting[st["step"]])
        steps.add_row(st["step"], _status(st["status"]), str(st["runs"]), now)
    parts.append(steps)
    loops = _loops(view, live=False)
    if loops is not None:
        parts.append(loops)
    for err in view["errors"]:
        parts.append(Text(f"error in {err.get('step')}: {err.get('message')}", style="red"))
    if view.get("error") and not view["errors"]:
        parts.append(Text(f"error: {view['error']}", style="red"))
    for step, report in (view.get("unfinished_rows") or {}).items():
        parts.append(Text(unfinished_text(view["execution_id"], step, report), style="yellow"))
    for event in view.get("deadline") or []:
        parts.append(Text(deadline_text(event), style="red"))
    for note in view.get("notifications") or []:
        parts.append(Text(notification_text(note), style="dim"))
    return Group(*parts)


def deadline_text(event: Mapping[str, Any]) -> str:
    """`deadline missed (due 2026-11-29T06:00:00Z)`, `deadline at risk (due ..., ETA ...)`."""
    word = "missed" if event.get("event") == "deadline.missed" else "at risk"
    eta = f", ETA {event['eta_at']}" if event.get("eta_at") else ""
    return f"deadline {word} (due {event.get('deadline_at')}{eta})"


def notification_text(note: Mapping[str, Any]) -> str:
    """One notification and its delivery."""
    what = f"notification {note['event']} -> {note['target']}: "
    if note.get("delivered_at"):
        return what + f"delivered {note['delivered_at']} (attempt {note['attempts']})"
    error = f", last error: {note['last_error']}" if note.get("last_error") else ""
    return what + f"pending after {note['attempts']} attempt(s){error}"


def unfinished_text(execution_id: str, step: str, report: Mapping[str, Any]) -> str:
    """One line about the rows a cursor step left claimed in the user's queue."""
    interrupted = report.get("interrupted") or []
    note = ""
    if interrupted and not report.get("truncated"):
        note = f" ({len(interrupted)} interrupted while running)"
    return (
        f"{step}: {report.get('count', 0)} claimed row(s) not processed{note}, still claimed "
        f"in your queue; list them: noetl-celery events {execution_id} --type "
        "cursor.unfinished --json"
    )


def progress_renderable(view: Mapping[str, Any]) -> RenderableType:
    """One frame of `run`'s live display: status, running steps, running loops."""
    parts: list[RenderableType] = [
        Text.assemble(
            _status(view["status"]),
            f"  {view['duration_seconds']:.1f}s  {now_text(view)}",
            f"  {broker_text(view['held_for_broker'])}" if view.get("held_for_broker") else "",
        )
    ]
    loops = _loops(view, live=True)
    if loops is not None:
        parts.append(loops)
    return Group(*parts)


def started_by(row: Mapping[str, Any]) -> str:
    """How an execution was started, for the `trigger` column: `manual`, `schedule 3
    catalog:flows/daily` (`(by hand)` for `schedule trigger`), `rerun of <id>`,
    `parent <id>`."""
    trigger = row.get("trigger") or ("parent" if row.get("parent_execution_id") else "manual")
    detail = row.get("trigger_detail") or {}
    if trigger == "schedule":
        text = f"schedule {detail.get('schedule_id', '?')}"
        if detail.get("schedule"):
            text += f" {detail['schedule']}"
        return text + (" (by hand)" if detail.get("manual") else "")
    if trigger == "rerun":
        return f"rerun of {row.get('rerun_of') or '?'}"
    if trigger == "parent":
        return f"parent {row.get('parent_execution_id') or '?'}"
    return str(trigger)


def executions_renderable(rows: Sequence[Mapping[str, Any]]) -> RenderableType:
    """`noetl-celery executions`: one row per execution, newest first."""
    columns = ["execution_id", "playbook", "status", "started (UTC)", "seconds", "trigger"]
    table = Table()
    for column in columns:
        # ids and paths are copied and grepped: never wrapped, even in a narrow pipe
        table.add_column(column, justify="right" if column == "seconds" else "left", no_wrap=True)
    for row in rows:
        table.add_row(
            row["execution_id"],
            row["path"],
            _status(row["status"]),
            row["created_at"].replace("T", " ")[:19],
            f"{row['duration_seconds']:.1f}",
            started_by(row),
        )
    return table


def catalog_renderable(rows: Sequence[Mapping[str, Any]]) -> RenderableType:
    """`noetl-celery catalog list`: one row per catalog path."""
    table = Table()
    for column in ("path", "name", "latest", "versions", "registered (UTC)"):
        numeric = column in ("latest", "versions")
        table.add_column(column, justify="right" if numeric else "left", no_wrap=True)
    for row in rows:
        table.add_row(
            row["path"],
            row["name"],
            f"v{row['latest_version']}",
            str(row["versions"]),
            row["registered_at"].replace("T", " ")[:19],
        )
    return table


def _utc(iso: str | None) -> str:
    return "-" if not iso else iso.replace("T", " ")[:19]


def schedules_renderable(rows: Sequence[Mapping[str, Any]]) -> RenderableType:
    """`noetl-celery schedule list`: one row per schedule (a paused one has no next
    firing until it is resumed)."""
    table = Table()
    columns = ("id", "name", "path", "cron", "timezone", "state", "next (UTC)", "last (UTC)")
    for column in columns:
        table.add_column(column, justify="right" if column == "id" else "left", no_wrap=True)
    for row in rows:
        table.add_row(
            str(row["schedule_id"]),
            row["name"] or Text(row["path"], style="dim"),  # no --name: its catalog path
            row["path"],
            row["cron"],
            row["timezone"],
            Text("enabled", style="green") if row["enabled"] else Text("paused", style="yellow"),
            _utc(row["next_fire_at"]),
            _utc(row["last_fire_at"]),
        )
    return table
