"""The snapshot's JSON (`StepState.to_json`, written by hand for speed) is the one
`dataclasses.asdict` gave with the same fields left out at their defaults, key order
included, and reads back to the same state."""

from __future__ import annotations

from dataclasses import asdict
from typing import Any

import pytest

from noetl_celery.constants import StepStatus
from noetl_celery.orchestrator.state import (
    ExecutionState,
    ItemError,
    Lane,
    LoopProgress,
    StepState,
)


def asdict_json(step: StepState) -> dict[str, Any]:
    """The format as it was written with dataclasses.asdict (until issue 34)."""
    data = asdict(step)
    if step.loop is None:
        data.pop("loop")
    elif step.loop.lanes is None:
        for key in ("lanes", "max_rows", "row_concurrency", "per_frame", "claim_attempts"):
            data["loop"].pop(key)
    for lane in (data.get("loop") or {}).get("lanes") or []:
        if lane.get("body") is None:
            lane.pop("body", None)
        if not lane.get("chain_end"):  # (chains: a later field, left out when unset)
            lane.pop("chain_end", None)
    if step.loop is not None:
        for key in ("errors", "unused", "quarantined", "released", "chain"):
            if not getattr(step.loop, key):
                data["loop"].pop(key)
    return data


ERROR: ItemError = {"item": 3, "kind": "http_error", "message": "500"}

STEPS = {
    "plain": StepState(epoch=2, in_flight=1, status=StepStatus.RUNNING, result_epoch=1),
    "loop.in": StepState(
        epoch=1, loop=LoopProgress(epoch=1, total=10, window=4, mode="async", next_index=4)
    ),
    "loop with everything": StepState(
        epoch=1,
        loop=LoopProgress(
            epoch=1,
            total=10,
            window=4,
            succeeded=3,
            failed=1,
            quarantined=2,
            done=True,
            released=[5, 7],
            unused=3,
            errors=[ERROR],
        ),
    ),
    "cursor": StepState(
        epoch=1,
        status=StepStatus.RUNNING,
        loop=LoopProgress(
            epoch=1,
            total=6,
            window=2,
            lanes=[Lane(frame=2, claiming=True, body=6), Lane(frame=1, drained=True, rows=3)],
            max_rows=50,
            row_concurrency=25,
            per_frame=True,
            claim_attempts=4,
        ),
    ),
    "cursor with chains": StepState(
        epoch=1,
        status=StepStatus.RUNNING,
        loop=LoopProgress(
            epoch=1,
            total=6,
            window=2,
            lanes=[
                Lane(frame=2, claiming=True, body=6, chain_end=9),
                Lane(frame=1, drained=True, rows=3, start=9, stop=10, chain_end=18),
            ],
            max_rows=50,
            row_concurrency=1,
            per_frame=True,
            chain=8,
        ),
    ),
}


@pytest.mark.parametrize("name", list(STEPS))
def test_the_json_is_asdicts_key_for_key_and_in_order(name: str) -> None:
    step = STEPS[name]
    written = step.to_json()
    assert written == asdict_json(step)
    assert list(written) == list(asdict_json(step))
    if "loop" in written:
        assert list(written["loop"]) == list(asdict_json(step)["loop"])
    assert StepState.from_json(written) == step


def test_the_json_shares_no_list_with_the_state() -> None:
    """The pass mutates its copy of the state after writing: the JSON must not change."""
    step = STEPS["loop with everything"]
    assert step.loop is not None
    written = step.to_json()
    step.loop.released.append(9)
    step.loop.errors[0]["message"] = "changed"
    assert written["loop"]["released"] == [5, 7]
    assert written["loop"]["errors"][0]["message"] == "500"
    step.loop.released.pop()
    step.loop.errors[0]["message"] = "500"


def test_an_execution_state_round_trips() -> None:
    state = ExecutionState("e1", vars={"a": 1}, steps=dict(STEPS), halt=["cursor"])
    assert ExecutionState.from_json(state.to_json()) == state
