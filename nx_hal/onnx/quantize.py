"""Int8 post-training quantization: an ONNX model and calibration inputs in,
a QDQ ONNX model out (QuantizeLinear/DequantizeLinear pairs around each
quantized operator), made with onnxruntime's static quantization.

QDQ is the portable int8 form: OpenVINO (nx-hal-npu) runs it in int8, and
runtimes without int8 kernels still compute it correctly in float. Needs the
``onnx`` and ``onnxruntime`` packages (``pip install nx-hal[quantize]``).
"""

from __future__ import annotations

import tempfile
from collections.abc import Iterable, Iterator, Mapping
from os import PathLike
from pathlib import Path
from typing import Any

import numpy as np

from nx_hal.errors import InvalidArgumentError, UnavailableError

__all__ = ["quantize", "PRECISIONS"]

PRECISIONS = ("int8",)


def _model_bytes(model: object) -> bytes:
    if isinstance(model, (bytes, bytearray, memoryview)):
        return bytes(model)
    if isinstance(model, (str, PathLike)):
        path = Path(model)
        if not path.is_file():
            raise InvalidArgumentError(f"quantize: model file {path} does not exist")
        return path.read_bytes()
    serialize = getattr(model, "SerializeToString", None)
    if callable(serialize):
        data = serialize()
        if isinstance(data, bytes):
            return data
    raise InvalidArgumentError(
        f"quantize: expected ONNX bytes, a path or an onnx.ModelProto, got {type(model).__name__}"
    )


def _feeds(calibration_data: Iterable[Any], input_names: list[str]) -> list[dict[str, np.ndarray]]:
    """Calibration samples as input-name -> array dicts. A sample is a dict,
    or (for a single-input model) an array, or a sequence of arrays in input order."""
    feeds: list[dict[str, np.ndarray]] = []
    for index, sample in enumerate(calibration_data):
        if isinstance(sample, Mapping):
            feed = {str(k): np.asarray(v) for k, v in sample.items()}
        elif isinstance(sample, np.ndarray) and len(input_names) == 1:
            feed = {input_names[0]: sample}
        elif isinstance(sample, (list, tuple)) and len(sample) == len(input_names):
            feed = {name: np.asarray(v) for name, v in zip(input_names, sample, strict=False)}
        else:
            raise InvalidArgumentError(
                f"quantize: calibration sample {index} is a {type(sample).__name__}; expected a "
                f"dict of {input_names}, or arrays in that order"
            )
        missing = sorted(set(input_names) - set(feed))
        if missing:
            raise InvalidArgumentError(f"quantize: calibration sample {index} lacks inputs {missing}")
        feeds.append(feed)
    if not feeds:
        raise InvalidArgumentError("quantize: calibration_data is empty; it needs representative inputs")
    return feeds


def quantize(
    model: object,
    calibration_data: Iterable[Any],
    precision: str = "int8",
    *,
    per_channel: bool = True,
) -> bytes:
    """Quantizes ``model`` (ONNX bytes, path or ModelProto) to a QDQ ONNX model.

    ``calibration_data`` holds representative inputs: dicts name -> array,
    or arrays for a single-input model. Activations become uint8 (asymmetric,
    range from calibration), weights int8 within 7 bits, [-64, 64]
    (symmetric, per output channel by default), so that CPUs without VNNI
    run them in int8 without saturating. Returns the quantized model's bytes.
    """
    if precision not in PRECISIONS:
        raise InvalidArgumentError(
            f"quantize: precision '{precision}' is not supported (supported: {', '.join(PRECISIONS)})"
        )
    try:
        import onnx
        from onnxruntime.quantization import (
            CalibrationDataReader,
            QuantFormat,
            QuantType,
            quantize_static,
        )
        from onnxruntime.quantization.shape_inference import quant_pre_process
    except ImportError as exc:
        raise UnavailableError(
            f"quantize needs onnx and onnxruntime ({exc}); pip install onnx onnxruntime"
        ) from None

    data = _model_bytes(model)
    try:
        proto = onnx.load_from_string(data)
    except Exception as exc:  # protobuf's DecodeError and friends
        raise InvalidArgumentError(f"quantize: not an ONNX model: {exc}") from None
    initializers = {i.name for i in proto.graph.initializer}
    input_names = [i.name for i in proto.graph.input if i.name not in initializers]
    feeds = _feeds(calibration_data, input_names)

    class _Reader(CalibrationDataReader):  # type: ignore[misc]
        def __init__(self) -> None:
            self._it: Iterator[dict[str, np.ndarray]] = iter(feeds)

        def get_next(self) -> dict[str, np.ndarray] | None:
            return next(self._it, None)

    with tempfile.TemporaryDirectory(prefix="nxhal_quantize_") as tmp:
        src = Path(tmp) / "model.onnx"
        prepared = Path(tmp) / "prepared.onnx"
        out = Path(tmp) / "model.int8.onnx"
        src.write_bytes(data)
        try:
            # Shape inference and graph cleanup give the quantizer full types.
            quant_pre_process(str(src), str(prepared), skip_symbolic_shape=True)
        except Exception:  # pre-processing is an optimisation; quantize the original
            prepared = src
        try:
            quantize_static(
                str(prepared), str(out), _Reader(),
                quant_format=QuantFormat.QDQ,
                activation_type=QuantType.QUInt8,
                weight_type=QuantType.QInt8,
                per_channel=per_channel,
                # 7-bit weights: x86 CPUs without VNNI sum pairs of u8 x s8
                # products in 16 bits, which saturate past [-64, 64]; within
                # it the model runs in int8, and exactly, on every CPU.
                reduce_range=True,
            )
        except Exception as exc:
            raise InvalidArgumentError(f"quantize: onnxruntime could not quantize the model: {exc}") from None
        return out.read_bytes()
