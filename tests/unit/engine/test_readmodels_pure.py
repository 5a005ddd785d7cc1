"""Pure parts of the read models: a loop's rate and ETA, live loop totals, the graph."""

from __future__ import annotations

import datetime as dt

import pytest

from noetl_celery.engine.graph import build_graph, tool_kind
from noetl_celery.engine.readmodels import loop_items
from noetl_celery.engine.summaries import in_workflow_order, loop_pace
from noetl_celery.models.playbook import Step
from noetl_celery.models.validation import load_playbook
from noetl_celery.store.overview import LoopTotals

T0 = dt.datetime(2026, 11, 25, 12, 0, 0)


def at(seconds: float) -> dt.datetime:
    return T0 + dt.timedelta(seconds=seconds)


@pytest.mark.parametrize(
    ("done", "total", "started", "until", "cursor", "finished", "expected"),
    [
        (50, 100, T0, at(10), False, False, (5.0, 10.0)),  # 50 left at 5/s
        (0, 100, T0, at(10), False, False, (0.0, None)),  # nothing done: no ETA
        (100, 100, T0, at(20), False, True, (5.0, 0.0)),  # finished
        (30, 30, T0, at(3), False, False, (10.0, 0.0)),  # all done, not yet folded
        (50, None, T0, at(10), True, False, (5.0, None)),  # cursor: total unknown
        (50, 100, T0, at(10), True, False, (5.0, None)),  # cursor: never an ETA
        (50, 100, None, at(10), False, False, (None, None)),  # epoch from before 0008
        (5, 100, T0, T0, False, False, (None, None)),  # no time elapsed
        (1, 4, T0, at(3), False, False, (0.333, 9.0)),
    ],
)
def test_loop_pace(
    done: int,
    total: int | None,
    started: dt.datetime | None,
    until: dt.datetime,
    cursor: bool,
    finished: bool,
    expected: tuple[float | None, float | None],
) -> None:
    assert loop_pace(done, total, started, until, cursor=cursor, finished=finished) == expected


def test_loop_items_adds_open_epochs_live_counters() -> None:
    steps = {
        "a": {
            "status": "running",
            "loop": {"epoch": 2, "done": False, "succeeded": 7, "failed": 2},
        },
        "b": {
            "status": "completed",
            "loop": {"epoch": 1, "done": True, "succeeded": 9, "failed": 0},
        },
        "c": {"status": "completed"},
    }
    assert loop_items(LoopTotals(succeeded=10, failed=3, open_epochs=1), steps) == (22, 5)
    assert loop_items(LoopTotals(), {}) == (0, 0)


PLAYBOOK = """apiVersion: noetl.io/v2
kind: Playbook
metadata: {name: g}
workflow:
  - step: start
    tool: {kind: noop}
    next: {arcs: [{step: fetch}]}
  - step: fetch
    tool: {kind: http, url: "http://x"}
    next:
      spec: {mode: inclusive}
      arcs:
        - {step: save, when: "{{ fetch.ok }}"}
        - {step: alert, when: true}
  - step: save
    tool:
      - {name: a, kind: python, code: "result = 1"}
      - {name: b, kind: noop}
  - step: alert
    tool: {kind: noop}
"""


def test_build_graph_nodes_edges_and_statuses() -> None:
    playbook = load_playbook(PLAYBOOK)
    graph = build_graph(
        playbook, {"start": {"status": "completed"}, "fetch": {"status": "running"}}
    )
    assert graph["entry"] == "start"
    assert graph["nodes"] == [
        {"step": "start", "status": "completed", "tool": "noop"},
        {"step": "fetch", "status": "running", "tool": "http"},
        {"step": "save", "status": "pending", "tool": "pipeline"},
        {"step": "alert", "status": "pending", "tool": "noop"},
    ]
    assert graph["edges"] == [
        {"from": "start", "to": "fetch", "when": None},
        {"from": "fetch", "to": "save", "when": "{{ fetch.ok }}"},
        {"from": "fetch", "to": "alert", "when": "true"},
    ]
    assert tool_kind(Step(step="router")) == "noop"  # a step without tool runs as noop


@pytest.mark.parametrize(
    ("names", "order", "expected"),
    [
        # JSONB keeps object keys sorted by length: the playbook's order wins
        (["end", "each", "start"], ["start", "each", "end"], ["start", "each", "end"]),
        (["b", "a"], [], ["b", "a"]),  # no order known: as given
        # names the workflow does not declare keep their order, after it
        (["zz", "b", "yy", "a"], ["a", "b"], ["a", "b", "zz", "yy"]),
    ],
)
def test_steps_in_workflow_order(names: list[str], order: list[str], expected: list[str]) -> None:
    assert in_workflow_order(names, order) == expected
