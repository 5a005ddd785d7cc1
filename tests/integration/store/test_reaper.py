"""The reaper against the real store (both backends): lost messages are published again,
a command whose worker died runs again as its next attempt, and after the last attempt
it fails with a clear error that ends the execution."""

from __future__ import annotations

import logging
import time
from collections.abc import Iterator, Sequence
from pathlib import Path

import pytest

from noetl_celery.engine.service import Engine
from noetl_celery.logcontext import FIELDS
from noetl_celery.models.outcome import Outcome
from noetl_celery.orchestrator.ids import claim_command_id
from noetl_celery.settings import Settings
from noetl_celery.store.counters import (
    COUNTER_LEASES_EXPIRED,
    COUNTER_REISSUED,
    COUNTER_REPUBLISHED,
)
from noetl_celery.store.database import SchemaMode
from tests.support.frames_by_hand import FRAMES

PLAYBOOK = """apiVersion: noetl.io/v2
kind: Playbook
metadata: {name: lonely, path: tests/lonely}
workflow:
  - step: only
    tool: {kind: python, code: "result = {'ok': True}"}
"""


class Recorder:
    """A broker that loses everything, but remembers what was sent."""

    def __init__(self) -> None:
        self.published: list[str] = []
        self.woken: list[str] = []

    def publish(self, command_ids: Sequence[str]) -> None:
        self.published.extend(command_ids)

    def wake(self, execution_id: str) -> None:
        self.woken.append(execution_id)


@pytest.fixture
def engine(store_url: str, tmp_path: Path) -> Iterator[tuple[Engine, Recorder]]:
    built = Engine(
        Settings(
            home=tmp_path,
            database_url=store_url,
            issued_grace_seconds=1.0,
            wake_grace_seconds=0.0,
            max_attempts=2,
        ),
        schema=SchemaMode.MIGRATE,
    )
    recorder = Recorder()
    built.use_dispatcher(recorder)
    yield built, recorder
    built.close()


def test_the_sweep_lease_is_held_by_one_owner_at_a_time(
    engine: tuple[Engine, Recorder],
) -> None:
    store = engine[0].store
    assert store.reaper.take_lease("duty", "a", 30)
    assert not store.reaper.take_lease("duty", "b", 30)
    assert store.reaper.take_lease("duty", "a", 30)  # the holder may renew
    store.reaper.release_lease("duty", "a")
    assert store.reaper.take_lease("duty", "b", 30)


def test_a_workers_fallback_sweep_runs_only_when_nobody_swept_lately(
    engine: tuple[Engine, Recorder],
) -> None:
    """`sweep_unless_swept` (every worker process, every interval): beside a beat whose
    sweeps keep the lease fresh it does nothing; once nobody swept for the lease's TTL it
    sweeps itself."""
    built, _ = engine
    reaper = built.reaper
    assert not reaper.store.reaper.held_within("reaper", 60)  # never swept
    first = reaper.sweep_unless_swept()  # nobody swept: this worker does
    assert first is not None and first.held
    assert reaper.store.reaper.held_within("reaper", 60)
    assert reaper.sweep_unless_swept() is None  # swept a moment ago (beat's, or ours)
    assert not reaper.store.reaper.held_within("reaper", 0)  # released, not held now
    # a sweep held elsewhere right now counts as swept too
    assert reaper.store.reaper.take_lease("reaper", "beat-side worker", 30)
    assert reaper.sweep_unless_swept() is None
    reaper.store.reaper.release_lease("reaper", "beat-side worker")


def test_lost_message_then_lost_worker_then_give_up(
    engine: tuple[Engine, Recorder], caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING, logger="noetl_celery.reaper")
    built, sent = engine
    eid = built.start_text(PLAYBOOK)
    [first] = sent.published  # the message the broker lost
    reaper = built.reaper

    assert reaper.sweep().republished == 0  # still within the grace period
    time.sleep(1.1)
    assert reaper.sweep().republished == 1
    assert sent.published == [first, first]
    time.sleep(1.4)
    assert reaper.sweep().republished == 0  # the second wait is twice as long
    time.sleep(0.8)
    assert reaper.sweep().republished == 1

    # a worker claims it and dies: its lease runs out
    assert built.store.claim(first, "doomed:1", lease_seconds=0) is not None
    time.sleep(0.05)
    report = reaper.sweep()
    assert report.reissued == 1
    second = sent.published[-1]
    assert second == f"{first}:a2"
    assert built.store.command_status(first) == "expired"

    # the next attempt dies too: that was the last one
    claimed = built.store.claim(second, "doomed:2", lease_seconds=0)
    assert claimed is not None and claimed.attempt == 2
    time.sleep(0.05)
    report = reaper.sweep()
    assert report.failed == 1 and report.woken == 1
    summary = built.summary(eid)
    assert summary["status"] == "FAILED"
    assert "lost its worker (lease expired) on attempt 2 of 2" in str(summary["error"])
    counts = built.store.command_counts(eid)
    assert counts.issued == counts.running == 0
    # what /metrics exports, counted in the sweeps' own transactions (store.counters)
    assert built.store.metrics.read_snapshot().counters == {
        COUNTER_REPUBLISHED: 2,
        COUNTER_REISSUED: 1,
        COUNTER_LEASES_EXPIRED: 2,  # the first run's and the last attempt's
    }
    # a late outcome of the dead attempt changes nothing
    assert not built.store.complete(claimed, Outcome("ok", {}))
    assert [e["type"] for e in built.events(eid)].count("command.failed") == 1
    # the sweep runs outside any command, yet its lines name the command they are about
    about = [
        (r.getMessage().split(";")[0], *(getattr(r, k) for k in FIELDS))
        for r in caplog.records
        if r.name == "noetl_celery.reaper"
    ]
    assert about == [
        (f"command {first} lost its worker", eid, "only", second),
        (
            f"command {second} failed: command {second} lost its worker (lease expired) "
            "on attempt 2 of 2",
            eid,
            "only",
            second,
        ),
    ]


def nested(depth: int) -> dict[str, object]:
    """`{"a": {"a": ... {}}}`, `depth` mappings deep."""
    root: dict[str, object] = {}
    node = root
    for _ in range(depth - 1):
        child: dict[str, object] = {}
        node["a"] = child
        node = child
    return root


def test_an_execution_whose_pass_crashes_does_not_cost_the_others_their_catch_up(
    engine: tuple[Engine, Recorder],
) -> None:
    """Unstarted executions (the process that created them died before their first pass)
    are started by the sweep. One whose first pass crashes (a payload nested past the
    bounds `run` enforces, written straight through the store) is sorted first: the others
    still get their pass on the same sweep, and it ends FAILED with the error instead of
    staying RUNNING with every sweep crashing on it."""
    built, sent = engine
    _, entry = built.register_text(PLAYBOOK)
    bad, healthy = "100", ["200", "300"]
    built.store.create_execution(bad, entry, {"deep": nested(600)})
    for eid in healthy:
        built.store.create_execution(eid, entry, None)

    first = built.reaper.sweep()
    for eid in healthy:  # caught up on the very sweep that met the bad one
        assert built.store.execution(eid).passes == 1
        assert f"{eid}:only:1" in sent.published
    assert first.woken == 3
    assert built.store.execution_status(bad) == "RUNNING"
    [crash] = built.events(bad, types=["pass.failed"])
    assert crash["payload"]["error"]["kind"] == "engine_error"
    assert crash["payload"]["error"]["message"].startswith("RecursionError: maximum recursion")

    for _ in range(2):  # it may crash where it ran; the third crash in a row ends it
        built.reaper.sweep()
    summary = built.summary(bad)
    assert summary["status"] == "FAILED"
    assert str(summary["error"]).startswith(
        "the engine could not orchestrate this execution: 3 passes in a row crashed "
        "(RecursionError: maximum recursion depth exceeded"
    )
    assert [e["kind"] for e in summary["errors"]] == ["engine_error"]
    assert len(built.events(bad, types=["pass.failed"])) == 3
    assert [e["type"] for e in built.events(bad)][-1] == "execution.failed"
    assert built.reaper.sweep().woken == 0  # nothing left to catch up
    for eid in healthy:
        assert built.store.execution_status(eid) == "RUNNING"  # their commands wait


def test_a_claim_that_recorded_its_rows_after_the_sweep_read_it_hands_them_on(
    store_url: str, tmp_path: Path
) -> None:
    """The sweep reads a claim as lost, then its (slow) worker records its frame's rows
    on it (worker.frames; a record tried again finds them), then the sweep re-issues
    it: the next attempt carries the rows as recorded, so it hands them over instead of
    claiming again."""
    engine = Engine(Settings(home=tmp_path, database_url=store_url), schema=SchemaMode.MIGRATE)
    try:
        eid = engine.start_text(FRAMES)
        claim_id = claim_command_id(eid, "drain", 1, 0, 1)
        command = engine.store.claim(claim_id, "slow-worker", 0)
        assert command is not None
        time.sleep(0.05)
        [lost] = [c for c in engine.store.reaper.lost_commands() if c.command_id == claim_id]
        assert lost.resume is None
        frame = engine.store.record_frame(command, [{"id": 1}, {"id": 2}, {"id": 1}])
        assert frame is not None and frame.rows == [{"id": 1}, {"id": 2}]
        assert frame.duplicates == 1  # the claim took row 1 twice
        # tried again (its commit's answer lost): the rows it stored, not duplicates
        assert engine.store.record_frame(command, [{"id": 1}, {"id": 2}, {"id": 1}]) == frame
        new_id = engine.store.reaper.reissue(lost)
        assert new_id == f"{claim_id}:a2"
        again = engine.store.claim(new_id, "next-worker", 60)
        assert again is not None
        assert again.resume == {"frame": {"rows": [{"id": 1}, {"id": 2}], "duplicates": 1}}
    finally:
        engine.close()
