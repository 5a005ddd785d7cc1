"""Log lines name the execution, step and command they are about."""

from __future__ import annotations

import io
import json
import logging

import pytest

from noetl_celery.cli.common import ContextFormatter, JsonFormatter
from noetl_celery.logcontext import ContextFilter, about


def capture(formatter: logging.Formatter) -> tuple[logging.Logger, io.StringIO]:
    stream = io.StringIO()
    handler = logging.StreamHandler(stream)
    handler.setFormatter(formatter)
    handler.addFilter(ContextFilter())
    logger = logging.getLogger(f"test.{id(stream)}")
    logger.handlers[:] = [handler]
    logger.propagate = False
    logger.setLevel(logging.INFO)
    return logger, stream


def test_plain_lines_end_with_the_context() -> None:
    logger, stream = capture(ContextFormatter())
    logger.info("no context")
    with about(execution_id="e1", step="fetch", command_id="e1:fetch:1:7"):
        logger.info("inside a command")
        logger.info("own extra wins", extra={"step": "other"})
    lines = stream.getvalue().splitlines()
    assert lines[0].endswith("no context")
    assert lines[1].endswith(
        "inside a command [execution_id=e1 step=fetch command_id=e1:fetch:1:7]"
    )
    assert "step=other" in lines[2]


def test_json_lines() -> None:
    logger, stream = capture(JsonFormatter())
    with about(execution_id="e2", step="", command_id=""):
        logger.warning("careful %s", "now")
    entry = json.loads(stream.getvalue())
    assert entry["message"] == "careful now" and entry["level"] == "WARNING"
    assert entry["execution_id"] == "e2" and "step" not in entry and "command_id" not in entry


def test_unknown_log_format_is_refused() -> None:
    import click

    from noetl_celery.cli.common import setup_logging

    with pytest.raises(click.ClickException, match="plain or json"):
        setup_logging(0, "yaml")
