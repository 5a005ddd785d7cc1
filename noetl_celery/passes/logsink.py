"""Captured output on its way to `command_logs` (the capture itself: logcapture).

A command's capture is cheap to open (a small object, a ContextVar set), and a command
that printed and logged nothing writes nothing: a no-op loop pays no extra row per
iteration.
"""

from __future__ import annotations

from collections.abc import Callable

from noetl_celery.logcapture import Capture, Collector
from noetl_celery.store.rows import ClaimedCommand, LogRow
from noetl_celery.tools.redaction import Redactor, with_command_masks


class _Redact:
    """The services' redactor, fetched on first use and kept for one capture (fetching
    it looks at the credentials file), followed by the keychain values the command
    resolved meanwhile (they are known only once it started rendering)."""

    __slots__ = ("_get", "_redactor")

    def __init__(self, get: Callable[[], Redactor]) -> None:
        self._get = get
        self._redactor: Redactor | None = None

    def __call__(self, text: str) -> str:
        if self._redactor is None:
            self._redactor = self._get()
        return with_command_masks(self._redactor).redact(text)


class LogSink:
    def __init__(self, limit: int, redactor: Callable[[], Redactor]) -> None:
        self.limit = limit  # bytes kept per command; 0 captures nothing
        self._redactor = redactor

    def command(self) -> Capture:
        """A command's capture; with a limit of 0 it keeps nothing but still redacts
        what the command echoes."""
        return Capture(self.limit, _Redact(self._redactor))

    def collector(self) -> Collector | None:
        return Collector(self.limit, _Redact(self._redactor)) if self.limit else None

    @staticmethod
    def command_rows(capture: Capture | None, command: ClaimedCommand) -> list[LogRow]:
        taken = capture.take() if capture is not None else None
        if taken is None:
            return []
        text, truncated = taken
        return [
            LogRow(
                execution_id=command.execution_id,
                command_id=command.command_id,
                step=command.step,
                iteration=command.iteration,
                text=text,
                truncated=truncated,
            )
        ]

    @staticmethod
    def collected_rows(collector: Collector | None) -> list[LogRow]:
        """Engine lines per (execution, step), stored without a command."""
        rows = []
        for (execution_id, step), capture in (collector.captures if collector else {}).items():
            taken = capture.take()
            if taken is not None:
                rows.append(LogRow(execution_id, None, step, None, taken[0], taken[1]))
        return rows
