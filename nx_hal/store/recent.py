"""This process's memory in front of the store: a bounded map that forgets
its least recently used entry first. The sandbox's and the verifier's
verdicts, the converter's failures and the compile memo each keep one, so
that a known answer costs neither a child nor a read of the store."""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Hashable
from typing import Generic, TypeVar

__all__ = ["Recent"]

K = TypeVar("K", bound=Hashable)
V = TypeVar("V")


class Recent(Generic[K, V]):
    """At most ``limit`` entries; ``get`` and ``put`` make an entry the most
    recent. Thread-safe: devices of every plugin share these."""

    def __init__(self, limit: int) -> None:
        if limit <= 0:
            raise ValueError(f"limit must be > 0, got {limit}")
        self.limit = limit
        self._entries: OrderedDict[K, V] = OrderedDict()
        self._lock = threading.Lock()

    def get(self, key: K) -> V | None:
        """The value for ``key``, or None."""
        with self._lock:
            found = self._entries.get(key)
            if found is not None:
                self._entries.move_to_end(key)
            return found

    def put(self, key: K, value: V) -> None:
        """Remembers ``value``; forgets the least recent entries past the limit."""
        with self._lock:
            self._entries[key] = value
            self._entries.move_to_end(key)
            while len(self._entries) > self.limit:
                self._entries.popitem(last=False)

    def values(self) -> list[V]:
        """The values now, least recent first (a copy)."""
        with self._lock:
            return list(self._entries.values())

    def clear(self) -> None:
        """Forgets every entry (tests, benchmarks)."""
        with self._lock:
            self._entries.clear()

    def __len__(self) -> int:
        with self._lock:
            return len(self._entries)
