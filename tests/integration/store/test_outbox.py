"""The outbox against the real store (both backends): a start whose publish the broker
refused is recorded with its command held, says so (BrokerUnavailable naming it), and a
relay publishes it once when the broker answers again; the fleet's recovery after a
broker restart is claimed once per restart and per outage."""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterator, Sequence
from pathlib import Path

import pytest

from noetl_celery.engine.outbox import Relay
from noetl_celery.engine.service import Engine
from noetl_celery.errors import BrokerUnavailable
from noetl_celery.settings import Settings
from noetl_celery.store.database import SchemaMode
from noetl_celery.store.schema import utcnow

PLAYBOOK = """apiVersion: noetl.io/v2
kind: Playbook
metadata: {name: lonely, path: tests/lonely}
workflow:
  - step: only
    tool: {kind: python, code: "result = {'ok': True}"}
"""


class Broker:
    """A broker that can be away; remembers what it took."""

    def __init__(self) -> None:
        self.up = True
        self.token = "t1"
        self.published: list[str] = []
        self.woken: list[str] = []

    def _check(self) -> None:
        if not self.up:
            raise ConnectionError("Error 111 connecting to 127.0.0.1:1. Connection refused.")

    def publish(self, command_ids: Sequence[str]) -> None:
        self._check()
        self.published.extend(command_ids)

    def wake(self, execution_id: str) -> None:
        self._check()
        self.woken.append(execution_id)

    def probe(self) -> str:
        self._check()
        return self.token


@pytest.fixture
def engine(store_url: str, tmp_path: Path) -> Iterator[tuple[Engine, Broker]]:
    built = Engine(
        Settings(home=tmp_path, database_url=store_url, broker_url="redis://:pw@broker:6379/0"),
        schema=SchemaMode.MIGRATE,
    )
    broker = Broker()
    built.use_broker(broker)
    yield built, broker
    built.close()


def relay_of(engine: Engine, broker: Broker) -> Relay:
    return Relay(engine.store, engine.orchestrator, broker, broker.probe, "redis://broker")


def test_a_start_the_broker_refused_is_held_and_published_once_when_it_is_back(
    engine: tuple[Engine, Broker],
) -> None:
    eng, broker = engine
    broker.up = False
    with pytest.raises(BrokerUnavailable) as caught:
        eng.start_text(PLAYBOOK)
    eid = caught.value.execution_id
    assert eid is not None
    message = str(caught.value)
    assert "unreachable" in message and "broker:6379" in message
    assert eid in message and "recorded" in message and "pw" not in message
    assert eng.store.execution_status(eid) == "RUNNING"
    assert eng.store.outbox.waiting(eid) == 1
    assert eng.status(eid)["held_for_broker"] == 1
    relay = relay_of(eng, broker)
    relay.tick()  # still away: nothing moves, nothing is lost
    assert broker.published == []
    assert eng.store.outbox.waiting(eid) == 1
    broker.up = True
    relay.tick()
    assert [c.split(":", 1)[0] for c in broker.published] == [eid]
    assert eng.store.outbox.waiting(eid) == 0
    relay.tick()  # published once
    assert len(broker.published) == 1


def test_the_relay_drops_a_held_command_someone_claimed_meanwhile(
    engine: tuple[Engine, Broker],
) -> None:
    eng, broker = engine
    broker.up = False
    with pytest.raises(BrokerUnavailable) as caught:
        eng.start_text(PLAYBOOK)
    eid = caught.value.execution_id
    assert eid is not None
    (item,) = eng.store.outbox.claim(30)
    eng.store.outbox.release([item.item_id])
    command_id = item.item_id
    assert eng.store.claim(command_id, "someone", 30) is not None  # a republish ran it
    broker.up = True
    relay = relay_of(eng, broker)
    relay.tick()
    assert broker.published == []  # no second delivery of a claimed command
    assert eng.store.outbox.waiting(eid) == 0


def test_outbox_rows_are_claimed_by_one_relay_at_a_time(engine: tuple[Engine, Broker]) -> None:
    outbox = engine[0].store.outbox
    outbox.hold(["e1:a:1", "e1:a:2"], wakes=["e2"])
    outbox.hold(["e1:a:1"])  # held twice: one row
    first = outbox.claim(30)
    assert sorted(i.item_id for i in first) == ["e1:a:1", "e1:a:2", "e2"]
    assert outbox.claim(30) == []  # claimed: another relay gets none of them
    outbox.release(["e2"])
    assert [i.kind for i in outbox.claim(30)] == ["wake"]
    outbox.done([i.item_id for i in first])
    assert not outbox.any_held()


def test_the_recovery_is_claimed_once_per_broker_restart_and_per_outage(
    engine: tuple[Engine, Broker],
) -> None:
    outbox = engine[0].store.outbox
    assert outbox.claim_recovery("t1", None)  # the first look of the fleet
    assert not outbox.claim_recovery("t1", None)  # the same broker: nothing lost
    assert outbox.claim_recovery("t2", None)  # restarted empty: once
    assert not outbox.claim_recovery("t2", None)
    lost_at = utcnow()
    assert outbox.claim_recovery("t2", lost_at)  # away since lost_at: once
    assert not outbox.claim_recovery("t2", lost_at - dt.timedelta(seconds=1))


def test_a_restarted_broker_gets_every_issued_command_again(
    engine: tuple[Engine, Broker],
) -> None:
    eng, broker = engine
    eid = eng.start_text(PLAYBOOK)
    assert len(broker.published) == 1
    relay = relay_of(eng, broker)
    relay.tick()  # the fleet's first look: nothing was lost yet
    broker.published.clear()
    broker.token = "t2"  # restarted empty: its queued message is gone
    relay.tick()
    assert [c.split(":", 1)[0] for c in broker.published] == [eid]
    assert relay.recovered >= 1
    broker.published.clear()
    relay.tick()
    assert broker.published == []


def test_a_worker_pass_whose_publish_fails_does_not_raise(engine: tuple[Engine, Broker]) -> None:
    eng, broker = engine
    broker.up = False
    eng.orchestrator.dispatcher.publish(["e9:s:1"])  # held, logged, not raised
    eng.orchestrator.dispatcher.wake("e8")
    assert sorted(i.item_id for i in eng.store.outbox.claim(30)) == ["e8", "e9:s:1"]


def test_a_schedule_triggered_while_the_broker_is_away_names_its_recorded_run(
    engine: tuple[Engine, Broker],
) -> None:
    eng, broker = engine
    eng.register_text(PLAYBOOK)
    row = eng.schedules.add("tests/lonely", "0 6 * * *")
    broker.up = False
    with pytest.raises(BrokerUnavailable) as caught:
        eng.trigger_schedule(row.schedule_id)
    eid = caught.value.execution_id
    assert eid is not None and eng.store.outbox.waiting(eid) == 1
    broker.up = True
    assert eng.trigger_schedule(row.schedule_id) != eid  # the broker back: plain start
