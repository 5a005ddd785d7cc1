"""Error reporting for the python tool: source registration and failure outcomes."""

from __future__ import annotations

import hashlib
import linecache
import threading
import traceback
from collections import OrderedDict
from collections.abc import Callable
from types import TracebackType

from noetl_celery.models.outcome import ErrorKind
from noetl_celery.tools.base import ToolOutcome

TRACEBACK_LINES = 20
# the failing source line quoted in a step's error message is cut to this many characters
SOURCE_LINE_CHARS = 120
# Sources kept in linecache for tracebacks; bounded so that code rendered per call
# cannot grow a long-lived worker without limit.
SOURCE_CACHE_LIMIT = 512

_sources: OrderedDict[str, None] = OrderedDict()
_sources_lock = threading.Lock()


def register_source(step: str, code: str) -> str:
    """A filename for compiling `code`, registered so tracebacks show the user's lines."""
    digest = hashlib.sha1(code.encode("utf-8"), usedforsecurity=False).hexdigest()[:10]
    filename = f"<python step {step} {digest}>"
    with _sources_lock:
        linecache.cache[filename] = (len(code), None, code.splitlines(True), filename)
        _sources[filename] = None
        _sources.move_to_end(filename)
        while len(_sources) > SOURCE_CACHE_LIMIT:
            old, _ = _sources.popitem(last=False)
            linecache.cache.pop(old, None)
    return filename


def _user_traceback(tb: TracebackType | None, filename: str) -> TracebackType | None:
    # Drop this module's frames: the user wants to see their code, not the tool's.
    current = tb
    while current is not None and current.tb_frame.f_code.co_filename != filename:
        current = current.tb_next
    return current or tb


def _where(lineno: int | None, source: str | None) -> str:
    """`line 3: return 1 / x` (the source line shortened), or `line 3` without it."""
    text = " ".join((source or "").split())
    if len(text) > SOURCE_LINE_CHARS:
        text = text[: SOURCE_LINE_CHARS - 1] + "…"
    return f"line {lineno}: {text}" if text else f"line {lineno}"


def failure_outcome(exc: BaseException, filename: str, redact: Callable[[str], str]) -> ToolOutcome:
    """The step's error: `Name: message (line N: <the user's source line>)`, naming the
    deepest line of the user's code on the traceback (a library's frames below it are
    left to the traceback in `detail`), redacted like everything a step reports."""
    name = type(exc).__name__
    kind: ErrorKind
    if isinstance(exc, SyntaxError):
        kind = "syntax_error"
        # compiler errors ('return' outside function) come without the text: read it
        source = exc.text or linecache.getline(filename, exc.lineno or 0)
        message = f"{name}: {exc.msg} ({_where(exc.lineno, source)})"
        lines = traceback.format_exception_only(type(exc), exc)
    else:
        kind = "python_error"
        tb = _user_traceback(exc.__traceback__, filename)
        frames = [f for f in traceback.extract_tb(tb) if f.filename == filename]
        where = f" ({_where(frames[-1].lineno, frames[-1].line)})" if frames else ""
        text = str(exc)
        message = f"{name}: {text}{where}" if text else f"{name}{where or ' (no message)'}"
        lines = traceback.format_exception(type(exc), exc, tb)
    tail = "".join(lines).splitlines()[-TRACEBACK_LINES:]
    return ToolOutcome.failure(
        kind,
        redact(message),
        detail={"py": {"exception": name, "traceback": redact("\n".join(tail))}},
    )
