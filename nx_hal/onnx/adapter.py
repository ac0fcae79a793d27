"""The ONNX package as the core's ``Converter`` (nx_hal.converter): what a
device calls to compile ONNX for a StableHLO backend, re-serialise StableHLO
for an older one, and verify StableHLO from the user."""

from __future__ import annotations

import functools
import importlib.util
from collections.abc import Mapping
from pathlib import Path
from typing import final

from nx_hal.converter import PreparedOnnx
from nx_hal.errors import InvalidArgumentError
from nx_hal.store import DEFAULT_CACHE_MAX_BYTES, Store
from nx_hal.version import code_identity

__all__ = ["OnnxConverter"]


@functools.cache
def _identity() -> str:
    """This package's sources and those of the tools it runs (onnx,
    torch-mlir: an upgrade rewrites them), each by path, size and mtime: no
    file is read, no package imported."""
    paths = list(Path(__file__).resolve().parent.rglob("*.py"))
    for module in ("onnx", "torch_mlir"):
        spec = importlib.util.find_spec(module)
        paths.append(Path(spec.origin) if spec is not None and spec.origin else Path(module))
    return code_identity(paths)


@final
class OnnxConverter:
    """Thread-safe; holds no state but the cache limit. The modules behind it
    are imported on first use (a warm start lists devices without them), and
    their functions are looked up at each call, so a test that replaces one
    is heard. ``cache_max_bytes`` (the setting; 0: no limit) bounds the
    cache_dir whose ``stablehlo`` section a device names for conversions."""

    __slots__ = ("cache_max_bytes",)

    def __init__(self, *, cache_max_bytes: int = DEFAULT_CACHE_MAX_BYTES) -> None:
        self.cache_max_bytes = cache_max_bytes

    def available(self) -> str | None:
        from nx_hal.onnx import convert

        return convert.converter_available()

    def identity(self) -> str:
        return _identity()

    def to_stablehlo(self, model: bytes, *, input_shapes: dict[str, list[int]], target_version: str | None,
                     cache_dir: Path | None, use_cache: bool, platform: str | None = None,
                     precision: str | None = None) -> bytes:
        from nx_hal.onnx import convert

        result = convert.onnx_to_stablehlo(model, input_shapes=input_shapes, target_version=target_version,
                                           bytecode=True, cache_dir=cache_dir, use_cache=use_cache,
                                           cache_max_bytes=self.cache_max_bytes, platform=platform,
                                           precision=precision)
        return result.module

    def reserialize(self, module: bytes, target_version: str, *, plugin: str) -> bytes:
        from nx_hal.onnx import convert

        try:
            return convert.reserialize_stablehlo(module, target_version).module
        except convert.ConversionError as exc:
            raise InvalidArgumentError(
                f"cannot write the program for this backend's StableHLO {target_version}: {exc}", plugin=plugin
            ) from exc

    def donate(self, module: bytes, target_version: str, inputs: tuple[int, ...], *,
               plugin: str) -> tuple[bytes, dict[int, int]]:
        from nx_hal.onnx import convert

        try:
            result = convert.reserialize_stablehlo(module, target_version, donate=inputs)
        except convert.ConversionError as exc:
            raise InvalidArgumentError(exc.message if exc.reason == "donate" else
                                       f"cannot mark donated inputs in the program: {exc.message}",
                                       plugin=plugin) from exc
        return result.module, result.aliases

    def check_stablehlo(self, data: bytes, *, policy: str, plugin: str, cache_dir: Path | None) -> None:
        from nx_hal.onnx import verify

        verify.check_stablehlo(data, policy=policy, plugin=plugin, cache_dir=cache_dir)

    def prepare_onnx(self, model: bytes, *, plugin: str, attributes: Mapping[str, object] | None = None,
                     store: Store | None = None) -> PreparedOnnx:
        from nx_hal.onnx import prepared

        return prepared.prepare(model, plugin=plugin, attributes=attributes, store=store)
