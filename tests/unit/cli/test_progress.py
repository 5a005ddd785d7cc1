"""Progress lines of `run` / `watch` off a terminal: rate over a window, ETA."""

from __future__ import annotations

from typing import Any

from noetl_celery.cli.progress import Rates, progress_lines


def view(
    done: int, *, total: int | None = 5000, mode: str = "parallel", **kw: Any
) -> dict[str, Any]:
    loop = {
        "step": "fetch_pages",
        "epoch": 1,
        "mode": mode,
        "total": total,
        "done": done,
        "failed": kw.get("failed", 0),
        "finished": kw.get("finished", False),
    }
    return {"status": "RUNNING", "current": kw.get("current", ["fetch_pages"]), "loops": [loop]}


def test_first_sample_has_no_rate_then_rate_and_eta() -> None:
    rates = Rates()
    rates.observe(view(0), 0.0)
    assert progress_lines(view(0), rates, 0.0) == ["RUNNING 0.0s  fetch_pages: 0/5000 (0.0%)"]
    rates.observe(view(1234, failed=3), 39.5)
    assert progress_lines(view(1234, failed=3), rates, 42.0) == [
        "RUNNING 42.0s  fetch_pages: 1234/5000 (24.7%) 31.2/s ETA 2m01s  failed 3"
    ]


def test_the_rate_is_over_the_recent_window_only() -> None:
    rates = Rates(window=30)
    for t, done in ((0, 0), (10, 1000), (20, 2000), (30, 2010), (40, 2020), (50, 2030)):
        rates.observe(view(done), float(t))
    # the fast start is outside the window: 30 items in the last 30 s
    assert rates.rate(("fetch_pages", 1)) == 1.0


def test_cursor_loops_count_without_a_total_and_other_steps_get_a_line() -> None:
    rates = Rates()
    v = view(70, total=80, mode="cursor", current=["drain", "audit"])
    v["loops"][0]["step"] = "drain"
    rates.observe(v, 0.0)
    rates.observe(v | {"loops": [dict(v["loops"][0], done=90)]}, 10.0)
    v["loops"][0]["done"] = 90
    assert progress_lines(v, rates, 12.0) == [
        "RUNNING 12.0s  running: audit",
        "RUNNING 12.0s  drain: 90 done 2.0/s",
    ]


def test_a_quiet_execution_still_gets_a_line_and_finished_loops_none() -> None:
    rates = Rates()
    v = view(5000, finished=True, current=[])
    rates.observe(v, 0.0)
    assert progress_lines(v, rates, 3.0) == ["RUNNING 3.0s  running: -"]


def test_a_command_no_worker_took_is_reported_as_waiting() -> None:
    rates = Rates()
    v = view(0, finished=True, current=[])
    v["waiting"] = [{"step": "start", "commands": 1, "seconds": 11.6}]
    rates.observe(v, 0.0)
    assert progress_lines(v, rates, 12.0) == ["RUNNING 12.0s  waiting for a worker (12s): start"]
    # a routed step names the queue whose pool must take it
    v["waiting"] = [{"step": "fetch", "commands": 4, "seconds": 30.2, "queue": "io"}]
    assert progress_lines(v, rates, 31.0) == [
        "RUNNING 31.0s  waiting for a worker on queue io (30s): fetch"
    ]


def test_commands_held_for_the_broker_are_named_instead_of_a_bare_rate() -> None:
    rates = Rates()
    waiting = {**view(10), "held_for_broker": 3}
    rates.observe(waiting, 0.0)
    rates.observe(waiting, 5.0)
    assert progress_lines(waiting, rates, 5.0) == [
        "RUNNING 5.0s  fetch_pages: 10/5000 (0.2%) 0.0/s  3 commands waiting for the broker"
    ]
    one = {**view(10), "held_for_broker": 1}
    assert progress_lines(one, Rates(), 1.0)[0].endswith("1 command waiting for the broker")
