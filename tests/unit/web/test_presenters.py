"""The pages' pure shaping: durations, progress, paging, the graph's layout, the task
arguments Flower shows."""

from __future__ import annotations

from typing import Any

import pytest

from noetl_celery.web.pages import presenters
from noetl_celery.web.pages.presenters import Pager


@pytest.mark.parametrize(
    ("seconds", "text"),
    [(None, ""), (0, "0s"), (4.6, "5s"), (59.4, "59s"), (61, "1m01s"), (3720, "1h02m")],
)
def test_duration_text(seconds: float | None, text: str) -> None:
    assert presenters.duration_text(seconds) == text


@pytest.mark.parametrize(
    ("done", "total", "pct"),
    [(0, 300, 0.0), (150, 300, 50.0), (1, 3, 33.3), (5, 0, None), (5, None, None), (9, 5, 100.0)],
)
def test_percent(done: int, total: int | None, pct: float | None) -> None:
    assert presenters.percent(done, total) == pct


@pytest.mark.parametrize(
    ("status", "cls"),
    [
        ("RUNNING", "running"),
        ("completed", "completed"),
        ("FAILED", "failed"),
        ("CANCELLED", "cancelled"),
        ("pending", "pending"),
        ("", "pending"),
        (None, "pending"),
        ("weird", "other"),
    ],
)
def test_status_class(status: str | None, cls: str) -> None:
    assert presenters.status_class(status) == cls


def loop(**kw: Any) -> dict[str, Any]:
    base = {
        "step": "each",
        "epoch": 1,
        "mode": "parallel",
        "total": 300,
        "done": 75,
        "succeeded": 70,
        "failed": 5,
        "in_flight": 5,
        "finished": False,
        "rate_per_second": 12.345,
        "eta_seconds": 18.2,
        "started_at": "2026-11-25T01:02:03.5Z",
    }
    return {**base, **kw}


def test_loop_row_running() -> None:
    row = presenters.loop_row(loop())
    assert row["percent"] == 25.0 and row["bar"] == 25.0
    assert row["rate"] == "12.3/s" and row["eta"] == "18s"
    assert row["started"] == "2026-11-25 01:02:03" and row["label"] == "each"
    assert row["state"] == "running"


def test_loop_row_finished_and_later_epochs() -> None:
    row = presenters.loop_row(loop(done=300, finished=True, eta_seconds=0.0, epoch=2))
    assert row["bar"] == 100.0 and row["eta"] == "" and row["state"] == "finished"
    assert row["label"] == "each #2"


def test_loop_row_cursor_has_no_percentage() -> None:
    row = presenters.loop_row(loop(mode="cursor", total=40, eta_seconds=None))
    assert row["percent"] is None and row["bar"] == 0.0 and row["eta"] == ""
    done = presenters.loop_row(loop(mode="cursor", total=40, finished=True))
    assert done["bar"] == 100.0


@pytest.mark.parametrize(
    ("total", "limit", "offset", "first", "last", "prev", "nxt"),
    [
        (0, 50, 0, 0, 0, None, None),
        (120, 50, 0, 1, 50, None, 50),
        (120, 50, 50, 51, 100, 0, 100),
        (120, 50, 100, 101, 120, 50, None),
        (2000, 50, 30, 31, 80, 0, 80),
    ],
)
def test_pager(
    total: int, limit: int, offset: int, first: int, last: int, prev: int | None, nxt: int | None
) -> None:
    p = Pager(total, limit, offset)
    assert (p.first, p.last, p.prev_offset, p.next_offset) == (first, last, prev, nxt)


@pytest.mark.parametrize(
    ("value", "result"),
    [(None, 50), ("", 50), ("20", 20), ("x", 50), ("-3", 1), ("100000", 200)],
)
def test_bounded(value: str | None, result: int) -> None:
    assert presenters.bounded(value, 50, 200, 1) == result


def edges(*pairs: str) -> list[tuple[str, str]]:
    return [(p.split(">")[0], p.split(">")[1]) for p in pairs]


@pytest.mark.parametrize(
    ("nodes", "arcs", "entry", "expected"),
    [
        # a chain
        ("a b c", ["a>b", "b>c"], None, {"a": 0, "b": 1, "c": 2}),
        # a fork and a join: the join sits at its shortest distance
        ("s x y e", ["s>x", "s>y", "x>e", "y>e"], None, {"s": 0, "x": 1, "y": 1, "e": 2}),
        # a loop-back does not push the start down
        (
            "start work end",
            ["start>work", "work>start", "work>end"],
            "start",
            {"start": 0, "work": 1, "end": 2},
        ),
        # everything in a cycle: the entry (else the first step) is the root
        ("a b", ["a>b", "b>a"], None, {"a": 0, "b": 1}),
        # a cycle no root reaches starts a layer of its own below
        ("a b x y", ["a>b", "x>y", "y>x"], "a", {"a": 0, "b": 1, "x": 2, "y": 3}),
        # a step pointing only at itself is a root
        ("a lone", ["lone>lone"], "a", {"a": 0, "lone": 0}),
        # unknown targets are ignored
        ("a", ["a>ghost"], None, {"a": 0}),
    ],
)
def test_layers(nodes: str, arcs: list[str], entry: str | None, expected: dict[str, int]) -> None:
    assert presenters.layers(nodes.split(), edges(*arcs), entry) == expected


def graph(nodes: list[tuple[str, str]], arcs: list[str]) -> dict[str, Any]:
    return {
        "entry": nodes[0][0],
        "nodes": [{"step": s, "status": st, "tool": "python"} for s, st in nodes],
        "edges": [{"from": a, "to": b, "when": None} for a, b in edges(*arcs)],
    }


def test_graph_layout_places_layers_top_to_bottom_and_colours_by_status() -> None:
    g = presenters.graph_layout(
        graph(
            [("start", "completed"), ("x", "running"), ("y", "failed"), ("end", "pending")],
            ["start>x", "start>y", "x>end", "y>end"],
        )
    )
    at = {n["step"]: n for n in g["nodes"]}
    assert at["start"]["y"] < at["x"]["y"] == at["y"]["y"] < at["end"]["y"]
    assert at["x"]["x"] < at["y"]["x"]  # workflow order within a layer
    # rows are centred: the lone start sits between the two of the next layer
    assert at["x"]["cx"] < at["start"]["cx"] < at["y"]["cx"]
    assert [at[s]["fill"] for s in ("start", "x", "y", "end")] == [
        "#198754",
        "#0d6efd",
        "#dc3545",
        "#adb5bd",
    ]
    assert at["y"]["class"] == "failed"
    assert len(g["edges"]) == 4 and all(e["d"].startswith("M") for e in g["edges"])
    for node in g["nodes"]:  # everything inside the canvas
        assert node["x"] >= 0 and node["x"] + g["node_w"] <= g["width"]
        assert node["y"] >= 0 and node["y"] + g["node_h"] <= g["height"]


def test_graph_layout_loop_back_curves_on_the_side_within_the_canvas() -> None:
    g = presenters.graph_layout(graph([("a", ""), ("b", "")], ["a>b", "b>a"]))
    back = next(e for e in g["edges"] if e["from"] == "b")
    numbers = [
        float(v)
        for part in back["d"][1:].replace("C", " ").replace("S", " ").split()
        for v in part.split(",")
    ]
    assert max(numbers[0::2]) <= g["width"]
    assert numbers[2] > numbers[0]  # bulges to the right of the boxes


def test_graph_layout_empty_and_long_names() -> None:
    assert presenters.graph_layout({"nodes": [], "edges": []})["nodes"] == []
    g = presenters.graph_layout(graph([("a_really_long_step_name_here", "")], []))
    label = g["nodes"][0]["label"]
    assert label.endswith("…") and len(label) == presenters.MAX_LABEL


@pytest.mark.parametrize(
    ("args", "execution_id"),
    [
        ("execution=3837882 step=each command=3837882:each:1:4", "3837882"),
        ("['3837882:each:1:4']", "3837882"),
        ("('3837882:start:1',)", "3837882"),
        ("execution=99", "99"),
        ("command=abc", None),
        ("", None),
        (None, None),
    ],
)
def test_execution_id_of(args: str | None, execution_id: str | None) -> None:
    assert presenters.execution_id_of(args) == execution_id


def test_item_totals() -> None:
    assert presenters.item_totals([]) == (0, 0)
    assert presenters.item_totals([loop(), loop(done=10, failed=0)]) == (85, 5)


def test_loop_row_of_an_ended_execution_is_stopped() -> None:
    row = presenters.loop_row(loop(), ended=True)
    assert row["state"] == "stopped" and row["eta"] == "" and row["in_flight"] == 0
    finished = presenters.loop_row(loop(done=300, finished=True), ended=True)
    assert finished["state"] == "finished"


@pytest.mark.parametrize(
    ("status", "ended", "drawn"),
    [
        ("running", False, "running"),
        ("running", True, "stopped"),
        ("completed", True, "completed"),
        (None, True, "pending"),
        ("", False, "pending"),
    ],
)
def test_node_status(status: str | None, ended: bool, drawn: str) -> None:
    assert presenters.node_status(status, ended) == drawn


def test_graph_of_an_ended_execution_draws_running_steps_stopped() -> None:
    g = presenters.graph_layout(graph([("a", "completed"), ("b", "running")], ["a>b"]), ended=True)
    assert [(n["status"], n["class"]) for n in g["nodes"]] == [
        ("completed", "completed"),
        ("stopped", "cancelled"),
    ]


def test_a_loop_back_rounds_every_box_of_the_rows_it_spans() -> None:
    g = presenters.graph_layout(
        graph(
            [("start", ""), ("a", ""), ("b", ""), ("c", ""), ("check", ""), ("end", "")],
            ["start>a", "start>b", "start>c", "a>check", "check>start", "check>end"],
        )
    )
    back = next(e for e in g["edges"] if e["from"] == "check")
    xs = [float(p.split(",")[0]) for p in back["d"][1:].replace("C", " ").replace("S", " ").split()]
    rightmost_box = max(n["x"] + g["node_w"] for n in g["nodes"])
    assert max(xs) > rightmost_box and max(xs) < g["width"]


@pytest.mark.parametrize(
    ("message", "line"),
    [
        (None, ""),
        ("", ""),
        ("boom", "boom"),
        ("HTTP 500 from api\nbody: {...}", "HTTP 500 from api …"),
        (
            'Traceback (most recent call last):\n  File "x", line 1\nAssertionError: item 3',
            "AssertionError: item 3",
        ),
        ("x" * 500, "x" * 159 + "…"),
        ("<b>odd</b>", "<b>odd</b>"),  # escaped by the template, not here
    ],
)
def test_message_line(message: str | None, line: str) -> None:
    assert presenters.message_line(message) == line


def test_rows_count_succeeded_items_apart_from_failed() -> None:
    row = presenters.execution_row({"items_done": 10, "items_failed": 3})
    assert (row["items_succeeded"], row["items_failed"], row["items_done"]) == (7, 3, 10)
    assert presenters.loop_row(loop())["succeeded"] == 70
    older = {k: v for k, v in loop().items() if k != "succeeded"}  # done - failed
    assert presenters.loop_row(older)["succeeded"] == 70
