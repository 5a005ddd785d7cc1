"""Composition for CLI commands: settings from the environment, an engine wired to the
right dispatcher, JSON output on the real stdout."""

from __future__ import annotations

import json
import logging
import os
import sys
import time
from typing import TYPE_CHECKING, Any, TextIO

import click

from noetl_celery import logcapture
from noetl_celery.constants import COMPLETED, TERMINAL_STATUSES
from noetl_celery.logcontext import FIELDS, ContextFilter
from noetl_celery.settings import Settings
from noetl_celery.templating.environment import json_default

if TYPE_CHECKING:  # the engine is imported by the commands that build one (cli.main)
    from noetl_celery.engine.bootstrap import Role
    from noetl_celery.engine.service import Engine

# `run` / `watch` exit codes (README "Command line"): COMPLETED, FAILED or CANCELLED,
# invalid input or configuration, still running when `--timeout` ran out. 2 is also
# every misconfiguration: a bad NOETL_* value, a database that cannot be used (cli.main
# prints any NoetlError that reaches it as one line)
EXIT_OK, EXIT_FAILED, EXIT_INVALID, EXIT_RUNNING = 0, 1, 2, 3


def exit_code(status: str) -> int:
    """The exit code for an execution's status as a command leaves it."""
    if status == COMPLETED:
        return EXIT_OK
    return EXIT_FAILED if status in TERMINAL_STATUSES else EXIT_RUNNING


class InvalidInput(click.ClickException):
    """Bad input (an unknown execution or step, an impossible rerun): one line, exit 2."""

    exit_code = EXIT_INVALID


_CONTEXT = FIELDS


class ContextFormatter(logging.Formatter):
    """Plain lines that end with the execution, step and command a record is about (the
    engine passes them as `extra`), so one grep follows an execution across workers."""

    def __init__(self) -> None:
        super().__init__("%(asctime)s %(levelname)s %(name)s: %(message)s")

    def format(self, record: logging.LogRecord) -> str:
        line = super().format(record)
        context = [f"{k}={getattr(record, k)}" for k in _CONTEXT if getattr(record, k, None)]
        return f"{line} [{' '.join(context)}]" if context else line


class JsonFormatter(logging.Formatter):
    """One JSON object per line (NOETL_LOG_FORMAT=json), for log pipelines."""

    # UTC with a `Z`: lines from hosts in different zones sort and join as they are
    def converter(self, seconds: float | None = None) -> time.struct_time:
        return time.gmtime(seconds)

    def format(self, record: logging.LogRecord) -> str:
        entry: dict[str, Any] = {
            "ts": self.formatTime(record, "%Y-%m-%dT%H:%M:%S") + f".{int(record.msecs):03d}Z",
            "level": record.levelname,
            "logger": record.name,
            "message": record.getMessage(),
        }
        for key in _CONTEXT:
            value = getattr(record, key, None)
            if value:
                entry[key] = value
        if record.exc_info:
            # a redacted traceback when one was made (logcapture.RedactFilter)
            entry["exception"] = record.exc_text or self.formatException(record.exc_info)
        return json.dumps(entry, default=str)


class LevelGate(logging.Filter):
    """Drops what the chosen level would have dropped had the root logger kept it: the
    root lets INFO through so that commands' INFO lines reach their log capture, while
    stderr shows what it always showed (loggers with a level of their own keep it)."""

    def __init__(self, level: int) -> None:
        super().__init__()
        self.level = level

    def filter(self, record: logging.LogRecord) -> bool:
        if record.levelno >= self.level:
            return True
        logger = logging.root.manager.loggerDict.get(record.name)
        while isinstance(logger, logging.Logger) and logger is not logging.root:
            if logger.level:
                return record.levelno >= logger.level
            logger = logger.parent
        return False


def setup_logging(verbose: int, log_format: str | None = None, *, capture: bool = True) -> None:
    """Log to stderr; `NOETL_LOG_FORMAT=json` for JSON lines (read here: the CLI is a
    composition root). With `capture` (every command but those whose logging Celery sets
    up) a command's INFO lines are captured into its logs whatever stderr shows."""
    level = logging.WARNING - 10 * min(verbose, 2)
    fmt = (log_format or os.environ.get("NOETL_LOG_FORMAT") or "plain").strip().lower()
    if fmt not in ("plain", "json"):
        raise click.ClickException(f"NOETL_LOG_FORMAT must be plain or json, not {fmt!r}")
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(JsonFormatter() if fmt == "json" else ContextFormatter())
    root = logging.getLogger()
    root.setLevel(level)
    if capture and level > logging.INFO:
        root.setLevel(logging.INFO)
        handler.addFilter(LevelGate(level))  # first: what is dropped costs nothing more
        # a line per request would make every HTTP command store a log (workers do the
        # same: tasks.app); `-v` shows and keeps them
        logging.getLogger("httpx").setLevel(logging.WARNING)
    handler.addFilter(ContextFilter())
    handler.addFilter(logcapture.RedactFilter())
    root.handlers[:] = [handler, logcapture.CaptureHandler()]


def load_settings() -> Settings:
    """Settings from the environment (a bad value raises ConfigurationError: exit 2)."""
    return Settings.from_env()


def build_engine(settings: Settings, role: Role) -> Engine:
    """An engine for a CLI command (engine.bootstrap says what each role may do); with a
    broker, a role that starts work sends it to Celery workers."""
    from noetl_celery.engine.bootstrap import build_engine as bootstrap_engine
    from noetl_celery.tasks.broker import client_dispatcher

    return bootstrap_engine(settings, role, broker=client_dispatcher)


def dump_json(obj: Any, stream: TextIO | None = None) -> None:
    out = stream or sys.stdout
    out.write(json.dumps(obj, default=json_default, ensure_ascii=False) + "\n")
    out.flush()
