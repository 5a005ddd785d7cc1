"""A retry delay above `park_after` parks the pipeline (pure: no worker, no database):
the run state is handed back with the waiting task's attempt counted, and the resumed
run goes on at that task, never from the first one."""

from __future__ import annotations

import json
from typing import Any

import pytest

from noetl_celery.errors import ConfigurationError
from noetl_celery.models.outcome import Outcome
from noetl_celery.settings import Settings
from noetl_celery.store.rows import ClaimedCommand
from noetl_celery.tools.base import ToolOutcome
from noetl_celery.tools.redaction import Redactor, command_masks
from noetl_celery.worker.parking import releases
from noetl_celery.worker.pipeline import Parked, PipelineLimits, run_pipeline
from noetl_celery.worker.runner import holds_no_keychain_value
from tests.unit.worker.test_pipeline import Script, http_error, step

PIPELINE = """
- name: first
  kind: python
  code: "result = 1"
- name: fetch
  kind: http
  url: x
  spec:
    policy:
      rules:
        - when: "{{ output.status == 'error' }}"
          then: {do: retry, attempts: %d, backoff: fixed, delay: %s}
"""


def limits(sleeps: list[float], park_after: float | None = 1.0) -> PipelineLimits:
    return PipelineLimits(max_retry_delay=60, sleep=sleeps.append, park_after=park_after)


def go(
    tasks: str, script: Script, sleeps: list[float], resume: dict[str, Any] | None = None
) -> Outcome | Parked:
    result = run_pipeline(
        "s", step(tasks).tasks(), {"ctx": {}}, None, script, limits(sleeps), resume
    )
    assert not isinstance(result, Outcome) or result.status in ("ok", "error")
    return result  # type: ignore[return-value]


def resumed(parked: Parked) -> dict[str, Any]:
    # through JSON, as the commands row keeps it
    stored = {"continuation": parked.continuation, "parked": {"task": parked.task}}
    return dict(json.loads(json.dumps(stored)))


def test_retry_after_above_the_threshold_parks_and_resumes_at_the_waiting_task() -> None:
    script = Script(
        {"fetch": [http_error(429, 2), http_error(429, 2), ToolOutcome.success({"n": 7})]}
    )
    sleeps: list[float] = []
    tasks = PIPELINE % (5, "0.1")
    first = go(tasks, script, sleeps)
    assert isinstance(first, Parked)
    assert (first.task, first.delay) == ("fetch", 2.0)
    assert first.continuation["index"] == 1 and first.continuation["attempts"] == {"fetch": 2}
    second = go(tasks, script, sleeps, resumed(first))
    assert isinstance(second, Parked) and second.continuation["attempts"] == {"fetch": 3}
    done = go(tasks, script, sleeps, resumed(second))
    assert isinstance(done, Outcome) and done.status == "ok", done
    assert done.result["results"]["fetch"] == {"n": 7}
    # `first` ran once; fetch three times, with the attempt each run saw
    assert [(label, c["_attempt"]) for label, c in script.calls] == [
        ("first", 1),
        ("fetch", 1),
        ("fetch", 2),
        ("fetch", 3),
    ]
    assert sleeps == []  # nothing slept in the slot
    assert done.meta["runs"] == 4


def test_short_delays_sleep_in_place() -> None:
    script = Script({"fetch": [http_error(503), ToolOutcome.success({"ok": True})]})
    sleeps: list[float] = []
    done = go(PIPELINE % (3, "0.5"), script, sleeps)
    assert isinstance(done, Outcome) and done.status == "ok"
    assert sleeps == [0.5]


def test_a_delay_of_exactly_the_threshold_sleeps() -> None:
    script = Script({"fetch": [http_error(429, 1), ToolOutcome.success({"ok": True})]})
    sleeps: list[float] = []
    done = go(PIPELINE % (3, "0.1"), script, sleeps)
    assert isinstance(done, Outcome) and sleeps == [1.0]


def test_parked_attempts_still_bound_the_retries() -> None:
    script = Script({"fetch": [http_error(429, 5)]})
    sleeps: list[float] = []
    tasks = PIPELINE % (2, "0.1")
    parked = go(tasks, script, sleeps)
    assert isinstance(parked, Parked)
    ended = go(tasks, script, sleeps, resumed(parked))
    assert isinstance(ended, Outcome) and ended.status == "error"
    assert ended.error is not None and "gave up after 2 attempts" in ended.error.message


def test_no_threshold_never_parks() -> None:
    script = Script({"fetch": [http_error(429, 5), ToolOutcome.success({"ok": True})]})
    sleeps: list[float] = []
    tasks = step(PIPELINE % (3, "0.1")).tasks()
    result = run_pipeline("s", tasks, {"ctx": {}}, None, script, limits(sleeps, None))
    assert isinstance(result, Outcome) and sleeps == [5.0]


@pytest.mark.parametrize("raw", ["-1", "nan", "inf", "soon"])
def test_park_after_is_validated(raw: str) -> None:
    with pytest.raises(ConfigurationError, match="NOETL_PARK_AFTER_SECONDS"):
        Settings.from_env({"NOETL_PARK_AFTER_SECONDS": raw})


def test_park_after_default_and_value() -> None:
    assert Settings.from_env({}).park_after_seconds == 1.0
    assert Settings.from_env({"NOETL_PARK_AFTER_SECONDS": "0.25"}).park_after_seconds == 0.25


def test_thread_pool_sizes_the_database_pool_from_the_concurrency() -> None:
    base = Settings.from_env({})
    sized = base.for_worker_threads(32)
    assert (sized.db_pool_size, sized.db_max_overflow, sized.worker_threads) == (36, 36, 32)
    small = base.for_worker_threads(1)  # never below what is configured
    assert (small.db_pool_size, small.db_max_overflow) == (5, 20)


def test_wakeups_issue_and_publish_in_due_order() -> None:
    import datetime as dt
    import threading
    import time

    from noetl_celery.worker.parking import Wakeups

    issued: list[str] = []
    published: list[str] = []
    done = threading.Event()

    def issue(command_id: str, due: dt.datetime) -> bool:
        issued.append(command_id)
        return command_id != "gone"  # cancelled meanwhile: not published

    def publish(ids: Any) -> None:
        published.extend(ids)
        if len(published) == 2:
            done.set()

    wakeups = Wakeups(issue, publish)
    now = dt.datetime.now(dt.UTC)
    began = time.monotonic()
    wakeups.at("late", now, 0.3)
    wakeups.at("gone", now, 0.1)
    wakeups.at("early", now, 0.2)
    assert done.wait(5)
    assert time.monotonic() - began >= 0.3
    assert issued == ["gone", "early", "late"] and published == ["early", "late"]


def test_a_state_holding_a_keychain_value_sleeps_in_its_slot_instead_of_parking() -> None:
    # a parked state is stored with keychain values masked: resumed, it would carry `***`
    script = Script({"fetch": [http_error(429, 5), ToolOutcome.success({"ok": True})]})
    sleeps: list[float] = []
    tasks = step(PIPELINE % (3, "0.1")).tasks()
    seen: list[dict[str, Any]] = []

    def storable(state: dict[str, Any]) -> bool:
        seen.append(state)
        return False

    held = PipelineLimits(
        max_retry_delay=60, sleep=sleeps.append, park_after=1.0, storable=storable
    )
    result = run_pipeline("s", tasks, {"ctx": {}}, None, script, held)
    assert isinstance(result, Outcome) and result.status == "ok"
    assert sleeps == [5.0]
    assert len(seen) == 1 and seen[0]["attempts"] == {"fetch": 2}


def test_a_state_is_storable_unless_it_holds_the_commands_keychain_values() -> None:
    state = {"ctx": {"token": "s3cr3t-token", "page": 2}}
    with command_masks() as masks:
        assert holds_no_keychain_value(state)  # no keychain resolved: nothing to hide
        masks.add(Redactor(["s3cr3t-token"]))
        assert not holds_no_keychain_value(state)
        assert holds_no_keychain_value({"ctx": {"page": 2}})
        assert not holds_no_keychain_value({"results": {"auth": ["Bearer s3cr3t-token"]}})


def _item(iteration: int | None, resume: dict[str, Any] | None = None) -> ClaimedCommand:
    return ClaimedCommand(
        "e:each:1:0", "e", 1, "each", "step", 1, iteration, 1, 1, None, None, resume
    )


@pytest.mark.parametrize(
    ("iteration", "turn", "settled", "resume", "released"),
    [
        (0, True, True, None, True),  # a loop item parked for its key's turn: gives its slot back
        (0, False, True, None, False),  # parked for a run slot (concurrency): keeps it
        (None, True, True, None, False),  # not a loop item: no window
        # given back already (an earlier park)
        (0, True, True, {"parked": {"released": True}}, False),
        (0, True, True, {"parked": {"task": "each"}}, True),  # an earlier park that did not
        # the key's rate is still being cut: the item keeps its slot (shallow bookings)
        (0, True, False, None, False),
        (0, True, False, {"parked": {"task": "each"}}, False),
    ],
)
def test_which_parks_give_a_loop_items_window_slot_back(
    iteration: int | None,
    turn: bool,
    settled: bool,
    resume: dict[str, Any] | None,
    released: bool,
) -> None:
    parked = Parked({"single": True}, 4.5, "each", {"key:a": [1.0, 2.0]}, "key:a", turn, settled)
    payload = releases(_item(iteration, resume), parked)
    assert (payload is not None) == released
    if payload is not None:
        assert payload == {"key": "key:a", "delay": 4.5}
