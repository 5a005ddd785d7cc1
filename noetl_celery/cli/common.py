"""Composition for CLI commands: settings from the environment, an engine wired to the
right dispatcher, JSON output on the real stdout."""

from __future__ import annotations

import json
import logging
import sys
from typing import Any, TextIO

import click

from noetl_celery.engine.service import Engine
from noetl_celery.errors import NoetlError
from noetl_celery.settings import Settings
from noetl_celery.templating.environment import json_default

EXIT_OK, EXIT_FAILED, EXIT_INVALID = 0, 1, 2


def setup_logging(verbose: int) -> None:
    level = logging.WARNING - 10 * min(verbose, 2)
    logging.basicConfig(
        level=level, stream=sys.stderr, format="%(asctime)s %(levelname)s %(name)s: %(message)s"
    )


def load_settings() -> Settings:
    try:
        return Settings.from_env()
    except NoetlError as exc:
        raise click.ClickException(str(exc)) from exc


def build_engine(settings: Settings, *, dispatch: bool) -> Engine:
    """An engine; with `dispatch`, commands go to in-process threads (embedded) or to
    Celery workers (NOETL_BROKER_URL set)."""
    engine = Engine(settings)
    if dispatch:
        if settings.embedded:
            engine.use_in_process_workers()
        else:
            from noetl_celery.tasks.app import make_app
            from noetl_celery.tasks.dispatcher import CeleryDispatcher

            engine.use_dispatcher(CeleryDispatcher(make_app(settings)))
    return engine


def dump_json(obj: Any, stream: TextIO | None = None) -> None:
    out = stream or sys.stdout
    out.write(json.dumps(obj, default=json_default, ensure_ascii=False) + "\n")
    out.flush()
