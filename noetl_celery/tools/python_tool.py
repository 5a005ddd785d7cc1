"""`kind: python`: runs inline user code in this worker process.

Three forms, as in NoETL: if the code defines `main`, it is called (awaited when async)
and its return value is the result; code ending in a top-level `return` runs as the body
of a function whose return value is the result (models.python_code); otherwise the
module-level `result` is. The step's input is also the dict `input_data` (and `args`), as
NoETL's python tool binds it. Exceptions in user code become a `python_error` (or
`syntax_error`) outcome, never a raise.
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import concurrent.futures
import contextvars
import datetime
import importlib
import inspect
import json
import logging
import os
import signal
import threading
import uuid
from collections.abc import Callable, Mapping
from typing import Any, ClassVar

from jinja2.runtime import Undefined

from noetl_celery.errors import TemplateError
from noetl_celery.models.python_code import cached_step_code
from noetl_celery.templating.code_template import render_code
from noetl_celery.tools.base import ToolCall, ToolOutcome
from noetl_celery.tools.jsonable import make_serializable, to_jsonable
from noetl_celery.tools.python_args import main_arguments
from noetl_celery.tools.python_errors import failure_outcome, register_source
from noetl_celery.tools.python_helpers import (
    deep_merge,
    format_iso8601,
    get_val,
    now_utc,
    stderr_print,
)

logger = logging.getLogger(__name__)


class _ConfigProblem(Exception):
    """The step is misconfigured (no code, bad base64, unimportable lib)."""


class PythonTool:
    kind: ClassVar[str] = "python"
    raw_fields: ClassVar[frozenset[str]] = frozenset({"code", "code_b64", "code_base64"})

    def run(self, call: ToolCall) -> ToolOutcome:
        redact = call.services.redactor.redact
        try:
            code = _source(call.config)
            libs = _import_libs(call.config.get("libs"))
            if "code" in call.config:  # NoETL renders `{{ … }}` in code (code_template)
                code = render_code(code, call.context, f"step '{call.step}'")
        except _ConfigProblem as exc:
            return ToolOutcome.failure("config_error", redact(str(exc)))
        except TemplateError as exc:
            return ToolOutcome.failure("template_error", redact(str(exc)))
        filename = register_source(call.step, code)
        if call.timeout:
            return _with_timeout(lambda: self._execute(call, code, libs, filename), call.timeout)
        return self._execute(call, code, libs, filename)

    @staticmethod
    def _execute(call: ToolCall, code: str, libs: Mapping[str, Any], filename: str) -> ToolOutcome:
        redact = call.services.redactor.redact
        try:
            compiled = cached_step_code(code, filename)
            namespace = _namespace(call, libs)
            initial = dict(namespace)
            exec(compiled, namespace)
            main = namespace.get("main")
            if callable(main):
                args, kwargs = main_arguments(main, call.input, namespace["context"])
                result = _resolve_awaitable(main(*args, **kwargs))
            elif "result" in namespace:
                result = namespace["result"]
            else:
                result = _summary(namespace, initial)
        except (Exception, SystemExit) as exc:  # SystemExit: sys.exit() must not end a worker
            return failure_outcome(exc, filename, redact)
        return ToolOutcome.success(to_jsonable(result))


class _TimedOut(BaseException):
    """Raised inside the code by the timer (BaseException: `except Exception` in the
    user's code must not swallow it)."""


def _timeout_outcome(seconds: float) -> ToolOutcome:
    return ToolOutcome.failure(
        "timeout", f"python code still running after its timeout of {seconds:g}s", retryable=True
    )


def _with_timeout(run: Callable[[], ToolOutcome], seconds: float) -> ToolOutcome:
    """Run with a time limit. On a worker's main thread (Celery's prefork children) a
    timer signal interrupts the code; elsewhere (embedded threads) the code runs on a
    daemon thread that is abandoned when the limit passes: Python cannot stop a thread,
    but the command fails on time and never hangs."""
    if threading.current_thread() is threading.main_thread():

        def interrupt(signum: int, frame: Any) -> None:
            raise _TimedOut

        previous = signal.signal(signal.SIGALRM, interrupt)
        signal.setitimer(signal.ITIMER_REAL, seconds)
        try:
            return run()
        except _TimedOut:
            return _timeout_outcome(seconds)
        finally:
            signal.setitimer(signal.ITIMER_REAL, 0)
            signal.signal(signal.SIGALRM, previous)
    box: list[ToolOutcome] = []
    # the code keeps this command's context on its thread: its log capture and log fields
    context = contextvars.copy_context()
    thread = threading.Thread(
        target=lambda: box.append(context.run(run)), daemon=True, name="noetl-python"
    )
    thread.start()
    thread.join(seconds)
    return box[0] if box else _timeout_outcome(seconds)


def _source(config: Mapping[str, Any]) -> str:
    for name in ("code_b64", "code_base64"):
        raw = config.get(name)
        if raw:
            try:
                return base64.b64decode("".join(str(raw).split()), validate=True).decode("utf-8")
            except (binascii.Error, UnicodeDecodeError) as exc:
                raise _ConfigProblem(f"python tool: `{name}` is not valid base64 UTF-8") from exc
    code = config.get("code")
    if isinstance(code, str) and code.strip():
        return code
    raise _ConfigProblem("python tool needs `code` (or `code_b64`)")


def _import_libs(libs: Any) -> dict[str, Any]:
    """`libs: {alias: module}` or `{alias: {from: pkg, import: name}}` as globals."""
    if not libs:
        return {}
    if not isinstance(libs, Mapping):
        logger.warning("python tool: list-form `libs` is ignored; use {alias: module}")
        return {}
    imported: dict[str, Any] = {}
    for alias, spec in libs.items():
        if isinstance(spec, Mapping):
            package, name = spec.get("from"), spec.get("import")
            target = f"{package}.{name}" if package and name else str(package or name or "")
        else:
            package, name, target = None, None, str(spec)
        try:
            if package and name:
                module = importlib.import_module(str(package))
                imported[str(alias)] = (
                    getattr(module, str(name))
                    if hasattr(module, str(name))
                    else importlib.import_module(target)
                )
            else:
                imported[str(alias)] = importlib.import_module(target)
        except (ImportError, ValueError, TypeError) as exc:
            raise _ConfigProblem(
                f"python libs: cannot import '{target}' (alias '{alias}'): {exc}"
            ) from exc
    return imported


def _namespace(call: ToolCall, libs: Mapping[str, Any]) -> dict[str, Any]:
    namespace: dict[str, Any] = {
        # not "__main__": a script's own `if __name__ == "__main__": main()` must not run
        "__name__": "__noetl_python_step__",
        "os": os,
        "json": json,
        "datetime": datetime,
        "uuid": uuid,
        "logging": logging,
        "now_utc": now_utc,
        "format_iso8601": format_iso8601,
        "make_serializable": make_serializable,
        "deep_merge": deep_merge,
        "get_val": get_val,
        "print": stderr_print,
        # steps without a result (templating.not_run) are for templates: left out here, so
        # a `main(step)` parameter keeps its default and `context` stays plain data
        "context": {k: v for k, v in call.context.items() if not isinstance(v, Undefined)},
        # NoETL's python tool (noetl/tools src/tools/python.rs): `args` is the step's
        # input and `input_data` a copy of it, and the input keys are globals. An input
        # key of either name wins (NoETL's Rust tool overwrites an input `input_data`
        # with the whole input, which breaks fixtures of its own that pass one)
        "args": dict(call.input),
        "input_data": dict(call.input),
    }
    namespace.update(call.input)
    namespace.update(libs)
    return namespace


def _resolve_awaitable(value: Any) -> Any:
    if not inspect.isawaitable(value):
        return value

    async def wait() -> Any:
        return await value

    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return asyncio.run(wait())
    # A loop already runs in this thread (asyncio.run would refuse): use a fresh thread.
    # (with this command's context: its log capture and log fields)
    context = contextvars.copy_context()
    with concurrent.futures.ThreadPoolExecutor(max_workers=1) as pool:
        return pool.submit(context.run, asyncio.run, wait()).result()


def _summary(namespace: Mapping[str, Any], initial: Mapping[str, Any]) -> dict[str, Any]:
    names = sorted(
        name
        for name, value in namespace.items()
        if not name.startswith("__")
        and (name not in initial or initial[name] is not value)
        and not (inspect.ismodule(value) or inspect.isroutine(value) or inspect.isclass(value))
    )
    return {
        "status": "success",
        "message": "python code ran without a result",
        "locals_keys": names,
    }
