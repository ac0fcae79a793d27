"""ONNX → StableHLO conversion (nx_hal.onnx.convert) against onnxruntime.

Outputs are run by StableHLO's reference interpreter (bundled with torch-mlir),
and on XLA CPU through nx_hal when the tpu plugin and xla-cpu-pjrt are there.
"""

from __future__ import annotations

import importlib.util
import json
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest

try:
    import torch_mlir  # noqa: F401
except ImportError as exc:  # absent, or a wheel that does not load here
    pytest.skip(f"ONNX → StableHLO needs torch-mlir (pip install torch-mlir): {exc}", allow_module_level=True)
onnx = pytest.importorskip("onnx", reason="needs onnx")
ort = pytest.importorskip("onnxruntime", reason="needs onnxruntime (the oracle)")

from onnx import helper  # noqa: E402

from nx_hal import DeadlineExceededError, InvalidArgumentError  # noqa: E402
from nx_hal.onnx.convert import (  # noqa: E402
    ConversionError,
    ConversionResult,
    convert_cli,
    onnx_to_stablehlo,
    parse_input_shapes,
    summary_text,
    target_version_of,
)

TARGET = "1.9.0"  # an older StableHLO than torch-mlir's, as a PJRT plugin would state
_OP = re.compile(r'^\s*(?:%[^=]+=\s*)?"?([a-z_]+\.[a-z_.]+)')


_RNG = np.random.default_rng(0)

from tests.onnx_models import (  # noqa: E402
    _vi,
    _w,
    cnn,
    if_model,
    maxpool_uint8,
    mlp,
    qdq_int8,
    resize,
    transformer_block,
)
from tests.store_util import entries  # noqa: E402

# ---------------------------------------------------------------- helpers


def ops_of(text: str) -> set[str]:
    return {m.group(1) for line in text.splitlines() if (m := _OP.match(line))}


def walked_ops(text: str) -> set[str]:
    """Every operation in the module, nested regions included (the pretty
    printer hides ops such as a reduce body's ``stablehlo.maximum``)."""
    from torch_mlir import ir
    from torch_mlir._mlir_libs import _stablehlo as stablehlo

    context = ir.Context()
    stablehlo.register_dialect(context)
    names: set[str] = set()

    def walk(op: Any) -> None:
        for region in op.regions:
            for block in region.blocks:
                for inner in block.operations:
                    names.add(inner.operation.name)
                    walk(inner.operation)

    with context:
        walk(ir.Module.parse(text).operation)
    return names


def assert_only_stablehlo(result: ConversionResult) -> None:
    names = walked_ops(result.text)
    assert ops_of(result.text) <= names
    stray = {o for o in names if not o.startswith(("stablehlo.", "func."))}
    assert not stray, f"non-StableHLO ops in output: {stray}"
    assert "func.func @main" in result.text
    assert set(result.stablehlo_ops) == {o for o in names if o.startswith("stablehlo.")}


def interpret(module: bytes, inputs: list[np.ndarray]) -> list[np.ndarray]:
    """Runs a module with StableHLO's reference interpreter."""
    from torch_mlir import ir
    from torch_mlir._mlir_libs import _stablehlo as stablehlo

    context = ir.Context()
    stablehlo.register_dialect(context)
    stablehlo.register_interpreter_dialect(context)
    with context:
        if module.startswith(b"ML\xefR"):
            mod = stablehlo.deserialize_portable_artifact(context, module)
        else:
            mod = ir.Module.parse(module.decode())
        outs = stablehlo.eval_module(mod, [ir.DenseElementsAttr.get(np.ascontiguousarray(x)) for x in inputs])
        return [np.array(o) for o in outs]


def reference(model: bytes, inputs: dict[str, np.ndarray]) -> list[np.ndarray]:
    session = ort.InferenceSession(model, providers=["CPUExecutionProvider"])
    return [np.asarray(o) for o in session.run(None, inputs)]


@pytest.fixture
def cache(tmp_path: Path) -> Path:
    """The store's root: conversions go to its "stablehlo" section."""
    return tmp_path / "cache"


# ---------------------------------------------------------------- conversions

# name -> (model builder, input_shapes for the converter, shapes of the inputs fed)
CASES: dict[str, tuple[Callable[[], bytes], dict[str, tuple[int, ...]] | None, dict[str, tuple[int, ...]]]] = {
    "mlp": (lambda: mlp(), {"x": (3, 4)}, {"x": (3, 4)}),
    "cnn": (cnn, None, {"x": (2, 3, 8, 8)}),
    "transformer": (transformer_block, None, {"x": (2, 4, 8)}),
}


@pytest.mark.parametrize("name", sorted(CASES))
def test_converts_and_matches_onnxruntime(name: str, cache: Path) -> None:
    build, shapes, feeds = CASES[name]
    model = build()
    result = onnx_to_stablehlo(model, input_shapes=shapes, target_version=TARGET, cache_dir=cache)
    assert_only_stablehlo(result)
    assert result.portable and result.stablehlo_version == TARGET
    assert not result.cache_hit
    inputs = {k: _RNG.standard_normal(v).astype(np.float32) for k, v in feeds.items()}
    expected = reference(model, inputs)
    got = interpret(result.module, list(inputs.values()))
    assert len(got) == len(expected)
    for g, e in zip(got, expected, strict=False):
        assert g.shape == e.shape
        np.testing.assert_allclose(g, e, rtol=1e-4, atol=1e-5)


def test_cnn_and_transformer_ops_reported(cache: Path) -> None:
    cnn_result = onnx_to_stablehlo(cnn(), cache_dir=cache)
    assert {"Conv", "BatchNormalization", "MaxPool", "GlobalAveragePool", "Gemm"} <= set(cnn_result.onnx_ops)
    assert cnn_result.stablehlo_ops.get("stablehlo.convolution", 0) == 1
    block = onnx_to_stablehlo(transformer_block(), cache_dir=cache)
    assert {"Softmax", "LayerNormalization", "Erf"} <= set(block.onnx_ops)
    assert block.stablehlo_ops["stablehlo.dot_general"] >= 6


def test_bytecode_for_target_version(cache: Path) -> None:
    model = transformer_block()
    result = onnx_to_stablehlo(model, target_version=TARGET, bytecode=True, cache_dir=cache)
    assert result.bytecode and result.module.startswith(b"ML\xefR")
    x = _RNG.standard_normal((2, 4, 8)).astype(np.float32)
    np.testing.assert_allclose(interpret(result.module, [x])[0], reference(model, {"x": x})[0],
                               rtol=1e-4, atol=1e-5)
    with pytest.raises(InvalidArgumentError):
        _ = result.text


def test_target_newer_than_torch_mlir_is_capped(cache: Path) -> None:
    result = onnx_to_stablehlo(mlp(2), target_version="99.0.0", cache_dir=cache)
    assert result.stablehlo_version not in (None, "99.0.0")
    assert any("newer" in n for n in result.notes)


def test_target_older_than_minimum_is_an_error(cache: Path) -> None:
    with pytest.raises(ConversionError, match="older") as err:
        onnx_to_stablehlo(mlp(2), target_version="0.0.1", cache_dir=cache)
    assert err.value.reason == "serialize"


def test_text_without_target_is_marked_unversioned(cache: Path) -> None:
    result = onnx_to_stablehlo(mlp(2), cache_dir=cache)
    assert result.stablehlo_version is None and not result.portable
    assert any("not version-checked" in n for n in result.notes)


# ---------------------------------------------------------------- unsupported


# With nx_hal.onnx.rewrites (issue #13) the converter writes Resize and Q/DQ
# in operators the lowering has, before lowering: those models convert.
REWRITES = importlib.util.find_spec("nx_hal.onnx.rewrites") is not None


@pytest.mark.parametrize(
    ("build", "operators", "rewritten"),
    [
        (resize, {"Resize"}, REWRITES),
        (if_model, {"If"}, False),  # a condition computed from the input: no rewrite either way
        (qdq_int8, {"QuantizeLinear", "DequantizeLinear"}, REWRITES),
    ],
    ids=["resize", "if", "qdq-int8"],
)
def test_unsupported_operator_is_named(build: Any, operators: set[str], rewritten: bool, cache: Path) -> None:
    if rewritten:
        result = onnx_to_stablehlo(build(), target_version=TARGET, cache_dir=cache)
        assert any(note.startswith("rewritten into standard operators") for note in result.notes), result.notes
        return
    with pytest.raises(ConversionError) as err:
        onnx_to_stablehlo(build(), target_version=TARGET, cache_dir=cache)
    assert err.value.reason == "unsupported-operator"
    assert set(err.value.operators) & operators, err.value.operators
    assert set(err.value.operators) <= operators | {"MatMul"}
    for op in err.value.operators:
        assert op in str(err.value)
    # The lowering says what it left; a rewrite that refuses before lowering names the node instead.
    assert err.value.leftover_ops or "If node" in str(err.value)
    assert err.value.code == "INVALID_ARGUMENT"
    assert not entries(cache, "stablehlo"), "a failed conversion must not be cached"


def test_onnxruntime_quantize_static_model_is_refused(tmp_path: Path, cache: Path) -> None:
    quantization = pytest.importorskip("onnxruntime.quantization", reason="needs onnxruntime.quantization")
    graph = helper.make_graph(
        [helper.make_node("MatMul", ["x", "W"], ["m"]), helper.make_node("Relu", ["m"], ["y"])], "g",
        [_vi("x", [2, 4])], [_vi("y", [2, 3])], [_w("W", (4, 3))],
    )
    source, quantized = tmp_path / "f32.onnx", tmp_path / "int8.onnx"
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), str(source))

    from onnxruntime.quantization import CalibrationDataReader

    class Reader(CalibrationDataReader):  # type: ignore[misc]  # onnxruntime ships no type information
        def __init__(self) -> None:
            self.batches = iter([{"x": _RNG.standard_normal((2, 4)).astype(np.float32)} for _ in range(4)])

        def get_next(self) -> dict[str, np.ndarray] | None:
            return next(self.batches, None)

    quantization.quantize_static(str(source), str(quantized), Reader(), quant_format=quantization.QuantFormat.QDQ,
                                 activation_type=quantization.QuantType.QInt8,
                                 weight_type=quantization.QuantType.QInt8)
    if REWRITES:  # Q/DQ written as float arithmetic before lowering
        assert onnx_to_stablehlo(quantized.read_bytes(), cache_dir=cache).stablehlo_ops
        return
    with pytest.raises(ConversionError, match="int8 QDQ") as err:
        onnx_to_stablehlo(quantized.read_bytes(), cache_dir=cache)
    assert err.value.operators
    assert set(err.value.operators) <= {"QuantizeLinear", "DequantizeLinear", "MatMul", "Relu"}
    assert err.value.operators[0] in ("QuantizeLinear", "DequantizeLinear")


def test_converter_crash_is_an_error_and_caller_survives(cache: Path) -> None:
    with pytest.raises(ConversionError, match=r"converter crashed \(SIGSEGV\)") as err:
        onnx_to_stablehlo(maxpool_uint8(), cache_dir=cache)
    assert err.value.reason == "crash"
    assert "MaxPool" in str(err.value) and "torch-backend-to-stablehlo-backend-pipeline" in str(err.value)
    # Still alive, and the converter still works.
    assert onnx_to_stablehlo(mlp(2), cache_dir=cache, use_cache=False).stablehlo_ops


def test_timeout_is_deadline_exceeded(cache: Path) -> None:
    with pytest.raises(DeadlineExceededError, match="longer than"):
        onnx_to_stablehlo(mlp(2), cache_dir=cache, timeout=0.05)


@pytest.mark.parametrize("data", [b"", b"not an onnx model at all", b"\x08\x07\x12\x03abc\xff\xff"])
def test_malformed_bytes(data: bytes, cache: Path) -> None:
    with pytest.raises(ConversionError) as err:
        onnx_to_stablehlo(data, cache_dir=cache)
    assert err.value.reason == "malformed"
    assert "ONNX" in str(err.value)


def test_missing_torch_mlir_is_unavailable(cache: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import importlib.util

    from nx_hal import UnavailableError
    from nx_hal.onnx import convert

    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec",  # the module object convert calls through
                        lambda name, *a: None if name == "torch_mlir" else real(name, *a))
    assert "pip install torch-mlir" in (convert.converter_available() or "")
    with pytest.raises(UnavailableError, match="torch-mlir"):
        onnx_to_stablehlo(mlp(2), cache_dir=cache)


def test_bad_arguments(cache: Path) -> None:
    with pytest.raises(InvalidArgumentError, match="target_version"):
        onnx_to_stablehlo(mlp(2), target_version="latest", cache_dir=cache)
    for platform in ("CPU", "", "cpu; rm", 3):
        with pytest.raises(InvalidArgumentError, match="platform"):
            onnx_to_stablehlo(mlp(2), platform=platform, cache_dir=cache)  # type: ignore[arg-type]
    with pytest.raises(InvalidArgumentError, match="input_shapes"):
        onnx_to_stablehlo(mlp(), input_shapes={"x": "abc"}, cache_dir=cache)  # type: ignore[dict-item]


# ---------------------------------------------------------------- dynamic shapes


def test_dynamic_batch_without_shapes_names_the_input(cache: Path) -> None:
    with pytest.raises(ConversionError, match=r"input 'x' dim 0 \('N'\) is dynamic") as err:
        onnx_to_stablehlo(mlp(), cache_dir=cache)
    assert err.value.reason == "dynamic-shape"


def test_dynamic_batch_fixed_by_input_shapes(cache: Path) -> None:
    result = onnx_to_stablehlo(mlp(), input_shapes={"x": (5, 4)}, cache_dir=cache)
    assert "tensor<5x4xf32>" in result.text and "tensor<5x3xf32>" in result.text
    assert any("opset upgraded from 13 to 17" in n for n in result.notes)


@pytest.mark.parametrize(
    ("shapes", "message"),
    [
        ({"x": (5, 7)}, r"input 'x' dim 1 is fixed to 4 in the model but input_shapes gives 7"),
        ({"x": (5,)}, r"input 'x' has rank 2"),
        ({"y": (1, 4)}, r"unknown input\(s\) 'y'"),
    ],
)
def test_wrong_input_shapes(shapes: dict[str, tuple[int, ...]], message: str, cache: Path) -> None:
    with pytest.raises(ConversionError, match=message):
        onnx_to_stablehlo(mlp(), input_shapes=shapes, cache_dir=cache)


# ---------------------------------------------------------------- cache


def test_cache_hit_on_second_conversion(cache: Path) -> None:
    model = transformer_block()
    first = onnx_to_stablehlo(model, target_version=TARGET, cache_dir=cache)
    second = onnx_to_stablehlo(model, target_version=TARGET, cache_dir=cache)
    assert not first.cache_hit and second.cache_hit
    assert second.module == first.module and second.cache_key == first.cache_key
    assert second.stablehlo_ops == first.stablehlo_ops
    assert second.seconds < first.seconds / 5, (first.seconds, second.seconds)
    # Another target version or shape is another entry.
    other = onnx_to_stablehlo(model, target_version="1.8.0", cache_dir=cache)
    assert not other.cache_hit and other.cache_key != first.cache_key
    assert not list(cache.rglob("*.tmp")), "temporary files left behind"
    assert len(entries(cache, "stablehlo")) == 2


def _depthwise_model() -> bytes:
    rng = np.random.default_rng(5)
    graph = helper.make_graph(
        [helper.make_node("Conv", ["x", "w", "b"], ["y"], group=8, pads=[1, 1, 1, 1])], "depthwise",
        [helper.make_tensor_value_info("x", onnx.TensorProto.FLOAT, [1, 8, 10, 10])],
        [helper.make_tensor_value_info("y", onnx.TensorProto.FLOAT, [1, 8, 10, 10])],
        [onnx.numpy_helper.from_array(rng.standard_normal((8, 1, 3, 3)).astype(np.float32), "w"),
         onnx.numpy_helper.from_array(rng.standard_normal(8).astype(np.float32), "b")])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    return bytes(model.SerializeToString())


def test_platform_picks_rewrites_and_is_part_of_the_key(cache: Path) -> None:
    """A depthwise Conv converted for a CPU is a sum over its kernel's taps
    (XLA CPU's grouped convolution is slow); for any platform it stays a
    convolution. Both compute onnxruntime's values, and each platform is
    its own cache entry; without one the key is what it always was."""
    model = _depthwise_model()
    x = np.random.default_rng(6).standard_normal((1, 8, 10, 10)).astype(np.float32)
    want = reference(model, {"x": x})[0]
    anywhere = onnx_to_stablehlo(model, cache_dir=cache)
    cpu = onnx_to_stablehlo(model, cache_dir=cache, platform="cpu")
    gpu = onnx_to_stablehlo(model, cache_dir=cache, platform="gpu")
    assert "stablehlo.convolution" in anywhere.stablehlo_ops and "stablehlo.convolution" in gpu.stablehlo_ops
    assert "stablehlo.convolution" not in cpu.stablehlo_ops and "stablehlo.dot_general" not in cpu.stablehlo_ops
    assert "stablehlo.multiply" in cpu.stablehlo_ops
    assert len({anywhere.cache_key, cpu.cache_key, gpu.cache_key}) == 3
    assert onnx_to_stablehlo(model, cache_dir=cache, platform="cpu").cache_hit
    for result in (anywhere, cpu):
        np.testing.assert_allclose(interpret(result.module, [x])[0], want, rtol=1e-5, atol=1e-5)


def test_torn_cache_entry_is_converted_again(cache: Path) -> None:
    model = mlp(2)
    first = onnx_to_stablehlo(model, cache_dir=cache)
    (entry,) = entries(cache, "stablehlo")
    entry.write_bytes(first.module[: len(first.module) // 2])
    again = onnx_to_stablehlo(model, cache_dir=cache)
    assert not again.cache_hit and again.module == first.module


def test_default_cache_dir_follows_xdg(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    onnx_to_stablehlo(mlp(2))
    assert entries(tmp_path / "nx_hal", "stablehlo")


# ---------------------------------------------------------------- CLI helpers


def test_convert_cli_writes_module(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    source = tmp_path / "model.onnx"
    source.write_bytes(mlp())
    out = tmp_path / "model.mlir"
    summary = convert_cli(source, out, target=TARGET, input_shapes=parse_input_shapes(["x=2,4"]))
    assert (summary["output"], summary["stablehlo_version"], summary["bytecode"]) == (str(out), "1.9.0", False)
    assert "Gemm" in summary["onnx_ops"] and summary["bytes"] == len(out.read_bytes())
    assert summary["stablehlo_ops"] and all(n > 0 for n in summary["stablehlo_ops"].values())
    text = summary_text(summary)
    assert text.startswith(f"wrote {out} ({summary['bytes']} bytes, MLIR text, StableHLO 1.9.0, ") and "Gemm" in text
    assert ops_of(out.read_text()) and "tensor<2x4xf32>" in out.read_text()
    out_bc = tmp_path / "model.mlirbc"
    convert_cli(source, out_bc, target=TARGET, bytecode=True, input_shapes={"x": (2, 4)})
    assert out_bc.read_bytes().startswith(b"ML\xefR")
    with pytest.raises(InvalidArgumentError, match="cannot read"):
        convert_cli(tmp_path / "missing.onnx", out)


def test_parse_input_shapes() -> None:
    assert parse_input_shapes(["x=1,3,224,224", "m=1x128"]) == {"x": (1, 3, 224, 224), "m": (1, 128)}
    with pytest.raises(InvalidArgumentError, match="NAME=D0"):
        parse_input_shapes(["x:1,2"])


def test_target_version_of() -> None:
    class Dev:
        attributes = {"stablehlo_version": "1.9.3"}

    assert target_version_of(Dev()) == "1.9.3"
    assert target_version_of(object()) is None


# ---------------------------------------------------------------- XLA CPU (optional)


def _xla_cpu_device() -> Any:
    pytest.importorskip("nx_hal_tpu", reason="the tpu plugin is not installed")
    import nx_hal

    try:
        return nx_hal.device("tpu:cpu")
    except nx_hal.NxHalError as exc:
        pytest.skip(f"no XLA CPU device: {exc}")


@pytest.mark.parametrize("name", sorted(CASES))
def test_runs_on_xla_cpu(name: str, cache: Path) -> None:
    dev = _xla_cpu_device()
    build, shapes, feeds = CASES[name]
    model = build()
    result = onnx_to_stablehlo(model, input_shapes=shapes, target_version=target_version_of(dev),
                               cache_dir=cache)
    exe = dev.compile(result.module, format="stablehlo")
    inputs = {k: _RNG.standard_normal(v).astype(np.float32) for k, v in feeds.items()}
    outs = [o.to_numpy() for o in exe(*[dev.put(x) for x in inputs.values()])]
    for got, expected in zip(outs, reference(model, inputs), strict=False):
        np.testing.assert_allclose(got, expected, rtol=1e-4, atol=1e-5)


def test_a_cpu_device_converts_for_its_platform(monkeypatch: pytest.MonkeyPatch) -> None:
    """tpu:cpu hands its kind to the converter: the depthwise Conv runs as
    the CPU rewrite, with onnxruntime's values."""
    from nx_hal.onnx import convert
    from tests.plugin_env import installed_device

    dev = installed_device("tpu:cpu")
    seen: list[str | None] = []
    original = convert.onnx_to_stablehlo

    def spy(*args: Any, **kwargs: Any) -> ConversionResult:
        result = original(*args, **kwargs)
        seen.append(kwargs.get("platform"))
        assert "stablehlo.convolution" not in result.stablehlo_ops
        return result

    monkeypatch.setattr(convert, "onnx_to_stablehlo", spy)
    model = _depthwise_model()
    exe = dev.compile(model, cache=False)
    x = np.random.default_rng(7).standard_normal((1, 8, 10, 10)).astype(np.float32)
    np.testing.assert_allclose(exe(x)[0].to_numpy(), reference(model, {"x": x})[0], rtol=1e-5, atol=1e-5)
    assert seen == ["cpu"]


def test_cli_platform(tmp_path: Path) -> None:
    """``nx-hal convert --platform cpu`` writes what a CPU device compiles
    (the depthwise Conv as a sum over its taps); without it, a convolution; a kind it
    does not know is refused before any work."""
    from tests.test_cli import nx_hal

    source = tmp_path / "depthwise.onnx"
    source.write_bytes(_depthwise_model())
    env = {"XDG_CACHE_HOME": str(tmp_path / "cache")}
    for platform, has_conv in ((None, True), ("cpu", False)):
        out = tmp_path / f"{platform}.mlir"
        args = [str(source), "-o", str(out)] + (["--platform", platform] if platform else [])
        done = nx_hal("convert", *args, "--json", env=env, cwd=tmp_path)
        assert done.returncode == 0, done.stderr
        assert ("stablehlo.convolution" in out.read_text()) is has_conv
        fields = json.loads(done.stdout)  # fields, not a paragraph in a string
        assert fields["output"] == str(out) and fields["onnx_ops"] == ["Conv"], fields
        assert ("stablehlo.convolution" in fields["stablehlo_ops"]) is has_conv
    refused = nx_hal("convert", str(source), "-o", str(tmp_path / "x.mlir"), "--platform", "npu", cwd=tmp_path)
    assert refused.returncode == 2 and "--platform" in refused.stderr
