"""nx_hal: one API for ML accelerators through vendor plugins.

import nx_hal
dev = nx_hal.device()                 # best device by config, with loud fallback
exe = dev.compile("model.onnx")
(out,) = exe(x)
print(out.to_numpy(), nx_hal.explain())
"""

from typing import TYPE_CHECKING, Any

from nx_hal.api import (
    compile,
    compile_anywhere,
    configure,
    default_device,
    device,
    devices,
    explain,
    is_available,
    plugins,
    put,
    registry,
    set_default_device,
)
from nx_hal.buffer import Buffer
from nx_hal.config import load_config
from nx_hal.device import Device, MemoryStats
from nx_hal.errors import (
    AbiMismatchError,
    CancelledError,
    ConfigError,
    ConfigWarning,
    DeadlineExceededError,
    FailedPreconditionError,
    InternalError,
    InvalidArgumentError,
    InvalidProgramError,
    NotFoundError,
    NxHalError,
    ResourceExhaustedError,
    UnavailableError,
    UnimplementedError,
)
from nx_hal.event import Event
from nx_hal.executable import Executable, TensorSpec
from nx_hal.plugin import PluginRecord, PluginSpec
from nx_hal.registry import Registry
from nx_hal.selection import FallbackWarning, Report
from nx_hal.version import __version__

if TYPE_CHECKING:
    from nx_hal.config import Config
    from nx_hal.dynamic import DynamicExecutable
    from nx_hal.hookspecs import Register, hookimpl, hookspec
    from nx_hal.host_memory import align_numpy
    from nx_hal.onnx.convert import ConversionError
    from nx_hal.onnx.quantize import quantize
    from nx_hal.sdk import get_cmake_dir, get_include
    from nx_hal.selectors import Selector

# Imported on first use: a start (import nx_hal; nx_hal.devices()) needs
# none of them, the converter alone pulls in a dozen modules, Config and
# Selector are pydantic models and the hook markers are pluggy's.
_LAZY: dict[str, str] = {
    "ConversionError": "nx_hal.onnx.convert", "quantize": "nx_hal.onnx.quantize",
    "get_cmake_dir": "nx_hal.sdk", "get_include": "nx_hal.sdk",
    "Config": "nx_hal.config", "DynamicExecutable": "nx_hal.dynamic", "Selector": "nx_hal.selectors", "align_numpy": "nx_hal.host_memory",
    "Register": "nx_hal.hookspecs", "hookimpl": "nx_hal.hookspecs", "hookspec": "nx_hal.hookspecs",
}


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'nx_hal' has no attribute {name!r}")
    import importlib

    value = getattr(importlib.import_module(module), name)
    globals()[name] = value  # later look-ups skip this function
    return value

__all__ = [
    "AbiMismatchError", "Buffer", "CancelledError", "Config", "ConfigError", "ConfigWarning", "ConversionError",
    "DeadlineExceededError", "Device", "DynamicExecutable", "Event", "Executable", "FailedPreconditionError",
    "FallbackWarning", "InternalError", "InvalidArgumentError", "InvalidProgramError", "MemoryStats", "NotFoundError",
    "NxHalError", "PluginRecord", "PluginSpec", "Register", "Registry", "Report",
    "ResourceExhaustedError", "Selector", "TensorSpec", "UnavailableError", "UnimplementedError",
    "align_numpy", "compile", "compile_anywhere", "configure", "default_device", "quantize", "device", "devices", "explain",
    "get_cmake_dir", "get_include", "hookimpl", "hookspec", "is_available", "load_config", "plugins", "put", "registry",
    "set_default_device", "__version__",
]
