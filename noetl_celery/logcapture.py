"""What a command prints and logs, captured per command while it runs.

The worker opens a `Capture` around each command; a ContextVar makes it the current
sink of that thread (embedded threads, Celery's threads pool) or process (prefork), so
commands running side by side never see each other's lines. Two writers feed it:
`print` in python steps (tools.python_helpers.stderr_print) and `CaptureHandler` on the
root logger (the step's own `logging`, the engine's lines about the command). Text is
redacted as it arrives (no secret is ever held, let alone stored) and capped; the worker
stores it when the command closes, and only when something was captured.

A `Collector` is the sink of engine work outside any command (a reaper sweep): it keeps
the lines that name an execution (`extra={"execution_id": ...}`).
"""

from __future__ import annotations

import logging
import re
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from typing import Protocol

Redact = Callable[[str], str]

# how a captured log record reads (the stored block is headed by its command already)
LINE_FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"


class Sink(Protocol):
    def add_record(self, record: logging.LogRecord, text: str) -> None: ...


_current: ContextVar[Sink | None] = ContextVar("noetl_log_capture", default=None)


def storable(text: str) -> str:
    """`text` as a database can hold it: NUL (which Postgres text refuses) and lone
    surrogates (which UTF-8 cannot encode) become U+FFFD."""
    if "\x00" in text:
        text = text.replace("\x00", "\ufffd")
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        text = _SURROGATE.sub("\ufffd", text)
    return text


_SURROGATE = re.compile("[\ud800-\udfff]")


def _cut(text: str, size: int) -> str:
    """The longest prefix of `text` that is at most `size` UTF-8 bytes."""
    return text.encode("utf-8")[:size].decode("utf-8", "ignore")


class Capture:
    """One command's output: redacted as written, at most `limit` UTF-8 bytes kept (the
    head; `truncated` says more was written). Thread-safe: a python step may print from
    threads of its own, and a timed-out step's abandoned thread may still print after
    the command closed (then nothing more is taken)."""

    __slots__ = ("_chunks", "_closed", "_lock", "_redact", "_size", "limit", "truncated")

    def __init__(self, limit: int, redact: Redact | None = None) -> None:
        self.limit = limit
        self.truncated = False
        self._redact = redact
        self._chunks: list[str] = []
        self._size = 0
        self._closed = False
        self._lock = threading.Lock()

    def redact(self, text: str) -> str:
        return self._redact(text) if self._redact is not None else text

    def write(self, text: str) -> str:
        """Keep `text` (redacted, within the cap); returns the redacted text, which is
        what the caller should echo."""
        if not text:
            return text
        text = self.redact(storable(text))
        with self._lock:
            if self._closed:
                return text
            room = self.limit - self._size
            if room <= 0:
                self.truncated = True
                return text
            size = len(text.encode("utf-8"))
            kept = text if size <= room else _cut(text, room)
            if kept is not text:
                self.truncated = True
                size = len(kept.encode("utf-8"))
            self._chunks.append(kept)
            self._size += size
        return text

    def add_record(self, record: logging.LogRecord, text: str) -> None:
        self.write(text)

    def take(self) -> tuple[str, bool] | None:
        """Close the capture; (text, truncated), or None when nothing was captured."""
        with self._lock:
            self._closed = True
            chunks, self._chunks = self._chunks, []
        if not chunks:
            return None
        # a secret printed in two pieces is only whole once the pieces are joined
        text = self.redact("".join(chunks))
        if len(text.encode("utf-8")) > self.limit:
            text, self.truncated = _cut(text, self.limit), True
        return text, self.truncated


class Collector:
    """Engine lines about executions logged outside any command: (execution, step) ->
    a capture each."""

    def __init__(self, limit: int, redact: Redact | None = None) -> None:
        self.limit = limit
        self._redact = redact
        self._lock = threading.Lock()
        self.captures: dict[tuple[str, str | None], Capture] = {}

    def add_record(self, record: logging.LogRecord, text: str) -> None:
        execution_id = getattr(record, "execution_id", None)
        if not execution_id:
            return
        key = (str(execution_id), getattr(record, "step", None) or None)
        with self._lock:
            capture = self.captures.get(key)
            if capture is None:
                capture = self.captures[key] = Capture(self.limit, self._redact)
        capture.write(text)


def current() -> Sink | None:
    return _current.get()


def current_capture() -> Capture | None:
    """The command capture of this context (prints go only to a command's capture)."""
    sink = _current.get()
    return sink if isinstance(sink, Capture) else None


@contextmanager
def capturing(sink: Sink | None) -> Iterator[None]:
    """Make `sink` the current one for the code in the block (None: capture nothing)."""
    token = _current.set(sink)
    try:
        yield
    finally:
        _current.reset(token)


class CaptureHandler(logging.Handler):
    """Root-logger handler that hands records to the current sink, if any."""

    # Celery workers redirect sys.stdout/stderr into this logger: a python step's print
    # was captured where it was printed, so its redirected copy is not taken twice
    SKIP = frozenset({"celery.redirected"})

    def __init__(self) -> None:
        super().__init__()
        self.setFormatter(logging.Formatter(LINE_FORMAT))

    def handle(self, record: logging.LogRecord) -> bool:
        # the common case (no command on this thread) costs one ContextVar read, no lock
        if _current.get() is None or record.name in self.SKIP:
            return False
        return super().handle(record)

    def emit(self, record: logging.LogRecord) -> None:
        sink = _current.get()
        if sink is None:
            return
        try:
            text = self.format(record) + "\n"
        except Exception:  # a record that cannot be formatted must not fail the command
            self.handleError(record)
            return
        sink.add_record(record, text)


class RedactFilter(logging.Filter):
    """On a handler that shows records (stderr): a record logged while a command runs is
    redacted with that command's redactor before anything formats it (a step may log a
    secret it was given). Records outside commands are the engine's own, built from
    redacted text already."""

    def filter(self, record: logging.LogRecord) -> bool:
        capture = current_capture()
        if capture is None or getattr(record, "_noetl_redacted", False):
            return True
        record.msg = capture.redact(record.getMessage())
        record.args = None
        if record.exc_info and not record.exc_text:
            record.exc_text = capture.redact(_FORMATTER.formatException(record.exc_info))
        record._noetl_redacted = True
        return True


_FORMATTER = logging.Formatter()


def install() -> CaptureHandler:
    """Put one CaptureHandler on the root logger (idempotent)."""
    root = logging.getLogger()
    for handler in root.handlers:
        if isinstance(handler, CaptureHandler):
            return handler
    handler = CaptureHandler()
    root.addHandler(handler)
    return handler
