"""Error reporting for the python tool: source registration and failure outcomes."""

from __future__ import annotations

import hashlib
import linecache
import threading
import traceback
from collections import OrderedDict
from collections.abc import Callable
from types import TracebackType

from noetl_celery.tools.base import ToolOutcome

TRACEBACK_LINES = 20
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


def failure_outcome(exc: BaseException, filename: str, redact: Callable[[str], str]) -> ToolOutcome:
    name = type(exc).__name__
    if isinstance(exc, SyntaxError):
        kind = "syntax_error"
        message = f"{name}: {exc.msg} (line {exc.lineno})"
        lines = traceback.format_exception_only(type(exc), exc)
    else:
        kind = "python_error"
        tb = _user_traceback(exc.__traceback__, filename)
        text = str(exc)
        if not text:
            frames = [f for f in traceback.extract_tb(tb) if f.filename == filename]
            text = f"raised at line {frames[-1].lineno}" if frames else "(no message)"
        message = f"{name}: {text}"
        lines = traceback.format_exception(type(exc), exc, tb)
    tail = "".join(lines).splitlines()[-TRACEBACK_LINES:]
    return ToolOutcome.failure(
        kind,
        redact(message),
        detail={"py": {"exception": name, "traceback": redact("\n".join(tail))}},
    )
