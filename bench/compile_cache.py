"""The compile cache (issue #32): each model compiled cold (an empty cache:
conversion, sandbox, vendor compile), warm in a fresh process (the store's
entries read and the executable deserialized), and again in the same process
while the first executable is held (this process's lookup), per device; with
the vendor's own path in the same run: OpenVINO's ``Core.compile_model`` of
the model, and its ``Core.import_model`` of the very stream nx_hal's npu:cpu
executable holds, each in a fresh process.

    python bench/compile_cache.py [-n 3] [--corpus] [--only NAME ...] [--tree DIR ...]

Every timed process first imports numpy and opens the device (its client:
XLA's CPU client, OpenVINO's core), the "open" column, so cold and warm are
the compile alone, as a program that already uses the device would see
them. Models: examples/mlp.onnx and a small CNN; with ``--corpus`` the
real-model corpus of tests/models (torchvision, transformers, torch.nn with
random weights; exported once and cached, as the corpus tests do), and a
summary per device: the median over the models of cold / warm, and of warm /
OpenVINO's import.

``--tree``: time another checkout's nx_hal in the same run (its compiled
extensions built in place: ``python setup.py build_ext --inplace`` there),
put first on the import path of each timed process, so "before" and "after"
are measured side by side; the plugins are the installed ones. Times are
the median of ``-n`` fresh processes, in milliseconds.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

# One process: open the device, compile twice, keep the executable's bytes
# (npu:cpu: the OpenVINO stream inside them is what import_model is timed on).
_TIMED = """
import sys, time, json
sys.path.insert(0, {tree!r})
import numpy
import nx_hal
t0 = time.perf_counter(); dev = nx_hal.device({device!r}); dev.put(numpy.zeros(1, numpy.float32))
t1 = time.perf_counter(); exe = dev.compile({model!r}); t2 = time.perf_counter(); again = dev.compile({model!r})
t3 = time.perf_counter()
assert nx_hal.__file__.startswith({tree!r}), nx_hal.__file__
if {blob!r} and isinstance(exe, nx_hal.Executable):  # a model compiled per shape has no one blob
    try:
        data = exe._serialize()
    except nx_hal.NxHalError:  # not serializable (OpenVINO's LSTM streams): nothing to import
        data = None
    if data is not None:
        open({blob!r}, "wb").write(data)
print(json.dumps([t1 - t0, t2 - t1, t3 - t2]))
"""

# OpenVINO is opened before the clock as the npu plugin opens it (its
# devices listed, the CPU plugin's versions and name read, pinning set as the
# plugin sets it), as nx_hal's device is opened before its clock.
_OPEN_OPENVINO = """
import time, json, openvino as ov
core = ov.Core()
core.get_available_devices(); core.get_versions("CPU"); core.get_property("CPU", "FULL_DEVICE_NAME")
core.set_property("CPU", {{"ENABLE_CPU_PINNING": False}})
"""

_OPENVINO_COMPILE = _OPEN_OPENVINO + """
t0 = time.perf_counter(); core.compile_model({model!r}, "CPU"); print(json.dumps([time.perf_counter() - t0]))
"""

# The stream is read before the clock starts: nx_hal's warm compile reads
# its store entry inside the timed call, so this favours OpenVINO.
_OPENVINO_IMPORT = _OPEN_OPENVINO + """
data = open({stream!r}, "rb").read()
t0 = time.perf_counter(); core.import_model(data, "CPU"); print(json.dumps([time.perf_counter() - t0]))
"""


def _cnn(path: Path) -> None:
    """A small CNN (six Conv+Relu, a Gemm) that takes real compile time."""
    import numpy as np
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    rng = np.random.default_rng(0)
    nodes, inits, c, name = [], [], 3, "x"
    for i, out in enumerate((16, 16, 32, 32, 64, 64)):
        w = numpy_helper.from_array(rng.standard_normal((out, c, 3, 3)).astype(np.float32) * 0.1, f"w{i}")
        inits.append(w)
        nodes.append(helper.make_node("Conv", [name, f"w{i}"], [f"c{i}"], pads=[1, 1, 1, 1],
                                      strides=[2, 2] if i % 2 else [1, 1]))
        nodes.append(helper.make_node("Relu", [f"c{i}"], [f"r{i}"]))
        name, c = f"r{i}", out
    nodes.append(helper.make_node("GlobalAveragePool", [name], ["p"]))
    nodes.append(helper.make_node("Flatten", ["p"], ["f"]))
    inits.append(numpy_helper.from_array(rng.standard_normal((64, 10)).astype(np.float32), "fc"))
    nodes.append(helper.make_node("MatMul", ["f", "fc"], ["y"]))
    graph = helper.make_graph(nodes, "cnn", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 64, 64])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 10])], inits)
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), path)


def _run(code: str, env: dict[str, str]) -> list[float]:
    # Modules imported inside the clock load from their bytecode, as an
    # installed package's do (a machine with PYTHONDONTWRITEBYTECODE set
    # would compile each from source in every process).
    env = {k: v for k, v in env.items() if k != "PYTHONDONTWRITEBYTECODE"}
    out = subprocess.run([sys.executable, "-c", code], env=env, check=True, capture_output=True, text=True)
    return [float(t) * 1000 for t in json.loads(out.stdout.strip().splitlines()[-1])]


def _stream(blob: Path) -> Path:
    """The OpenVINO stream at the end of an nx-hal-npu executable's bytes
    (its header's payload_len, a little-endian uint64 at byte 24)."""
    data = blob.read_bytes()
    size = int.from_bytes(data[24:32], "little")
    stream = blob.with_suffix(".stream")
    stream.write_bytes(data[len(data) - size:])
    return stream


def _case(tree: str, device: str, model: str, n: int, folder: Path) -> dict[str, float]:
    rows: dict[str, list[float]] = {"open": [], "cold": [], "warm": [], "same": [], "ov_import": []}
    for _ in range(n):
        with tempfile.TemporaryDirectory() as cache:
            env = {**os.environ, "NX_HAL_CACHE_DIR": cache}
            blob = str(folder / "exe.blob") if device.startswith("npu") else ""
            opened, first, _ = _run(_TIMED.format(tree=tree, device=device, model=model, blob=""), env)
            _, again, in_process = _run(_TIMED.format(tree=tree, device=device, model=model, blob=blob), env)
            rows["open"].append(opened)
            rows["cold"].append(first)
            rows["warm"].append(again)
            rows["same"].append(in_process)
            if blob and Path(blob).exists():
                stream = _stream(Path(blob))
                Path(blob).unlink()
                try:
                    rows["ov_import"].append(_run(_OPENVINO_IMPORT.format(stream=str(stream)), dict(os.environ))[0])
                except subprocess.CalledProcessError as exc:  # a stream OpenVINO alone cannot read back
                    print(f"  ({Path(model).stem}: OpenVINO's import_model of the stream failed: "
                          f"{exc.stderr.strip().splitlines()[-1][:160] if exc.stderr else exc.returncode})")
    return {k: statistics.median(v) if v else float("nan") for k, v in rows.items()}


def _models(args: argparse.Namespace, folder: Path) -> dict[str, str]:
    if not args.corpus:
        cnn = folder / "cnn.onnx"
        _cnn(cnn)
        return {"mlp": str(ROOT / "examples" / "mlp.onnx"), "cnn": str(cnn)}
    sys.path.insert(0, str(ROOT))
    from tests.models import corpus

    where = corpus.corpus_dir()
    found = {name: str(where / f"{name}.onnx") for name, record in sorted(corpus.manifest(where)["models"].items())
             if record.get("ok") and (where / f"{name}.onnx").exists()}
    return {k: v for k, v in found.items() if not args.only or k in args.only}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("-n", type=int, default=3)
    parser.add_argument("--corpus", action="store_true", help="the real-model corpus of tests/models")
    parser.add_argument("--only", nargs="*", default=[], help="these models only")
    parser.add_argument("--devices", nargs="*", default=["npu:cpu", "tpu:cpu"])
    parser.add_argument("--tree", action="append", default=[], help="another checkout to time beside this one")
    args = parser.parse_args()
    trees = [str(ROOT)] + [str(Path(t).resolve()) for t in args.tree]
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        models = _models(args, folder)
        print(f"{'tree':<20} {'device':<8} {'model':<24} {'open ms':>8} {'cold ms':>9} {'warm ms':>8} "
              f"{'same ms':>8} {'cold/warm':>9} {'OV compile':>10} {'OV import':>9} {'warm/import':>11}")
        ratios: dict[tuple[str, str], list[float]] = {}
        for device in args.devices:
            for label, model in models.items():
                native = float("nan")
                if device.startswith("npu"):
                    native = statistics.median(_run(_OPENVINO_COMPILE.format(model=model), dict(os.environ))[0]
                                               for _ in range(args.n))
                for tree in trees:
                    m = _case(tree, device, model, args.n, folder)
                    speedup, vs_import = m["cold"] / m["warm"], m["warm"] / m["ov_import"]
                    ratios.setdefault((tree, device), []).append(speedup)
                    ratios.setdefault((tree, device + " import"), []).append(vs_import)
                    print(f"{tree[-20:]:<20} {device:<8} {label[:24]:<24} {m['open']:8.1f} {m['cold']:9.1f} "
                          f"{m['warm']:8.1f} {m['same']:8.2f} {speedup:9.1f} {native:10.1f} {m['ov_import']:9.1f} "
                          f"{vs_import:11.2f}", flush=True)
        print("\nmedian over the models:")
        for (tree, device), values in ratios.items():
            what = "warm / OpenVINO import_model" if device.endswith(" import") else "cold / warm"
            shown = [v for v in values if v == v]  # NaN: no OpenVINO row
            if shown:
                print(f"  {tree[-20:]:<20} {device.split()[0]:<8} {what:<28} {statistics.median(shown):7.2f} "
                      f"({len(shown)} models)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
