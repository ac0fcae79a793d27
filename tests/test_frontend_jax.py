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
from nx_hal.dynamic import DynamicExecutable  # noqa: E402
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
    (lambda: jax.jit(lambda v: v * 2).lower(jax.ShapeDtypeStruct(jax.export.symbolic_shape("b, 4"), jnp.float32)),
     r"this lowering has symbolic dimensions \(argument 0: .*\), and a lowering cannot be lowered again for each "
     r"concrete shape: export it, jax.export.export\(jax.jit\(f\)\)\(\*args\)"),
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


def _symbolic(spec: str, dtype: Any = jnp.float32) -> Any:
    return jax.ShapeDtypeStruct(jax.export.symbolic_shape(spec), dtype)


def _params_struct() -> dict[str, Any]:
    return {k: jax.ShapeDtypeStruct(v.shape, v.dtype) for k, v in _params().items()}


@pytest.mark.parametrize("form", ["exported", "serialized"])
def test_an_export_of_symbolic_batch_compiles_per_batch(dev: Device, form: str) -> None:
    """An export with a symbolic batch compiles per batch on first call,
    each matching JAX; the shapes served are listed."""
    exported = jax.export.export(jax.jit(mlp))(_params_struct(), _symbolic("b, 784"))
    exe = dev.compile(bytes(exported.serialize()), "jax-export") if form == "serialized" else dev.compile(exported)
    assert isinstance(exe, DynamicExecutable)
    assert [s.shape for s in exe.inputs][-1] == (None, 784) and exe.outputs[0].shape == (None, 10)
    params = _params()
    rng = np.random.default_rng(2)
    for batch in (1, 3, 8, 3):
        x = jnp.asarray(rng.standard_normal((batch, 784)), jnp.float32)
        (got,) = exe(*jax.tree.leaves((params, x)))
        want = np.asarray(jax.jit(mlp)(params, x))
        assert got.shape == (batch, 10)
        np.testing.assert_allclose(np.from_dlpack(got), want, rtol=1e-5, atol=1e-5)
    assert [s["arg1"] for s in exe.shapes] == [(1, 784), (3, 784), (8, 784)]


def _attend(q: Any, k: Any, lengths: Any) -> Any:
    """Attention over a padded sequence: positions at or past ``lengths`` are masked."""
    scores = jnp.einsum("bsd,btd->bst", q, k) / jnp.sqrt(q.shape[-1])
    mask = jnp.arange(k.shape[1])[None, None, :] < lengths[:, None, None]
    return jax.nn.softmax(jnp.where(mask, scores, -1e9), axis=-1)


def test_two_symbolic_dims_and_their_shapes(dev: Device) -> None:
    """Batch and sequence symbolic, tied across inputs: three (b, s) pairs
    each match JAX; inputs that disagree on a dim are refused by name."""
    b, s = jax.export.symbolic_shape("b, s")
    seq = jax.ShapeDtypeStruct((b, s, 16), jnp.float32)
    exported = jax.export.export(jax.jit(_attend))(seq, seq, jax.ShapeDtypeStruct((b,), jnp.int32))
    exe = dev.compile(exported)
    rng = np.random.default_rng(3)
    for b, s in ((1, 5), (3, 12), (2, 7)):
        q, k = (rng.standard_normal((b, s, 16)).astype(np.float32) for _ in range(2))
        lengths = rng.integers(1, s + 1, b).astype(np.int32)
        (got,) = exe(q, k, lengths)
        np.testing.assert_allclose(np.from_dlpack(got), np.asarray(_attend(q, k, lengths)), rtol=1e-5, atol=1e-6)
    with pytest.raises(nx_hal.InvalidArgumentError, match=r"inputs 'arg0' and 'arg1' disagree on dim 's': 5 and 6"):
        exe(np.zeros((1, 5, 16), np.float32), np.zeros((1, 6, 16), np.float32), np.ones(1, np.int32))


def test_buckets_bound_an_exports_compiles(dev: Device) -> None:
    """Ten sequence lengths over buckets (8, 16) make two compiles; the
    mask keeps the padded positions out, so each result matches JAX's on
    the unpadded inputs, cut back to its own length."""
    def pooled(x: Any, lengths: Any) -> Any:
        mask = (jnp.arange(x.shape[1])[None, :] < lengths[:, None])[..., None]
        return jnp.tanh(x * 2.0), jnp.sum(jnp.where(mask, x, 0.0), axis=1)

    b, s = jax.export.symbolic_shape("b, s")
    exported = jax.export.export(jax.jit(pooled))(jax.ShapeDtypeStruct((b, s, 4), jnp.float32),
                                                  jax.ShapeDtypeStruct((b,), jnp.int32))
    exe = dev.compile(exported, shape_buckets={"s": [8, 16]})
    assert isinstance(exe, DynamicExecutable)
    rng = np.random.default_rng(4)
    for s in range(3, 13):
        x = rng.standard_normal((2, s, 4)).astype(np.float32)
        lengths = np.array([s, max(1, s - 2)], np.int32)
        got = [np.from_dlpack(o) for o in exe(x, lengths)]
        want = [np.asarray(w) for w in pooled(x, lengths)]
        assert got[0].shape == (2, s, 4)
        for g, w in zip(got, want, strict=True):
            np.testing.assert_allclose(g, w, rtol=1e-5, atol=1e-5)
    assert sorted(shape["arg0"] for shape in exe.shapes) == [(2, 8, 4), (2, 16, 4)]


def test_shapes_an_export_forbids_are_refused_in_jaxs_words(dev: Device) -> None:
    """A shape that breaks the export's constraints (a dim of 2*b given an
    odd size; b >= 1 given 0) is an error naming the dim, not a crash."""
    exe = dev.compile(jax.export.export(jax.jit(lambda v: v[::2] * 3))(_symbolic("2*b, 3")))
    np.testing.assert_allclose(np.from_dlpack(exe(np.arange(12, dtype=np.float32).reshape(4, 3))[0]),
                               np.arange(12, dtype=np.float32).reshape(4, 3)[::2] * 3)
    with pytest.raises(nx_hal.InvalidArgumentError, match=r"the inputs' shapes do not fit this export: .*'b'"):
        exe(np.zeros((5, 3), np.float32))
    with pytest.raises(nx_hal.InvalidArgumentError, match=r"the inputs' shapes do not fit this export: .*'b'"):
        exe(np.zeros((0, 3), np.float32))


def test_input_shapes_fix_one_shape_of_an_export(dev: Device) -> None:
    """input_shapes compiles the one shape they give (an Executable of that
    shape, matching JAX); names it does not take, a symbolic input left out
    and a fixed dim contradicted are refused by name."""
    exported = jax.export.export(jax.jit(mlp))(_params_struct(), _symbolic("b, 784"))
    exe = dev.compile(exported, input_shapes={"arg1": [5, 784]})
    assert isinstance(exe, nx_hal.Executable) and exe.inputs[-1].shape == (5, 784)
    params = _params()
    x = jnp.asarray(np.random.default_rng(5).standard_normal((5, 784)), jnp.float32)
    np.testing.assert_allclose(np.from_dlpack(exe(*jax.tree.leaves((params, x)))[0]),
                               np.asarray(jax.jit(mlp)(params, x)), rtol=1e-5, atol=1e-5)
    for given, message in (({"x": [5, 784]}, r"input_shapes names 'x', which this program does not take; its "
                                             r"inputs: arg0.b1, arg0.b2, arg0.w1, arg0.w2, arg1"),
                           ({"arg0.w1": [784, 64]}, r"input_shapes gives no shape for 'arg1', whose dims \(b, 784\) "
                                                    r"are symbolic"),
                           ({"arg1": [5, 783]}, r"input_shapes gives 'arg1' the shape \[5, 783\]; the program "
                                                r"declares \(b, 784\)")):
        with pytest.raises(nx_hal.InvalidArgumentError, match=message):
            dev.compile(exported, input_shapes=given)
