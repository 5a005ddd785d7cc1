"""A loop item parked for its rate_limit key's turn (`item.throttled`) gives its window
slot back (orchestrator.loops.on_parked): tables of the pure decisions."""

from __future__ import annotations

import random
from dataclasses import dataclass, field

import pytest

from noetl_celery.models.outcome import Outcome
from noetl_celery.orchestrator.decide import decide, start
from noetl_celery.orchestrator.decisions import Completion, Limits
from noetl_celery.orchestrator.ids import iteration_command_id
from noetl_celery.orchestrator.state import ExecutionState, LoopProgress
from tests.unit.orchestrator.sim import Sim, ok
from tests.unit.orchestrator.test_loop_cases import loop_playbook


@dataclass
class Loop:
    """A loop epoch driven by hand: `park` and `done` fold one inbox entry each."""

    sim: Sim
    event: int = 100
    folded: list[Completion] = field(default_factory=list)

    @classmethod
    def begin(
        cls, items: int, window: int, mode: str = "parallel", limits: Limits | None = None
    ) -> Loop:
        sim = Sim(loop_playbook(list(range(items)), mode, window), lambda s, i, n: ok(i))
        sim.limits = limits or Limits()
        sim.apply(start(sim.playbook, "e1", None, sim, sim.limits, now=0.0))
        loop = cls(sim)
        loop.done_step("start")
        return loop

    @property
    def state(self) -> ExecutionState:
        assert self.sim.state is not None
        return self.sim.state

    @property
    def progress(self) -> LoopProgress:
        progress = self.state.step("each").loop
        assert progress is not None
        return progress

    def _fold(self, completion: Completion) -> None:
        self.event += 1
        self.folded.append(completion)
        self.sim.apply(
            decide(self.sim.playbook, self.state, [completion], self.sim, self.sim.limits, 0.0)
        )

    def done_step(self, step: str) -> None:
        cid = f"e1:{step}:1"
        self.sim.events.append({"step": step, "epoch": 1, "iteration": None})
        self._fold(Completion(self.event, cid, step, 1, None, Outcome("ok", 1)))

    def park(self, i: int, delay: float = 5.0, epoch: int = 1) -> None:
        cid = iteration_command_id("e1", "each", epoch, i)
        self._fold(Completion(self.event, cid, "each", epoch, i, Outcome("ok"), delay))

    def done(self, i: int) -> None:
        cid = iteration_command_id("e1", "each", 1, i)
        self.sim.events.append(
            {"step": "each", "epoch": 1, "iteration": i, "outcome": ok(i).to_json()}
        )
        self._fold(Completion(self.event, cid, "each", 1, i, ok(i)))

    def counts(self) -> tuple[int, int, list[int], int]:
        """(window in flight, next item to issue, released items, execution in flight)"""
        p = self.progress
        return p.in_flight, p.next_index, list(p.released), self.state.in_flight


# (what happens, in order) -> (in flight in the window, next index, released, execution's)
@pytest.mark.parametrize(
    ("steps", "expected"),
    [
        ([], (3, 3, [], 3)),
        # a parked item's slot is given back: the window refills with the next item
        ([("park", 0)], (3, 4, [0], 4)),
        # a second event of the same item (its next attempt parked again): nothing
        ([("park", 0), ("park", 0)], (3, 4, [0], 4)),
        # its completion does not free a slot a second time
        ([("park", 0), ("done", 0)], (3, 4, [], 3)),
        # an item that did not park frees its slot when it completes
        ([("park", 0), ("done", 1)], (3, 5, [0], 4)),
        # a turn beyond the horizon keeps the item's slot
        ([("park", 0, 500.0)], (3, 3, [], 3)),
        # an item never issued, or of another epoch: nothing
        ([("park", 7)], (3, 3, [], 3)),
        ([("park", 0, 5.0, 2)], (3, 3, [], 3)),
        # every parked item released: the window runs items of other keys meanwhile
        ([("park", 0), ("park", 1), ("park", 2)], (3, 6, [0, 1, 2], 6)),
    ],
)
def test_a_parked_item_gives_its_window_slot_back(
    steps: list[tuple[object, ...]], expected: tuple[int, int, list[int], int]
) -> None:
    loop = Loop.begin(items=10, window=3)
    for what, *args in steps:
        getattr(loop, str(what))(*args)
    assert loop.counts() == expected


def test_released_items_are_bounded_per_window() -> None:
    loop = Loop.begin(items=20, window=2, limits=Limits(released_per_window=2))
    for i in range(8):
        loop.park(i)
    # 2 x 2 given back (items 0-3); items 4 and 5 keep their slots and the window is full
    assert loop.counts() == (2, 6, [0, 1, 2, 3], 6)
    loop.done(0)  # one given back completes: the next one parked may be given back
    loop.park(4)
    assert loop.counts() == (2, 7, [1, 2, 3, 4], 6)


def test_a_sequential_loop_keeps_its_one_item_in_flight() -> None:
    loop = Loop.begin(items=5, window=3, mode="sequential")
    loop.park(0)
    assert loop.counts() == (1, 1, [], 1)


@pytest.mark.parametrize("seed", range(20))
def test_every_item_once_whatever_the_order_of_parks_and_completions(seed: int) -> None:
    """Random parks (some twice, some beyond the horizon) and completions: the window is
    never exceeded, the released set stays bounded, the execution's in-flight count is
    the window's plus the released items, every item completes once, one loop.done."""
    rng = random.Random(seed)
    window, items = 4, 40
    loop = Loop.begin(items=items, window=window, limits=Limits(released_per_window=3))
    issued: set[int] = set(range(loop.progress.next_index))
    completed: list[int] = []
    while loop.state.status == "RUNNING" and loop.progress.finished < items:
        running = sorted(issued - set(completed))
        i = rng.choice(running)
        if rng.random() < 0.5:
            loop.park(i, rng.choice([1.0, 5.0, 1000.0]))
        else:
            loop.done(i)
            completed.append(i)
        if loop.progress.done:
            break
        p = loop.progress
        assert p.in_flight <= window
        assert len(p.released) <= window * 3
        assert loop.state.in_flight == p.in_flight + len(p.released)
        assert set(p.released) <= set(running)
        issued |= set(range(p.next_index))
    assert sorted(completed) == list(range(items))
    assert loop.sim.event_types().count("loop.done") == 1
    assert loop.sim.results[("each", 1)]["stats"] == {
        "total": items,
        "success": items,
        "failed": 0,
    }
