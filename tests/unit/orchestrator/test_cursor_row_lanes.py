"""Per-row cursor lanes as one command, in the pure core (orchestrator.cursor): a claim
whose body the claiming worker may run reserves `max_rows` body iterations; a claim's
completion carrying one outcome per row (`bodies`) counts every row as its body
command's completion would and claims the next frame, with the same stats, per-item
results, failures, quarantine and loop counters whether the worker ran the bodies, none
(the rows handed over: body commands), or some."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from noetl_celery.models.outcome import Outcome
from noetl_celery.orchestrator.cursor import counted
from noetl_celery.orchestrator.decide import decide, start
from noetl_celery.orchestrator.decisions import Completion, Limits
from tests.unit.orchestrator.sim import Sim, err, ok, playbook

ROWS_PB = """apiVersion: noetl.io/v2
kind: Playbook
metadata: {{name: cursor_rows}}
workflow:
  - step: drain
    loop:
      cursor: {{kind: postgres, auth: pg, claim: "claim {{{{ __frame_max_rows }}}}"}}
      iterator: row
      spec:
        mode: cursor
        max_in_flight: {lanes}
        frame: {{max_rows: {rows}, row_concurrency: 3}}{extra}
    tool: {tool}
    next: {{arcs: [{{step: after, when: "{{{{ event.name == 'loop.done' }}}}"}}]}}
  - step: after
    tool: {{kind: noop}}
"""


def rows_playbook(lanes: int, rows: int, tool: str = "{kind: noop}", extra: str = "") -> Any:
    return playbook(ROWS_PB.format(lanes=lanes, rows=rows, tool=tool, extra=extra))


class InlineRows:
    """The work queue and a claiming worker that runs its frame's per-row bodies itself
    (`mode`: `inline` every frame, `plan` none: the rows handed over as by a claim run
    after its worker died, `mixed` every other frame), writing each body's terminal
    event as worker.frames does."""

    def __init__(self, size: int, max_rows: int, mode: str, bad: int | None = 7) -> None:
        self.pending = list(range(size))
        self.max_rows = max_rows
        self.mode = mode
        self.bad = bad
        self.claims = 0
        self.sim: Sim | None = None
        self.bodies: list[tuple[int, int]] = []  # (iteration, row id)

    def body(self, row: dict[str, int]) -> Outcome:
        if row["id"] == self.bad:
            return err(f"row {self.bad} is bad")
        return ok({"seen": row["id"]})

    def __call__(self, step: str, item: Any, iteration: int | None) -> Outcome:
        assert self.sim is not None and self.sim.state is not None
        if step != "drain":
            return ok({})
        if iteration is not None:  # a body command
            self.bodies.append((iteration, item["id"]))
            return self.body(item)
        self.claims += 1
        frame, self.pending = self.pending[: self.max_rows], self.pending[self.max_rows :]
        rows = [{"id": i} for i in frame]
        if not rows:
            return ok({"rows": [], "row_count": 0})
        progress = self.sim.state.steps["drain"].loop
        assert progress is not None and progress.lanes is not None
        reserved = progress.lanes[item["lane"]].body
        assert reserved is not None  # every such claim reserved its bodies' iterations
        result: dict[str, Any] = {"rows": rows, "row_count": len(rows), "recorded": True}
        result["iteration"] = reserved
        if self.mode == "inline" or (self.mode == "mixed" and self.claims % 2):
            outcomes = []
            for number, row in enumerate(rows, start=reserved):
                body = self.body(row)
                self.bodies.append((number, row["id"]))
                outcomes.append(counted(self.sim.playbook.step("drain"), body))  # as sent
                self.sim.events.append(
                    {
                        "step": step,
                        "epoch": 1,
                        "iteration": number,
                        "outcome": body.to_json(),
                        "type": "command.completed" if body.ok else "command.failed",
                    }
                )
            result["bodies"] = outcomes
        return ok(result)


# a step-level `set` renders each row's output: the claim's completion carries it whole
SET = '{kind: noop}\n    set: {ctx.seen: "{{ (ctx.seen | default(0)) + output.data.seen }}"}'


def rows_sim(
    size: int, lanes: int, mode: str, batch: int, extra: str = "", tool: str = "{kind: noop}"
) -> tuple[Sim, InlineRows]:
    queue = InlineRows(size, 10, mode)
    sim = Sim(rows_playbook(lanes, 10, tool=tool, extra=extra), queue)
    queue.sim = sim
    sim.run(batch=batch)
    return sim, queue


@pytest.mark.parametrize(
    ("size", "lanes", "batch", "extra", "tool"),
    [
        (47, 3, 1, "", "{kind: noop}"),
        (47, 3, 2, "", "{kind: noop}"),
        (10, 4, 3, "", "{kind: noop}"),
        (0, 2, 1, "", "{kind: noop}"),
        (95, 1, 1, "", "{kind: noop}"),
        (47, 3, 1, "\n        on_item_error: quarantine", "{kind: noop}"),
        (47, 3, 1, "", SET),
    ],
)
def test_rows_run_with_their_claim_count_as_their_body_commands_would(
    size: int, lanes: int, batch: int, extra: str, tool: str
) -> None:
    seen = {}
    for mode in ("inline", "plan", "mixed"):
        sim, queue = rows_sim(size, lanes, mode, batch, extra, tool)
        assert sim.state is not None and sim.state.status in ("COMPLETED", "FAILED")
        assert sorted(i for _, i in queue.bodies) == list(range(size)), mode  # once each
        iterations = [i for i, _ in queue.bodies]
        assert len(set(iterations)) == len(iterations), mode  # one body per iteration
        if mode == "inline":  # no body command at all: one command per frame
            assert [i for _, i in sim.ran if i is not None] == []
        if mode == "plan":  # every row's body a command, at its reserved iteration
            assert sorted(i for _, i in sim.ran if i is not None) == sorted(iterations)
        result = sim.results[("drain", 1)]
        loops = [m for d in sim.decisions for m in d.loops]
        last = loops[-1]
        quarantined = [e for e in sim.events if e.get("type") == "item.quarantined"]
        seen[mode] = (
            result,
            (last.total, last.issued, last.succeeded, last.failed, last.quarantined),
            sorted(e["payload"]["message"] for e in quarantined),
            [f["message"] for f in sim.state.failures],
            sim.state.vars.get("seen"),
        )
    assert seen["inline"] == seen["plan"] == seen["mixed"]
    if tool == SET:  # every successful row's output was rendered by the step's `set`
        assert seen["inline"][4] == sum(range(size)) - 7
    bad = 1 if size > 7 else 0
    stats = seen["inline"][0]["stats"]
    if extra:  # the bad row set aside, not failed
        assert stats == {"total": size, "success": size - bad, "failed": 0, "quarantined": bad}
    else:
        assert stats == {"total": size, "success": size - bad, "failed": bad}
    assert len(seen["inline"][0]["results"]) == size
    assert seen["inline"][1][1] == size  # `issued` counts bodies, not reserved numbers


def test_a_claim_reserves_max_rows_iterations_and_a_short_frame_leaves_the_rest_unused() -> None:
    """Lanes reserve 0-9 and 10-19; lane 0's frame of 10 uses its block and reserves
    20-29, lane 1's frame of 5 leaves 15-19 unused (counted, never issued)."""
    sim, queue = rows_sim(15, 2, "inline", 1)
    assert sorted(i for i, _ in queue.bodies) == [*range(10), *range(10, 15)]
    mirror = [m for d in sim.decisions for m in d.loops][-1]
    assert mirror.done and mirror.issued == 15 and mirror.total == 15
    progress = sim.state.steps["drain"].loop if sim.state else None
    assert progress is not None and progress.unused == 5


@pytest.mark.parametrize(
    ("claimed", "counted_now"),
    [
        ({"iteration": 0, "bodies": [{"status": "ok"}, {"status": "ok"}]}, True),
        ({"iteration": 4, "bodies": [{"status": "ok"}, {"status": "ok"}]}, False),  # not its own
        ({"iteration": 0, "bodies": [{"status": "ok"}]}, False),  # not one per row
        ({"iteration": 0}, False),  # rows handed over without bodies: body commands
        ({"bodies": [{"status": "ok"}, {"status": "ok"}]}, False),  # no reservation named
        ({"iteration": 0, "body": {"status": "ok"}}, False),  # a frame's body: not per row
    ],
)
def test_only_bodies_run_as_the_reserved_iterations_are_counted_with_their_claim(
    claimed: dict[str, Any], counted_now: bool
) -> None:
    pb = rows_playbook(1, 2)
    d = start(pb, "e1", None, Sim(pb, InlineRows(0, 2, "plan")), Limits(), now=0.0)
    first = {"max_rows": 2, "process": "rows", "iteration": 0}
    assert d.commands[0].meta == first
    rows = [{"id": 1}, {"id": 2}]
    outcome = ok({"rows": rows, "row_count": 2, "recorded": True, **claimed})
    completion = Completion(1, d.commands[0].command_id, "drain", 1, None, outcome)
    sim = Sim(pb, InlineRows(0, 2, "plan"))
    d2 = decide(pb, copy.deepcopy(d.state), [completion], sim, Limits(), 0.0)
    progress = d2.state.steps["drain"].loop
    assert progress is not None and progress.total == 2
    if counted_now:
        assert progress.succeeded == 2 and not d2.plans
        assert [c.meta for c in d2.commands] == [{**first, "iteration": 2}]
    else:
        assert progress.succeeded == 0 and not d2.commands
        assert [(p.start, p.items) for p in d2.plans] == [(0, rows)]


PIPELINE = """
      - {name: get, kind: http, url: 'http://x',
         spec: {policy: {rules: [{when: "{{ output.status == 'error' }}",
                                  then: {do: retry, attempts: 3, delay: 0.1}}]}}}
      - {name: save, kind: KIND, command: 'select 1', code: 'result = 1', auth: pg}"""


@pytest.mark.parametrize(
    ("tool", "concurrency", "inline", "threads"),
    [
        ("{kind: noop}", 3, True, None),  # quick and local: one row at a time
        ("{kind: postgres, auth: pg, command: 'select 1'}", 3, True, None),
        ("{kind: http, url: 'http://x'}", 3, True, 3),  # requests overlap in threads
        ("{kind: http, url: 'http://x'}", 1, True, None),
        ("{kind: python, code: 'result = 1'}", 3, False, None),  # it may compute: processes
        ("{kind: python, code: 'result = 1'}", 1, True, None),
        ("{kind: duckdb, command: 'select 1'}", 3, True, None),  # quick and local: in turn
        ("{kind: playbook, path: a/b}", 1, False, None),  # waits for a child
        (PIPELINE.replace("KIND", "postgres"), 25, True, 25),  # policies: the row's whole run
        (PIPELINE.replace("KIND", "python"), 25, False, None),  # http + python: commands
        (PIPELINE.replace("KIND", "python"), 1, True, None),
        (PIPELINE.replace("KIND", "duckdb"), 3, False, None),  # its requests must overlap
        ("{kind: http, url: 'http://x'}\n    spec: {timeout: 5}", 3, False, None),  # a deadline
    ],
)
def test_which_per_row_bodies_the_claiming_worker_may_run(
    tool: str, concurrency: int, inline: bool, threads: int | None
) -> None:
    text = ROWS_PB.format(lanes=1, rows=5, tool=tool, extra="")
    pb = playbook(text.replace("row_concurrency: 3", f"row_concurrency: {concurrency}"))
    d = start(pb, "e1", None, Sim(pb, InlineRows(0, 5, "plan")), Limits(), now=0.0)
    meta = d.commands[0].meta or {}
    assert (meta.get("process") == "rows") is inline
    assert ("iteration" in meta) is inline
    assert meta.get("row_concurrency") == threads


def test_a_parked_row_is_in_flight_and_its_lane_claims_its_next_frame_when_it_finishes() -> None:
    """A row whose body parked in the claiming worker (worker.frame_rows) was written as
    a parked body command by the frame's close: the claim's completion counts the other
    rows and holds the lane; the parked body's own completion counts it and claims the
    lane's next frame."""
    pb = rows_playbook(1, 3)
    d = start(pb, "e1", None, Sim(pb, InlineRows(0, 3, "plan")), Limits(), now=0.0)
    rows = [{"id": 1}, {"id": 2}, {"id": 3}]
    bodies = [ok({"seen": 1}).to_json(), {"parked": True}, ok({"seen": 3}).to_json()]
    claimed = ok({"rows": rows, "row_count": 3, "recorded": True, "iteration": 0, "bodies": bodies})
    completion = Completion(1, d.commands[0].command_id, "drain", 1, None, claimed)
    sim = Sim(pb, InlineRows(0, 3, "plan"))
    d2 = decide(pb, copy.deepcopy(d.state), [completion], sim, Limits(), 0.0)
    progress = d2.state.steps["drain"].loop
    assert progress is not None and progress.lanes is not None
    assert (progress.total, progress.succeeded, progress.in_flight) == (3, 2, 1)
    assert progress.lanes[0].in_flight == 1 and not d2.commands and not d2.plans
    assert d2.state.in_flight == 1
    parked = Completion(2, "e1:drain:1:1", "drain", 1, 1, ok({"seen": 2}))
    d3 = decide(pb, copy.deepcopy(d2.state), [parked], sim, Limits(), 0.0)
    progress = d3.state.steps["drain"].loop
    assert progress is not None and progress.lanes is not None
    assert (progress.succeeded, progress.lanes[0].in_flight) == (3, 0)
    assert [c.meta for c in d3.commands] == [{"max_rows": 3, "process": "rows", "iteration": 3}]
