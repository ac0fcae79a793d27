"""What compiling a native program first in a child costs (nx_hal.sandbox),
against OpenVINO's own compile measured in the same run.

    python bench/sandbox_overhead.py [--repeat 7]

For a small model (examples/mlp.onnx) and a larger CNN, on npu:cpu, with the
compile cache off:

- openvino: ``Core.read_model`` + ``compile_model`` through OpenVINO's Python
  API (the SDK's own path, the baseline);
- nx_hal off: ``Device.compile(verify="off")``, in this process, unchecked;
- nx_hal first: a program never seen: checked by onnx.checker and compiled
  in the (running) child, the executable serialized there and loaded here;
- nx_hal known: the verdict in memory, so compiled here with no child (what
  every later compile of the program pays; a new process reads the verdict
  from disk instead).

Medians of interleaved runs; ratios against openvino. The child's start is
shown once, apart.
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np

import nx_hal
from nx_hal import sandbox

ROOT = Path(__file__).resolve().parent.parent


def cnn(layers: int = 8, channels: int = 64, size: int = 56) -> bytes:
    from onnx import TensorProto, helper, numpy_helper

    rng = np.random.default_rng(0)
    nodes, inits = [], []
    prev, c_in = "x", 3
    for i in range(layers):
        w = numpy_helper.from_array(rng.standard_normal((channels, c_in, 3, 3)).astype(np.float32), f"w{i}")
        inits.append(w)
        nodes.append(helper.make_node("Conv", [prev, f"w{i}"], [f"c{i}"], pads=[1, 1, 1, 1]))
        nodes.append(helper.make_node("Relu", [f"c{i}"], [f"r{i}"]))
        prev, c_in = f"r{i}", channels
    nodes.append(helper.make_node("GlobalAveragePool", [prev], ["y"]))
    graph = helper.make_graph(nodes, "cnn", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, size, size])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, channels, 1, 1])], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    model.ir_version = 8
    return bytes(model.SerializeToString())


def timed(fn: Callable[[], object]) -> float:
    start = time.perf_counter()
    fn()
    return time.perf_counter() - start


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--repeat", type=int, default=7)
    args = parser.parse_args()
    import openvino as ov

    core = ov.Core()
    with tempfile.TemporaryDirectory() as tmp:
        nx_hal.configure({"cache_dir": tmp})
        dev = nx_hal.device("npu:cpu")
        start = timed(lambda: dev.compile(cnn(1, 4, 8), "onnx", cache=False))
        print(f"child start + first compile of a tiny model: {start * 1e3:.0f} ms (once per process)\n")
        models = {"mlp": (ROOT / "examples" / "mlp.onnx").read_bytes(), "cnn 8x64": cnn()}
        print(f"{'model':10} {'bytes':>9} {'openvino':>10} {'off':>10} {'first':>10} {'known':>10} "
              f"{'off/ov':>7} {'first/ov':>8} {'known/ov':>8}")
        for name, data in models.items():
            rows: dict[str, list[float]] = {"ov": [], "off": [], "first": [], "known": []}
            for _ in range(args.repeat):
                rows["ov"].append(timed(lambda: core.compile_model(core.read_model(data, b""), "CPU")))
                rows["off"].append(timed(lambda: dev.compile(data, "onnx", cache=False, verify="off")))
                sandbox.clear_memory()
                rows["first"].append(timed(lambda: dev.compile(data, "onnx", cache=False)))
                rows["known"].append(timed(lambda: dev.compile(data, "onnx", cache=False)))
            med = {k: statistics.median(v) for k, v in rows.items()}
            print(f"{name:10} {len(data):>9} {med['ov'] * 1e3:>8.1f}ms {med['off'] * 1e3:>8.1f}ms "
                  f"{med['first'] * 1e3:>8.1f}ms {med['known'] * 1e3:>8.1f}ms {med['off'] / med['ov']:>7.2f} "
                  f"{med['first'] / med['ov']:>8.2f} {med['known'] / med['ov']:>8.2f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
