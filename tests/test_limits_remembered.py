"""Inputs that ran a child past its deadline or out of memory fail at once
the second time under the same limit, and try again under a larger one
(nx_hal.store.limits; issue 29, item 11)."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

import nx_hal
from nx_hal import child, sandbox
from nx_hal.errors import DeadlineExceededError, ResourceExhaustedError
from nx_hal.store import Store, limits
from tests.test_child import _softmax_axis, trap_fixture_device


@pytest.fixture
def limit_restored(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(child, "_memory_limit", child._memory_limit)


KEY = "ab" * 32


@pytest.mark.parametrize(("error", "limit", "now", "known"), [
    (DeadlineExceededError("slow"), 5.0, 5.0, True),
    (DeadlineExceededError("slow"), 5.0, 2.0, True),
    (DeadlineExceededError("slow"), 5.0, 5.5, False),
    (ResourceExhaustedError("big"), 1 << 30, 1 << 30, True),
    (ResourceExhaustedError("big"), 1 << 30, 1 << 29, True),
    (ResourceExhaustedError("big"), 1 << 30, (1 << 30) + 1, False),
    (ResourceExhaustedError("big"), 1 << 30, 0, False),  # no limit now: the child may get what it needs
    (ResourceExhaustedError("big"), 0, 1 << 20, True),  # out of memory with none: any limit fails too
])
def test_an_outcome_covers_the_same_or_a_smaller_limit(tmp_path: Path, error: nx_hal.NxHalError, limit: float,
                                                       now: float, known: bool) -> None:
    store = Store(tmp_path / "cache")
    assert limits.known(store, "stablehlo", KEY, timeout=now, memory_limit=int(now)) is None
    limits.remember(store, "stablehlo", KEY, error, limit)
    found = limits.known(store, "stablehlo", KEY, timeout=now, memory_limit=int(now))
    assert (found is not None) == known
    if found is not None:
        assert type(found) is type(error) and "remembered" in found.message and error.message in found.message
    # Another section, or another input, knows nothing of it.
    assert limits.known(store, "verdicts", KEY, timeout=now, memory_limit=int(now)) is None
    assert limits.known(store, "stablehlo", "cd" * 32, timeout=now, memory_limit=int(now)) is None


def test_other_errors_are_not_remembered(tmp_path: Path) -> None:
    store = Store(tmp_path / "cache")
    limits.remember(store, "stablehlo", KEY, nx_hal.InvalidArgumentError("bad"), 5)
    assert limits.known(store, "stablehlo", KEY, timeout=1, memory_limit=1) is None


def test_a_conversion_that_timed_out_fails_at_once_the_second_time(tmp_path: Path) -> None:
    from nx_hal.onnx import convert

    model = _softmax_axis(2**62)  # spins torch-mlir's lowering until killed
    started = time.monotonic()
    with pytest.raises(DeadlineExceededError):
        convert.onnx_to_stablehlo(model, timeout=3, cache_dir=tmp_path / "cache")
    assert time.monotonic() - started >= 3
    again = time.monotonic()
    with pytest.raises(DeadlineExceededError, match="remembered"):
        convert.onnx_to_stablehlo(model, timeout=3, cache_dir=tmp_path / "cache")
    assert time.monotonic() - again < 1.5
    # Without the cache nothing is remembered: the conversion runs (and times out) again.
    with pytest.raises(DeadlineExceededError) as info:
        convert.onnx_to_stablehlo(model, timeout=2, cache_dir=tmp_path / "cache", use_cache=False)
    assert "remembered" not in str(info.value)


def test_a_sandboxed_compile_out_of_memory_fails_at_once_under_the_same_limit(tmp_path: Path,
                                                                               limit_restored: None) -> None:
    dev = trap_fixture_device(tmp_path)
    sandbox.clear_memory()
    child.set_memory_limit(4 << 20)
    with pytest.raises(ResourceExhaustedError, match="4 MiB") as first:
        dev.compile(b"neg f32 4", "fixture-elementwise")
    assert "remembered" not in first.value.message
    started = sandbox.children_started
    with pytest.raises(ResourceExhaustedError, match="remembered"):
        dev.compile(b"neg f32 4", "fixture-elementwise")
    assert sandbox.children_started == started  # no child: known at once
    child.set_memory_limit(0)  # no limit: tried again, and it compiles
    exe = dev.compile(b"neg f32 4", "fixture-elementwise")
    assert sandbox.children_started == started + 1
    assert exe is not None
