"""worker.frame_rows: a cursor frame's per-row bodies run by the claiming worker, at most
`threads` at a time, in row order in what they came to; a parked row's body becomes a
`ParkedBody`; a claim found cancelled starts no more rows."""

from __future__ import annotations

import datetime as dt
import threading
import time
from collections.abc import Collection, Sequence
from dataclasses import replace

import pytest

from noetl_celery.models.outcome import Outcome
from noetl_celery.store.bodies import ParkedBody
from noetl_celery.store.rows import ClaimedCommand
from noetl_celery.tools.redaction import command_masks, current_masks
from noetl_celery.worker.frame_rows import RowRunner
from noetl_celery.worker.heartbeat import Heartbeats
from noetl_celery.worker.pipeline import Parked

CLAIM = ClaimedCommand(
    command_id="e:drain:1:c0.1",
    execution_id="e",
    catalog_id=1,
    step="drain",
    kind="claim",
    epoch=1,
    iteration=None,
    attempt=1,
    ctx_version=0,
    item={"lane": 0, "frame": 1},
    meta={"max_rows": 10, "process": "rows", "iteration": 0, "row_concurrency": 3},
)


def bodies(count: int) -> list[ClaimedCommand]:
    return [
        replace(CLAIM, command_id=f"e:drain:1:{i}", kind="iteration", iteration=i, item={"id": i})
        for i in range(count)
    ]


class Statuses:
    def __init__(self) -> None:
        self.cancelled: set[str] = set()

    def poll(self, ids: Sequence[str]) -> Collection[str]:
        return {i for i in ids if i not in self.cancelled}


def runner(statuses: Statuses) -> tuple[RowRunner, Heartbeats]:
    beats = Heartbeats(lambda ids: set(ids), 600, poll=statuses.poll, poll_seconds=0.02)
    beats.start(CLAIM.command_id)
    beats.watch(CLAIM.command_id)
    return RowRunner(beats), beats


class Bodies:
    """Runs a row's body: sleeps a little, records who asked and how many ran at once."""

    def __init__(self, sleep: float = 0.2) -> None:
        self.sleep = sleep
        self.running = 0
        self.most = 0
        self.started: list[int] = []
        self.watched: set[str | None] = set()
        self.lock = threading.Lock()

    def __call__(self, body: ClaimedCommand, watch: str | None = None) -> object:
        with self.lock:
            self.running += 1
            self.most = max(self.most, self.running)
            self.started.append(int(body.item["id"]))
            self.watched.add(watch)
        time.sleep(self.sleep)
        with self.lock:
            self.running -= 1
        return Outcome("ok", {"id": body.item["id"]})


@pytest.mark.parametrize(("threads", "most"), [(1, 1), (3, 3), (20, 7)])
def test_rows_run_at_most_threads_at_a_time_and_come_back_in_row_order(
    threads: int, most: int
) -> None:
    rows, _ = runner(Statuses())
    run = Bodies()
    ran = rows.run(CLAIM, bodies(7), threads, run)
    assert ran is not None
    assert [(b.iteration, o) for b, o in ran] == [(i, Outcome("ok", {"id": i})) for i in range(7)]
    assert run.most == most  # (each body sleeps 0.2 s: the rows taken at once overlap)
    assert run.watched == {CLAIM.command_id}  # each row stops on the claim's status


def test_a_claim_cancelled_mid_frame_starts_no_more_rows() -> None:
    statuses = Statuses()
    rows, beats = runner(statuses)
    run = Bodies(sleep=0.1)

    def cancelled_after_the_first_rows(body: ClaimedCommand, watch: str | None = None) -> object:
        statuses.cancelled.add(CLAIM.command_id)
        deadline = time.monotonic() + 5
        while not beats.lost(CLAIM.command_id) and time.monotonic() < deadline:
            time.sleep(0.01)
        return run(body, watch)

    assert rows.run(CLAIM, bodies(12), 3, cancelled_after_the_first_rows) is None
    assert sorted(run.started) == [0, 1, 2]  # the rows already taken, and no other


def test_a_row_that_parks_is_a_parked_body_and_one_that_cannot_wait_fails() -> None:
    rows, _ = runner(Statuses())
    parked = Parked({"index": 1, "attempts": {"fetch": 1}}, 30.0, "fetch")

    def body(command: ClaimedCommand, watch: str | None = None) -> object:
        number = command.iteration
        if number == 1:
            return parked
        if number == 2:
            return object()  # what no row may come to (a sub-playbook's wait)
        return Outcome("ok", number)

    before = dt.datetime.now(dt.UTC).replace(tzinfo=None)
    ran = rows.run(CLAIM, bodies(3), 3, body)
    assert ran is not None
    [(_, first), (_, second), (_, third)] = ran
    assert first == Outcome("ok", 0)
    assert isinstance(second, ParkedBody)
    assert second.resume == {
        "continuation": parked.continuation,
        "parked": {"task": "fetch", "delay": 30.0},
    }
    assert before + dt.timedelta(seconds=30) <= second.due <= before + dt.timedelta(seconds=31)
    assert isinstance(third, Outcome) and third.error is not None
    assert third.error.kind == "engine_error" and "cannot wait here" in third.error.message


def test_rows_see_the_claims_context() -> None:
    """Each row thread runs in a copy of the claim's context: the claim's keychain
    masks (and output capture) are the rows' too."""

    rows, _ = runner(Statuses())
    seen = []

    def body(command: ClaimedCommand, watch: str | None = None) -> object:
        seen.append(current_masks())
        return Outcome("ok", None)

    with command_masks() as masks:
        assert rows.run(CLAIM, bodies(4), 2, body) is not None
    assert seen == [masks] * 4
