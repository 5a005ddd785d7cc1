"""What a log line is about: the execution, step and command being worked on.

The engine sets it around each command it runs; the CLI's log formatters read it, so
every line logged meanwhile (by the engine, a tool, a library) names the command,
without each call site passing `extra=`.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar

FIELDS = ("execution_id", "step", "command_id")
_current: ContextVar[dict[str, str] | None] = ContextVar("noetl_log_context", default=None)


@contextmanager
def about(**fields: str) -> Iterator[None]:
    token = _current.set({k: v for k, v in fields.items() if v})
    try:
        yield
    finally:
        _current.reset(token)


def of_command(command_id: str) -> dict[str, str]:
    """`extra=` for a line about a command: its id is `execution:step:...` (`:` cannot
    appear in a step name), so code holding only the id can still name all three."""
    execution_id, _, rest = command_id.partition(":")
    return {"execution_id": execution_id, "step": rest.partition(":")[0], "command_id": command_id}


class ContextFilter(logging.Filter):
    """Fills the fields a record does not carry itself from the current context."""

    def filter(self, record: logging.LogRecord) -> bool:
        current = _current.get() or {}
        own = getattr(record, "execution_id", None)
        if own and own != current.get("execution_id"):
            # about another execution (a child driven from its parent's command): the
            # command being run is not what this line is about
            return True
        for key, value in current.items():
            if not getattr(record, key, None):
                setattr(record, key, value)
        return True
