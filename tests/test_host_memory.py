"""nx_hal.align_numpy (issue #14): numpy arrays made 64-byte aligned by a
numpy memory handler (NEP 49) in C, so XLA CPU aliases them instead of
copying. The handler must keep every value numpy's own allocator keeps
(growth by realloc, calloc's zeros) and restore what was there before.
Under .ci/sanitize these run against the handler built with ASan+UBSan."""

from __future__ import annotations

import random
import threading

import numpy as np
import pytest

import nx_hal
from nx_hal.host_memory import ALIGNMENT, _multiarray, is_aligned


def handler_name() -> str:
    return str(_multiarray().get_handler_name())


@pytest.fixture(autouse=True)
def numpy_default() -> None:
    assert handler_name() == "default_allocator", "an earlier test left the aligned handler on"


def make_arrays() -> list[np.ndarray]:
    rng = np.random.default_rng(0)
    return [
        np.empty(1, np.uint8), np.empty(3, np.float32), np.empty(0, np.float64), np.zeros(17, np.int16),
        np.ones((5, 7)), rng.standard_normal((1024, 1024)).astype(np.float32),
        np.arange(100_000), np.concatenate([np.ones(3), np.zeros(1000)]),
        np.full((3, 3), 2.5).T.copy(), np.empty(2**22, np.uint8),
    ]


def test_arrays_made_under_it_are_aligned_and_numpy_default_comes_back() -> None:
    before = make_arrays()
    assert handler_name() == "default_allocator"
    with nx_hal.align_numpy():
        assert handler_name() == "nx_hal_aligned_64"
        inside = make_arrays()
    assert handler_name() == "default_allocator"
    assert all(is_aligned(a) for a in inside), [a.ctypes.data % ALIGNMENT for a in inside]
    # numpy's own allocator gives malloc's 16 bytes: some of these are not 64-aligned
    assert not all(is_aligned(a) for a in before)
    np.testing.assert_array_equal(inside[4], np.ones((5, 7)))
    np.testing.assert_array_equal(inside[5], before[5])
    np.testing.assert_array_equal(inside[6], np.arange(100_000))


def test_zeros_are_zeros_small_and_large() -> None:
    with nx_hal.align_numpy():
        for n in (1, 100, 10_000, 2**20, 2**24 + 3):
            z = np.zeros(n, np.uint8)
            assert is_aligned(z) and not z.any(), n


def test_growth_by_realloc_keeps_the_values() -> None:
    """ndarray.resize and fromiter grow their block with realloc, which may
    move it to another alignment: the values must come along unchanged."""
    rng = random.Random(14)
    with nx_hal.align_numpy():
        for _ in range(400):
            n, m = rng.randrange(1, 5000), rng.randrange(1, 300_000)
            a = np.arange(n, dtype=np.int64)
            a.resize(m, refcheck=False)
            k = min(n, m)
            np.testing.assert_array_equal(a[:k], np.arange(k))
            assert not a[k:].any() and is_aligned(a)
        grown = np.fromiter((i * 3 for i in range(250_000)), dtype=np.int64)
    np.testing.assert_array_equal(grown, np.arange(250_000) * 3)
    assert is_aligned(grown)


def test_arrays_outlive_the_handler_change_both_ways() -> None:
    outside = np.arange(50_000.0)
    with nx_hal.align_numpy():
        inside = np.arange(50_000.0)
        del outside  # freed by numpy's allocator, which made it
    total = inside.sum()
    del inside  # freed by the aligned handler, no longer the current one
    assert total == 50_000 * 49_999 / 2


def test_function_form_and_off() -> None:
    try:
        nx_hal.align_numpy()
        assert handler_name() == "nx_hal_aligned_64"
        assert is_aligned(np.ones(1000))
        with nx_hal.align_numpy(False):
            assert handler_name() == "default_allocator"
        assert handler_name() == "nx_hal_aligned_64"
    finally:
        nx_hal.align_numpy(False)
    assert handler_name() == "default_allocator"


def test_it_is_per_thread_as_numpy_documents() -> None:
    """numpy keeps its handler in a context variable: a thread started while
    it is on has a context of its own, with numpy's default."""
    seen: list[str] = []
    with nx_hal.align_numpy():
        worker = threading.Thread(target=lambda: seen.append(handler_name()))
        worker.start()
        worker.join()
    assert seen == ["default_allocator"]


def test_is_aligned_reads_any_array() -> None:
    raw = np.empty(256, np.uint8)
    offset = (-raw.ctypes.data) % 64
    assert is_aligned(raw[offset:])
    assert not is_aligned(raw[offset + 16:])
    assert is_aligned(raw[offset + 16:], 16)


def test_the_extension_under_test() -> None:
    """Under .ci/sanitize, the sanitized build is what these tests ran on."""
    import os

    from nx_hal import _numpy_alloc

    sanitized = os.environ.get("NX_HAL_SANITIZED_NUMPY_ALLOC")
    if sanitized:
        assert _numpy_alloc.__file__ == sanitized
    else:
        assert _numpy_alloc.__file__ is not None and "_numpy_alloc" in _numpy_alloc.__file__


def test_off_brings_back_numpy_default_even_when_it_came_first_after_another_handler(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """The first call may come while another handler is in place (here a
    second capsule of nx_hal's own, standing for someone else's): off is
    numpy's default all the same, not whatever was there."""
    from nx_hal import _numpy_alloc, host_memory

    monkeypatch.setattr(host_memory, "_handlers", {})
    before = _numpy_alloc.set_handler(_numpy_alloc.handler())
    try:
        assert handler_name() == "nx_hal_aligned_64"
        nx_hal.align_numpy()
        nx_hal.align_numpy(False)
        assert handler_name() == "default_allocator"
    finally:
        _numpy_alloc.set_handler(before)
