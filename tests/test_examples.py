"""The example models that ship with nx_hal (nx_hal/examples/) and
`nx-hal run --example NAME`: the files are what examples/make_models.py
writes, their references agree with onnxruntime, and the command checks a
device against them, failing when the output is wrong."""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path

import numpy as np
import pytest

from nx_hal import examples
from nx_hal.cli.app import main
from tests.plugin_env import installed_device

ROOT = Path(__file__).resolve().parent.parent


def _make_models() -> object:
    spec = importlib.util.spec_from_file_location("make_models", ROOT / "examples" / "make_models.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


@pytest.mark.parametrize("name", examples.NAMES)
def test_the_shipped_files_are_what_make_models_writes(name: str) -> None:
    """A committed model or reference edited by hand (or left stale) fails here."""
    onnx = pytest.importorskip("onnx")
    make = _make_models()
    build, _, _ = make.MODELS[name]  # type: ignore[attr-defined]
    assert examples.path(name).read_bytes() == build().SerializeToString()
    text = make.reference_text(name, onnx.load(examples.path(name)))  # type: ignore[attr-defined]
    assert (examples.path(name).parent / f"{name}_reference.txt").read_text() == text


@pytest.mark.parametrize("name", examples.NAMES)
def test_each_reference_agrees_with_onnxruntime(name: str) -> None:
    """The references are numpy's (float64, written for this repository):
    onnxruntime, computing from the same file, is the independent check."""
    ort = pytest.importorskip("onnxruntime")
    inputs, outputs = examples.reference(name)
    session = ort.InferenceSession(str(examples.path(name)), providers=["CPUExecutionProvider"])
    assert [o.name for o in session.get_outputs()] == list(outputs)
    for got, want in zip(session.run(None, inputs), outputs.values(), strict=True):
        assert got.shape == want.shape
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)
        assert np.std(want) > 1e-3  # not a constant output a wrong model would also give


def test_the_repository_paths_lead_to_the_shipped_files() -> None:
    """examples/mlp.onnx (the README's first command) is the packaged model."""
    for file in ("mlp.onnx", "mlp_reference.txt"):
        assert (ROOT / "examples" / file).read_bytes() == (examples.path("mlp").parent / file).read_bytes()


def test_unknown_example_names_the_ones_there_are() -> None:
    with pytest.raises(ValueError, match=r"no example 'mpl' \(examples: mlp, cnn, attention\)"):
        examples.path("mpl")


def _run(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, dict[str, object]]:
    status = main(["run", *args, "--iterations", "2", "--json", "--no-progress"])
    out = capsys.readouterr().out
    return status, json.loads(out)


@pytest.mark.parametrize("selector", ["npu:cpu", "tpu:cpu"])
@pytest.mark.parametrize("name", examples.NAMES)
def test_run_example_matches_its_reference(capsys: pytest.CaptureFixture[str], name: str, selector: str) -> None:
    installed_device(selector)
    status, data = _run(capsys, "--example", name, "--device", selector)
    assert status == 0, data
    reference = data["reference"]
    assert isinstance(reference, dict) and reference["matches"] is True
    assert 0 <= reference["max_abs_error"] < 1e-4  # float32 on a CPU: far inside the tolerance
    assert [i["values"] for i in data["inputs"]] == ["given"]  # type: ignore[attr-defined]


def test_a_wrong_output_does_not_match(capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    """The check can fail: a reference one ulp-scale step off passes, one
    clearly off fails with exit status 1 and says so."""
    installed_device("npu:cpu")
    real = examples.reference

    def off_by(delta: float) -> object:
        def reference(name: str) -> tuple[dict[str, np.ndarray], dict[str, np.ndarray]]:
            inputs, outputs = real(name)
            return inputs, {k: v + np.float32(delta) for k, v in outputs.items()}
        return reference

    monkeypatch.setattr(examples, "reference", off_by(1e-6))
    assert _run(capsys, "--example", "mlp", "--device", "npu:cpu")[0] == 0
    monkeypatch.setattr(examples, "reference", off_by(0.05))
    status = main(["run", "--example", "mlp", "--device", "npu:cpu", "--iterations", "1", "--no-progress"])
    out = capsys.readouterr().out
    assert status == 1
    assert "reference: DOES NOT MATCH numpy's output (max abs error 5.0e-02" in out


def test_given_inputs_replace_the_reference_and_its_check(capsys: pytest.CaptureFixture[str],
                                                          tmp_path: Path) -> None:
    installed_device("npu:cpu")
    x = tmp_path / "x.npy"
    np.save(x, np.zeros((1, 64), np.float32))
    status, data = _run(capsys, "--example", "mlp", "--device", "npu:cpu", "--input", f"image={x}")
    assert status == 0 and "reference" not in data


@pytest.mark.parametrize(("args", "message"), [
    ([], "give a model file, or --example NAME (mlp, cnn, attention)"),
    ([str(ROOT / "examples" / "mlp.onnx"), "--example", "mlp"], "give a model file or --example mlp, not both"),
    (["--example", "mpl"], "argument --example: invalid choice: 'mpl'"),
])
def test_example_usage_mistakes(capsys: pytest.CaptureFixture[str], args: list[str], message: str) -> None:
    assert main(["run", *args, "--no-progress"]) == 2
    assert message in capsys.readouterr().err
