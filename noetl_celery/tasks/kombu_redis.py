"""A measured fix for kombu's Redis transport in worker processes.

kombu 5.7's `Channel.conn_or_acquire()` builds a new `redis.Redis` object for every
operation that is not given a client (each ack makes two, each publish one). Building
one costs about as much as the command it sends. A client is only a thin wrapper over the
channel's connection pool and is thread-safe, so one per channel is enough; it is rebuilt
when the channel replaces its pool (after a reconnect).
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any


def install() -> bool:
    try:
        from kombu.transport import redis as kombu_redis
    except ImportError:  # no redis extra: nothing to fix
        return False
    channel_cls: Any = kombu_redis.Channel
    if getattr(channel_cls, "_noetl_cached_client", False):
        return True

    @contextmanager
    def conn_or_acquire(self: Any, client: Any = None) -> Iterator[Any]:
        if client:
            yield client
            return
        cached = self.__dict__.get("_noetl_client")
        if cached is None or cached.connection_pool is not self.pool:
            cached = self._noetl_client = self._create_client()
        yield cached

    channel_cls.conn_or_acquire = conn_or_acquire
    channel_cls._noetl_cached_client = True
    return True
