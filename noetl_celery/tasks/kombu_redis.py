"""Fixes for kombu's Redis transport, installed in every process that talks to Redis.

1. A client per channel (measured). kombu 5.7's `Channel.conn_or_acquire()` builds a new
   `redis.Redis` object for every operation that is not given a client (each ack makes
   two, each publish one). Building one costs about as much as the command it sends. A
   client is only a thin wrapper over the channel's connection pool and is thread-safe,
   so one per channel is enough; it is rebuilt when the channel replaces its pool (after
   a reconnect).

2. A broker outage must not kill a worker. When Redis goes away, the worker's consumer
   closes its connection: `Channel.close()` drops the channel's pools, and the transport
   loses its client; then the virtual channel's close gives the unacked messages back
   (`QoS.restore_unacked_once` -> `restore_unacked` -> `conn_or_acquire`), and callbacks
   still pending in the hub ack messages on that channel. Both need a client, the
   channel tries to build a new pool from `self.connection.client.hostname` and gets
   `AttributeError: 'NoneType' object has no attribute 'hostname'`. kombu and Celery
   handle *connection* errors on these paths (the consumer reconnects), but not an
   AttributeError: it became "Unrecoverable error" and the worker exited for good (stock
   kombu 5.7 takes the same path). So:
   - a channel whose transport is gone raises `redis.ConnectionError` ("the broker is
     unreachable", which it is) instead, and Celery's usual recovery takes over;
   - giving unacked messages back is best effort: a failure is logged, never raised.
     Nothing is lost either way: if Redis is alive the messages stay in its unacked set
     (restored to the queue after the visibility timeout), if it is gone so are they, and
     the reaper republishes their commands from Postgres (`issued` rows nobody started;
     a command that did start is re-issued when its lease expires).
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

log = logging.getLogger("noetl_celery.broker")


def install() -> bool:
    try:
        from kombu.transport import redis as kombu_redis
        from redis.exceptions import ConnectionError as RedisConnectionError
    except ImportError:  # no redis extra: nothing to fix
        return False
    channel_cls: Any = kombu_redis.Channel
    qos_cls: Any = kombu_redis.QoS
    if getattr(channel_cls, "_noetl_cached_client", False):
        return True

    @contextmanager
    def conn_or_acquire(self: Any, client: Any = None) -> Iterator[Any]:
        if client:
            yield client
            return
        transport = self.connection
        if self._pool is None and (transport is None or transport.client is None):
            # closed: its pools are gone and nothing is left to build new ones from
            raise RedisConnectionError("the channel to Redis is closed")
        cached = self.__dict__.get("_noetl_client")
        if cached is None or cached.connection_pool is not self.pool:
            cached = self._noetl_client = self._create_client()
        yield cached

    restore_unacked = qos_cls.restore_unacked

    def restore_unacked_best_effort(self: Any, client: Any = None) -> None:
        try:
            restore_unacked(self, client)
        except Exception as exc:  # Redis is gone, or the channel closed under us
            count = len(self._delivered)
            self._delivered.clear()
            log.warning(
                "could not give %d unacknowledged message(s) back to Redis (%s: %s); "
                "the reaper republishes their commands from Postgres",
                count,
                type(exc).__name__,
                exc,
            )

    channel_cls.conn_or_acquire = conn_or_acquire
    qos_cls.restore_unacked = restore_unacked_best_effort
    channel_cls._noetl_cached_client = True
    return True
