"""Quarantined loop items on the embedded engine, both store backends: a body policy's
`do: quarantine` and the loop's `on_item_error: quarantine` set failed items aside; the
execution ends COMPLETED with the count in its loop stats, its summary (`run --json`),
its status view, its loops rows and the notification of its end."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from noetl_celery.engine.service import Engine
from noetl_celery.models.filters import ExecutionFilter
from noetl_celery.passes.rerun import RerunError
from noetl_celery.settings import Settings
from noetl_celery.settings_notify import NotifySettings
from noetl_celery.store.database import SchemaMode
from tests.support.notify_receiver import Receiver, receiving

BAD = [3, 7, 11]
POLICY = """apiVersion: noetl.io/v2
kind: Playbook
metadata: {name: q, path: tests/quarantine_policy}
workload: {n: 20, bad: [3, 7, 11]}
workflow:
  - step: each
    loop: {in: "{{ range(n) | list }}", iterator: x, spec: {mode: parallel, max_in_flight: 4}}
    tool:
      kind: python
      input: {x: "{{ iter.x }}", bad: "{{ bad }}"}
      code: |
        assert x not in bad, f"item {x} is poisoned"
        result = x
      spec:
        policy:
          rules:
            - when: "{{ output.status == 'error' }}"
              then: {do: quarantine}
    next: {arcs: [{step: last}]}
  - step: last
    tool: {kind: python, code: "result = {'done': True}"}
"""
# the loop's option, over a retry that never succeeds: exhausted, then quarantined
OPTION = """apiVersion: noetl.io/v2
kind: Playbook
metadata: {name: q2, path: tests/quarantine_option}
workload: {n: 12, bad: [3, 7, 11]}
workflow:
  - step: each
    loop:
      in: "{{ range(n) | list }}"
      iterator: x
      spec: {mode: parallel, max_in_flight: 3, on_item_error: quarantine}
    tool:
      kind: python
      input: {x: "{{ iter.x }}", bad: "{{ bad }}"}
      code: |
        assert x not in bad, f"item {x} is poisoned"
        result = x
      spec:
        policy:
          rules:
            - when: "{{ output.status == 'error' }}"
              then: {do: retry, attempts: 2, delay: 0}
"""


@pytest.fixture
def receiver() -> Iterator[Receiver]:
    with receiving() as r:
        yield r


@pytest.fixture
def engine(store_url: str, tmp_path: Path, receiver: Receiver) -> Iterator[Engine]:
    notify = NotifySettings(url=receiver.url(), on=frozenset({"completed", "failed"}))
    settings = Settings(home=tmp_path / "home", database_url=store_url, notify=notify)
    built = Engine(settings, schema=SchemaMode.MIGRATE)
    built.use_in_process_workers()
    yield built
    built.close()


def test_a_policy_quarantines_poisoned_items_and_the_run_completes(
    engine: Engine, receiver: Receiver
) -> None:
    eid = engine.start_text(POLICY)
    engine.wait(eid, 60)
    summary = engine.summary(eid)
    assert summary["status"] == "COMPLETED", summary["error"]
    stats = {"total": 20, "success": 17, "failed": 0, "quarantined": 3}
    assert summary["steps"]["each"]["stats"] == stats
    assert summary["quarantined"] == 3
    assert summary["errors"] == []
    assert summary["result"] == {"done": True}  # the flow went on past the loop
    status = engine.status(eid)
    assert status["quarantined"] == 3
    [loop] = status["loops"]
    assert (loop["succeeded"], loop["failed"], loop["quarantined"], loop["done"]) == (17, 0, 3, 20)
    [row] = engine.store.loops(eid)
    assert (row.succeeded, row.failed, row.quarantined, row.in_flight) == (17, 0, 3, 0)
    # the quarantined items' commands keep their input and error
    failed = engine.events(eid, types=["command.failed"], step="each")
    assert len(failed) == len(BAD) and {e["iteration"] for e in failed} == set(BAD)
    assert all(e["payload"]["meta"]["quarantine"] for e in failed)
    assert all("poisoned" in e["payload"]["error"]["message"] for e in failed)
    # one `item.quarantined` per item, naming its command and error
    marks = engine.events(eid, types=["item.quarantined"], step="each")
    assert sorted((e["iteration"], e["command_id"]) for e in marks) == sorted(
        (e["iteration"], e["command_id"]) for e in failed
    )
    assert all(e["payload"]["kind"] == "python_error" for e in marks)
    assert engine.store.overview.count_failed_iterations(eid, "each") == 0  # none is a failure
    body = receiver.wait_for(lambda d: len(d) >= 1)[0].json
    assert (body["status"], body["quarantined"]) == ("completed", 3)


def test_the_loop_option_quarantines_items_whose_retries_ran_out(engine: Engine) -> None:
    eid = engine.start_text(OPTION)
    engine.wait(eid, 60)
    summary = engine.summary(eid)
    assert summary["status"] == "COMPLETED", summary["error"]
    assert summary["steps"]["each"]["stats"] == {
        "total": 12,
        "success": 9,
        "failed": 0,
        "quarantined": 3,
    }
    assert summary["quarantined"] == 3
    failed = engine.events(eid, types=["command.failed"], step="each")
    # each poisoned item ran twice (its retry), and is one quarantined item
    assert all("gave up after 2 attempts" in e["payload"]["error"]["message"] for e in failed)
    assert engine.status(eid)["quarantined"] == 3


def test_a_run_without_quarantined_items_reports_zero(engine: Engine) -> None:
    eid = engine.start_text(POLICY, {"bad": []})
    engine.wait(eid, 60)
    summary = engine.summary(eid)
    assert summary["steps"]["each"]["stats"] == {"total": 20, "success": 20, "failed": 0}
    assert summary["quarantined"] == 0


def test_failed_items_reads_and_rerun_skip_quarantined_items(engine: Engine) -> None:
    # items 3 and 7 are quarantined, 11 fails: the run fails for 11 alone
    text = POLICY.replace(
        """            - when: "{{ output.status == 'error' }}"
              then: {do: quarantine}""",
        """            - when: "{{ output.status == 'error' and iter.x < 10 }}"
              then: {do: quarantine}""",
    )
    eid = engine.start_text(text)
    engine.wait(eid, 60)
    summary = engine.summary(eid)
    assert summary["status"] == "FAILED"
    assert summary["steps"]["each"]["stats"] == {
        "total": 20,
        "success": 17,
        "failed": 1,
        "quarantined": 2,
    }
    assert summary["quarantined"] == 2
    assert [(e["step"], e["item"]) for e in summary["errors"]] == [("each", 11)]
    assert [
        f.iteration
        for f in engine.store.overview.failed_iterations(
            eid, "each", epoch=None, offset=0, limit=50
        )
    ] == [11]
    rerun = engine.rerun(eid, failed_items=True, overrides={"bad": []})
    engine.wait(rerun, 60)
    again = engine.summary(rerun)
    assert again["status"] == "COMPLETED", again["error"]
    assert again["steps"]["each"]["stats"] == {"total": 1, "success": 1, "failed": 0}


def items_run(engine: Engine, eid: str, step: str = "each") -> list[int]:
    """The items whose body succeeded (a one-task pipeline's result: `{data, status}`)."""
    done = engine.events(eid, types=["command.completed"], step=step)
    return sorted(int(e["payload"]["result"]["data"]) for e in done)


def test_a_redrive_runs_exactly_the_quarantined_items_once(engine: Engine) -> None:
    original = engine.start_text(POLICY)
    engine.wait(original, 60)
    # fixed by the payload: the poisoned items now pass
    redrive = engine.redrive(original, overrides={"bad": []})
    engine.wait(redrive, 60)
    summary = engine.summary(redrive)
    assert summary["status"] == "COMPLETED", summary["error"]
    assert summary["steps"]["each"]["stats"] == {"total": 3, "success": 3, "failed": 0}
    assert items_run(engine, redrive) == BAD
    assert list(summary["steps"]) == ["each"]  # exactly those items: `last` did not run
    row = engine.store.execution(redrive)
    assert (row.trigger, row.rerun_of) == ("rerun", original)
    assert (row.trigger_detail or {})["start"]["redrive"] == {"each": [[1, 3], [1, 7], [1, 11]]}
    # every item counted once across both: 17 succeeded there, 3 here, 3 marked redriven
    listed = engine.quarantine(original)["items"]
    assert {i["redriven_by"] for i in listed} == {redrive}
    first = engine.summary(original)["steps"]["each"]["stats"]
    assert first["success"] + summary["steps"]["each"]["stats"]["success"] == 20
    with pytest.raises(RerunError, match="no quarantined items left to redrive"):
        engine.redrive(original)
    with pytest.raises(RerunError, match=f"already redriven: each:1:7 \\(by {redrive}\\)"):
        engine.redrive(original, items=["each:1:7"])


def test_a_redrive_of_chosen_items_leaves_the_others(engine: Engine) -> None:
    original = engine.start_text(POLICY)
    engine.wait(original, 60)
    one = engine.redrive(original, items=["each:1:7"], overrides={"bad": []})
    engine.wait(one, 60)
    assert items_run(engine, one) == [7]
    # not fixed: the rest fail again and are quarantined in the redrive, which can be
    # redriven in turn
    rest = engine.redrive(original)
    engine.wait(rest, 60)
    again = engine.summary(rest)
    assert again["status"] == "COMPLETED" and again["quarantined"] == 2
    assert items_run(engine, rest) == []
    by = {i["id"]: i["redriven_by"] for i in engine.quarantine(original)["items"]}
    assert by == {"each:1:3": rest, "each:1:7": one, "each:1:11": rest}
    last = engine.redrive(rest, overrides={"bad": []})
    engine.wait(last, 60)
    assert items_run(engine, last) == [3, 11]
    assert engine.store.execution(last).rerun_of == rest


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"step": "nope"}, "no step 'nope'"),
        ({"step": "last"}, "has no quarantined items of that step and kind left"),
        ({"kind": "timeout"}, "has no quarantined items of that step and kind left"),
        ({"items": ["each:1:4"]}, "has no quarantined item each:1:4"),
        ({"items": ["each-3"]}, "is not a quarantined item id"),
    ],
)
def test_a_redrive_that_cannot_be_made_is_refused(
    engine: Engine, kwargs: dict[str, Any], message: str
) -> None:
    original = engine.start_text(POLICY)
    engine.wait(original, 60)
    with pytest.raises(RerunError, match=message):
        engine.redrive(original, **kwargs)
    assert (
        engine.store.overview.list_executions(ExecutionFilter(trigger="rerun")) == []
    )  # nothing started


def test_a_redrive_while_the_original_runs_is_refused(engine: Engine) -> None:
    eid = engine.start_text(
        POLICY.replace("result = x", "import time; time.sleep(0.5); result = x")
    )
    with pytest.raises(RerunError, match="still RUNNING"):
        engine.redrive(eid)
    engine.wait(eid, 60)
