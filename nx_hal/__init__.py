"""nx_hal: one API for ML accelerators through vendor plugins.

    import nx_hal
    dev = nx_hal.device()                 # best device by config, with loud fallback
    exe = dev.compile("model.onnx")
    (out,) = exe(x)
    print(out.to_numpy(), nx_hal.explain())
"""

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
from nx_hal.config import Config, load_config
from nx_hal.convert import ConversionError
from nx_hal.device import Device, MemoryStats
from nx_hal.errors import (
    AbiMismatchError,
    CancelledError,
    ConfigError,
    DeadlineExceededError,
    FailedPreconditionError,
    InternalError,
    InvalidArgumentError,
    NotFoundError,
    NxHalError,
    ResourceExhaustedError,
    UnavailableError,
    UnimplementedError,
)
from nx_hal.event import Event
from nx_hal.executable import Executable, TensorSpec
from nx_hal.hookspecs import Register, hookimpl, hookspec
from nx_hal.registry import PluginRecord, PluginSpec, Registry
from nx_hal.selection import FallbackWarning, Report
from nx_hal.quantize import quantize
from nx_hal.selectors import Selector


from nx_hal.sdk import get_cmake_dir, get_include
from nx_hal.version import __version__

__all__ = [
    "AbiMismatchError", "Buffer", "CancelledError", "Config", "ConfigError", "ConversionError",
    "DeadlineExceededError", "Device", "Event", "Executable", "FailedPreconditionError",
    "FallbackWarning", "InternalError", "InvalidArgumentError", "MemoryStats", "NotFoundError",
    "NxHalError", "PluginRecord", "PluginSpec", "Register", "Registry", "Report",
    "ResourceExhaustedError", "Selector", "TensorSpec", "UnavailableError", "UnimplementedError",
    "compile", "compile_anywhere", "configure", "default_device", "quantize", "device", "devices", "explain",
    "get_cmake_dir", "get_include", "hookimpl", "hookspec", "is_available", "load_config", "plugins", "put", "registry",
    "set_default_device", "__version__",
]
