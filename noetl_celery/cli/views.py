"""What operators see in a terminal: rich tables for `status` and `executions`, and the
live progress of `run` (pure functions from the engine's views to rich renderables)."""

from __future__ import annotations

import sys
from typing import Any

from rich.console import Console, Group, RenderableType
from rich.progress_bar import ProgressBar
from rich.table import Table
from rich.text import Text


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


def _loops(view: dict[str, Any], live: bool) -> Table | None:
    loops = [lp for lp in view["loops"] if not (live and lp["finished"])]
    if not loops:
        return None
    table = Table(title="loops", title_justify="left", expand=False)
    for column in ("step", "epoch", "mode", "progress", "done", "failed", "in flight"):
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
            str(lp["failed"]),
            str(lp["in_flight"]),
        )
    return table


def status_renderable(view: dict[str, Any]) -> RenderableType:
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
    parts: list[RenderableType] = [head]
    steps = Table(title="steps", title_justify="left")
    steps.add_column("step", no_wrap=True)
    steps.add_column("status")
    steps.add_column("runs", justify="right")
    steps.add_column("now")
    for st in view["steps"]:
        running = "running" if st["step"] in view["current"] else ""
        steps.add_row(st["step"], _status(st["status"]), str(st["runs"]), running)
    parts.append(steps)
    loops = _loops(view, live=False)
    if loops is not None:
        parts.append(loops)
    for err in view["errors"]:
        parts.append(Text(f"error in {err.get('step')}: {err.get('message')}", style="red"))
    if view.get("error") and not view["errors"]:
        parts.append(Text(f"error: {view['error']}", style="red"))
    return Group(*parts)


def progress_renderable(view: dict[str, Any]) -> RenderableType:
    """One frame of `run`'s live display: status, running steps, running loops."""
    current = ", ".join(view["current"]) or "-"
    parts: list[RenderableType] = [
        Text.assemble(
            _status(view["status"]),
            f"  {view['duration_seconds']:.1f}s  running: {current}",
        )
    ]
    loops = _loops(view, live=True)
    if loops is not None:
        parts.append(loops)
    return Group(*parts)


def executions_renderable(rows: list[dict[str, Any]]) -> RenderableType:
    """`noetl-celery executions`: one row per execution, newest first."""
    # most runs are top-level: the parent column only appears when one has a parent
    columns = ["execution_id", "playbook", "status", "started (UTC)", "seconds"]
    with_parent = any(row.get("parent_execution_id") for row in rows)
    if with_parent:
        columns.append("parent")
    table = Table()
    for column in columns:
        # ids and paths are copied and grepped: never wrapped, even in a narrow pipe
        table.add_column(column, justify="right" if column == "seconds" else "left", no_wrap=True)
    for row in rows:
        cells: list[RenderableType] = [
            row["execution_id"],
            row["path"],
            _status(row["status"]),
            row["created_at"].replace("T", " ")[:19],
            f"{row['duration_seconds']:.1f}",
        ]
        if with_parent:
            cells.append(row.get("parent_execution_id") or "")
        table.add_row(*cells)
    return table
