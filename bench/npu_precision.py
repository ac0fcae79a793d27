"""Speed and accuracy of the npu plugin's precision option, beside OpenVINO's own path.

Models: real architectures from the ONNX "light" backend test models
        (onnx/backend/test/data/light: resnet50, squeezenet, ...), whose
        weights are ConstantOfShape(0.02) there; each weight is replaced by
        seeded random values of the same shape (He-scaled conv/gemm weights,
        batch norms near identity), so rounding errors are those of a trained
        network's value spread, not of one constant. Input: 1x3x224x224 N(0, 1).
Paths:  nx_hal on npu:cpu, input already a device buffer: exe(buffer); and
        OpenVINO's Python API: core.compile_model(model, "CPU", hint) with
        req.infer(share_inputs=True, share_outputs=True), in the same run.
Precisions: f32, bf16, f16 (INFERENCE_PRECISION_HINT), and auto (nx_hal:
        precision="auto"; OpenVINO: no hint, its own choice).
Errors: of the logits (a final Softmax is dropped) against onnxruntime in
        f32: max abs error, and that over max |ref| (rel err).
Prints a table of milliseconds per inference (median over interleaved
rounds) with ratios. Needs: nx-hal, nx-hal-npu, openvino, onnx,
onnxruntime, numpy. Usage: python bench/npu_precision.py [--quick]
"""

from __future__ import annotations

import argparse
import functools
import os
import platform
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np
import onnx
from onnx import helper, numpy_helper

PRECISIONS = ("f32", "bf16", "f16", "auto")
FULL = ("squeezenet", "shufflenet", "resnet50", "inception_v2", "densenet121", "zfnet512")
QUICK = ("squeezenet", "shufflenet", "resnet50")


def light_dir() -> Path:
    return Path(os.path.dirname(onnx.__file__)) / "backend" / "test" / "data" / "light"


def _random_weight(name: str, shape: list[int], consumers: list[tuple[str, int]],
                   rng: np.random.Generator) -> np.ndarray:
    """Values for a weight by the role its consumers give it."""
    op, index = consumers[0] if consumers else ("", 0)
    if op in ("Conv", "Gemm", "MatMul", "FC") and index == 1:
        fan_in = int(np.prod(shape[1:])) if op == "Conv" else shape[0 if op == "MatMul" else -1]
        return rng.standard_normal(shape) * float(np.sqrt(2.0 / max(1, fan_in)))
    if op in ("BatchNormalization", "SpatialBN"):
        if index == 1:  # scale
            return 1.0 + 0.1 * rng.standard_normal(shape)
        if index == 4:  # variance
            return 1.0 + 0.1 * np.abs(rng.standard_normal(shape))
        return 0.1 * rng.standard_normal(shape)  # bias, mean
    if op == "Mul":  # a batch norm folded to Mul/Add (inception_v2's sc_w)
        return 1.0 + 0.1 * rng.standard_normal(shape)
    return 0.05 * rng.standard_normal(shape)  # biases and the rest


def load_light(name: str, seed: int = 0) -> onnx.ModelProto:
    """The light model with its ConstantOfShape weights made random
    initializers and only the data input left as a graph input."""
    model = onnx.load(str(light_dir() / f"light_{name}.onnx"))
    graph = model.graph
    inits = {i.name: i for i in graph.initializer}
    consumers: dict[str, list[tuple[str, int]]] = {}
    for node in graph.node:
        for k, inp in enumerate(node.input):
            consumers.setdefault(inp, []).append((node.op_type, k))
    rng = np.random.default_rng(seed)
    new_inits: list[onnx.TensorProto] = []
    nodes: list[onnx.NodeProto] = []
    for node in graph.node:
        if node.op_type == "ConstantOfShape" and node.input[0] in inits:
            shape = [int(d) for d in numpy_helper.to_array(inits[node.input[0]])]
            out = node.output[0]
            value = _random_weight(out, shape, consumers.get(out, []), rng)
            new_inits.append(numpy_helper.from_array(value.astype(np.float32), out))
        else:
            nodes.append(node)
    produced = {i.name for i in new_inits}
    used = {inp for node in nodes for inp in node.input}
    kept = [i for i in graph.initializer if i.name in used and i.name not in produced]
    for init in kept:  # float weights stored as plain initializers: random too
        if init.data_type == onnx.TensorProto.FLOAT:
            arr = numpy_helper.to_array(init)
            value = _random_weight(init.name, list(arr.shape), consumers.get(init.name, []), rng)
            init.CopyFrom(numpy_helper.from_array(value.astype(np.float32), init.name))
    all_inits = kept + new_inits
    inputs = [i for i in graph.input if i.name not in inits and i.name not in produced]
    outputs = list(graph.output)
    # Logits, not probabilities: a softmax saturated to one-hot would hide
    # the rounding errors this measures.
    if nodes[-1].op_type == "Softmax" and nodes[-1].output[0] == outputs[0].name:
        logits = nodes.pop().input[0]
        shape = [d.dim_value for d in outputs[0].type.tensor_type.shape.dim]
        outputs = [helper.make_tensor_value_info(logits, onnx.TensorProto.FLOAT, shape)]
    new_graph = helper.make_graph(nodes, graph.name, inputs, outputs, all_inits)
    out_model = helper.make_model(new_graph, opset_imports=list(model.opset_import))
    out_model.ir_version = 8
    return out_model


def median_ms(fn: Callable[[], object], iters: int) -> float:
    fn()  # warm-up
    times = []
    for _ in range(iters):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return statistics.median(times) * 1e3


def cpu_model() -> str:
    try:
        out = subprocess.run(["lscpu"], capture_output=True, text=True, check=True).stdout
        for line in out.splitlines():
            if line.startswith("Model name:"):
                return line.split(":", 1)[1].strip()
    except (OSError, subprocess.CalledProcessError):
        pass
    return platform.processor() or "unknown CPU"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="three small models, few iterations")
    parser.add_argument("--models", nargs="*", help=f"light models to run (default: {', '.join(FULL)})")
    parser.add_argument("--iters", type=int, default=None, help="timed runs per round")
    parser.add_argument("--rounds", type=int, default=None, help="interleaved rounds")
    args = parser.parse_args()
    names = tuple(args.models or (QUICK if args.quick else FULL))
    iters = args.iters or (3 if args.quick else 10)
    rounds = args.rounds or (2 if args.quick else 3)

    import onnxruntime as ort
    import openvino as ov

    import nx_hal

    nx_hal.configure(no_config=True)
    dev = nx_hal.device("npu:cpu")
    caps = ov.Core().get_property("CPU", "OPTIMIZATION_CAPABILITIES")
    x = np.random.default_rng(1).standard_normal((1, 3, 224, 224)).astype(np.float32)
    xbuf = dev.put(x)
    rows: list[tuple[str, str, float, float, float, float]] = []
    for name in names:
        model = load_light(name)
        data = model.SerializeToString()
        session = ort.InferenceSession(data, providers=["CPUExecutionProvider"])
        ref = np.asarray(session.run(None, {session.get_inputs()[0].name: x})[0], np.float64)
        paths: dict[tuple[str, str], Callable[[], object]] = {}
        outs: dict[str, np.ndarray] = {}
        for p in PRECISIONS:
            exe = dev.compile(model, precision=p)
            outs[p] = exe(xbuf)[0].to_numpy()
            core = ov.Core()  # fresh: no hint set anywhere, as a user's own
            hint = {} if p == "auto" else {"INFERENCE_PRECISION_HINT": p}
            req = core.compile_model(core.read_model(data), "CPU", hint).create_infer_request()
            paths[(p, "nx_hal")] = functools.partial(exe, xbuf)
            paths[(p, "openvino")] = functools.partial(req.infer, [x], share_inputs=True,
                                                       share_outputs=True)
        samples: dict[tuple[str, str], list[float]] = {k: [] for k in paths}
        for _ in range(rounds):  # interleaved, so drift on a shared machine hits all alike
            for key, fn in paths.items():
                samples[key].append(median_ms(fn, iters))
        scale = float(np.max(np.abs(ref))) or 1.0
        for p in PRECISIONS:
            err = float(np.max(np.abs(outs[p].astype(np.float64) - ref)))
            rows.append((name, p, statistics.median(samples[(p, "nx_hal")]),
                         statistics.median(samples[(p, "openvino")]), err, err / scale))
        print(f"  done {name}", file=sys.stderr, flush=True)

    print(f"OpenVINO {ov.get_version()}, {cpu_model()}, {os.cpu_count()} CPUs; "
          f"OpenVINO CPU capabilities: {' '.join(caps)}")
    print("ms per inference (median), batch 1; errors vs onnxruntime f32\n")
    header = (f"| {'model':12s} | {'precision':9s} | {'nx_hal ms':>9s} | {'OpenVINO ms':>11s} | "
              f"{'nx_hal/OV':>9s} | {'f32/this':>8s} | {'max abs err':>11s} | {'rel err':>8s} |")
    print(header)
    print("|" + "|".join("-" * (len(c)) for c in header.split("|")[1:-1]) + "|")
    f32_ms = {r[0]: r[2] for r in rows if r[1] == "f32"}
    for name, p, ours, theirs, err, rel in rows:
        print(f"| {name:12s} | {p:9s} | {ours:9.2f} | {theirs:11.2f} | {ours / theirs:9.2f} | "
              f"{f32_ms[name] / ours:8.2f} | {err:11.2e} | {rel:8.1e} |")


if __name__ == "__main__":
    main()
