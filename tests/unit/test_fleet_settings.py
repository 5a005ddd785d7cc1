"""Settings and pure helpers of brokers and worker pools: the queue type, the shutdown
budget, NOETL_QUEUE_BY_KIND, `spec.queue`, `worker -Q`, and the per-step routing."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from noetl_celery.cli.admin import worker_queues
from noetl_celery.constants import QUEUE_COMMANDS, QUEUE_ORCHESTRATE
from noetl_celery.errors import ConfigurationError
from noetl_celery.models.validation import validate_text
from noetl_celery.routing import parse_queue_by_kind, step_queue
from noetl_celery.settings import Settings
from noetl_celery.tasks.app import make_app
from noetl_celery.tasks.dispatcher import is_redis


def test_defaults() -> None:
    settings = Settings.from_env({})
    assert settings.broker_queue_type == "classic"
    assert settings.worker_shutdown_seconds == 20.0
    assert settings.queue_by_kind == ()
    assert settings.beside_threads == 64


def test_beside_threads_from_the_environment() -> None:
    assert Settings.from_env({"NOETL_BESIDE_THREADS": "0"}).beside_threads == 0
    assert Settings.from_env({"NOETL_BESIDE_THREADS": "8"}).batch_options == (0.15, 8)


def test_queue_type_and_budget_from_the_environment() -> None:
    settings = Settings.from_env(
        {"NOETL_BROKER_QUEUE_TYPE": " Quorum ", "NOETL_WORKER_SHUTDOWN_SECONDS": "5"}
    )
    assert settings.broker_queue_type == "quorum"
    assert settings.worker_shutdown_seconds == 5.0


@pytest.mark.parametrize(
    ("env", "says"),
    [
        ({"NOETL_BROKER_QUEUE_TYPE": "stream"}, "NOETL_BROKER_QUEUE_TYPE must be one of"),
        ({"NOETL_WORKER_SHUTDOWN_SECONDS": "soon"}, "NOETL_WORKER_SHUTDOWN_SECONDS must be"),
        ({"NOETL_WORKER_SHUTDOWN_SECONDS": "-1"}, "NOETL_WORKER_SHUTDOWN_SECONDS must be"),
        ({"NOETL_WORKER_SHUTDOWN_SECONDS": "inf"}, "NOETL_WORKER_SHUTDOWN_SECONDS must be"),
        ({"NOETL_QUEUE_BY_KIND": "http"}, "NOETL_QUEUE_BY_KIND must be kind:queue"),
        ({"NOETL_QUEUE_BY_KIND": "http:i o"}, "NOETL_QUEUE_BY_KIND must be kind:queue"),
        ({"NOETL_QUEUE_BY_KIND": ":io"}, "NOETL_QUEUE_BY_KIND must be kind:queue"),
        ({"NOETL_BESIDE_THREADS": "-1"}, "NOETL_BESIDE_THREADS must be >= 0"),
        ({"NOETL_BESIDE_THREADS": "many"}, "NOETL_BESIDE_THREADS must be an integer"),
    ],
)
def test_bad_values_are_one_line_errors(env: dict[str, str], says: str) -> None:
    with pytest.raises(ConfigurationError) as caught:
        Settings.from_env(env)
    assert says in str(caught.value) and "\n" not in str(caught.value)


def test_queue_by_kind_parses() -> None:
    assert parse_queue_by_kind(" http:io , Python:cpu,,") == (("http", "io"), ("python", "cpu"))
    assert parse_queue_by_kind("") == ()


def test_a_step_queue_wins_over_its_kind() -> None:
    by_kind = {"http": "io", "python": "cpu"}
    assert step_queue({"queue": "gpu"}, ("python",), by_kind) == "gpu"
    assert step_queue(None, ("python",), by_kind) == "cpu"
    assert step_queue({}, ("HTTP",), by_kind) == "io"
    assert step_queue(None, ("noop",), by_kind) is None
    # a pipeline of kinds routed apart has no one queue: the default
    assert step_queue(None, ("http", "python"), by_kind) is None
    assert step_queue(None, ("http", "http"), by_kind) == "io"


PLAYBOOK = """
apiVersion: noetl.io/v2
kind: Playbook
metadata: {{name: q, path: tests/q}}
workflow:
  - step: start
    spec: {{queue: {queue}}}
    tool: {{kind: noop}}
"""


@pytest.mark.parametrize("queue", ["io", "gpu-pool_2"])
def test_a_valid_step_queue_passes_validation(queue: str) -> None:
    assert validate_text(PLAYBOOK.format(queue=queue)).errors == []


@pytest.mark.parametrize("queue", ["'a b'", "'noetl.commands'", "''", "3", "[io]"])
def test_a_bad_step_queue_is_refused(queue: str) -> None:
    errors = validate_text(PLAYBOOK.format(queue=queue), "p.yaml").errors
    assert len(errors) == 1, errors
    assert "spec.queue" in errors[0].message and "letters, digits" in errors[0].message


@pytest.mark.parametrize(
    ("args", "queues", "rest"),
    [
        ((), [QUEUE_COMMANDS, QUEUE_ORCHESTRATE], []),
        (("-c", "4"), [QUEUE_COMMANDS, QUEUE_ORCHESTRATE], ["-c", "4"]),
        (("-Q", "io"), ["io", QUEUE_ORCHESTRATE], []),
        (("-Qio,cpu", "-c", "2"), ["io", "cpu", QUEUE_ORCHESTRATE], ["-c", "2"]),
        (("--queues=io", "-Q", "noetl.commands"), ["io", QUEUE_COMMANDS, QUEUE_ORCHESTRATE], []),
        (("--queues", "noetl.orchestrate,io"), [QUEUE_ORCHESTRATE, "io"], []),
    ],
)
def test_worker_q_chooses_the_queues(
    args: tuple[str, ...], queues: list[str], rest: list[str]
) -> None:
    assert worker_queues(args) == (queues, rest)


@pytest.mark.parametrize("args", [("-Q",), ("-Q", "a b"), ("--queues=io,",)])
def test_worker_q_refuses_bad_names(args: tuple[str, ...]) -> None:
    with pytest.raises(ConfigurationError) as caught:
        worker_queues(args)
    assert "\n" not in str(caught.value)


def queue_of(app: Any, name: str) -> Any:
    return app.amqp.queues[name]


@pytest.mark.parametrize("queue_type", ["classic", "quorum"])
def test_the_engine_queues_are_durable_and_typed(tmp_path: Path, queue_type: str) -> None:
    settings = Settings(
        home=tmp_path, broker_url="amqp://guest@localhost//", broker_queue_type=queue_type
    )
    app = make_app(settings)
    for name in (QUEUE_COMMANDS, QUEUE_ORCHESTRATE, "io"):  # io: a pool's, made on demand
        queue = queue_of(app, name)
        assert queue.durable and not queue.auto_delete
        arguments = queue.queue_arguments or {}
        assert arguments.get("x-queue-type", "classic") == queue_type
    assert app.conf.task_default_delivery_mode == "persistent"


def test_which_urls_are_redis() -> None:
    assert is_redis("redis://h:6379/0") and is_redis("rediss://h/0")
    assert is_redis("sentinel://h:26379")
    assert not is_redis("amqp://guest@h//") and not is_redis("sqs://")
