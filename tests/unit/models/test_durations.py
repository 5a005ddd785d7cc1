"""models.durations: seconds as numbers or NoETL's duration strings, one parser."""

from __future__ import annotations

from typing import Any

import pytest
from pydantic import ValidationError

from noetl_celery.models.durations import (
    DurationInvalid,
    format_duration,
    parse_duration,
    to_seconds,
)
from noetl_celery.models.playbook import FrameSpec, Step, ToolOptions, step_timeout
from noetl_celery.models.policy import Then


@pytest.mark.parametrize(
    ("value", "seconds"),
    [
        (30, 30.0),
        (1.5, 1.5),
        (0, 0.0),
        ("30", 30.0),
        ("2.5", 2.5),
        ("500ms", 0.5),
        ("30s", 30.0),
        ("5m", 300.0),
        ("2h", 7200.0),
        ("1.5s", 1.5),
        (".5s", 0.5),
        (" 10 s ", 10.0),
        ("5M", 300.0),
        ("3min", 180.0),
        ("4sec", 4.0),
    ],
)
def test_durations(value: Any, seconds: float) -> None:
    assert to_seconds(value) == seconds
    assert parse_duration(value, "spec.timeout") == seconds


def test_format_duration_for_people() -> None:
    # the CLI's progress lines and the pages print these; a negative time reads 0s
    cases = (0, 45.4, 59.6, 121, 3599, 3600 + 125, -3)
    assert [format_duration(s) for s in cases] == [
        "0s",
        "45s",
        "1m00s",
        "2m01s",
        "59m59s",
        "1h02m",
        "0s",
    ]


@pytest.mark.parametrize(
    "value", ["30x", "", "s", "-5s", "5 m s", "1d", "inf", "nan", "1e3", True, None, [1], -1]
)
def test_not_durations(value: Any) -> None:
    assert to_seconds(value) is None
    with pytest.raises(DurationInvalid) as caught:
        parse_duration(value, "spec.timeout")
    assert str(caught.value) == (
        f"spec.timeout: {value!r} is not a duration: use a number of seconds or 500ms, 30s, 5m, 2h"
    )


def test_models_take_duration_strings() -> None:
    assert ToolOptions.model_validate({"timeout": "500ms"}).timeout == 0.5
    then = Then.model_validate({"do": "retry", "delay": "2s", "max_delay": "1m"})
    assert (then.delay, then.max_delay) == (2.0, 60.0)
    then = Then.model_validate({"do": "retry", "delay": "40s", "backoff": "exponential"})
    assert then.retry_delay(3) == 160.0
    frame = FrameSpec.model_validate({"lease_seconds": "5m", "heartbeat_seconds": 10})
    assert (frame.lease_seconds, frame.heartbeat_seconds) == (300.0, 10.0)
    step = Step.model_validate({"step": "a", "spec": {"timeout": "2m"}})
    assert step_timeout(step) == 120.0


@pytest.mark.parametrize(
    ("model", "data"),
    [
        (ToolOptions, {"timeout": "30x"}),
        (Then, {"do": "retry", "delay": "soon"}),
        (FrameSpec, {"max_seconds": "1 day"}),
    ],
)
def test_models_refuse_what_is_no_duration(model: Any, data: dict[str, Any]) -> None:
    with pytest.raises(ValidationError, match="is not a duration"):
        model.model_validate(data)


def test_zero_and_negative_still_meet_the_field_bounds() -> None:
    with pytest.raises(ValidationError):
        ToolOptions.model_validate({"timeout": "0s"})
    with pytest.raises(ValidationError):
        Then.model_validate({"do": "retry", "delay": -1})


def test_frame_leases_accept_a_template_noetl_renders() -> None:
    frame = FrameSpec.model_validate(
        {"lease_seconds": "{{ frame_lease_seconds }}", "heartbeat_seconds": "30s"}
    )
    assert frame.lease_seconds == "{{ frame_lease_seconds }}"
    assert frame.heartbeat_seconds == 30.0
    with pytest.raises(ValidationError, match="is not a duration"):
        FrameSpec.model_validate({"lease_seconds": "30x"})
