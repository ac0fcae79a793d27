"""Donated inputs (issue #31): a JAX step lowered with ``donate_argnums``
carries input-output aliasing; on a PJRT device the loop runs with its
parameters staying on the device and must compute what JAX computes. The
default XLA CPU plugin (xla_cpu_pjrt 0.0.1) computes such a step wrongly
when it updates a donated parameter in place (bench/donation_check.py), so
there a CPU device copies instead, says so (attribute ``donation``) and keeps
the inputs valid. A newer XLA CPU (StableHLO 1.20: lammps-jax-pjrt-cpu,
installed by the test command) donates in place: those tests run it in a
child process (tests/donation_child.py), as a PJRT library loads once per
process."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import nx_hal
from tests.donating import DONATED, donating

jax = pytest.importorskip("jax")
pytest.importorskip("jax.numpy")

from tests.donation_child import problem, sgd_step  # noqa: E402 - after the skip without jax

TPU = "tpu:cpu"


def _device() -> nx_hal.Device:
    try:
        return nx_hal.device(TPU)
    except nx_hal.NxHalError as exc:
        pytest.skip(f"no {TPU} device: {exc}")


def test_a_donated_training_loop_matches_jax() -> None:
    dev = _device()
    params0, xs, ys = problem()
    step = jax.jit(sgd_step, donate_argnums=(0,))
    want = []
    p = jax.device_put(params0)
    for x, y in zip(xs, ys, strict=True):
        p, loss = step(p, x, y)
        want.append(float(loss))
    exe = dev.compile(step.lower(params0, xs[0], ys[0]))
    assert [s.name for s in exe.inputs] == ["arg0.w1", "arg0.w2", "arg1", "arg2"]
    params = [dev.put(params0["w1"]), dev.put(params0["w2"])]
    got = []
    for x, y in zip(xs, ys, strict=True):  # the outputs go straight back in: never to the host
        *params, loss = exe(*params, x, y)
        got.append(float(loss.to_numpy()))
    np.testing.assert_allclose(got, want, rtol=1e-5)
    for mine, theirs in zip(params, (p["w1"], p["w2"]), strict=True):
        np.testing.assert_allclose(mine.to_numpy(), np.asarray(theirs), rtol=1e-4, atol=1e-6)


def test_a_cpu_device_copies_donated_inputs_and_says_so() -> None:
    dev = _device()
    assert dev.attributes["donation"] == "copy"
    params0, xs, ys = problem(hidden=16, steps=1)
    exe = dev.compile(jax.jit(sgd_step, donate_argnums=(0,)).lower(params0, xs[0], ys[0]))
    w1, w2 = dev.put(params0["w1"]), dev.put(params0["w2"])
    new_w1, new_w2, _ = exe(w1, w2, xs[0], ys[0])
    # The inputs are still there and unchanged; the outputs are new arrays.
    np.testing.assert_array_equal(w1.to_numpy(), params0["w1"])
    np.testing.assert_array_equal(w2.to_numpy(), params0["w2"])
    assert not np.array_equal(new_w1.to_numpy(), params0["w1"])
    exe(w1, w2, xs[0], ys[0])  # and usable again


def test_a_cpu_device_gets_a_jax_program_without_its_donation_marks(monkeypatch: pytest.MonkeyPatch) -> None:
    """The copy costs a step its parameters' traffic and computes what no donation computes:
    a device whose donation is "copy" compiles the program JAX made without donate_argnums."""
    from nx_hal.device import Device
    from nx_hal.frontends import from_jax

    dev = _device()
    params0, xs, ys = problem(hidden=16, steps=1)
    donated = jax.jit(sgd_step, donate_argnums=(0,)).lower(params0, xs[0], ys[0])
    plain = jax.jit(sgd_step).lower(params0, xs[0], ys[0])
    assert b"tf.aliasing_output" in donated.as_text(dialect="stablehlo").encode()
    assert from_jax.without_donation(donated.as_text(dialect="stablehlo").encode()) == \
        plain.as_text(dialect="stablehlo").encode()
    seen: list[bytes] = []
    compile_native = Device._compile

    def spy(self: Device, prog: Any, options: Any) -> Any:
        seen.append(bytes(prog.data))
        return compile_native(self, prog, options)

    monkeypatch.setattr(Device, "_compile", spy)
    exported = jax.export.export(jax.jit(sgd_step, donate_argnums=(0,)))(params0, xs[0], ys[0])
    assert b"tf.aliasing_output" in bytes(exported.mlir_module_serialized)
    for program in (donated, exported):
        exe = dev.compile(program, cache=False)
        w1, w2 = dev.put(params0["w1"]), dev.put(params0["w2"])
        *_, loss = exe(w1, w2, xs[0], ys[0])
        np.testing.assert_allclose(float(loss.to_numpy()), float(sgd_step(params0, xs[0], ys[0])[1]), rtol=1e-5)
    assert len(seen) == 2 and not any(b"tf.aliasing_output" in s or b"jax.buffer_donor" in s for s in seen)
    assert seen[1].startswith(b"ML\xefR")  # the export stays a portable artifact


# -- on an XLA CPU that donates in place ------------------------------------------------------



def test_a_donating_cpu_backend_trains_in_place_and_a_donated_buffer_is_an_error() -> None:
    seen = donating("loop")
    assert seen["donation"] == "in place"
    np.testing.assert_allclose(seen["got"], seen["want"], rtol=1e-5)
    assert seen["final"] < 1e-5
    # The first parameters were donated to the first step: their Buffer still
    # knows its shape, and any use of its memory is a clear error.
    assert seen["shape"] == [784, 256]
    for use in ("to_numpy", "copy", "dlpack", "call"):
        assert seen[use].startswith("InvalidArgumentError") and DONATED in seen[use], (use, seen[use])


def test_memory_seen_outside_pjrt_is_never_donated() -> None:
    seen = donating("exposure")
    assert seen.pop("is_zero_copy") is True
    forty = seen.pop("forty")  # one buffer at inputs 3 and 7 of forty: kept there, the others donated
    assert forty["doubled"] == [2.0 * (3 if i == 7 else i) for i in range(40)]
    assert forty["shared"] == "ok" and DONATED in forty["first"]
    twice = seen.pop("twice")
    # One buffer passed twice is read twice, never donated to itself.
    assert (twice["sum"], twice["double"], twice["again"]) == (2.0, 2.0, "ok")
    for case in ("after view", "plain"):  # nothing sees these: donated, and then an error
        got = seen.pop(case)
        assert (got["sum"], got["double"]) == (3.0, 2.0), case
        assert DONATED in got["again"], (case, got)
    # A live to_numpy view, the caller's array aliased (zero-copy or staged),
    # an array passed as is: the memory keeps its values and the input stays usable.
    assert set(seen) == {"viewed", "zero-copy put", "staged put", "numpy argument"}
    for case, got in seen.items():
        assert got == {"sum": 3.0, "double": 2.0, "host": 1.0, "again": "ok"}, case


def test_a_donated_loop_holds_one_copy_of_its_parameters_and_a_copying_one_two() -> None:
    donated, copied = donating("memory-donated"), donating("memory-copied")
    size = donated["param_bytes"]
    assert size == 64 * 2**20
    assert donated["value"] == pytest.approx(copied["value"], rel=1e-6)
    # Right after each step, the copying loop holds the old and the new
    # parameter; the donated one only the new, in the old one's memory.
    assert donated["peak_growth"] < size / 4, donated
    assert copied["peak_growth"] > size * 3 / 4, copied


def test_a_donated_inputs_memory_is_counted_once_under_a_memory_limit() -> None:
    """A loop that keeps its old parameters' handles (a history, say) under a
    160 MiB device limit with a 64 MiB parameter: each donated input's count
    is given back when its memory goes to the output (before: the second
    step was refused, 128 MiB already counted)."""
    seen = donating("limit", env={"NX_HAL_PLUGINS__TPU__MEMORY_LIMIT_BYTES": str(160 << 20)})
    assert (seen["steps"], seen["error"]) == (6, "ok"), seen
    p = np.float32(0.5)
    for _ in range(6):
        p = np.float32(p - np.float32(0.01) * np.tanh(p))
    assert seen["value"] == pytest.approx(float(p), rel=1e-5)


# -- donate_argnums: any program that reaches a PJRT device as StableHLO -------------------------


def test_donate_argnums_gives_an_onnx_models_state_to_its_output(tmp_path: Path) -> None:
    pytest.importorskip("onnx")
    seen = donating("onnx", str(tmp_path))
    for label in ("plain", "by name", "by position"):  # out = x @ state, new_state = state / 2 + x, 3 steps
        assert max(seen[label]["errors"]) < 1e-4, (label, seen[label])
        assert seen[label]["warnings"] == [], label
    # The same file compiled without the option kept its input; with it, by
    # the input's name or position, the old state is gone after the step.
    assert seen["plain"]["old"] == "ok"
    assert DONATED in seen["by name"]["old"] and DONATED in seen["by position"]["old"]
    text = seen["text"]  # main(a: 4xf32, b: 2xf32) -> 4xf32, both donated: b matches no output
    assert text["doubled"] == [0.0, 2.0, 4.0, 6.0]
    assert DONATED in text["a"] and text["b"] == "ok"
    assert len(text["warnings"]) == 1 and "input(s) 1," in text["warnings"][0] and "not donated" in text["warnings"][0]


def _state_model() -> Any:
    pytest.importorskip("onnx")
    from tests.donation_child import state_model

    return state_model(8)


@pytest.mark.parametrize("selector", ["tpu:cpu", "npu:cpu"])
def test_donate_argnums_where_a_device_cannot_donate_warns_and_keeps_the_inputs(selector: str) -> None:
    try:
        dev = nx_hal.device(selector)
    except nx_hal.NxHalError as exc:
        pytest.skip(f"no {selector}: {exc}")
    if dev.attributes.get("donation") == "in place":
        pytest.skip(f"{selector} donates here")
    with pytest.warns(UserWarning, match="does not donate inputs .*donate_argnums has no effect"):
        exe = dev.compile(_state_model(), donate_argnums="state")
    x, s = np.eye(8, dtype=np.float32) * 3, np.arange(64, dtype=np.float32).reshape(8, 8)
    state = dev.put(s)
    out, new = exe(x, state)
    np.testing.assert_allclose(out.to_numpy(), x @ s, rtol=1e-6)
    np.testing.assert_allclose(new.to_numpy(), s / 2 + x, rtol=1e-6)
    np.testing.assert_array_equal(state.to_numpy(), s)  # still there


@pytest.mark.parametrize(("value", "words"), [
    (-1, "expected input positions"), (True, "expected input positions"), (1.5, "expected input positions"),
    ("", "expected input positions"), ([0, None], "expected input positions"),
    ("nope", "names input 'nope', which the program does not take; its inputs: x, state"),
    (2, "names input 2; the program takes 2 input(s) (0 to 1)"),
])
def test_bad_donate_argnums_are_errors(value: object, words: str) -> None:
    dev = _device()
    with pytest.raises(nx_hal.InvalidArgumentError, match=re.escape(words)):
        dev.compile(_state_model(), donate_argnums=value)


def test_donate_argnums_by_name_needs_named_inputs() -> None:
    dev = _device()
    text = "func.func @main(%a: tensor<4xf32>) -> tensor<4xf32> {\n  return %a : tensor<4xf32>\n}"
    with pytest.raises(nx_hal.InvalidArgumentError, match="have no names here: give positions"):
        dev.compile(text, donate_argnums="a")
