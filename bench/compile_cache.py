"""The compile cache: a model compiled cold (empty cache: conversion,
sandbox, vendor compile), warm in a fresh process (the store's entry loaded
and deserialized), and again in the same process while the first executable
is held (this process's lookup, where the tree has one), per device; with the
vendor's own compile of the same model in the same run (OpenVINO's
``Core.compile_model`` for npu:cpu).

    python bench/compile_cache.py [-n 5] [--tree DIR ...]

``--tree``: time another checkout's nx_hal in the same run (its compiled
extensions built in place: ``python setup.py build_ext --inplace`` there),
put first on the import path of each timed process, so "before" and "after"
are measured side by side; the plugins are the installed ones. Times are
the median of ``-n`` fresh processes, in milliseconds, of ``compile`` alone.
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

# One process: compile twice, say how long each took.
_TIMED = """
import sys, time, json
sys.path.insert(0, {tree!r})
import nx_hal
dev = nx_hal.device({device!r})
t0 = time.perf_counter(); exe = dev.compile({model!r}); t1 = time.perf_counter(); again = dev.compile({model!r})
t2 = time.perf_counter()
assert nx_hal.__file__.startswith({tree!r}), nx_hal.__file__
print(json.dumps([t1 - t0, t2 - t1]))
"""

_OPENVINO = """
import time, json, openvino as ov
core = ov.Core()
t0 = time.perf_counter(); core.compile_model({model!r}, "CPU"); print(json.dumps([time.perf_counter() - t0]))
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
    out = subprocess.run([sys.executable, "-c", code], env=env, check=True, capture_output=True, text=True)
    return [float(t) * 1000 for t in json.loads(out.stdout.strip().splitlines()[-1])]


def _case(tree: str, device: str, model: str, n: int) -> tuple[float, float, float]:
    cold, warm, same = [], [], []
    for _ in range(n):
        with tempfile.TemporaryDirectory() as cache:
            env = {**os.environ, "NX_HAL_CACHE_DIR": cache}
            code = _TIMED.format(tree=tree, device=device, model=model)
            first, _ = _run(code, env)
            cold.append(first)
            again, in_process = _run(code, env)
            warm.append(again)
            same.append(in_process)
    return statistics.median(cold), statistics.median(warm), statistics.median(same)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("-n", type=int, default=5)
    parser.add_argument("--tree", action="append", default=[], help="another checkout to time beside this one")
    args = parser.parse_args()
    trees = [str(ROOT)] + [str(Path(t).resolve()) for t in args.tree]
    with tempfile.TemporaryDirectory() as folder:
        cnn = Path(folder) / "cnn.onnx"
        _cnn(cnn)
        models = {"mlp": str(ROOT / "examples" / "mlp.onnx"), "cnn": str(cnn)}
        print(f"{'tree':<28} {'device':<8} {'model':<5} {'cold ms':>9} {'warm, new process':>18} "
              f"{'warm, same process':>19}")
        for device in ("npu:cpu", "tpu:cpu"):
            for label, model in models.items():
                for tree in trees:
                    cold, warm, same = _case(tree, device, model, args.n)
                    print(f"{tree[-28:]:<28} {device:<8} {label:<5} {cold:>9.1f} {warm:>18.1f} {same:>19.2f}")
                if device == "npu:cpu":
                    native = statistics.median(_run(_OPENVINO.format(model=model), dict(os.environ))[0]
                                               for _ in range(args.n))
                    print(f"{'OpenVINO compile_model':<28} {device:<8} {label:<5} {native:>9.1f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
