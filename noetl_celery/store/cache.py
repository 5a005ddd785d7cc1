"""A small thread-safe LRU for rows that never change once written (playbook content,
contexts, step results): caching them forever per process is always correct."""

from __future__ import annotations

import os
import threading
from collections import OrderedDict
from collections.abc import Callable, Hashable
from typing import Generic, TypeVar, cast

K = TypeVar("K", bound=Hashable)
V = TypeVar("V")


class _Loading:
    """A load in progress: the threads that missed the same key meanwhile wait for it."""

    def __init__(self) -> None:
        self.done = threading.Event()
        self.value: object = None
        self.failed = False


class ImmutableCache(Generic[K, V]):
    def __init__(self, size: int) -> None:
        self._size = size
        self._data: OrderedDict[K, V] = OrderedDict()
        self._loading: dict[K, _Loading] = {}
        self._lock = threading.Lock()
        self._pid = os.getpid()

    def get_or_load(self, key: K, load: Callable[[], V]) -> V:
        """The cached value, or the one `load` returns, loaded once for the threads that
        miss the key at the same time: the rows of a cursor frame run in threads
        (worker.frame_rows) and all read a new step result at once; each loaded and
        decoded it (py-spy on bench.pft_cursor: 1.4 % of a worker's CPU). A waiter whose
        load failed loads it itself (and meets its own error)."""
        if self._pid != os.getpid():  # a forked child: the parent's loads are not its own
            self._forked()
        with self._lock:
            if key in self._data:
                self._data.move_to_end(key)
                return self._data[key]
            loading = self._loading.get(key)
            mine = loading is None
            if loading is None:
                loading = self._loading[key] = _Loading()
        if not mine:
            loading.done.wait()
            if not loading.failed:
                return cast(V, loading.value)
            return self._load(key, load, None)
        return self._load(key, load, loading)

    def _forked(self) -> None:
        self._lock = threading.Lock()
        self._loading = {}
        self._pid = os.getpid()

    def _load(self, key: K, load: Callable[[], V], loading: _Loading | None) -> V:
        try:
            value = load()  # outside the lock: loads do I/O
        except BaseException:
            if loading is not None:
                with self._lock:
                    self._loading.pop(key, None)
                loading.failed = True
                loading.done.set()
            raise
        with self._lock:
            self._data[key] = value
            self._data.move_to_end(key)
            while len(self._data) > self._size:
                self._data.popitem(last=False)
            if loading is not None:
                self._loading.pop(key, None)
        if loading is not None:
            loading.value = value
            loading.done.set()
        return value

    def put(self, key: K, value: V) -> None:
        with self._lock:
            self._data[key] = value
            while len(self._data) > self._size:
                self._data.popitem(last=False)

    def clear(self) -> None:
        with self._lock:
            self._data.clear()
