"""Worker pools against the real store (both backends): the engine publishes each command
to its step's queue (engine.routing: `spec.queue`, else NOETL_QUEUE_BY_KIND, else the
default), and a stopping worker's hand-back (`release_workers`) puts back to `issued`
exactly the commands running under the named worker processes."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from pathlib import Path

import pytest

from noetl_celery.engine.service import Engine
from noetl_celery.settings import Settings
from noetl_celery.store.database import SchemaMode

ROUTED = """apiVersion: noetl.io/v2
kind: Playbook
metadata: {{name: routed, path: tests/routed_{name}}}
workflow:
  - step: only
    {spec}
    tool: {tool}
"""


class QueueRecorder:
    """A broker that remembers which queue each publish named (None: the default)."""

    def __init__(self) -> None:
        self.sent: list[tuple[str | None, list[str]]] = []

    def publish(self, command_ids: Sequence[str], queue: str | None = None) -> None:
        self.sent.append((queue, list(command_ids)))

    def wake(self, execution_id: str) -> None:
        return None


@pytest.fixture
def engine(store_url: str, tmp_path: Path) -> Iterator[tuple[Engine, QueueRecorder]]:
    built = Engine(
        Settings(home=tmp_path, database_url=store_url, queue_by_kind=(("python", "cpu"),)),
        schema=SchemaMode.MIGRATE,
    )
    recorder = QueueRecorder()
    built.use_broker(recorder)
    yield built, recorder
    built.close()


@pytest.mark.parametrize(
    ("spec", "tool", "queue"),
    [
        ("spec: {queue: io}", "{kind: python, code: 'result = 1'}", "io"),
        ("", "{kind: python, code: 'result = 1'}", "cpu"),
        ("", "{kind: noop}", None),
    ],
)
def test_each_command_goes_to_its_steps_queue(
    engine: tuple[Engine, QueueRecorder], spec: str, tool: str, queue: str | None
) -> None:
    built, recorder = engine
    name = queue or "default"
    eid = built.start_text(ROUTED.format(name=name, spec=spec, tool=tool), {})
    assert recorder.sent == [(queue, [f"{eid}:only:1"])]
    # a republish (the reaper, a relay, a hand-back) takes the same way
    built.orchestrator.dispatcher.publish([f"{eid}:only:1"])
    assert recorder.sent[-1] == (queue, [f"{eid}:only:1"])


def test_release_workers_hands_back_only_their_running_commands(
    engine: tuple[Engine, QueueRecorder],
) -> None:
    built, _ = engine
    ids = []
    for i in range(3):
        eid = built.start_text(ROUTED.format(name=f"r{i}", spec="", tool="{kind: noop}"), {})
        ids.append(f"{eid}:only:1")
    store = built.store
    assert store.claim(ids[0], "host:1", 60) is not None
    assert store.claim(ids[1], "host:2", 60) is not None
    assert store.claim(ids[2], "host:3", 60) is not None
    assert store.release_workers([]) == []
    assert sorted(store.release_workers(["host:1", "host:2", "host:9"])) == sorted(ids[:2])
    assert store.release_workers(["host:1"]) == []  # already issued: nothing more
    # issued again: another worker claims them at once; the third is still host:3's
    assert store.claim(ids[0], "other:1", 60) is not None
    assert store.claim(ids[1], "other:1", 60) is not None
    assert store.claim(ids[2], "other:1", 60) is None
