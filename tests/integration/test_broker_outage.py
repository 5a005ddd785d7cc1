"""kombu's Redis channel, closed after its transport lost its client (what a worker's
consumer does when Redis goes away), must fail like a lost connection, never with an
AttributeError: Celery reconnects after the former and exits for good after the latter.
The whole outage, with real workers, is in tests/chaos (test_redis_down_for_30_s)."""

from __future__ import annotations

import logging
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
from kombu.connection import Connection

from noetl_celery.tasks import kombu_redis

pytestmark = pytest.mark.integration


@pytest.fixture
def unacked(redis_url: str) -> Iterator[tuple[Connection, Any, Any]]:
    """A connection, its channel and a message taken from a queue and not acked."""
    assert kombu_redis.install()
    queue = f"noetl-outage-{uuid.uuid4().hex[:8]}"
    with Connection(redis_url) as conn:
        channel = conn.channel()
        channel.queue_declare(queue)
        channel.basic_publish(channel.prepare_message("x"), exchange="", routing_key=queue)
        message = channel.basic_get(queue, no_ack=False)
        assert message is not None
        assert channel.qos._delivered  # unacked: closing the channel gives it back
        yield conn, channel, message


def test_closing_a_channel_whose_transport_is_gone_logs_and_survives(
    unacked: tuple[Connection, Any, Any], caplog: pytest.LogCaptureFixture
) -> None:
    conn, channel, _ = unacked
    conn.transport.client = None  # what kombu's Connection._close does to the transport
    channel._disconnect_pools()  # what the Redis channel's close does first
    with caplog.at_level(logging.WARNING, logger="noetl_celery.broker"):
        channel.close()  # stock kombu 5.7: AttributeError: ... no attribute 'hostname'
    assert "could not give 1 unacknowledged message(s) back to Redis" in caplog.text
    assert "republishes" in caplog.text


def test_acking_on_a_closed_channel_is_a_connection_error(
    unacked: tuple[Connection, Any, Any],
) -> None:
    conn, channel, message = unacked
    errors = conn.connection_errors
    conn.transport.client = None
    channel._disconnect_pools()
    # Celery acks with `ack_log_error(logger, connection_errors)`: logged, not fatal
    with pytest.raises(errors):
        message.ack()


def test_a_live_channel_still_gives_unacked_messages_back(
    unacked: tuple[Connection, Any, Any], redis_url: str
) -> None:
    _, channel, message = unacked
    queue = message.delivery_info["routing_key"]
    channel.close()
    with Connection(redis_url) as other:
        again = other.channel().basic_get(queue, no_ack=True)
    assert again is not None and again.body == message.body
