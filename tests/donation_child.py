"""Run by tests/test_donation.py in a child process whose tpu plugin runs over
an XLA CPU plugin that donates in place (NX_HAL_PLUGINS__TPU__BACKEND_PATHS
names it): a PJRT library is loaded once per process, so the test's own
process keeps the default backend. Each scenario prints one JSON object of
what it observed; the test asserts on it.

    python -m tests.donation_child loop|exposure|memory-donated|memory-copied|limit|torch|onnx FOLDER
"""

from __future__ import annotations

import json
import os
import resource
import sys
import time
from typing import Any

import numpy as np

os.environ.setdefault("JAX_PLATFORMS", "cpu")

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402

import nx_hal  # noqa: E402


def _outcome(fn: Any) -> str:
    """'ok', or the error's class and message: what using a buffer did."""
    try:
        fn()
    except Exception as exc:  # noqa: BLE001 - the observation is the point
        return f"{type(exc).__name__}: {exc}"
    return "ok"


def sgd_step(params: dict[str, Any], x: Any, y: Any) -> tuple[dict[str, Any], Any]:
    """An MLP classifier's SGD step: the training step the donation tests run."""
    def loss_fn(p: dict[str, Any]) -> Any:
        logits = jax.nn.relu(x @ p["w1"]) @ p["w2"]
        return -jnp.mean(jnp.sum(y * jax.nn.log_softmax(logits), axis=-1))

    loss, grads = jax.value_and_grad(loss_fn)(params)
    return jax.tree_util.tree_map(lambda p, g: p - 0.05 * g, params, grads), loss


def problem(hidden: int = 512, steps: int = 6) -> tuple[dict[str, np.ndarray], np.ndarray, np.ndarray]:
    """Seeded initial parameters and ``steps`` batches of 128 for sgd_step."""
    rng = np.random.default_rng(0)
    params = {"w1": (rng.standard_normal((784, hidden)) * 0.05).astype(np.float32),
              "w2": (rng.standard_normal((hidden, 10)) * 0.05).astype(np.float32)}
    xs = rng.standard_normal((steps, 128, 784)).astype(np.float32)
    ys = np.eye(10, dtype=np.float32)[rng.integers(0, 10, (steps, 128))]
    return params, xs, ys


def loop(dev: nx_hal.Device) -> dict[str, Any]:
    """A donated SGD loop against JAX's own; then the donated buffers used."""
    params0, xs, ys = problem(hidden=256)
    step = jax.jit(sgd_step, donate_argnums=(0,))
    want, p = [], jax.device_put(params0)
    for x, y in zip(xs, ys, strict=True):
        p, loss = step(p, x, y)
        want.append(float(loss))
    exe = dev.compile(step.lower(params0, xs[0], ys[0]))
    params = [dev.put(params0["w1"]), dev.put(params0["w2"])]
    first = params[0]
    got = []
    for x, y in zip(xs, ys, strict=True):
        *params, loss = exe(*params, x, y)
        got.append(float(loss.to_numpy()))
    return {
        "donation": dev.attributes["donation"], "want": want, "got": got,
        "final": float(np.abs(params[0].to_numpy() - np.asarray(p["w1"])).max()),
        "shape": list(first.shape),
        "to_numpy": _outcome(first.to_numpy), "copy": _outcome(lambda: first.to_numpy(copy=True)),
        "dlpack": _outcome(lambda: np.from_dlpack(first)),
        "call": _outcome(lambda: exe(first, params[1], xs[0], ys[0])),
    }


def exposure(dev: nx_hal.Device) -> dict[str, Any]:
    """Inputs whose memory something outside PJRT sees, each through a donated
    step: is the memory still what it was, is the buffer still usable?"""
    n = 256  # 256 KiB: over the plugin's staging threshold (64 KiB)

    def f(a: Any, b: Any) -> tuple[Any, Any]:
        return a + b, a * 2

    like = np.ones((n, n), np.float32)
    exe = dev.compile(jax.jit(f, donate_argnums=(0,)).lower(like, like))
    two = dev.put(np.full((n, n), 2, np.float32))
    seen: dict[str, Any] = {}

    def run(name: str, a: Any, host: np.ndarray | None = None) -> None:
        total, double = exe(a, two)
        seen[name] = {
            "sum": float(total.to_numpy()[0, 0]), "double": float(double.to_numpy()[0, 0]),
            "host": None if host is None else float(host.min()),
            "again": _outcome(lambda: exe(a, two)),
        }

    def aligned(offset: int) -> np.ndarray:
        raw = np.zeros(n * n * 4 + 128, np.uint8)
        start = (-raw.ctypes.data) % 64 + offset
        host = raw[start:start + n * n * 4].view(np.float32).reshape(n, n)
        host[:] = 1
        return host

    a = dev.put(like.copy())
    view = a.to_numpy()  # a zero-copy view: the export is alive
    run("viewed", a, view)
    del view  # the export is gone: now it may be donated
    run("after view", a)
    host = aligned(0)
    zero_copy = dev.put(host, zero_copy=True)
    seen["is_zero_copy"] = zero_copy.is_zero_copy
    run("zero-copy put", zero_copy, host)
    host = aligned(4)
    run("staged put", dev.put(host, zero_copy=True), host)
    host = like.copy()
    run("numpy argument", host, host)
    a = dev.put(like.copy())
    total, double = exe(a, a)  # one buffer twice: PJRT cannot donate and read it
    seen["twice"] = {"sum": float(total.to_numpy()[0, 0]), "double": float(double.to_numpy()[0, 0]),
                     "again": _outcome(lambda: exe(a, two))}
    plain = dev.put(like.copy())
    run("plain", plain)
    # Forty inputs, one buffer passed at 3 and 7: past the pairwise scan's size.
    many = [np.full(4, i, np.float32) for i in range(40)]
    exe40 = dev.compile(jax.jit(lambda *ps: tuple(p * 2 for p in ps), donate_argnums=tuple(range(40))).lower(*many))
    handles = [dev.put(a) for a in many]
    handles[7] = handles[3]
    doubled = [float(o.to_numpy()[0]) for o in exe40(*handles)]
    seen["forty"] = {"doubled": doubled, "shared": _outcome(handles[3].to_numpy),
                     "first": _outcome(handles[0].to_numpy)}
    return seen


def memory(dev: nx_hal.Device, donate: bool) -> dict[str, Any]:
    """The most resident memory above the loop's start while a step's old and
    new 64 MiB parameter could both be alive (right after each call)."""
    def step(p: Any, lr: Any) -> tuple[Any, Any]:
        # The second output reads the new parameter, not the old: with the
        # old one also read after the update XLA must keep it, and copies.
        new = p - lr * jnp.tanh(p)
        return new, new[0, 0]

    param = np.full((4096, 4096), 0.5, np.float32)
    lr = np.float32(0.01)
    exe = dev.compile(jax.jit(step, donate_argnums=(0,) if donate else ()).lower(param, lr))
    p = dev.put(param)
    del param
    p, s = exe(p, lr)  # warm-up: the program's first run
    s.to_numpy()
    page = resource.getpagesize()

    def rss() -> int:
        with open("/proc/self/statm") as fh:
            return int(fh.read().split()[1]) * page

    # The first parameter's memory may be freed after the call that replaced
    # it returned (PJRT releases a buffer once nothing uses it): the start is
    # the resident memory once it no longer falls.
    start, steady, deadline = rss(), 0, time.monotonic() + 5
    while steady < 5 and time.monotonic() < deadline:
        time.sleep(0.02)
        now = rss()
        steady = steady + 1 if now >= start else 0
        start = min(start, now)
    peak = 0
    for _ in range(5):
        out, s = exe(p, lr)
        s.to_numpy()  # the step has run: its output is written
        peak = max(peak, rss() - start)
        p = out
    return {"donation": dev.attributes["donation"], "peak_growth": peak, "param_bytes": p.nbytes,
            "value": float(p.to_numpy()[0, 0])}


def state_model(n: int = 64) -> Any:
    """An ONNX step with a state: out = x @ state, new_state = state / 2 + x."""
    from onnx import TensorProto, helper

    def port(name: str) -> Any:
        return helper.make_tensor_value_info(name, TensorProto.FLOAT, [n, n])

    graph = helper.make_graph(
        [helper.make_node("MatMul", ["x", "state"], ["out"]), helper.make_node("Mul", ["state", "half"], ["s2"]),
         helper.make_node("Add", ["s2", "x"], ["new_state"])],
        "step", [port("x"), port("state")], [port("out"), port("new_state")],
        [helper.make_tensor("half", TensorProto.FLOAT, [], [0.5])])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def onnx_state(dev: nx_hal.Device, folder: str) -> dict[str, Any]:
    """``donate_argnums`` on an ONNX model, by name and by position, from a
    file compiled also without it; and on StableHLO text whose donated input
    no output matches."""
    import warnings

    import onnx

    path = os.path.join(folder, "step.onnx")
    onnx.save(state_model(), path)
    rng = np.random.default_rng(0)
    x = rng.standard_normal((64, 64)).astype(np.float32)
    s0 = rng.standard_normal((64, 64)).astype(np.float32)
    seen: dict[str, Any] = {}
    for label, donate in (("plain", None), ("by name", "state"), ("by position", (1,))):
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always", UserWarning)
            exe = dev.compile(path) if donate is None else dev.compile(path, donate_argnums=donate)
        state, want, errors = dev.put(s0), s0, []
        for _ in range(3):
            old = state
            out, state = exe(x, state)
            errors.append(float(np.abs(out.to_numpy() - x @ want).max()))
            want = (want / 2 + x).astype(np.float32)
            errors.append(float(np.abs(state.to_numpy() - want).max()))
        seen[label] = {"errors": errors, "old": _outcome(old.to_numpy),
                       "warnings": [str(w.message) for w in caught if issubclass(w.category, UserWarning)]}
    text = """func.func @main(%a: tensor<4xf32>, %b: tensor<2xf32>) -> tensor<4xf32> {
      %0 = stablehlo.add %a, %a : tensor<4xf32>
      return %0 : tensor<4xf32>
    }"""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", UserWarning)
        exe = dev.compile(text, donate_argnums=(0, 1))
    a, b = dev.put(np.arange(4, dtype=np.float32)), dev.put(np.ones(2, np.float32))
    (doubled,) = exe(a, b)
    seen["text"] = {"doubled": doubled.to_numpy().tolist(), "a": _outcome(a.to_numpy), "b": _outcome(b.to_numpy),
                    "warnings": [str(w.message) for w in caught if issubclass(w.category, UserWarning)]}
    return seen


def torch_state(dev: nx_hal.Device) -> dict[str, Any]:
    """``donate_argnums`` by name on a torch.nn.Module with a state."""
    import torch

    class Step(torch.nn.Module):
        def forward(self, x: Any, state: Any) -> tuple[Any, Any]:
            return x @ state, state * 0.5 + x

    x, s = torch.randn(16, 16, generator=torch.Generator().manual_seed(0)), torch.randn(16, 16)
    exe = dev.compile(Step(), example_args=(x, s), donate_argnums="state")
    state = dev.put(s.numpy())
    out, new = exe(x.numpy(), state)
    return {"inputs": [i.name for i in exe.inputs], "out": float(np.abs(out.to_numpy() - (x @ s).numpy()).max()),
            "new": float(np.abs(new.to_numpy() - (s * 0.5 + x).numpy()).max()), "old": _outcome(state.to_numpy)}


def limit(dev: nx_hal.Device) -> dict[str, Any]:
    """Six donated steps of a 64 MiB parameter, every old handle kept, under
    the device memory limit the parent set: the donated inputs' memory is
    counted once, by the outputs that took it."""
    def step(p: Any, lr: Any) -> tuple[Any, Any]:
        new = p - lr * jnp.tanh(p)
        return new, new[0, 0]

    param, lr = np.full((4096, 4096), 0.5, np.float32), np.float32(0.01)
    exe = dev.compile(jax.jit(step, donate_argnums=(0,)).lower(param, lr))
    p, kept, steps = dev.put(param), [], 0
    try:
        for steps in range(6):  # noqa: B007 - how far it got is the observation
            kept.append(p)
            p, s = exe(p, lr)
        steps, error = 6, "ok"
    except nx_hal.NxHalError as exc:
        error = f"{type(exc).__name__}: {exc}"
    return {"steps": steps, "error": error, "value": float(p.to_numpy()[0, 0])}


def main() -> int:
    dev = nx_hal.device("tpu:cpu")
    scenario = sys.argv[1]
    if scenario == "loop":
        out = loop(dev)
    elif scenario == "exposure":
        out = exposure(dev)
    elif scenario == "limit":
        out = limit(dev)
    elif scenario == "torch":
        out = torch_state(dev)
    elif scenario == "onnx":
        out = onnx_state(dev, sys.argv[2])
    else:
        out = memory(dev, donate=scenario == "memory-donated")
    print(json.dumps(out))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
