"""PyTorch straight in (issue #31): a torch.nn.Module with example inputs, a
torch.export.ExportedProgram, and torch.compile(model, backend="nx_hal"),
on npu:cpu and tpu:cpu, against PyTorch's own output. Needs torch,
torchvision and transformers (tests/models/requirements.txt, which .ci/models
installs): without them these tests skip, unless NXHAL_REQUIRE_MODELS=1."""

from __future__ import annotations

import os
import warnings
from typing import Any

import numpy as np
import pytest

import nx_hal
from nx_hal.errors import InvalidArgumentError
from tests.plugin_env import device_available

if os.environ.get("NXHAL_REQUIRE_MODELS") == "1":
    import torch
else:
    torch = pytest.importorskip("torch")
    pytest.importorskip("torchvision")
    pytest.importorskip("transformers")
    pytest.importorskip("onnxscript")

from tests.models import export  # noqa: E402

NPU, TPU = "npu:cpu", "tpu:cpu"
RTOL = 1e-4  # of the output's largest magnitude, as the issue asks


def _on(*selectors: str) -> list[Any]:
    return [pytest.param(s, marks=pytest.mark.skipif(not device_available(s), reason=f"no {s} device"))
            for s in selectors]


def _close(got: Any, want: Any) -> None:
    got, want = np.asarray(got), np.asarray(want)
    assert got.shape == want.shape
    assert float(np.abs(got - want).max()) <= RTOL * float(np.abs(want).max())


@pytest.fixture(scope="module")
def resnet() -> tuple[Any, Any, np.ndarray]:
    model, inputs = export._resnet18()
    (x,) = inputs.values()
    with torch.no_grad():
        return model, x, model(x).numpy()


@pytest.fixture(scope="module")
def gpt2() -> tuple[Any, tuple[Any, Any], np.ndarray]:
    model, inputs = export._gpt2()
    args = (inputs["input_ids"], inputs["attention_mask"])
    with torch.no_grad():
        return model, args, model(*args).numpy()


@pytest.mark.parametrize("selector", _on(NPU, TPU))
def test_resnet18_as_a_module_and_as_an_export(selector: str, resnet: tuple[Any, Any, np.ndarray]) -> None:
    model, x, want = resnet
    dev = nx_hal.device(selector)
    exe = dev.compile(model, example_args=(x,))
    assert [s.name for s in exe.inputs] == ["x"]  # the forward parameter's name
    _close(torch.from_dlpack(exe(x.numpy())[0]), want)
    exe = dev.compile(torch.export.export(model, (x,)))
    _close(torch.from_dlpack(exe(x.numpy())[0]), want)


@pytest.mark.parametrize("selector", _on(NPU, TPU))
def test_a_small_decoder_as_a_module(selector: str, gpt2: tuple[Any, tuple[Any, Any], np.ndarray]) -> None:
    model, args, want = gpt2
    exe = nx_hal.device(selector).compile(model, example_args=args)
    assert [s.name for s in exe.inputs] == ["input_ids", "attention_mask"]
    _close(exe(*(a.numpy() for a in args))[0].to_numpy(), want)


def test_torch_compile_runs_resnet18_on_the_best_device(resnet: tuple[Any, Any, np.ndarray]) -> None:
    model, x, want = resnet
    torch._dynamo.reset()
    with torch.no_grad(), warnings.catch_warnings():
        warnings.simplefilter("error", RuntimeWarning)  # a graph left to PyTorch would warn
        warnings.simplefilter("ignore", nx_hal.FallbackWarning)
        got = torch.compile(model, backend="nx_hal")(x)
    _close(got, want)


@pytest.mark.parametrize("selector", _on(NPU, TPU))
def test_torch_compile_runs_the_decoder(selector: str, gpt2: tuple[Any, tuple[Any, Any], np.ndarray]) -> None:
    model, args, want = gpt2
    torch._dynamo.reset()
    with torch.no_grad(), warnings.catch_warnings():
        warnings.simplefilter("error", RuntimeWarning)  # a graph left to PyTorch would warn
        got = torch.compile(model, backend="nx_hal", options={"device": selector})(*args)
    _close(got, want)


class _Breaks(torch.nn.Module):
    """Two graph breaks: a print and a branch on a tensor's value."""

    def __init__(self) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.a, self.b = torch.nn.Linear(8, 16), torch.nn.Linear(16, 4)

    def forward(self, x: Any) -> Any:
        h = torch.relu(self.a(x))
        print("a graph break")
        if h.sum().item() > 0:  # data-dependent: Dynamo breaks the graph here too
            h = h * 2
        return self.b(h)


@pytest.mark.parametrize("selector", _on(NPU, TPU))
def test_torch_compile_with_graph_breaks(selector: str) -> None:
    model = _Breaks().eval()
    x = torch.randn(3, 8, generator=torch.Generator().manual_seed(1))
    torch._dynamo.reset()
    with torch.no_grad(), warnings.catch_warnings():
        warnings.simplefilter("error", RuntimeWarning)
        want = model(x)
        got = torch.compile(model, backend="nx_hal", options={"device": selector})(x)
    _close(got, want)


def test_a_modules_state_is_donated_by_name() -> None:
    """donate_argnums names a forward parameter: on an XLA CPU that donates
    (tests/donating.py) the state's old Buffer is gone after the call."""
    from tests.donating import DONATED, donating

    seen = donating("torch")
    assert seen["inputs"] == ["x", "state"]
    assert seen["out"] < 1e-4 and seen["new"] < 1e-5, seen
    assert DONATED in seen["old"]


def test_what_cannot_run_is_said() -> None:
    model = _Breaks().eval()
    x = torch.randn(3, 8)
    with pytest.raises(InvalidArgumentError, match=r"compiles with example inputs: compile\(model, example_args"):
        nx_hal.compile(model)
    with pytest.raises(InvalidArgumentError, match="torch.export cannot capture _Breaks: .*backend='nx_hal'"):
        nx_hal.compile(model, example_args=(x,))
    with pytest.raises(InvalidArgumentError, match="example_args are a torch.nn.Module's example inputs"):
        nx_hal.compile(b"\x08\x07", example_args=(x,))
    # Gradients: inference only, so the graph stays in PyTorch, with a warning.
    linear = torch.nn.Linear(4, 2)
    torch._dynamo.reset()
    with pytest.warns(RuntimeWarning, match="needs gradients, and nx_hal runs inference only"):
        out = torch.compile(linear, backend="nx_hal")(torch.randn(2, 4))
    assert out.requires_grad
    torch._dynamo.reset()
    # PyTorch wraps a backend's error in its own, ours inside.
    with pytest.raises(torch._dynamo.exc.BackendCompilerFailed, match="unknown option.* precision"):
        torch.compile(linear, backend="nx_hal", options={"precision": "f16"})(torch.randn(2, 4))
