"""Pure shaping for the pages: the engine's read models in, template context out.

Durations and ETAs as short text (`models.durations.format_duration`, the CLI's wording),
progress percentages, a colour per status, paging links, and the step graph laid out as
SVG: layers by breadth-first distance from the steps nothing points to (loop-backs drawn
as curves on the side), so no JavaScript graph library is needed.
"""

from __future__ import annotations

import datetime as dt
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from noetl_celery.constants import StepStatus
from noetl_celery.models.durations import format_duration

# status (execution or step, any case) -> CSS class suffix and SVG fill
STATUS_COLOURS: dict[str, tuple[str, str]] = {
    "running": ("running", "#0d6efd"),
    "completed": ("completed", "#198754"),
    "failed": ("failed", "#dc3545"),
    "cancelled": ("cancelled", "#fd7e14"),
    "stopped": ("cancelled", "#fd7e14"),  # left running by an execution that ended
    "pending": ("pending", "#adb5bd"),  # not reached (engine.graph)
    "": ("pending", "#adb5bd"),
}
TERMINAL = frozenset({"COMPLETED", "FAILED", "CANCELLED"})

# graph geometry (SVG user units)
NODE_W, NODE_H = 150, 34
GAP_X, GAP_Y = 30, 46
MARGIN = 20
MAX_LABEL = 20


def status_class(status: str | None) -> str:
    return STATUS_COLOURS.get((status or "").lower(), ("other", "#6c757d"))[0]


def status_fill(status: str | None) -> str:
    return STATUS_COLOURS.get((status or "").lower(), ("other", "#6c757d"))[1]


def duration_text(seconds: float | None) -> str:
    return "" if seconds is None else format_duration(seconds)


def percent(done: int, total: int | None) -> float | None:
    """Share done, 0-100 (one decimal), None when the total is unknown or zero."""
    if not total or total <= 0:
        return None
    return round(min(100.0, max(0.0, 100.0 * done / total)), 1)


def rate_text(rate: float | None) -> str:
    return "" if rate is None else f"{rate:.1f}/s"


def time_text(iso: str | None) -> str:
    """`2026-11-25T01:02:03.456789Z` -> `2026-11-25 01:02:03` (UTC, as stored)."""
    if not iso:
        return ""
    try:
        value = dt.datetime.fromisoformat(iso.rstrip("Z"))
    except ValueError:
        return iso
    return value.strftime("%Y-%m-%d %H:%M:%S")


def zoned_times(iso: str | None, timezone: str | None) -> tuple[str, str]:
    """A stored UTC time (`2026-11-25T02:00:00Z`) as (the schedule's own zone's wall
    clock with the zone's abbreviation, UTC); the first is empty when the zone is UTC
    (or unknown: the second alone then says it)."""
    utc = time_text(iso)
    if not utc or not timezone or timezone.upper() in ("UTC", "ETC/UTC", "Z"):
        return "", utc
    try:
        zone = ZoneInfo(timezone)
        value = dt.datetime.fromisoformat(str(iso).rstrip("Z")).replace(tzinfo=dt.UTC)
    except (ZoneInfoNotFoundError, ValueError):
        return "", utc
    local = value.astimezone(zone)
    return f"{local.strftime('%Y-%m-%d %H:%M:%S')} {local.tzname() or timezone}", utc


def schedule_row(line: Mapping[str, Any]) -> dict[str, Any]:
    """A schedule (`Schedule.to_json`) for the Schedules page: next and last firing in
    its own time zone and in UTC, and its catalog path as the name when it has none
    (`schedule add` without `--name`)."""
    timezone = line.get("timezone")
    next_local, next_utc = zoned_times(line.get("next_fire_at"), timezone)
    last_local, last_utc = zoned_times(line.get("last_fire_at"), timezone)
    return {
        **line,
        "title": line.get("name") or line.get("path") or "",
        "named": bool(line.get("name")),
        "next_local": next_local,
        "next": next_utc,
        "last_local": last_local,
        "last": last_utc,
    }


MESSAGE_LINE_CHARS = 160  # of a failed item's error shown on its row


def message_line(message: Any, limit: int = MESSAGE_LINE_CHARS) -> str:
    """A failed item's error as one short line for its row: a traceback's last line
    (the exception), else the first line, cut at `limit` characters. The whole text
    stays in the row's details; the template escapes both."""
    lines = [line.strip() for line in str(message or "").splitlines() if line.strip()]
    if not lines:
        return ""
    line = lines[-1] if lines[0].startswith("Traceback") else lines[0]
    more = len(lines) > 1 and line == lines[0]
    text = short(line, limit)
    return text + " …" if more and not text.endswith("…") else text


def short(text: str | None, limit: int) -> str:
    text = text or ""
    return text if len(text) <= limit else text[: limit - 1] + "…"


def execution_row(line: Mapping[str, Any]) -> dict[str, Any]:
    """An executions-list line (engine `executions_page`) as a table row."""
    return {
        **line,
        "status_class": status_class(line.get("status")),
        "started": time_text(line.get("created_at")),
        "duration": duration_text(line.get("duration_seconds")),
        "items_done": line.get("items_done") or 0,
        # given when items were quarantined too (neither succeeded nor failed)
        "items_succeeded": line.get(
            "items_succeeded", (line.get("items_done") or 0) - (line.get("items_failed") or 0)
        ),
        "items_failed": line.get("items_failed") or 0,
    }


def loop_row(lp: Mapping[str, Any], *, ended: bool = False) -> dict[str, Any]:
    """A loop epoch of `detail` with its bar width, rate and ETA as text. An unfinished
    epoch of an execution that has `ended` (cancelled, failed, timed out) is stopped:
    no ETA, nothing in flight."""
    cursor = lp.get("mode") == "cursor"  # a cursor's total grows as it claims
    total = None if cursor else lp.get("total")
    pct = percent(int(lp.get("done") or 0), total)
    eta = lp.get("eta_seconds")
    stopped = ended and not lp.get("finished")
    return {
        **lp,
        # `done` counts failed items too: the pages show succeeded and failed apart
        "succeeded": lp.get("succeeded", int(lp.get("done") or 0) - int(lp.get("failed") or 0)),
        "label": lp["step"] if (lp.get("epoch") or 1) <= 1 else f"{lp['step']} #{lp['epoch']}",
        "percent": pct,
        "bar": 100.0 if lp.get("finished") and pct is None else (pct or 0.0),
        "rate": rate_text(lp.get("rate_per_second")),
        "eta": "" if lp.get("finished") or stopped or eta is None else format_duration(eta),
        "in_flight": 0 if stopped else lp.get("in_flight") or 0,
        "started": time_text(lp.get("started_at")),
        "state": "finished" if lp.get("finished") else "stopped" if stopped else "running",
    }


def item_totals(loops: Sequence[Mapping[str, Any]]) -> tuple[int, int]:
    """(items finished, of which failed) over an execution's loop epochs."""
    return (
        sum(int(lp.get("done") or 0) for lp in loops),
        sum(int(lp.get("failed") or 0) for lp in loops),
    )


@dataclass(frozen=True)
class Pager:
    total: int
    limit: int
    offset: int

    @property
    def first(self) -> int:
        return 0 if self.total == 0 else min(self.offset + 1, self.total)

    @property
    def last(self) -> int:
        return min(self.offset + self.limit, self.total)

    @property
    def prev_offset(self) -> int | None:
        return None if self.offset <= 0 else max(0, self.offset - self.limit)

    @property
    def next_offset(self) -> int | None:
        return self.offset + self.limit if self.offset + self.limit < self.total else None


def bounded(value: str | None, default: int, maximum: int, minimum: int = 0) -> int:
    """A numeric query parameter, clamped; anything unparsable is the default."""
    try:
        number = int(value) if value not in (None, "") else default
    except (TypeError, ValueError):
        return default
    return max(minimum, min(maximum, number))


# ---- the step graph ---------------------------------------------------------------------------


def layers(
    nodes: Sequence[str], edges: Sequence[tuple[str, str]], entry: str | None = None
) -> dict[str, int]:
    """Each step's layer: its breadth-first distance from the roots (the entry step and
    the steps with no incoming edge, else the first step). Steps no root reaches start
    new layers below."""
    known = set(nodes)
    targets: dict[str, list[str]] = {n: [] for n in nodes}
    incoming: set[str] = set()
    for a, b in edges:
        if a in known and b in known and a != b:
            targets[a].append(b)
            incoming.add(b)
    roots = [n for n in nodes if n not in incoming] or list(nodes[:1])
    if entry in known and entry not in roots:
        roots.insert(0, entry)
    layer: dict[str, int] = {}
    frontier = list(roots)
    for r in roots:
        layer[r] = 0
    while True:
        while frontier:
            nxt: list[str] = []
            for n in frontier:
                for t in targets[n]:
                    if t not in layer:
                        layer[t] = layer[n] + 1
                        nxt.append(t)
            frontier = nxt
        rest = [n for n in nodes if n not in layer]
        if not rest:
            return layer
        layer[rest[0]] = max(layer.values(), default=-1) + 1
        frontier = [rest[0]]


def node_status(status: str | None, ended: bool) -> str:
    """A step's status as drawn: a step still `running` in the state of an execution that
    has ended was stopped there."""
    status = status or "pending"
    return "stopped" if ended and status == StepStatus.RUNNING else status


def graph_layout(graph: Mapping[str, Any], *, ended: bool = False) -> dict[str, Any]:
    """`engine.graph` (`nodes: [{step, status, tool}]`, `edges: [{from, to, when}]`) as
    SVG geometry: boxes per layer (rows, top to bottom) and an edge path per arc; with
    `ended`, a step left running is drawn stopped."""
    raw_nodes = [
        {**n, "status": node_status(n.get("status"), ended)} for n in graph.get("nodes") or []
    ]
    names = [str(n["step"]) for n in raw_nodes]
    pairs = [(str(e["from"]), str(e["to"])) for e in graph.get("edges") or []]
    layer_of = layers(names, pairs, graph.get("entry"))
    rows: dict[int, list[str]] = {}
    for name in names:
        rows.setdefault(layer_of[name], []).append(name)
    widest = max((len(r) for r in rows.values()), default=0)
    width: float = 2 * MARGIN + widest * NODE_W + max(0, widest - 1) * GAP_X
    pos: dict[str, tuple[float, float]] = {}
    for index, row in rows.items():
        row_w = len(row) * NODE_W + (len(row) - 1) * GAP_X
        left = (width - row_w) / 2
        for i, name in enumerate(row):
            pos[name] = (left + i * (NODE_W + GAP_X), MARGIN + index * (NODE_H + GAP_Y))
    nodes = []
    for n in raw_nodes:
        x, y = pos[str(n["step"])]
        nodes.append(
            {
                "step": n["step"],
                "label": short(str(n["step"]), MAX_LABEL),
                "tool": n.get("tool") or "",
                "status": n.get("status") or "",
                "class": status_class(n.get("status")),
                "fill": status_fill(n.get("status")),
                "x": x,
                "y": y,
                "cx": x + NODE_W / 2,
                "ty": y + NODE_H / 2 + 4,
            }
        )
    edges = []
    backs = 0
    for e in graph.get("edges") or []:
        a, b = str(e["from"]), str(e["to"])
        if a not in pos or b not in pos:
            continue
        if pos[b][1] > pos[a][1]:
            path = _down_path(pos[a], pos[b])
        else:  # a loop-back: round the right of every box of the rows it spans
            low, high = sorted((pos[a][1], pos[b][1]))
            right = max(x + NODE_W for x, y in pos.values() if low <= y <= high)
            backs += 1
            path = _back_path(pos[a], pos[b], right + GAP_X / 2 + 10 * backs)
        edges.append({"from": a, "to": b, "when": e.get("when") or "", "d": path})
    height = 2 * MARGIN + len(rows) * NODE_H + max(0, len(rows) - 1) * GAP_Y
    width = max(width, widest_right(pos) + MARGIN + (GAP_X + 10 * backs if backs else 0))
    return {
        "width": width,
        "height": height,
        "nodes": nodes,
        "edges": edges,
        "node_w": NODE_W,
        "node_h": NODE_H,
    }


def widest_right(pos: Mapping[str, tuple[float, float]]) -> float:
    return max((x + NODE_W for x, _ in pos.values()), default=0.0)


def _down_path(a: tuple[float, float], b: tuple[float, float]) -> str:
    """Bottom centre of `a` to top centre of `b`, as a smooth S."""
    x1, y1, x2, y2 = a[0] + NODE_W / 2, a[1] + NODE_H, b[0] + NODE_W / 2, b[1]
    mid = (y1 + y2) / 2
    return f"M{x1:.0f},{y1:.0f} C{x1:.0f},{mid:.0f} {x2:.0f},{mid:.0f} {x2:.0f},{y2:.0f}"


def _back_path(a: tuple[float, float], b: tuple[float, float], out: float) -> str:
    """Right side of `a`, out to x=`out`, back to the right side of `b`."""
    x1, y1, x2, y2 = a[0] + NODE_W, a[1] + NODE_H / 2, b[0] + NODE_W, b[1] + NODE_H / 2
    return (
        f"M{x1:.0f},{y1:.0f} C{out:.0f},{y1:.0f} {out:.0f},{y1:.0f} {out:.0f},{(y1 + y2) / 2:.0f}"
        f" S{out:.0f},{y2:.0f} {x2:.0f},{y2:.0f}"
    )


# ---- Flower's task rows --------------------------------------------------------------------

_READABLE = re.compile(r"execution=([A-Za-z0-9_.\-]+)")
_RAW = re.compile(r"""^\s*[\[(]?\s*['"]([A-Za-z0-9_.\-]+):""")


def execution_id_of(args: str | None) -> str | None:
    """The execution a `noetl.execute_command` task is about, from the arguments Flower
    shows: `execution=ID step=... command=...` (tasks.dispatcher's argsrepr) or the raw
    `['ID:step:epoch...']` (a command id: the execution id is before the first `:`)."""
    if not args:
        return None
    found = _READABLE.search(args) or _RAW.match(args)
    return found.group(1) if found else None
