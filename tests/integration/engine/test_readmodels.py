"""The read models of the HTTP API and the pages (engine.readmodels) on both store
backends: the executions page with loop totals, detail, failed items paged, the graph."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from noetl_celery.engine.service import Engine
from noetl_celery.engine.summaries import LoopProgress
from noetl_celery.errors import ExecutionNotFound, InputInvalid
from noetl_celery.models.filters import ExecutionFilter
from tests.support.engines import embedded_engine

PLAYBOOKS = Path(__file__).resolve().parents[2] / "playbooks"

# 40 items, every third one fails (14 failures: 0, 3, ..., 39)
THIRDS = """apiVersion: noetl.io/v2
kind: Playbook
metadata: {name: thirds, path: tests/thirds}
workload: {n: 40}
workflow:
  - step: start
    tool: {kind: noop}
    next: {arcs: [{step: each}]}
  - step: each
    loop: {in: "{{ range(n) | list }}", iterator: x, spec: {mode: parallel, max_in_flight: 8}}
    tool:
      kind: python
      input: {x: "{{ iter.x }}"}
      code: |
        assert x % 3 != 0, f"item {x} is a multiple of three"
        result = x
    next: {arcs: [{step: end, when: "{{ event.name == 'loop.done' }}"}]}
  - step: end
    tool: {kind: noop}
"""


@pytest.fixture
def engine(store_url: str, tmp_path: Path) -> Iterator[Engine]:
    built = embedded_engine(store_url, tmp_path / "home")
    yield built
    built.close()


def test_executions_page_detail_failed_items_and_graph(engine: Engine) -> None:
    failed = engine.start_text(THIRDS)
    assert engine.wait(failed, 60).status == "FAILED"
    ok = engine.start_text(THIRDS, {"n": 2})  # item 0 fails, item 1 succeeds
    engine.wait(ok, 60)
    plain = engine.start_text(
        "apiVersion: noetl.io/v2\nkind: Playbook\nmetadata: {name: plain}\n"
        "workflow:\n  - step: only\n    tool: {kind: noop}\n"
    )
    assert engine.wait(plain, 60).status == "COMPLETED"

    page = engine.executions_page(ExecutionFilter(limit=2))
    assert page["total"] == 3 and page["limit"] == 2 and page["offset"] == 0
    assert [e["execution_id"] for e in page["executions"]] == [plain, ok]
    assert page["executions"][0]["items_done"] == 0
    assert (page["executions"][1]["items_done"], page["executions"][1]["items_failed"]) == (2, 1)
    assert page["executions"][1]["items_succeeded"] == 1  # added; items_done stays the sum
    rest = engine.executions_page(ExecutionFilter(limit=2, offset=2))
    assert [e["execution_id"] for e in rest["executions"]] == [failed]
    assert (rest["executions"][0]["items_done"], rest["executions"][0]["items_failed"]) == (40, 14)
    assert engine.executions_page(ExecutionFilter(path="tests/thirds"))["total"] == 2
    assert engine.executions_page(ExecutionFilter(status="completed"))["total"] == 1
    assert engine.executions_page(ExecutionFilter(parent=failed))["total"] == 0
    # the short list (`executions`) reads the same filter: every field and the page
    listed = engine.executions(ExecutionFilter(path="tests/thirds", limit=1, offset=1))
    assert [e["execution_id"] for e in listed] == [failed]
    assert len(engine.executions(ExecutionFilter(status="completed", trigger="MANUAL"))) == 1
    assert engine.executions(ExecutionFilter(parent=failed)) == []

    detail = engine.detail(failed)
    assert detail["status"] == "FAILED" and detail["children"] == []
    assert detail["children_total"] == 0
    assert len(detail["errors"]) == 14 and detail["errors"][0]["item"] == 0
    assert detail["failures"] and detail["failures"][0]["step"] == "each"
    # the playbook's order, not the state's JSONB key order (end, each, start)
    assert [s["step"] for s in detail["steps"]] == ["start", "each", "end"]
    assert [s["step"] for s in engine.status(failed)["steps"]] == ["start", "each", "end"]
    (loop,) = detail["loops"]
    assert loop["finished"] and loop["done"] == 40 and loop["started_at"]
    assert loop["eta_seconds"] == 0.0 and (loop["rate_per_second"] or 0) > 0

    first = engine.failed_items(failed, "each", limit=10)
    assert first["total"] == 14
    assert [i["iteration"] for i in first["items"]] == [3 * k for k in range(10)]
    assert first["items"][1] == {
        "epoch": 1,
        "iteration": 3,
        "value": "3",
        "kind": "python_error",
        "message": first["items"][1]["message"],
    }
    assert "multiple of three" in first["items"][1]["message"]
    second = engine.failed_items(failed, "each", epoch=1, offset=10, limit=10)
    assert [i["iteration"] for i in second["items"]] == [30, 33, 36, 39]
    assert engine.failed_items(failed, "each", epoch=2)["total"] == 0
    with pytest.raises(InputInvalid, match="no step 'nope'"):
        engine.failed_items(failed, "nope")

    graph = engine.graph(failed)
    assert graph["nodes"] == [
        {"step": "start", "status": "completed", "tool": "noop"},
        {"step": "each", "status": "failed", "tool": "python"},
        {"step": "end", "status": "completed", "tool": "noop"},  # runs after loop.done,
    ]
    assert graph["edges"] == [
        {"from": "start", "to": "each", "when": None},
        {"from": "each", "to": "end", "when": "{{ event.name == 'loop.done' }}"},
    ]
    for call in (engine.detail, engine.graph):
        with pytest.raises(ExecutionNotFound):
            call("nope")


SLOW = """apiVersion: noetl.io/v2
kind: Playbook
metadata: {name: slow_items}
workflow:
  - step: slow
    loop: {in: "{{ range(30) | list }}", iterator: i, spec: {mode: parallel, max_in_flight: 2}}
    tool: {kind: python, code: "import time; time.sleep(0.1); result = 1"}
"""


def test_a_running_loop_counts_live_with_rate_and_eta(engine: Engine) -> None:
    import time

    eid = engine.start_text(SLOW)
    seen: list[tuple[int, LoopProgress]] = []
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        line = engine.executions_page(ExecutionFilter(limit=1))["executions"][0]
        loops = engine.detail(eid)["loops"]
        if line["status"] != "RUNNING":
            break
        if loops and not loops[0]["finished"]:
            seen.append((line["items_done"], loops[0]))
        time.sleep(0.05)
    moving = [(done, lp) for done, lp in seen if 0 < done < 30]
    assert moving, "never saw the loop part done"
    _, lp = moving[-1]
    eta = lp["eta_seconds"]
    assert lp["rate_per_second"] and isinstance(eta, int | float) and eta > 0
    assert engine.executions_page(ExecutionFilter(limit=1))["executions"][0]["items_done"] == 30
