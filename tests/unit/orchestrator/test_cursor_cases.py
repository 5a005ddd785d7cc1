"""Cursor loops in the pure core: lanes claim frames until the queue is drained; every
row runs exactly once; loop.done once; lanes and rows in flight stay within bounds."""

from __future__ import annotations

import copy
import json
from typing import Any

import pytest

from noetl_celery.models.outcome import Outcome, StepError
from noetl_celery.orchestrator.cursor import chain_next, claim_backoff
from noetl_celery.orchestrator.decide import decide, start
from noetl_celery.orchestrator.decisions import Completion, Limits
from noetl_celery.orchestrator.ids import claim_command_id
from tests.unit.orchestrator.sim import Sim, err, ok, playbook

CURSOR = """apiVersion: noetl.io/v2
kind: Playbook
metadata: {{name: cursor}}
workflow:
  - step: drain
    loop:
      cursor: {{kind: postgres, auth: pg, claim: "claim {{{{ __frame_max_rows }}}}"}}
      iterator: row
      spec:
        mode: cursor
        max_in_flight: {lanes}
        frame: {{max_rows: {rows}, row_concurrency: {conc}}}
    tool: {{kind: noop}}
    next: {{arcs: [{{step: after, when: "{{{{ event.name == 'loop.done' }}}}"}}]}}
  - step: after
    tool: {{kind: noop}}
"""


class Queue:
    """The work queue behind the claim SQL: claims pop up to max_rows rows."""

    def __init__(
        self, size: int, max_rows: int, fail_claim: bool = False, bad: int | None = 7
    ) -> None:
        self.pending = list(range(size))
        self.max_rows = max_rows
        self.fail_claim = fail_claim
        self.bad = bad  # the row whose body fails
        self.claims = 0

    def __call__(self, step: str, item: Any, iteration: int | None) -> Outcome:
        if step == "drain" and iteration is None:  # a claim
            self.claims += 1
            if self.fail_claim:
                return err("relation does not exist", kind="db_error")
            frame, self.pending = self.pending[: self.max_rows], self.pending[self.max_rows :]
            return ok({"rows": [{"id": i} for i in frame], "row_count": len(frame)})
        if step == "drain" and item["id"] == self.bad:
            return err("row 7 is bad")
        return ok({"seen": item["id"]} if item else {})


def peaks(sim: Sim) -> tuple[int, int]:
    lanes_claiming = rows = 0
    for d in sim.decisions:
        lp = d.state.steps.get("drain")
        if lp is None or lp.loop is None or lp.loop.lanes is None:
            continue
        rows = max(rows, max(lane.in_flight for lane in lp.loop.lanes))
        lanes_claiming = max(lanes_claiming, sum(lane.claiming for lane in lp.loop.lanes))
    return lanes_claiming, rows


@pytest.mark.parametrize(
    ("size", "lanes", "rows", "conc", "batch"),
    [(50, 1, 10, 1, 1), (50, 4, 10, 3, 1), (53, 4, 10, 3, 7), (5, 8, 2, 2, 3), (200, 3, 25, 5, 20)],
)
def test_drains_every_row_exactly_once(
    size: int, lanes: int, rows: int, conc: int, batch: int
) -> None:
    queue = Queue(size, rows)
    sim = Sim(playbook(CURSOR.format(lanes=lanes, rows=rows, conc=conc)), queue)
    state = sim.run(batch=batch)
    # row 7's body fails: the loop still completes and routes, the execution fails
    assert state.status == ("FAILED" if size > 7 else "COMPLETED")
    if size > 7:
        assert len(state.failures) == 1
        message = state.failures[0]["message"]
        assert message.startswith(f"1 of {size} items failed (first: item ")
        assert "row 7 is bad" in message
    bodies = sorted(i for s, i in sim.ran if s == "drain" and i is not None)
    assert bodies == list(range(size))  # every claimed row ran once
    stats = sim.results[("drain", 1)]["stats"]
    assert stats == {
        "total": size,
        "success": size - (1 if size > 7 else 0),
        "failed": 1 if size > 7 else 0,
    }
    assert sim.event_types().count("loop.done") == 1
    assert "after" in sim.steps_ran()
    claiming, in_flight = peaks(sim)
    assert claiming <= lanes and in_flight <= conc
    # every lane ends with one empty claim; frames are at most max_rows
    assert queue.claims == -(-size // rows) + lanes


def test_an_empty_queue_finishes_after_one_claim_per_lane() -> None:
    queue = Queue(0, 10)
    sim = Sim(playbook(CURSOR.format(lanes=3, rows=10, conc=2)), queue)
    assert sim.run().status == "COMPLETED"
    assert queue.claims == 3
    assert sim.results[("drain", 1)]["stats"]["total"] == 0


def test_a_failing_claim_fails_the_step() -> None:
    queue = Queue(10, 10, fail_claim=True)
    sim = Sim(playbook(CURSOR.format(lanes=2, rows=10, conc=2)), queue)
    state = sim.run()
    assert state.status == "FAILED"
    assert "cursor claim" in state.failures[0]["message"]
    assert "relation does not exist" in state.failures[0]["message"]
    assert queue.claims == 2  # not retryable (a missing table): no lane claims again


def test_reentry_starts_new_frames() -> None:
    text = (
        CURSOR.format(lanes=2, rows=5, conc=2)
        .replace(
            "next: {arcs: [{step: after, when: \"{{ event.name == 'loop.done' }}\"}]}",
            "next: {arcs: [{step: again, when: \"{{ event.name == 'loop.done' }}\"}]}\n"
            "  - step: again\n"
            "    tool: {kind: noop}\n"
            "    set: {ctx.rounds: '{{ rounds + 1 }}'}\n"
            "    next: {arcs: [{step: drain, when: '{{ rounds < 3 }}'}, {step: after}]}",
        )
        .replace("metadata: {name: cursor}", "metadata: {name: cursor}\nworkload: {rounds: 0}")
    )
    queue = Queue(12, 5, bad=None)
    refills = [list(range(100, 104)), list(range(200, 203))]

    def refill(step: str, item: Any, iteration: int | None) -> Outcome:
        if step == "again" and refills:
            queue.pending = refills.pop(0)  # more work arrives between epochs
        return queue(step, item, iteration)

    sim = Sim(playbook(text), refill)
    state = sim.run()
    assert state.status == "COMPLETED"
    done = [e["epoch"] for e in sim.events if e["type"] == "loop.done"]
    assert done == [1, 2, 3]
    assert [sim.results[("drain", e)]["stats"]["total"] for e in (1, 2, 3)] == [12, 4, 3]
    assert state.steps["drain"].epoch == 3


def test_frame_processing_runs_one_body_per_frame_and_counts_rows() -> None:
    text = CURSOR.format(lanes=3, rows=10, conc=4).replace(
        "frame: {max_rows: 10, row_concurrency: 4}",
        "frame: {max_rows: 10, row_concurrency: 4, process: frame}",
    )
    seen: list[int] = []

    class FrameQueue(Queue):
        def __call__(self, step: str, item: Any, iteration: int | None) -> Outcome:
            if step == "drain" and iteration is not None:
                seen.extend(row["id"] for row in item)  # the body gets the frame's rows
                return ok({"n": len(item)})
            return super().__call__(step, item, iteration)

    sim = Sim(playbook(text), FrameQueue(47, 10))
    assert sim.run(batch=2).status == "COMPLETED"
    assert sorted(seen) == list(range(47))
    bodies = [i for s, i in sim.ran if s == "drain" and i is not None]
    assert len(bodies) == 5  # ceil(47 / 10) frames
    assert sim.results[("drain", 1)]["stats"] == {"total": 47, "success": 47, "failed": 0}


def test_a_frame_of_rows_claimed_before_is_not_the_end_of_the_queue() -> None:
    """The store drops rows an epoch already claimed (a claim that died before its
    commit put them back); a frame left empty that way claims again, it is not drained."""

    class Replaying(Queue):
        def __call__(self, step: str, item: Any, iteration: int | None) -> Outcome:
            if step == "drain" and iteration is None and self.claims == 1:
                self.claims += 1  # the second claim: only rows seen before
                return ok({"rows": [], "row_count": 0, "duplicates": 10})
            return super().__call__(step, item, iteration)

    queue = Replaying(30, 10, bad=None)
    sim = Sim(playbook(CURSOR.format(lanes=1, rows=10, conc=2)), queue)
    assert sim.run(batch=1).status == "COMPLETED"
    bodies = sorted(i for s, i in sim.ran if s == "drain" and i is not None)
    assert bodies == list(range(30))  # the lane went on claiming after the empty frame
    assert sim.results[("drain", 1)]["stats"]["total"] == 30


def down(message: str = "connection refused") -> Outcome:
    """A claim whose queue database was away: the driver marks it retryable."""
    return Outcome.failed(StepError("db_connection", message, retryable=True))


class Flaky(Queue):
    """The queue database is away for the claims numbered in `outage` (1-based)."""

    def __init__(self, size: int, max_rows: int, outage: set[int]) -> None:
        super().__init__(size, max_rows, bad=None)
        self.outage = outage
        self.seen = 0

    def __call__(self, step: str, item: Any, iteration: int | None) -> Outcome:
        if step == "drain" and iteration is None:
            self.seen += 1
            if self.seen in self.outage:
                return down(f"claim {self.seen}: connection refused")
        return super().__call__(step, item, iteration)


def claims_issued(sim: Sim) -> list[tuple[str, float]]:
    """(command id without the execution, delay) of every claim, in issue order."""
    return [
        (c.command_id.split(":", 1)[1], c.delay_seconds)
        for d in sim.decisions
        for c in d.commands
        if c.kind == "claim"
    ]


def test_a_claim_that_meets_a_database_error_is_claimed_again_with_backoff() -> None:
    # one lane: claims 2, 3 and 4 meet the outage; the frame is claimed again each time
    queue = Flaky(12, 5, outage={2, 3, 4})
    sim = Sim(playbook(CURSOR.format(lanes=1, rows=5, conc=2)), queue)
    state = sim.run()
    assert state.status == "COMPLETED", state.failures
    assert claims_issued(sim) == [
        ("drain:1:c0.1", 0.0),
        ("drain:1:c0.2", 0.0),
        ("drain:1:c0.2:a2", 1.0),  # the same frame, the next attempt, after a backoff
        ("drain:1:c0.2:a3", 2.0),
        ("drain:1:c0.2:a4", 4.0),
        ("drain:1:c0.3", 0.0),
        ("drain:1:c0.4", 0.0),
    ]
    bodies = sorted(i for s, i in sim.ran if s == "drain" and i is not None)
    assert bodies == list(range(12))  # every row ran once
    assert sim.results[("drain", 1)]["stats"] == {"total": 12, "success": 12, "failed": 0}
    assert sim.event_types().count("loop.done") == 1


def test_a_claim_that_keeps_failing_fails_the_step_with_the_real_error() -> None:
    queue = Flaky(10, 5, outage=set(range(2, 100)))
    sim = Sim(playbook(CURSOR.format(lanes=2, rows=5, conc=2)), queue)
    state = sim.run()
    assert state.status == "FAILED"
    # claim 1 (lane 0) got the first frame; every later claim met the outage
    assert sorted(f["message"].split(" failed")[0] for f in state.failures) == [
        "cursor claim (lane 0, frame 2)",
        "cursor claim (lane 1, frame 1)",
    ]
    for failure in state.failures:
        assert " failed after 5 attempts: claim " in failure["message"]
        assert failure["message"].endswith(": connection refused")  # the last real error
        assert failure["error"]["kind"] == "db_connection"
    assert sim.results[("drain", 1)]["stats"] == {"total": 5, "success": 5, "failed": 0}
    retries = [(cid, delay) for cid, delay in claims_issued(sim) if ":a" in cid]
    assert sorted({delay for _, delay in retries}) == [1.0, 2.0, 4.0, 8.0]
    assert max(int(cid.rsplit(":a", 1)[1]) for cid, _ in retries) == 5


def test_frame_max_attempts_sets_the_claim_attempts() -> None:
    text = CURSOR.format(lanes=1, rows=5, conc=2).replace(
        "frame: {max_rows: 5, row_concurrency: 2}",
        "frame: {max_rows: 5, row_concurrency: 2, max_attempts: 2}",
    )
    sim = Sim(playbook(text), Flaky(10, 5, outage={1, 2}))
    state = sim.run()
    assert state.status == "FAILED"
    assert "(lane 0, frame 1) failed after 2 attempts" in state.failures[0]["message"]
    assert [cid for cid, _ in claims_issued(sim)] == ["drain:1:c0.1", "drain:1:c0.1:a2"]


def test_a_redone_pass_decides_the_same_claim_retry() -> None:
    sim = Sim(playbook(CURSOR.format(lanes=2, rows=5, conc=2)), Queue(10, 5))
    sim.apply(start(sim.playbook, "e1", None, sim, sim.limits, now=0.0))
    assert sim.state is not None
    failed = Completion(1, "e1:drain:1:c1.1:a2", "drain", 1, None, down())
    first, again = (
        decide(sim.playbook, copy.deepcopy(sim.state), [failed], sim, sim.limits, 0.0)
        for _ in range(2)
    )
    assert first.commands == again.commands
    [retry] = first.commands
    assert (retry.command_id, retry.attempt, retry.delay_seconds) == ("e1:drain:1:c1.1:a3", 3, 2.0)
    assert retry.item == {"lane": 1, "frame": 1}


@pytest.mark.parametrize(
    ("attempt", "delay"), [(2, 0.5), (3, 1.0), (4, 2.0), (5, 4.0), (12, 10.0), (99, 10.0)]
)
def test_claim_backoff_doubles_up_to_the_cap(attempt: int, delay: float) -> None:
    limits = Limits(claim_retry_delay_seconds=0.5, max_retry_delay_seconds=10.0)
    assert claim_backoff(limits, attempt) == delay


# ---- one command per frame (`frame.process: frame`, worker.frames) ---------------------------
FRAMES = CURSOR.replace("row_concurrency: {conc}}}", "row_concurrency: {conc}, process: frame}}")


class InlineFrames(Queue):
    """A claiming worker that runs its frame's body itself (`mode`: `inline` every frame,
    `plan` none: the claim hands its rows over as a claim run after its worker died,
    `mixed` every other frame), writing the body's terminal event as worker.frames does."""

    def __init__(self, size: int, max_rows: int, mode: str, bad: int | None = 7) -> None:
        super().__init__(size, max_rows, bad=bad)
        self.mode = mode
        self.sim: Sim | None = None
        self.bodies: list[tuple[int, list[int]]] = []  # (iteration, row ids)
        self.chained = 0  # claims issued by the worker (chains), not by a pass

    def next_claim(
        self, step: str, item: dict[str, int], meta: dict[str, Any], iteration: int
    ) -> dict[str, Any]:
        """The lane's next claim as worker.frames issues it in a chain."""
        lane, frame = item["lane"], item["frame"] + 1
        return {
            "id": claim_command_id("e1", step, 1, lane, frame),
            "step": step,
            "epoch": 1,
            "iteration": None,
            "item": {"lane": lane, "frame": frame},
            "meta": {**meta, "iteration": iteration + 1},
            "delay": 0.0,
        }

    def body(self, rows: list[dict[str, int]]) -> Outcome:
        if self.bad is not None and any(r["id"] == self.bad for r in rows):
            return err(f"row {self.bad} is bad")
        return ok({"n": len(rows)})

    def __call__(self, step: str, item: Any, iteration: int | None) -> Outcome:
        assert self.sim is not None and self.sim.state is not None
        if iteration is not None:  # a body command
            self.bodies.append((iteration, [r["id"] for r in item]))
            return self.body(item)
        self.claims += 1
        frame, self.pending = self.pending[: self.max_rows], self.pending[self.max_rows :]
        rows = [{"id": i} for i in frame]
        if not rows:
            return ok({"rows": [], "row_count": 0})
        assert self.sim.current is not None
        meta = self.sim.current["meta"] or {}
        reserved = meta.get("iteration")
        assert reserved is not None  # every per-frame claim reserves its body's iteration
        result: dict[str, Any] = {"rows": rows, "row_count": len(rows), "recorded": True}
        result["iteration"] = reserved
        if self.mode == "inline" or (self.mode == "mixed" and self.claims % 2):
            body = self.body(rows)
            if body.ok and chain_next(meta, reserved):  # issue the lane's next claim here
                result["chained"] = True
                self.chained += 1
                self.sim.queue.append(self.next_claim(step, item, meta, reserved))
            self.bodies.append((reserved, frame))
            self.sim.events.append(
                {
                    "step": step,
                    "epoch": 1,
                    "iteration": reserved,
                    "outcome": body.to_json(),
                    "type": "command.completed" if body.ok else "command.failed",
                }
            )
            result["body"] = body.to_json()
        return ok(result)


def frames_sim(
    size: int, lanes: int, mode: str, batch: int, limits: Limits | None = None
) -> tuple[Sim, InlineFrames]:
    queue = InlineFrames(size, 10, mode)
    sim = Sim(playbook(FRAMES.format(lanes=lanes, rows=10, conc=4)), queue, limits or Limits())
    queue.sim = sim
    sim.run(batch=batch)
    return sim, queue


@pytest.mark.parametrize(
    ("size", "lanes", "batch"), [(47, 3, 1), (47, 3, 2), (10, 4, 3), (0, 2, 1), (95, 1, 1)]
)
def test_a_frame_run_with_its_claim_counts_as_its_body_command_would(
    size: int, lanes: int, batch: int
) -> None:
    """Every row once, the same stats, per-item results and loop counters whether the
    claiming worker ran each frame's body, none, or some."""
    seen = {}
    for mode in ("inline", "plan", "mixed"):
        sim, queue = frames_sim(size, lanes, mode, batch)
        assert sim.state is not None and sim.state.status in ("COMPLETED", "FAILED")
        rows = sorted(i for _, ids in queue.bodies for i in ids)
        assert rows == list(range(size)), mode
        iterations = [i for i, _ in queue.bodies]
        assert len(set(iterations)) == len(iterations), mode  # one body per iteration
        if mode == "inline":  # no body command at all: one command per frame
            assert [i for s, i in sim.ran if i is not None] == []
        if mode == "plan":
            assert sorted(i for s, i in sim.ran if i is not None) == sorted(iterations)
        if mode == "plan":  # a frame whose body is a command of its own does not chain
            assert queue.chained == 0
        result = dict(sim.results[("drain", 1)])
        # the per-item results in iteration order: a lane's chained frames take its
        # block's numbers, so which frame a number holds depends on the lanes' timing
        result["results"] = sorted(result["results"], key=json.dumps)
        loop = sim.decisions[-1].loops or [d.loops[-1] for d in sim.decisions if d.loops][-1:]
        seen[mode] = (result, [(m.total, m.issued, m.succeeded, m.failed) for m in loop])
    assert seen["inline"] == seen["plan"] == seen["mixed"]
    frames = -(-size // 10)
    stats = seen["inline"][0]["stats"]
    bad = 10 if size > 7 else 0
    assert stats == {"total": size, "success": size - bad, "failed": bad}
    assert len(seen["inline"][0]["results"]) == frames


@pytest.mark.parametrize(("chain", "numbers"), [(0, [0, 1, 2]), (8, [0, 1, 9]), (1, [0, 1, 2])])
def test_a_claim_that_finds_no_row_leaves_its_reserved_iteration_to_the_next(
    chain: int, numbers: list[int]
) -> None:
    """Reservations: without chains the first claims take 0..lanes-1; with chains of
    `chain` frames each lane takes a block of `1 + chain` numbers, its frames in order
    (lane 0: 0 then 1; lane 1 from 1 + chain). A lane's empty last claim leaves its
    numbers unused, and `issued` counts only bodies."""
    sim, queue = frames_sim(25, 2, "inline", 1, Limits(cursor_chain=chain))
    assert sorted(i for i, _ in queue.bodies) == numbers  # frames of 10, 10, 5
    assert (queue.chained > 0) == (chain > 0)  # (a frame whose body failed does not chain)
    mirror = [m for d in sim.decisions for m in d.loops][-1]
    assert mirror.done and mirror.issued == 3 and mirror.total == 25


@pytest.mark.parametrize(
    ("claimed", "counted_now"),
    [
        ({"iteration": 0, "body": {"status": "ok", "result": {"n": 2}}}, True),
        ({"iteration": 5, "body": {"status": "ok", "result": {"n": 2}}}, False),  # not its number
        ({"iteration": 0}, False),  # rows handed over without a body: a body command
        ({"body": {"status": "ok", "result": {"n": 2}}}, False),  # no reservation named
    ],
)
def test_only_a_body_run_as_the_reserved_iteration_is_counted_with_its_claim(
    claimed: dict[str, Any], counted_now: bool
) -> None:
    pb = playbook(FRAMES.format(lanes=1, rows=2, conc=1))
    d = start(pb, "e1", None, Sim(pb, Queue(0, 2)), Limits(), now=0.0)
    assert d.commands[0].meta == {"max_rows": 2, "process": "frame", "iteration": 0, "chain": 9}
    rows = [{"id": 1}, {"id": 2}]
    outcome = ok({"rows": rows, "row_count": 2, "recorded": True, **claimed})
    completion = Completion(1, d.commands[0].command_id, "drain", 1, None, outcome)
    d2 = decide(pb, copy.deepcopy(d.state), [completion], Sim(pb, Queue(0, 2)), Limits(), 0.0)
    progress = d2.state.steps["drain"].loop
    assert progress is not None and progress.lanes is not None
    assert progress.total == 2
    if counted_now:
        assert progress.succeeded == 2 and not d2.plans
        assert [c.meta for c in d2.commands] == [
            {"max_rows": 2, "process": "frame", "iteration": 1, "chain": 9}
        ]
    else:
        assert progress.succeeded == 0 and not d2.commands
        assert [(p.start, p.items) for p in d2.plans] == [(0, [rows])]


def chained_claim(
    completion_id: str, iteration: int, chained: bool, n: int = 2
) -> tuple[Outcome, Completion]:
    rows = [{"id": i} for i in range(n)]
    result = {"rows": rows, "row_count": n, "recorded": True, "iteration": iteration}
    result["body"] = {"status": "ok", "result": {"n": n}}
    if chained:
        result["chained"] = True
    outcome = ok(result)
    return outcome, Completion(1, completion_id, "drain", 1, None, outcome)


@pytest.mark.parametrize("chain", [1, 3])
def test_a_chained_claim_is_taken_as_issued_and_its_block_runs_out(chain: int) -> None:
    """A claim's completion that says its worker issued the lane's next claim (a chain)
    counts the frame and takes that claim as in flight without issuing it; the next
    claims take the block's numbers in order; past the block's end the pass issues the
    next claim itself, with a new block."""
    pb = playbook(FRAMES.format(lanes=1, rows=2, conc=1))
    limits = Limits(cursor_chain=chain)
    sim = Sim(pb, Queue(0, 2), limits)
    d = start(pb, "e1", None, sim, limits, now=0.0)
    [first] = d.commands
    assert first.meta == {"max_rows": 2, "process": "frame", "iteration": 0, "chain": chain + 1}
    state, claim_id = d.state, first.command_id
    for iteration in range(chain):  # every frame of the block but its last chains
        _, completion = chained_claim(claim_id, iteration, chained=True)
        d = decide(pb, copy.deepcopy(state), [completion], sim, limits, 0.0)
        assert d.commands == [] and d.plans == []  # issued by the worker
        progress = d.state.steps["drain"].loop
        assert progress is not None and progress.lanes is not None
        [lane] = progress.lanes
        assert (lane.frame, lane.claiming, lane.body) == (iteration + 2, True, iteration + 1)
        assert progress.succeeded == 2 * (iteration + 1) and progress.in_flight == 1
        assert progress.next_index == chain + 1  # nothing reserved past the block
        state, claim_id = d.state, f"e1:drain:1:c0.{iteration + 2}"
    # the block's last frame: even a completion that says `chained` gets a new claim
    _, completion = chained_claim(claim_id, chain, chained=True)
    d = decide(pb, copy.deepcopy(state), [completion], sim, limits, 0.0)
    [after] = d.commands
    assert after.command_id == f"e1:drain:1:c0.{chain + 2}"
    assert after.meta == {
        "max_rows": 2,
        "process": "frame",
        "iteration": chain + 1,
        "chain": 2 * (chain + 1),
    }


def test_a_claim_that_did_not_chain_gets_its_next_claim_from_the_pass() -> None:
    """Within its block, a frame whose worker issued nothing (its body failed, the chain
    was cut short) gets the lane's next claim from the pass: the block's next number."""
    pb = playbook(FRAMES.format(lanes=1, rows=2, conc=1))
    sim = Sim(pb, Queue(0, 2))
    d = start(pb, "e1", None, sim, Limits(), now=0.0)
    _, completion = chained_claim(d.commands[0].command_id, 0, chained=False)
    d2 = decide(pb, copy.deepcopy(d.state), [completion], sim, Limits(), 0.0)
    assert [(c.command_id, c.meta) for c in d2.commands] == [
        ("e1:drain:1:c0.2", {"max_rows": 2, "process": "frame", "iteration": 1, "chain": 9})
    ]


def test_a_lane_drained_mid_block_leaves_its_numbers_out_of_issued() -> None:
    """`issued` (the loops row) counts bodies only: a lane drained with numbers of its
    block left over does not count them."""
    pb = playbook(FRAMES.format(lanes=1, rows=2, conc=1))
    sim = Sim(pb, Queue(0, 2))
    d = start(pb, "e1", None, sim, Limits(), now=0.0)
    _, completion = chained_claim(d.commands[0].command_id, 0, chained=True)
    d = decide(pb, copy.deepcopy(d.state), [completion], sim, Limits(), 0.0)
    empty = Completion(2, "e1:drain:1:c0.2", "drain", 1, None, ok({"rows": [], "row_count": 0}))
    d = decide(pb, copy.deepcopy(d.state), [empty], sim, Limits(), 0.0)
    [mirror] = [m for m in d.loops if m.step == "drain"]
    assert mirror.done and mirror.total == 2 and mirror.issued == 1


@pytest.mark.parametrize(("lanes", "conc", "window"), [(1, 1, 1), (2, 3, 6), (4, 5, 20)])
def test_a_redrive_runs_the_recorded_rows_and_claims_nothing(
    lanes: int, conc: int, window: int
) -> None:
    """A redrive of quarantined cursor rows (passes.rerun): the rows the original
    claimed run as the epoch's items, `lanes` x `row_concurrency` at once, one frame of
    one lane (the bodies' cursor names render), no claim; nothing runs after."""
    rows = [{"id": i} for i in (3, 9, 11, 20, 21, 40, 41, 42)]
    queue = Queue(100, 10, bad=11)
    sim = Sim(playbook(CURSOR.format(lanes=lanes, rows=10, conc=conc)), queue)
    state = sim.run(entry="drain", loop_items={"drain": rows}, halt_after=["drain"])
    assert queue.claims == 0  # nothing taken from the queue
    assert sorted(i for s, i in sim.ran if s == "drain" and i is not None) == list(range(len(rows)))
    [plan] = sim.decisions[0].plans
    assert plan.items == rows
    assert plan.meta == {
        "iterator": "row",
        "total": len(rows),
        "lane": 0,
        "frame": 1,
        "frame_start": 0,
    }
    stats = sim.results[("drain", 1)]["stats"]
    assert stats == {"total": len(rows), "success": len(rows) - 1, "failed": 1}
    assert state.status == "FAILED" and sim.steps_ran() == []  # halted: `after` never ran
    in_flight = max(
        d.state.steps["drain"].loop.in_flight
        for d in sim.decisions
        if "drain" in d.state.steps and d.state.steps["drain"].loop is not None
    )
    assert in_flight == min(window, len(rows))


def test_a_redrive_of_frames_is_refused_at_start() -> None:
    text = CURSOR.format(lanes=2, rows=10, conc=1).replace(
        "row_concurrency: 1}", "row_concurrency: 1, process: frame}"
    )
    sim = Sim(playbook(text), Queue(10, 10))
    decision = start(
        playbook(text), "e1", None, sim, now=0.0, entry="drain", loop_items={"drain": [[1]]}
    )
    assert decision.terminal is not None and decision.terminal.status == "FAILED"
    assert "whose cursor runs a body per frame" in str(decision.state.failures)
