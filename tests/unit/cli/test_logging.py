"""Log lines name the execution, step and command they are about."""

from __future__ import annotations

import datetime as dt
import io
import json
import logging
from collections.abc import Iterator

import pytest

from noetl_celery.cli.common import ContextFormatter, JsonFormatter, setup_logging
from noetl_celery.logcontext import ContextFilter, about, of_command


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

    with pytest.raises(click.ClickException, match="plain or json"):
        setup_logging(0, "yaml")


def test_a_command_id_names_its_execution_and_step() -> None:
    assert of_command("383:fetch:2:17:a3") == {
        "execution_id": "383",
        "step": "fetch",
        "command_id": "383:fetch:2:17:a3",
    }
    logger, stream = capture(ContextFormatter())
    logger.warning("lease renewal failed", extra=of_command("9:load:1"))
    assert stream.getvalue().rstrip().endswith("[execution_id=9 step=load command_id=9:load:1]")


def test_a_line_about_another_execution_keeps_only_its_own_fields() -> None:
    """A child driven from its parent's command is not that command."""
    logger, stream = capture(JsonFormatter())
    with about(execution_id="parent", step="call", command_id="parent:call:1"):
        logger.info("child done", extra={"execution_id": "child"})
        logger.info("parent line", extra={"execution_id": "parent"})
    child, parent = (json.loads(line) for line in stream.getvalue().splitlines())
    assert child["execution_id"] == "child" and "step" not in child and "command_id" not in child
    assert parent["step"] == "call" and parent["command_id"] == "parent:call:1"


def test_json_timestamps_are_utc() -> None:
    logger, stream = capture(JsonFormatter())
    logger.info("when")
    stamp = json.loads(stream.getvalue())["ts"]
    parsed = dt.datetime.strptime(stamp, "%Y-%m-%dT%H:%M:%S.%fZ").replace(tzinfo=dt.UTC)
    assert abs((dt.datetime.now(dt.UTC) - parsed).total_seconds()) < 5


@pytest.fixture
def restore_root() -> Iterator[None]:
    root = logging.getLogger()
    handlers, level = root.handlers[:], root.level
    yield
    root.handlers[:] = handlers
    root.setLevel(level)


@pytest.mark.usefixtures("restore_root")
def test_setup_logging_reads_the_format_from_the_environment(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("NOETL_LOG_FORMAT", "JSON")
    setup_logging(1)  # -v: INFO
    with about(**of_command("7:greet:1:0")):
        logging.getLogger("noetl_celery.worker").info("ran")
    logging.getLogger("noetl_celery.worker").debug("not at -v")
    [line] = capsys.readouterr().err.splitlines()
    entry = json.loads(line)
    assert entry["logger"] == "noetl_celery.worker" and entry["message"] == "ran"
    assert (entry["execution_id"], entry["step"], entry["command_id"]) == (
        "7",
        "greet",
        "7:greet:1:0",
    )

    monkeypatch.delenv("NOETL_LOG_FORMAT")
    setup_logging(0)
    logging.getLogger("noetl_celery.reaper").warning("plain", extra=of_command("8:s:1"))
    err = capsys.readouterr().err
    assert "WARNING noetl_celery.reaper: plain [execution_id=8 step=s command_id=8:s:1]" in err


@pytest.mark.usefixtures("restore_root")
def test_commands_capture_info_lines_stderr_does_not_show(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """At the default level stderr shows warnings only, yet a command's INFO lines (a
    python step's `logging.info`) reach its capture; a logger with a level of its own
    (Celery's) keeps showing what it shows."""
    from noetl_celery.logcapture import Capture, capturing

    setup_logging(0)
    own = logging.getLogger("test.own_level")
    own.setLevel(logging.INFO)
    capture = Capture(10_000)
    try:
        with capturing(capture):
            logging.info("step says hello")
            logging.getLogger("noetl_celery.orchestrate").info("engine line")
            logging.getLogger("noetl_celery.orchestrate").debug("debug stays out")
        logging.info("outside: neither shown nor kept")
        own.info("own level shows")
        logging.getLogger("x").warning("warnings show")
    finally:
        own.setLevel(logging.NOTSET)
    err = capsys.readouterr().err
    assert "hello" not in err and "engine line" not in err and "outside" not in err
    assert "INFO test.own_level: own level shows" in err and "warnings show" in err
    text, _ = capture.take()  # type: ignore[misc]
    assert "INFO root: step says hello" in text
    assert "INFO noetl_celery.orchestrate: engine line" in text
    assert "debug stays out" not in text and "outside" not in text


@pytest.mark.usefixtures("restore_root")
def test_celery_commands_keep_their_root_level() -> None:
    setup_logging(0, capture=False)
    assert logging.getLogger().level == logging.WARNING
