"""Per-command capture of prints and log lines: isolation, caps, redaction."""

from __future__ import annotations

import io
import logging
import sys
import threading
from collections.abc import Iterator

import pytest

from noetl_celery import logcapture
from noetl_celery.logcapture import Capture, CaptureHandler, Collector, capturing
from noetl_celery.tools.python_helpers import stderr_print
from noetl_celery.tools.redaction import Redactor

SECRET = "canary-pw-7d1e0b-never-shown"


@pytest.fixture
def logger() -> Iterator[logging.Logger]:
    """A logger whose records reach only a CaptureHandler."""
    log = logging.getLogger("test.capture")
    log.handlers[:] = [CaptureHandler()]
    log.propagate = False
    log.setLevel(logging.INFO)
    yield log
    log.handlers[:] = []


def test_nothing_captured_gives_nothing_to_store() -> None:
    assert Capture(100).take() is None


def test_lines_are_kept_in_order_and_redacted() -> None:
    capture = Capture(1000, Redactor([SECRET]).redact)
    assert capture.write(f"pw {SECRET}\n") == "pw ***\n"  # the echo is redacted too
    capture.write("two\n")
    assert capture.take() == ("pw ***\ntwo\n", False)


def test_a_secret_printed_in_two_pieces_is_masked_once_joined() -> None:
    capture = Capture(1000, Redactor([SECRET]).redact)
    capture.write(SECRET[:10])
    capture.write(SECRET[10:] + "\n")
    text, _ = capture.take()  # type: ignore[misc]
    assert SECRET not in text and "***" in text


def test_the_cap_keeps_the_head_and_says_so() -> None:
    capture = Capture(10)
    capture.write("0123456")
    capture.write("789abcdef")
    capture.write("more")
    assert capture.take() == ("0123456789", True)


def test_the_cap_never_splits_a_character() -> None:
    capture = Capture(5)
    capture.write("ab€€")  # € is 3 bytes: only one fits after "ab"
    text, truncated = capture.take()  # type: ignore[misc]
    assert (text, truncated) == ("ab€", True)
    assert len(text.encode()) <= 5


def test_writes_after_take_are_dropped() -> None:
    capture = Capture(100)
    capture.write("kept")
    assert capture.take() == ("kept", False)
    capture.write("a timed-out step's thread still printing")
    assert capture.take() is None


def test_log_records_reach_only_the_current_capture(logger: logging.Logger) -> None:
    logger.info("outside any command")  # no sink: dropped, no error
    mine, theirs = Capture(100_000), Capture(100_000)
    barrier = threading.Barrier(2)

    def command(capture: Capture, name: str) -> None:
        with capturing(capture):
            barrier.wait()
            for n in range(50):
                logger.info("%s line %d", name, n)

    threads = [
        threading.Thread(target=command, args=(mine, "mine")),
        threading.Thread(target=command, args=(theirs, "theirs")),
    ]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    text_mine, _ = mine.take()  # type: ignore[misc]
    text_theirs, _ = theirs.take()  # type: ignore[misc]
    assert text_mine.count("mine line") == 50 and "theirs" not in text_mine
    assert text_theirs.count("theirs line") == 50 and "mine" not in text_theirs
    assert " INFO test.capture: mine line 0\n" in text_mine


def test_celery_redirected_output_is_not_taken_twice() -> None:
    handler = CaptureHandler()
    capture = Capture(1000)
    record = logging.LogRecord("celery.redirected", logging.WARNING, "", 0, "printed", (), None)
    with capturing(capture):
        handler.handle(record)
    assert capture.take() is None


def test_the_collector_keeps_lines_about_executions() -> None:
    handler = CaptureHandler()
    collector = Collector(1000)
    with capturing(collector):
        for extra in ({"execution_id": "e1", "step": "fetch"}, {"execution_id": "e1"}, {}):
            record = logging.LogRecord("noetl", logging.WARNING, "", 0, "lost", (), None)
            record.__dict__.update(extra)
            handler.handle(record)
    assert sorted(collector.captures, key=str) == [("e1", "fetch"), ("e1", None)]


def test_stderr_print_echoes_and_captures(monkeypatch: pytest.MonkeyPatch) -> None:
    err = io.StringIO()
    monkeypatch.setattr(sys, "stderr", err)
    stderr_print("outside", SECRET)  # no command: echoed as is, kept nowhere
    capture = Capture(1000, Redactor([SECRET]).redact)
    with capturing(capture):
        stderr_print("a", 1, SECRET, sep="|", flush=True)
        stderr_print("to stdout goes to stderr", file=sys.stdout)
        own = io.StringIO()
        stderr_print("a file of its own", file=own)
    assert own.getvalue() == "a file of its own\n"
    assert err.getvalue() == f"outside {SECRET}\na|1|***\nto stdout goes to stderr\n"
    assert capture.take() == ("a|1|***\nto stdout goes to stderr\n", False)


def test_install_is_idempotent() -> None:
    root = logging.getLogger()
    before = list(root.handlers)
    try:
        first = logcapture.install()
        assert logcapture.install() is first
        assert sum(isinstance(h, CaptureHandler) for h in root.handlers) >= 1
    finally:
        root.handlers[:] = before


def test_lines_shown_while_a_command_runs_are_redacted() -> None:
    from noetl_celery.logcapture import RedactFilter

    stream = io.StringIO()
    shown = logging.StreamHandler(stream)
    shown.addFilter(RedactFilter())
    log = logging.getLogger("test.redact_shown")
    log.handlers[:] = [shown, CaptureHandler()]
    log.propagate = False
    log.setLevel(logging.INFO)
    capture = Capture(1000, Redactor([SECRET]).redact)
    try:
        with capturing(capture):
            log.info("given %s", SECRET)
            try:
                raise ValueError(f"bad {SECRET}")
            except ValueError:
                log.exception("failed")
        log.info("outside %s", "as is")
    finally:
        log.handlers[:] = []
    assert SECRET not in stream.getvalue()
    assert "given ***" in stream.getvalue() and "ValueError: bad ***" in stream.getvalue()
    assert "outside as is" in stream.getvalue()
    text, _ = capture.take()  # type: ignore[misc]
    assert SECRET not in text and "given ***" in text and "ValueError: bad ***" in text


def test_a_zero_cap_keeps_nothing_but_still_redacts() -> None:
    capture = Capture(0, Redactor([SECRET]).redact)
    assert capture.write(f"x {SECRET}") == "x ***"
    assert capture.take() is None


def test_text_a_database_refuses_is_made_storable() -> None:
    capture = Capture(1000)
    assert capture.write("nul:\x00:surrogate:\udcff:ok?\n") == "nul:\ufffd:surrogate:\ufffd:ok?\n"
    text, _ = capture.take()  # type: ignore[misc]
    text.encode("utf-8")  # no error
