"""nx_hal.store.recent.Recent: the one bounded memory in front of the store."""

from __future__ import annotations

import threading

import pytest

from nx_hal.store.recent import Recent


def test_forgets_the_least_recently_used_first() -> None:
    memory: Recent[str, int] = Recent(2)
    memory.put("a", 1)
    memory.put("b", 2)
    assert memory.get("a") == 1  # "b" is now the least recent
    memory.put("c", 3)
    assert (memory.get("a"), memory.get("b"), memory.get("c")) == (1, None, 3) and len(memory) == 2
    memory.put("a", 10)  # replacing makes it the most recent too
    memory.put("d", 4)
    assert (memory.get("a"), memory.get("c"), memory.get("d")) == (10, None, 4)
    assert memory.values() == [10, 4]
    memory.clear()
    assert len(memory) == 0 and memory.get("a") is None


def test_a_limit_must_hold_something() -> None:
    with pytest.raises(ValueError, match="limit must be > 0, got 0"):
        Recent(0)
    assert Recent[str, int](1).limit == 1


def test_threads_never_see_more_than_the_limit() -> None:
    memory: Recent[int, int] = Recent(64)

    def work(base: int) -> None:
        for i in range(2000):
            memory.put(base + i, i)
            memory.get(base + i // 2)

    threads = [threading.Thread(target=work, args=(k * 10_000,)) for k in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(memory) == 64
