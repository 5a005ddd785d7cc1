"""How decisions reach workers. The engine only knows this protocol; Celery (tasks/) and
the embedded thread pool (engine/inprocess.py) implement it."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol, runtime_checkable


class Dispatcher(Protocol):
    def publish(self, command_ids: Sequence[str]) -> None:
        """Deliver `execute_command` for each id (at least once)."""

    def wake(self, execution_id: str) -> None:
        """Ask for an orchestration pass of `execution_id` somewhere."""


@runtime_checkable
class Probe(Protocol):
    def probe(self) -> str:
        """The broker's token, the same until the broker restarts empty or is flushed
        (engine.outbox); raises when the broker cannot be reached."""
        ...


class NullDispatcher:
    """Publishes nothing: for tools that only read (status, events) and for tests."""

    def publish(self, command_ids: Sequence[str]) -> None:
        return None

    def wake(self, execution_id: str) -> None:
        return None
