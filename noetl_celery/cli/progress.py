"""Progress lines for `run` / `watch` off a terminal (pure: views and times in, text out).

    RUNNING 42.0s  running: audit
    RUNNING 42.0s  fetch_pages: 1234/5000 (24.7%) 31.2/s ETA 2m01s  failed 3

The rate is measured over the last `RATE_WINDOW` seconds of samples (not since the
start: a loop that slowed down says so), and the ETA is the remaining items at that rate.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Mapping
from typing import Any

from noetl_celery.models.durations import format_duration

RATE_WINDOW = 30.0

LoopKey = tuple[str, int]


class Rates:
    """Items finished per second of each loop epoch, over a recent window."""

    def __init__(self, window: float = RATE_WINDOW) -> None:
        self.window = window
        self._samples: dict[LoopKey, deque[tuple[float, int]]] = {}

    def observe(self, view: Mapping[str, Any], now: float) -> None:
        for lp in view["loops"]:
            key = (lp["step"], lp["epoch"])
            if lp["finished"]:
                self._samples.pop(key, None)
                continue
            samples = self._samples.setdefault(key, deque())
            samples.append((now, lp["done"]))
            # keep the newest sample at or before the window's start: the rate then
            # spans the whole window
            while len(samples) > 2 and samples[1][0] <= now - self.window:
                samples.popleft()

    def rate(self, key: LoopKey) -> float | None:
        samples = self._samples.get(key)
        if not samples or len(samples) < 2:
            return None
        (t0, d0), (t1, d1) = samples[0], samples[-1]
        return (d1 - d0) / (t1 - t0) if t1 > t0 else None


def loop_line(lp: Mapping[str, Any], rate: float | None) -> str:
    name = lp["step"] if lp["epoch"] <= 1 else f"{lp['step']} (epoch {lp['epoch']})"
    done, total = lp["done"], lp["total"]
    if total and lp["mode"] != "cursor":
        text = f"{name}: {done}/{total} ({100 * done / total:.1f}%)"
    else:  # a cursor's total grows as it claims: the count is what there is
        text = f"{name}: {done} done"
    if rate is not None:
        text += f" {rate:.1f}/s"
        if total and lp["mode"] != "cursor" and rate > 0:
            text += f" ETA {format_duration(max(0, total - done) / rate)}"
    if lp["failed"]:
        text += f"  failed {lp['failed']}"
    return text


def progress_lines(view: Mapping[str, Any], rates: Rates, elapsed: float) -> list[str]:
    """What to print for one sample: a line per running loop, and one naming the other
    running steps (always one line at least: a quiet pipeline still says it lives)."""
    head = f"{view['status']} {elapsed:.1f}s"
    running = [lp for lp in view["loops"] if not lp["finished"]]
    looping = {lp["step"] for lp in running}
    steps = [name for name in view["current"] if name not in looping]
    # a command no worker has taken is not running: say so (no worker, or all busy)
    waiting = [w for w in view.get("waiting") or [] if w["step"] not in looping]
    lines = [f"{head}  {loop_line(lp, rates.rate((lp['step'], lp['epoch'])))}" for lp in running]
    if steps or waiting or not lines:
        lines.insert(0, f"{head}  {now_text({'current': steps, 'waiting': waiting})}")
    held = view.get("held_for_broker") or 0
    if held:  # a rate of 0.0/s with no reason would look like a hang
        lines[0] += f"  {broker_text(held)}"
    return lines


def broker_text(held: int) -> str:
    """Commands the broker could not take, held until it is back (engine.outbox)."""
    return f"{held} command{'s' if held != 1 else ''} waiting for the broker"


def waiting_text(waiting: Mapping[str, Any]) -> str:
    """`waiting for a worker (12s)`; a routed step names its queue, the pool that must
    take it (`worker -Q io`)."""
    seconds = waiting.get("seconds")
    queue = waiting.get("queue")
    text = "waiting for a worker" + (f" on queue {queue}" if queue else "")
    return text + (f" ({seconds:.0f}s)" if seconds is not None else "")


def now_text(view: Mapping[str, Any]) -> str:
    """What runs now: claimed steps, and steps issued that no worker has taken (a
    command nobody took is not "running")."""
    parts = []
    if view["current"]:
        parts.append("running: " + ", ".join(view["current"]))
    for waiting in view.get("waiting") or []:
        parts.append(f"{waiting_text(waiting)}: {waiting['step']}")
    return "  ".join(parts) or "running: -"
