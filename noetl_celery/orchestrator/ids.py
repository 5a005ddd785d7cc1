"""Deterministic command ids (docs/design.md §2.2).

A command id is its logical coordinate, so re-running a decision yields the same id and
the primary key turns the duplicate insert into a no-op. `:` cannot appear in a step name
(the validator rejects it), which keeps the coordinates unambiguous.
"""

from __future__ import annotations


def step_command_id(execution_id: str, step: str, epoch: int, attempt: int = 1) -> str:
    base = f"{execution_id}:{step}:{epoch}"
    return base if attempt == 1 else f"{base}:a{attempt}"


def iteration_command_id(
    execution_id: str, step: str, epoch: int, iteration: int, attempt: int = 1
) -> str:
    base = f"{execution_id}:{step}:{epoch}:{iteration}"
    return base if attempt == 1 else f"{base}:a{attempt}"


def base_command_id(command_id: str) -> str:
    """The logical coordinate of a command, without its `:a<attempt>` suffix."""
    head, sep, last = command_id.rpartition(":")
    if sep and last.startswith("a") and last[1:].isdigit():
        return head
    return command_id


def attempt_of(command_id: str) -> int:
    """Which run of its logical command `command_id` is (1 when it has no suffix)."""
    _, sep, last = command_id.rpartition(":")
    return int(last[1:]) if sep and last.startswith("a") and last[1:].isdigit() else 1


def with_attempt(command_id: str, attempt: int) -> str:
    """The id of run `attempt` of the same logical command (attempt 1 has no suffix)."""
    base = base_command_id(command_id)
    return base if attempt == 1 else f"{base}:a{attempt}"


def claim_command_id(execution_id: str, step: str, epoch: int, lane: int, frame: int) -> str:
    """A cursor lane's claim of one frame."""
    return f"{execution_id}:{step}:{epoch}:c{lane}.{frame}"


def parse_claim(command_id: str) -> tuple[int, int] | None:
    """(lane, frame) of a claim command id, None for any other command."""
    last = base_command_id(command_id).rsplit(":", 1)[-1]
    if not last.startswith("c") or "." not in last:
        return None
    lane, _, frame = last[1:].partition(".")
    if not (lane.isdigit() and frame.isdigit()):
        return None
    return int(lane), int(frame)
