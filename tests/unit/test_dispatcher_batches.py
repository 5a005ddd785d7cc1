"""What CeleryDispatcher.publish sends: batches of at most `batch_size` ids as
`execute_commands`, a lone id as `execute_command` (the message old workers and the
reaper's single republish use)."""

from __future__ import annotations

from pathlib import Path

from noetl_celery.constants import QUEUE_COMMANDS, TASK_EXECUTE_COMMAND, TASK_EXECUTE_COMMANDS
from noetl_celery.settings import Settings
from noetl_celery.tasks.app import make_app
from noetl_celery.tasks.dispatcher import CeleryDispatcher


class Sent(CeleryDispatcher):
    """The dispatcher with its broker send replaced by a list (memory broker app)."""

    def __init__(self, batch_size: int, home: Path) -> None:
        super().__init__(make_app(Settings(home=home)), batch_size=batch_size)
        self.sent: list[tuple[str, object, str]] = []

    def _send(self, name: str, arg: str | list[str], queue: str) -> None:
        self.sent.append((name, arg, queue))


def test_ids_go_in_batches_and_a_lone_id_as_execute_command(tmp_path: Path) -> None:
    dispatcher = Sent(2, tmp_path)
    dispatcher.publish(["a", "b", "c", "d", "e"])
    assert dispatcher.sent == [
        (TASK_EXECUTE_COMMANDS, ["a", "b"], QUEUE_COMMANDS),
        (TASK_EXECUTE_COMMANDS, ["c", "d"], QUEUE_COMMANDS),
        (TASK_EXECUTE_COMMAND, "e", QUEUE_COMMANDS),
    ]


def test_a_batch_size_of_one_sends_one_message_per_command(tmp_path: Path) -> None:
    dispatcher = Sent(1, tmp_path)
    dispatcher.publish(["a", "b"])
    assert dispatcher.sent == [
        (TASK_EXECUTE_COMMAND, "a", QUEUE_COMMANDS),
        (TASK_EXECUTE_COMMAND, "b", QUEUE_COMMANDS),
    ]
