"""JAX programs straight in (issue #31): ``jax.jit(f).lower(*args)``,
``jax.export.export(jax.jit(f))(*args)`` and an export's serialized bytes
compile on a PJRT device and match JAX's own results; what cannot run as the
function's flattened arguments is refused by name before any compile."""

from __future__ import annotations

import os
from typing import Any

import numpy as np
import pytest

os.environ.setdefault("JAX_PLATFORMS", "cpu")  # JAX's own CPU client only: no TPU or GPU probing here
jax = pytest.importorskip("jax")
jnp = pytest.importorskip("jax.numpy")

import nx_hal  # noqa: E402
from nx_hal.device import Device  # noqa: E402
from tests.plugin_env import installed_device  # noqa: E402


@pytest.fixture(scope="module")
def dev() -> Device:
    return installed_device("tpu:cpu")


def mlp(params: dict[str, Any], x: Any) -> Any:
    """A two-layer classifier in plain jax.numpy."""
    h = jax.nn.gelu(x @ params["w1"] + params["b1"])
    return jax.nn.log_softmax(h @ params["w2"] + params["b2"], axis=-1)


def _params(seed: int = 0) -> dict[str, Any]:
    rng = np.random.default_rng(seed)
    return {"w1": jnp.asarray(rng.standard_normal((784, 64)) / 28, jnp.float32),
            "b1": jnp.asarray(rng.standard_normal(64) * 0.1, jnp.float32),
            "w2": jnp.asarray(rng.standard_normal((64, 10)) / 8, jnp.float32),
            "b2": jnp.asarray(rng.standard_normal(10) * 0.1, jnp.float32)}


def _forms(f: Any, *args: Any) -> list[tuple[str, Any, str | None]]:
    exported = jax.export.export(jax.jit(f))(*args)
    return [("lowered", jax.jit(f).lower(*args), None), ("exported", exported, None),
            ("serialized", bytes(exported.serialize()), "jax-export")]


@pytest.mark.parametrize("form", ["lowered", "exported", "serialized"])
def test_an_mlp_matches_jax(dev: Device, form: str) -> None:
    params = _params()
    x = jnp.asarray(np.random.default_rng(1).standard_normal((8, 784)), jnp.float32)
    program, fmt = next((p, f) for name, p, f in _forms(mlp, params, x) if name == form)
    exe = dev.compile(program, fmt)
    assert [s.name for s in exe.inputs] == ["arg0.b1", "arg0.b2", "arg0.w1", "arg0.w2", "arg1"]
    assert [s.name for s in exe.outputs] == ["result"]
    (got,) = exe(*jax.tree.leaves((params, x)))
    want = np.asarray(jax.jit(mlp)(params, x))
    np.testing.assert_allclose(np.from_dlpack(got), want, rtol=1e-5, atol=1e-5)
    assert np.abs(want).max() > 0.1  # not a constant a wrong program would also give
    # DLPack out to JAX, as a jax.Array
    np.testing.assert_allclose(np.asarray(jnp.from_dlpack(got)), want, rtol=1e-5, atol=1e-5)


def test_a_function_of_pytrees_and_keywords(dev: Device) -> None:
    """Inputs and outputs are the flattened leaves, named by their paths."""
    def f(a: Any, pair: tuple[Any, Any], *, scale: Any) -> dict[str, Any]:
        return {"sum": (a + pair[0]) * scale, "prod": jnp.tanh(a * pair[1]), "n": jnp.sum(a).astype(jnp.int32)}

    a = jnp.arange(6, dtype=jnp.float32).reshape(2, 3)
    pair = (jnp.ones((2, 3), jnp.float32), jnp.full((2, 3), 0.5, jnp.float32))
    scale = jnp.float32(3.0)
    lowered = jax.jit(f).lower(a, pair, scale=scale)
    exe = dev.compile(lowered)
    assert [s.name for s in exe.inputs] == ["arg0", "arg1.0", "arg1.1", "scale"]
    assert [s.name for s in exe.outputs] == ["n", "prod", "sum"]
    got = [np.from_dlpack(o) for o in exe(*jax.tree.leaves(((a, pair), {"scale": scale})))]
    want = jax.tree.leaves(f(a, pair, scale=scale))
    for g, w in zip(got, want, strict=True):
        np.testing.assert_allclose(g, np.asarray(w), rtol=1e-6)
    assert got[0].dtype == np.int32 and got[0] == 15


def test_compile_anywhere_picks_a_device_that_reads_stablehlo(dev: Device) -> None:
    x = jnp.ones((2, 3), jnp.float32)
    exe, report = nx_hal.compile_anywhere(jax.jit(lambda v: v * 2 + 1).lower(x), selector=dev.selector)
    assert exe.device is dev and report.chosen is dev
    np.testing.assert_array_equal(np.from_dlpack(exe(np.ones((2, 3), np.float32))[0]), np.full((2, 3), 3.0))


def test_a_device_without_stablehlo_says_so() -> None:
    npu = installed_device("npu:cpu")
    with pytest.raises(nx_hal.InvalidArgumentError, match="does not accept 'stablehlo' programs"):
        npu.compile(jax.jit(lambda v: v + 1).lower(jnp.ones(3)))


def _unused(a: Any, unused: Any, b: Any) -> Any:
    return a * b


def _print(v: Any) -> Any:
    jax.debug.print("v = {}", v)
    return v + 1


@pytest.mark.parametrize(("make", "message"), [
    (lambda: jax.jit(_unused).lower(1.0, 2.0, 3.0),
     r"JAX left unused argument\(s\) 1 \(of the 3 flattened ones\) out of this lowering, so its inputs would not "
     r"be the function's arguments: make it with jax.jit\(f, keep_unused=True\).lower\(\*args\)"),
    (lambda: jax.export.export(jax.jit(_unused))(1.0, 2.0, 3.0),
     r"out of this export, .*jax.export.export\(jax.jit\(f, keep_unused=True\)\)\(\*args\)"),
    (lambda: jax.export.export(jax.jit(mlp), platforms=["cuda"])(_params(), jnp.ones((1, 784))),
     r"this program was lowered for cuda, and tpu:cpu:0 runs 'cpu': lower or export it for 'cpu'"),
    (lambda: jax.export.export(jax.jit(mlp), platforms=["cpu", "cuda"])(_params(), jnp.ones((1, 784))),
     r"this export was lowered for several platforms \('cpu', 'cuda'\)"),
    (lambda: jax.export.export(jax.jit(lambda v: v * 2))(
        jax.ShapeDtypeStruct(jax.export.symbolic_shape("b, 4"), jnp.float32)),
     r"this export has symbolic dimensions \(argument 0: .*\); nx_hal compiles JAX programs of concrete shapes"),
    (lambda: jax.jit(_print).lower(1.0),
     r"this lowering calls back into Python on the host"),
])
def test_what_cannot_run_as_the_functions_arguments_is_refused(dev: Device, make: Any, message: str) -> None:
    with pytest.raises(nx_hal.InvalidArgumentError, match=message):
        dev.compile(make())


@pytest.mark.parametrize("data", [b"", b"garbage", b"\x00" * 64, bytes(range(256))])
def test_bytes_that_are_no_export(dev: Device, data: bytes) -> None:
    with pytest.raises(nx_hal.InvalidArgumentError, match=r"^INVALID_ARGUMENT: not a serialized JAX export \(the bytes of"):
        dev.compile(data, "jax-export")
