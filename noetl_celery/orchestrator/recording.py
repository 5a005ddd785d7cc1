"""A pass as a self-contained record, and replaying it (the Temporal way of testing
that the core is deterministic).

A pass is a function of (playbook, state before, completions, the facts it read, now,
limits); its record holds all of them and the decision it made. `RecordingFacts` wraps
the real `Facts` and writes down every question and answer; `ReplayFacts` answers from
that record alone and refuses any question the original pass did not ask, so a replay
needs no database. The JSON shape of completions and decisions lives here only: when
a type changes, this is the one place its (de)serialisation changes.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Iterable, Mapping
from typing import Any

from noetl_celery.errors import ReplayError
from noetl_celery.models.outcome import Outcome
from noetl_celery.models.playbook import Playbook
from noetl_celery.orchestrator.decide import decide, start
from noetl_celery.orchestrator.decisions import Completion, Decision, Facts, Limits
from noetl_celery.orchestrator.state import ExecutionState

RECORD_VERSION = 1


def _key(call: str, args: Iterable[Any]) -> str:
    return json.dumps([call, *args])


class RecordingFacts:
    """`Facts` that records every call and its answer (in call order)."""

    def __init__(self, inner: Facts) -> None:
        self.inner = inner
        self.calls: list[dict[str, Any]] = []

    def result(self, step: str, epoch: int) -> Any:
        answer = self.inner.result(step, epoch)
        self.calls.append({"call": "result", "args": [step, epoch], "answer": answer})
        return answer

    def iteration_results(self, step: str, epoch: int, limit: int) -> list[Any]:
        answer = self.inner.iteration_results(step, epoch, limit)
        self.calls.append(
            {"call": "iteration_results", "args": [step, epoch, limit], "answer": answer}
        )
        return answer


class ReplayFacts:
    """`Facts` answered from a recording; a call the recording lacks is an error."""

    def __init__(self, calls: list[dict[str, Any]]) -> None:
        self._answers = {_key(c["call"], c["args"]): c["answer"] for c in calls}

    def _answer(self, call: str, *args: Any) -> Any:
        key = _key(call, args)
        if key not in self._answers:
            raise ReplayError(f"the replayed pass asked {call}{tuple(args)!r}, not recorded")
        return json.loads(json.dumps(self._answers[key]))  # a pass never shares the record

    def result(self, step: str, epoch: int) -> Any:
        return self._answer("result", step, epoch)

    def iteration_results(self, step: str, epoch: int, limit: int) -> list[Any]:
        answer: list[Any] = self._answer("iteration_results", step, epoch, limit)
        return answer


# ---- (de)serialisation ---------------------------------------------------------------------
def completion_to_json(completion: Completion) -> dict[str, Any]:
    out = {
        "event_id": completion.event_id,
        "command_id": completion.command_id,
        "step": completion.step,
        "epoch": completion.epoch,
        "iteration": completion.iteration,
        "outcome": completion.outcome.to_json(),
    }
    if completion.parked_for is not None:  # an `item.throttled` (records before it: none)
        out["parked_for"] = completion.parked_for
    return out


def completion_from_json(data: Mapping[str, Any]) -> Completion:
    return Completion(
        event_id=data["event_id"],
        command_id=data["command_id"],
        step=data["step"],
        epoch=data["epoch"],
        iteration=data["iteration"],
        outcome=Outcome.from_json(data["outcome"]),
        parked_for=data.get("parked_for"),
    )


def limits_to_json(limits: Limits) -> dict[str, Any]:
    return dataclasses.asdict(limits)


def limits_from_json(data: Mapping[str, Any]) -> Limits:
    """The limits a pass was recorded with; a limit the recording does not name did not
    exist then, so it stands at what made the engine behave as it did: a cursor lane
    folded every frame (no `cursor_chain`)."""
    return Limits(**{"cursor_chain": 0, **data})


def _plain(value: Any) -> Any:
    """Plain JSON data: dataclasses become dicts, mapping keys strings."""
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {f.name: _plain(getattr(value, f.name)) for f in dataclasses.fields(value)}
    if isinstance(value, dict):
        return {str(key): _plain(item) for key, item in value.items()}
    if isinstance(value, list | tuple | range):
        return [_plain(item) for item in value]
    return value


def decision_to_json(decision: Decision) -> dict[str, Any]:
    """A decision as JSON data (two decisions are equal when their JSON is)."""
    data: dict[str, Any] = {
        name: _plain(getattr(decision, name))
        for name in ("commands", "plans", "issues", "events", "results", "contexts", "loops")
    }
    # records of passes without a quarantined item read as they always did
    for mirror in data["loops"]:
        if not mirror["quarantined"]:
            del mirror["quarantined"]
    for engine_event in data["events"]:
        for key in ("iteration", "command_id"):
            if engine_event[key] is None:
                del engine_event[key]
    data["terminal"] = _plain(decision.terminal)
    data["state"] = decision.state.to_json()
    # through JSON text: what a stored record reads back as (tuples -> lists, ...)
    plain: dict[str, Any] = json.loads(json.dumps(data, sort_keys=True))
    return plain


def pass_record(
    *,
    playbook: dict[str, Any],
    state: ExecutionState,
    completions: list[Completion],
    facts: RecordingFacts,
    now: float,
    limits: Limits,
    decision: Decision,
) -> dict[str, Any]:
    """The record of one `decide` pass; `playbook` says where its YAML is (`{"sha256"}`)."""
    return {
        "version": RECORD_VERSION,
        "playbook": playbook,
        "state": state.to_json(),
        "completions": [completion_to_json(c) for c in completions],
        "facts": facts.calls,
        "now": now,
        "limits": limits_to_json(limits),
        "decision": decision_to_json(decision),
    }


def start_record(
    *,
    playbook: dict[str, Any],
    execution_id: str,
    payload: dict[str, Any] | None,
    inputs: dict[str, Any],
    facts: RecordingFacts,
    now: float,
    limits: Limits,
    decision: Decision,
) -> dict[str, Any]:
    """The record of an execution's first pass (`start`): no state, no completions;
    `inputs` are start's keyword inputs (a rerun's entry, variables, results, items)."""
    return {
        "version": RECORD_VERSION,
        "playbook": playbook,
        "start": {"execution_id": execution_id, "payload": payload, **inputs},
        "state": None,
        "completions": [],
        "facts": facts.calls,
        "now": now,
        "limits": limits_to_json(limits),
        "decision": decision_to_json(decision),
    }


def replay(record: dict[str, Any], playbook: Playbook) -> dict[str, Any]:
    """Decide the recorded pass again from its record alone; the decision as JSON."""
    record = json.loads(json.dumps(record))  # the pass shares nothing with the record
    facts = ReplayFacts(record["facts"])
    limits = limits_from_json(record["limits"])
    begin = record.get("start")
    if begin is not None:
        execution_id, payload = begin.pop("execution_id"), begin.pop("payload")
        first = start(playbook, execution_id, payload, facts, limits, now=record["now"], **begin)
        return decision_to_json(first)
    decision = decide(
        playbook,
        ExecutionState.from_json(record["state"]),
        [completion_from_json(c) for c in record["completions"]],
        facts,
        limits,
        record["now"],
    )
    return decision_to_json(decision)
