"""The ingestion paths: how an input is made (in the parent) and fed (in a worker).

A path names the plugins it feeds; ``make`` builds input ``index`` from the
corpus and a Random seeded with the run's seed, the path and the index;
``Feeder`` (worker side) sets up a device once and feeds one input at a time,
raising an NxHalError/ConversionError for a clean refusal."""

from __future__ import annotations

import base64
import json
import os
import random
import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tests.fuzz import mutate

CORPUS = Path(__file__).with_name("corpus")
PLUGINS = ("npu", "tpu", "graphcore")
MAX_RUN_ELEMENTS = 1 << 20  # a program that compiles is run once if its inputs are this small


def load_corpus(path: str) -> list[bytes]:
    d = CORPUS / path
    return [p.read_bytes() for p in sorted(d.iterdir()) if p.is_file()] if d.is_dir() else []


# -- making inputs (parent) -------------------------------------------------------------


def make_bytes(rng: random.Random, corpus: list[bytes]) -> bytes:
    return mutate.mutate_bytes(rng, rng.choice(corpus), corpus)


def make_onnx(rng: random.Random, corpus: list[bytes]) -> bytes:
    seed = rng.choice(corpus)
    r = rng.random()
    if r < 0.5:
        out = mutate.mutate_onnx(rng, seed)
        if out is not None:
            return out if rng.random() < 0.8 else mutate.mutate_bytes(rng, out, corpus)
    return mutate.mutate_bytes(rng, seed, corpus)


def make_mlir_text(rng: random.Random, corpus: list[bytes]) -> bytes:
    seed = rng.choice(corpus)
    if rng.random() < 0.6:
        return mutate.mutate_mlir_text(rng, seed)
    return mutate.mutate_bytes(rng, seed, corpus)


def make_json(rng: random.Random, corpus: list[bytes]) -> bytes:
    if rng.random() < 0.15:  # raw bytes: the feeder must refuse what is not JSON cleanly
        return mutate.mutate_bytes(rng, rng.choice(corpus), corpus)
    value = json.loads(rng.choice(corpus))
    for _ in range(rng.choice([1, 1, 2, 3])):
        value = mutate.mutate_json(rng, value)
    return mutate.dumps(value)


_OPTION_NAMES = [
    "target", "precision", "performance", "streams", "cache_dir", "memory_limit", "library_path", "backend_paths",
    "memory_limit_bytes", "cpu_device_count", "gpu_memory_fraction", "gpu_preallocate", "gpu_allocator",
    "gpu_visible_devices", "num_replicas", "num_partitions", "input_shapes", "reserialize", "device_count",
]


def make_options(rng: random.Random, corpus: list[bytes]) -> bytes:
    value = json.loads(rng.choice(corpus))
    for _ in range(rng.choice([1, 1, 2, 3])):
        if rng.random() < 0.5:
            value[rng.choice(_OPTION_NAMES)] = mutate.random_value(rng)
        else:
            value = mutate.mutate_json(rng, value)
        if not isinstance(value, dict):
            value = {rng.choice(_OPTION_NAMES): value}
    return mutate.dumps(value)


_DLPACK_FIELDS: dict[str, list[Any]] = {
    "major": [0, 1, 2, 255, 2**32 - 1],
    "data": [None],
    "device_type": [0, 1, 2, 3, 4, 7, 13, -1, 2**31 - 1],
    "device_id": [0, 1, -1, 2**31 - 1],
    "code": [0, 1, 2, 3, 4, 5, 6, 255],
    "bits": [0, 1, 4, 7, 8, 16, 32, 64, 128, 255],
    "lanes": [0, 1, 2, 4, 65535],
    "ndim": [-(2**31), -1, 0, 1, 2, 3, 8, 32, 33, 64, 2**31 - 1],
    "byte_offset": [0, 1, 3, 4, 48, 2**32, 2**63, 2**64 - 8, 2**64 - 1],
    "flags": [0, 1, 2, 3, 2**64 - 1],
}
_DIMS = [0, 1, 2, 3, 4, 12, -1, -4, 2**31, 2**40, 2**62, 2**63 - 1, -(2**63)]
_STRIDES = [0, 1, 4, 8, -1, -4, 2**31, 2**40, 2**61 - 1, 2**62, 2**63 - 1, -(2**63)]


def make_dlpack(rng: random.Random, corpus: list[bytes]) -> bytes:
    fields = json.loads(rng.choice(corpus))
    for _ in range(rng.choice([1, 1, 2, 3, 4])):
        r = rng.random()
        if r < 0.45:
            name = rng.choice(sorted(_DLPACK_FIELDS))
            fields[name] = rng.choice(_DLPACK_FIELDS[name])
        elif r < 0.7:
            fields["shape"] = None if rng.random() < 0.05 else [
                rng.choice(_DIMS) for _ in range(rng.choice([0, 1, 2, 2, 3, 4]))]
        elif r < 0.95:
            n = len(fields.get("shape") or [3, 4])
            fields["strides"] = [rng.choice(_STRIDES) for _ in range(n)]
        else:
            fields.pop(rng.choice(sorted(fields)), None) if fields else None
    return mutate.dumps(fields)


def _toml_key(k: str) -> str:
    return k if k and all(c.isalnum() or c in "_-" for c in k) else json.dumps(k)


def _toml_value(v: Any) -> str:
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, int):
        return str(max(min(v, 2**63 - 1), -(2**63)))
    if isinstance(v, float):
        return "nan" if v != v else ("inf" if v == float("inf") else "-inf" if v == -float("inf") else repr(v))
    if isinstance(v, str):
        return json.dumps(v).replace("\\ud", "\\uFFFD")[:8000]
    if isinstance(v, list):
        return "[" + ", ".join(_toml_value(x) for x in v if x is not None and not isinstance(x, dict)) + "]"
    if isinstance(v, dict):
        return "{" + ", ".join(f"{_toml_key(str(k))} = {_toml_value(x)}" for k, x in v.items() if x is not None) + "}"
    return '""'


def to_toml(data: dict[str, Any]) -> str:
    """A small TOML writer (top-level keys and inline tables): enough for fuzzing."""
    return "".join(f"{_toml_key(str(k))} = {_toml_value(v)}\n" for k, v in data.items() if v is not None)


_ENV_NAMES = [
    "NX_HAL_PREFER", "NX_HAL_DISABLE", "NX_HAL_PLUGIN_PATH", "NX_HAL_ISOLATE_PROBE", "NX_HAL_PROBE_TIMEOUT",
    "NX_HAL_PROBE_CACHE", "NX_HAL_COMPILE_CACHE", "NX_HAL_NO_CONFIG", "NX_HAL_PLUGINS__NPU__TARGET",
    "NX_HAL_PLUGINS__NPU__STREAMS", "NX_HAL_PLUGINS__TPU__CPU_DEVICE_COUNT", "NX_HAL_PLUGINS__TPU__NUM_REPLICAS",
    "NX_HAL_PLUGINS__GRAPHCORE__X", "NX_HAL_PLUGINS", "NX_HAL_PLUGINS__", "NX_HAL_PLUGINS____X", "NX_HAL_BOGUS",
]


def make_config(rng: random.Random, corpus: list[bytes]) -> bytes:
    """{"toml": text (latin-1), "env": {NX_HAL_*: value}}."""
    from tests.fuzz.worker import tomllib

    text = rng.choice(corpus)
    r = rng.random()
    if r < 0.4:
        text = mutate.mutate_bytes(rng, text, corpus)
    elif r < 0.85:
        try:
            data = tomllib.loads(text.decode())
        except Exception:
            data = {}
        for _ in range(rng.choice([1, 1, 2, 3])):
            data = mutate.mutate_json(rng, data)
        text = to_toml(data if isinstance(data, dict) else {"x": data}).encode("utf-8", "surrogatepass")
    env: dict[str, str] = {}
    for _ in range(rng.choice([0, 0, 1, 1, 2, 3])):
        v = mutate.random_value(rng)
        env[rng.choice(_ENV_NAMES)] = v if isinstance(v, str) else json.dumps(v)
    return mutate.dumps({"toml": text.decode("latin-1"), "env": env})


# -- feeding inputs (worker) ------------------------------------------------------------


def open_device(plugin: str, cache_dir: str) -> Any:
    """The plugin's first device, loaded in this process; raises UnavailableError."""
    import nx_hal
    from nx_hal.config import load_config
    from nx_hal.registry import Registry

    reg = Registry(load_config({"cache_dir": cache_dir, "compile_cache": False, "probe_cache": False},
                               no_config=True))
    reg.discover()
    if plugin not in reg.records:
        raise nx_hal.UnavailableError(f"plugin {plugin} is not installed")
    rec = reg.records[plugin]
    reg.load(rec, isolate=False)
    if not rec.devices:
        raise nx_hal.UnavailableError(f"{rec.state}: {rec.code}: {rec.reason}")
    return rec.devices[0]


_NP = {"f16": "float16", "f32": "float32", "f64": "float64", "bf16": None, "i8": "int8", "i16": "int16",
       "i32": "int32", "i64": "int64", "u8": "uint8", "u16": "uint16", "u32": "uint32", "u64": "uint64",
       "bool": "bool", "pred": "bool"}


def run_once(exe: Any) -> None:
    """Runs a compiled executable on zeros if its inputs are small and static."""
    import numpy as np

    args = []
    total = 0
    for spec in exe.inputs:
        dt = _NP.get(spec.dtype)
        if dt is None or spec.shape is None or any(not isinstance(d, int) or d < 0 for d in spec.shape):
            return
        n = int(np.prod(spec.shape, dtype=object))
        total += n
        if total > MAX_RUN_ELEMENTS:
            return
        args.append(np.zeros(spec.shape, dt))
    for out in exe(*args):
        out.to_numpy()


class Feeder:
    """One path on one plugin, inside a worker. ``seeds()`` gives corpus
    members made at start (the executable path); ``feed(data)`` one input."""

    def __init__(self, plugin: str, workdir: str) -> None:
        self.plugin = plugin
        self.workdir = workdir

    def seeds(self) -> list[bytes]:
        return []

    def feed(self, data: bytes) -> None:
        raise NotImplementedError


class ProgramFeeder(Feeder):
    fmt = ""

    def __init__(self, plugin: str, workdir: str) -> None:
        super().__init__(plugin, workdir)
        self.device = open_device(plugin, workdir)
        if self.device.accepts(self.fmt) is not None:
            import nx_hal

            raise nx_hal.UnavailableError(f"{self.device.selector} does not take {self.fmt}: "
                                          f"{self.device.accepts(self.fmt)}")
        self._ctx: Any = None
        if self.fmt == "onnx" and "onnx" not in self.device.formats:
            from nx_hal.onnx import convert  # one long-lived converter child, not one per input

            self._ctx = convert.using(convert.ConverterWorker(timeout=60))
            self._ctx.__enter__()

    def feed(self, data: bytes) -> None:
        # A format the device reads natively is compiled first in the core's
        # sandbox child (nx_hal.sandbox): its hang limit is 60 s here, under
        # the harness's 90 s for this path, so a hang there is a clean error.
        run_once(self.device.compile(data, self.fmt, cache=False, verify_timeout=60))


class OnnxFeeder(ProgramFeeder):
    fmt = "onnx"


class StablehloFeeder(ProgramFeeder):
    fmt = "stablehlo"


class JaxExportFeeder(Feeder):
    """Serialized JAX exports (``format="jax-export"``, issue #31): JAX's
    flatbuffer reader, then the StableHLO inside through the verifier child
    and the compile. The seeds are exports of small functions made at start,
    by the JAX installed here (none: the path is skipped)."""

    def __init__(self, plugin: str, workdir: str) -> None:
        super().__init__(plugin, workdir)
        os.environ.setdefault("JAX_PLATFORMS", "cpu")
        try:
            import jax  # noqa: F401
        except ImportError:
            import nx_hal

            raise nx_hal.UnavailableError("jax is not installed: no JAX exports to fuzz") from None
        self.device = open_device(plugin, workdir)

    def seeds(self) -> list[bytes]:
        import jax
        import jax.numpy as jnp

        def mlp(params: Any, x: Any) -> Any:
            return jax.nn.softmax(jnp.tanh(x @ params["w"] + params["b"]) @ params["v"])

        params = {"w": jnp.ones((8, 4)), "b": jnp.zeros(4), "v": jnp.ones((4, 3))}
        functions: list[tuple[Callable[..., Any], tuple[Any, ...]]] = [
                     (mlp, (params, jnp.ones((2, 8)))),
                     (lambda a, b: (a * b).sum(axis=0), (jnp.ones((3, 5)), jnp.ones((3, 5)))),
                     (lambda t: jnp.cumsum(t[::-1], axis=1), (jnp.arange(12, dtype=jnp.int32).reshape(3, 4),))]
        return [bytes(jax.export.export(jax.jit(f))(*args).serialize()) for f, args in functions]

    def feed(self, data: bytes) -> None:
        run_once(self.device.compile(data, "jax-export", cache=False, verify_timeout=60))


class ExecutableFeeder(Feeder):
    def __init__(self, plugin: str, workdir: str) -> None:
        super().__init__(plugin, workdir)
        self.device = open_device(plugin, workdir)

    def seeds(self) -> list[bytes]:
        out = []
        for fmt, path in (("onnx", "onnx"), ("stablehlo", "stablehlo-text")):
            if fmt in self.device.formats:
                for prog in load_corpus(path):
                    # The plugin's own bytes: what its parser and digest check read.
                    out.append(self.device.compile(prog, fmt, cache=False)._serialize())
        return out

    def feed(self, data: bytes) -> None:
        # Unsealed mutants reach the plugin only when trusted: the plugin's
        # own checks are what is fuzzed (nx_hal's seal refuses them all).
        run_once(self.device.load_executable(data, trusted=True))


class DlpackFeeder(Feeder):
    """A malformed DLPack tensor through buffer_from_dlpack of the raw table.
    Memory is real: the host allocation covers byte_offset plus the bytes
    the shape claims, so a plugin that reads what the tensor describes never
    faults; a tensor claiming more than ALLOC_CAP is skipped (exit code 3)."""

    ALLOC_CAP = 64 << 20

    def __init__(self, plugin: str, workdir: str) -> None:
        super().__init__(plugin, workdir)
        self.device = open_device(plugin, workdir)

    def feed(self, data: bytes) -> None:
        import numpy as np

        import nx_hal
        from nx_hal.native import NULL, check, ffi, lib

        f = json.loads(data)
        if not isinstance(f, dict):
            raise nx_hal.InvalidArgumentError("not a field dict")
        api = self.device._api
        shape = f.get("shape", [3, 4])
        ndim = f.get("ndim", len(shape) if isinstance(shape, list) else 2)
        keep: list[Any] = []
        deleted: list[int] = []

        @ffi.callback("void(nxhal_dlpack_managed_tensor_t*)")  # type: ignore[untyped-decorator]  # cffi is untyped
        def deleter(_: Any) -> None:
            deleted.append(1)

        t = ffi.new("nxhal_dlpack_managed_tensor_t*")
        t.version.major = f.get("major", 1)
        t.deleter = deleter
        t.flags = f.get("flags", 0)
        dl = t.dl_tensor
        dl.device.device_type = f.get("device_type", 1)
        dl.device.device_id = f.get("device_id", 0)
        dl.dtype.code, dl.dtype.bits, dl.dtype.lanes = f.get("code", 0), f.get("bits", 32), f.get("lanes", 1)
        dl.ndim = ndim
        # The arrays are as long as ndim says (padded with 1), so reading
        # ndim entries is in bounds; an ndim past 64 must be refused unread.
        pad = ndim if 0 <= ndim <= 64 else 0
        if isinstance(shape, list):
            dims = (shape + [1] * pad)[: max(pad, len(shape))] or [0]
            keep.append(ffi.new("int64_t[]", dims))
            dl.shape = keep[-1]
        strides = f.get("strides")
        if isinstance(strides, list):
            st = (strides + [1] * pad)[: max(pad, len(strides))] or [0]
            keep.append(ffi.new("int64_t[]", st))
            dl.strides = keep[-1]
        dl.byte_offset = f.get("byte_offset", 0)
        need = dl.byte_offset
        if isinstance(shape, list) and 0 <= ndim <= 64 and all(d >= 0 for d in dims[:ndim]):
            n = 1
            for d in dims[:ndim]:
                n *= d
            size = n * max(1, (dl.dtype.bits * max(1, dl.dtype.lanes) + 7) // 8)
            need += size
            # Run only what the contract lets a plugin refuse unread: sizes past
            # INT64_MAX, and extents that wrap the address space (user pointers
            # are below 2**47). Between those and our allocation it would read
            # memory we said is there: the caller's fault, not the plugin's.
            if n > 0 and size <= 2**63 - 1 and self.ALLOC_CAP < need <= 2**64 - 2**47:
                raise SkipInput(f"claims {need} bytes")
        if f.get("data", True) is not None:
            host = np.zeros(max(1, min(need, self.ALLOC_CAP)), np.uint8)
            keep.append(host)
            dl.data = ffi.from_buffer(host)
        out = ffi.new("nxhal_buffer_t**")
        status = lib.nxhal_call_buffer_from_dlpack(api, self.device.handle, t, out)
        if status != NULL:
            if out[0] != NULL or deleted:
                raise ContractError(f"refused but out={out[0]} deleter calls={len(deleted)}")
            check(api, status, self.plugin)
        buf = nx_hal.Buffer(self.device, out[0])
        buf.to_numpy()
        del buf
        import gc

        gc.collect()
        if len(deleted) != 1:  # a plugin that copies may release the tensor at once, but only once
            raise ContractError(f"deleter ran {len(deleted)} times for an imported tensor")


class ClientOptionsFeeder(Feeder):
    def __init__(self, plugin: str, workdir: str) -> None:
        super().__init__(plugin, workdir)
        from tests.conformance.programs import add_program

        self.add_program = add_program

    def feed(self, data: bytes) -> None:
        import numpy as np

        import nx_hal

        opts = json.loads(data)
        others = [p for p in PLUGINS if p != self.plugin]
        reg = nx_hal.configure({"plugins": {self.plugin: opts}, "disable": others, "cache_dir": self.workdir,
                                "compile_cache": False, "probe_cache": False}, no_config=True, isolate_probe=False)
        rec = reg.records.get(self.plugin)
        if rec is None or rec.state != "loaded":
            # A plugin that refused its options is recorded with a reason, not raised.
            raise nx_hal.NxHalError(f"{rec.state}: {rec.code}: {rec.reason}" if rec else "not installed",
                                    plugin=self.plugin)
        for dev in rec.devices[:1]:
            prog = self.add_program(dev.formats)
            if prog is not None:
                x = np.ones(4, np.float32)
                dev.compile(prog[1], prog[0], cache=False)(x, x)[0].to_numpy()


class CompileOptionsFeeder(Feeder):
    def __init__(self, plugin: str, workdir: str) -> None:
        super().__init__(plugin, workdir)
        from tests.conformance.programs import add_program

        self.device = open_device(plugin, workdir)
        prog = add_program(self.device.formats)
        if prog is None:
            import nx_hal

            raise nx_hal.UnavailableError(f"no add program for {self.device.formats}")
        self.prog = prog

    def feed(self, data: bytes) -> None:
        import numpy as np

        opts = json.loads(data)
        if not isinstance(opts, dict):
            opts = {"options": opts}
        x = np.ones(4, np.float32)
        exe = self.device.compile(self.prog[1], self.prog[0], cache=False, **{str(k): v for k, v in opts.items()})
        exe(x, x)[0].to_numpy()


class ConfigFeeder(Feeder):
    """load_config over a random nx_hal.toml and NX_HAL_* variables, then the
    registry built from it (discovery and plugin option validation). The
    cache directory is pinned by argument so nothing is written elsewhere."""

    def feed(self, data: bytes) -> None:
        from nx_hal.config import load_config
        from nx_hal.registry import Registry

        value = json.loads(data)
        path = Path(self.workdir) / "nx_hal.toml"
        path.write_bytes(value["toml"].encode("latin-1"))
        env = {k: v.replace("\x00", "") for k, v in value["env"].items()}
        saved = dict(os.environ)
        os.environ.update(env)
        try:
            loaded = load_config({"cache_dir": self.workdir, "probe_cache": False, "compile_cache": False},
                                 config_file=path)
            reg = Registry(loaded)
            reg.discover()
            reg.load_all(isolate=False)
        finally:
            os.environ.clear()
            os.environ.update(saved)


class SkipInput(Exception):
    """The input cannot be fed safely (it describes memory we could not give it)."""


class ContractError(Exception):
    """The plugin returned, but broke the ABI contract (counted as 'other')."""


@dataclass(frozen=True)
class Path_:
    name: str
    plugins: tuple[str, ...]
    make: Callable[[random.Random, list[bytes]], bytes]
    feeder: type[Feeder]
    timeout: float = 20.0  # seconds one input may take before it counts as a hang
    # Plugins whose inputs go through a child with its own 60 s limit (the
    # ONNX converter, the StableHLO verifier): 90 s, so that limit's clean
    # DEADLINE_EXCEEDED is seen as the error it is, not as a hang.
    slow: tuple[str, ...] = ()
    per_plugin_corpus: bool = False  # seeds come from the worker (serialized executables)


def timeout_of(spec: Path_, plugin: str) -> float:
    return 90.0 if plugin in spec.slow else spec.timeout


PATHS: dict[str, Path_] = {p.name: p for p in [
    Path_("onnx", ("npu", "tpu"), make_onnx, OnnxFeeder, slow=("npu", "tpu")),
    Path_("stablehlo-text", ("tpu",), make_mlir_text, StablehloFeeder, slow=("tpu",)),
    Path_("stablehlo-bytecode", ("tpu",), make_bytes, StablehloFeeder, slow=("tpu",)),
    Path_("jax-export", ("tpu",), make_bytes, JaxExportFeeder, slow=("tpu",), per_plugin_corpus=True),
    Path_("executable", ("npu", "tpu", "graphcore"), make_bytes, ExecutableFeeder, per_plugin_corpus=True),
    Path_("dlpack", ("npu", "tpu", "graphcore"), make_dlpack, DlpackFeeder),
    Path_("client-options", ("npu", "tpu", "graphcore"), make_options, ClientOptionsFeeder),
    Path_("compile-options", ("npu", "tpu", "graphcore"), make_options, CompileOptionsFeeder),
    Path_("config", ("core",), make_config, ConfigFeeder),
]}


def encode(data: bytes) -> str:
    return base64.b64encode(data).decode()


def workdir() -> str:
    return tempfile.mkdtemp(prefix="nx_hal-fuzz-")



