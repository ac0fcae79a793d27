"""Dispatch overhead of nx_hal's OpenVINO plugin, in one run against its baselines.

Models: tiny  y[1,64]   = x[1,64]   · W[64,64]
        large y[64,1024] = x[64,1024] · W[1024,1024]
Paths:  OpenVINO C API directly (bench/npu_capi_driver.c, built here: infer,
        then take the output tensor and its data, as any program must), the
        same C driver through the nx_hal ABI (the plugin alone, no Python),
        OpenVINO Python: req.infer([x]) and the shared-tensor path
        (share_inputs/share_outputs), and nx_hal: exe(buffer) with the input
        already on the device, and exe(numpy) + to_numpy() (full round trip:
        the input aliased, the output read as a read-only view, as the C API
        reads its output tensor's data; bench/roundtrip.py has more rows).
All on OpenVINO's CPU device in f32. Prints a table of microseconds per
inference (median of several repeats). Needs: nx-hal, nx-hal-npu, openvino,
onnx, numpy, a C compiler. Usage: python bench/npu_overhead.py [--quick]
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

HERE = Path(__file__).resolve().parent


def matmul_model(m: int, k: int, n: int) -> onnx.ModelProto:
    rng = np.random.default_rng(0)
    w = (rng.standard_normal((k, n)) / np.sqrt(k)).astype(np.float32)
    graph = helper.make_graph(
        [helper.make_node("MatMul", ["x", "w"], ["y"])], "matmul",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [m, k])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [m, n])],
        [numpy_helper.from_array(w, "w")],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    return model


def per_call_us(fn: Callable[[], object], iters: int) -> float:
    for _ in range(max(10, iters // 10)):
        fn()
    start = time.perf_counter()
    for _ in range(iters):
        fn()
    return (time.perf_counter() - start) / iters * 1e6


def build_capi_driver(out_dir: Path) -> Path:
    import openvino

    ov_root = Path(openvino.__file__).parent
    libs = sorted((ov_root / "libs").glob("libopenvino_c.so.*"))
    if not libs:
        raise SystemExit(f"no libopenvino_c.so.* under {ov_root / 'libs'}")
    cc = shutil.which("cc") or shutil.which("gcc")
    if cc is None:
        raise SystemExit("a C compiler is needed for the C API baseline")
    exe = out_dir / "npu_capi_driver"
    subprocess.run(
        [cc, "-O2", "-std=c11", f"-I{ov_root / 'include'}", f"-I{HERE.parent / 'include'}",
         str(HERE / "npu_capi_driver.c"), "-o", str(exe), f"-L{ov_root / 'libs'}",
         f"-l:{libs[0].name}", f"-Wl,-rpath,{ov_root / 'libs'}", "-ldl"],
        check=True,
    )
    return exe


def capi_us(driver: Path, model_path: Path, m: int, k: int, iters: int, plugin: str = "") -> float:
    extra = [plugin] if plugin else []
    out = subprocess.run([str(driver), str(model_path), str(m), str(k), str(iters), *extra],
                         check=True, capture_output=True, text=True)
    return float(out.stdout.strip())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="fewer iterations")
    parser.add_argument("--rounds", type=int, default=7, help="interleaved rounds (median)")
    args = parser.parse_args()

    import openvino as ov

    import nx_hal

    nx_hal.configure(no_config=True)
    dev = nx_hal.device("npu:cpu")
    core = ov.Core()
    scale = 0.2 if args.quick else 1.0
    rows: list[tuple[str, dict[str, float]]] = []
    with tempfile.TemporaryDirectory() as tmp:
        tmpdir = Path(tmp)
        driver = build_capi_driver(tmpdir)
        for label, (m, k, n), iters in [("tiny 1x64·64x64", (1, 64, 64), 20000),
                                        ("large 64x1024·1024x1024", (64, 1024, 1024), 200)]:
            iters = max(20, int(iters * scale))
            model = matmul_model(m, k, n)
            path = tmpdir / f"mm_{m}_{k}_{n}.onnx"
            path.write_bytes(model.SerializeToString())
            # The same values the C driver feeds (kernel speed can depend on data).
            x = (np.arange(m * k) % 7 * 0.1).astype(np.float32).reshape(m, k)

            compiled = core.compile_model(core.read_model(str(path)), "CPU",
                                          {"INFERENCE_PRECISION_HINT": "f32"})
            req = compiled.create_infer_request()
            exe = dev.compile(model)
            xbuf = dev.put(x)
            expected = x @ numpy_helper.to_array(model.graph.initializer[0])
            np.testing.assert_allclose(exe(xbuf)[0].to_numpy(), expected, rtol=1e-4, atol=1e-4)

            paths: dict[str, Callable[[], float]] = {
                "OpenVINO C API": lambda: capi_us(driver, path, m, k, iters),
                "nx_hal C ABI (plugin, no Python)": lambda: capi_us(
                    driver, path, m, k, iters, str(dev.link.spec.library)),
                "OpenVINO Python infer([x])": lambda: per_call_us(lambda: req.infer([x]), iters),
                "OpenVINO Python shared tensors": lambda: per_call_us(
                    lambda: req.infer([x], share_inputs=True, share_outputs=True), iters),
                "nx_hal exe(buffer)": lambda: per_call_us(lambda: exe(xbuf), iters),
                "nx_hal exe(numpy) + to_numpy()": lambda: per_call_us(
                    lambda: exe(x)[0].to_numpy(), iters),
            }
            # Rounds interleave the paths so drift on a shared machine hits all alike.
            samples: dict[str, list[float]] = {name: [] for name in paths}
            for _ in range(args.rounds):
                for name, measure in paths.items():
                    samples[name].append(measure())
            rows.append((label, {name: statistics.median(v) for name, v in samples.items()}))

    print(f"OpenVINO {ov.get_version()} CPU f32, {sys.platform}; microseconds per inference (median)")
    for label, times in rows:
        base = times["OpenVINO C API"]
        print(f"\n{label}")
        print(f"  {'path':34s} {'us':>10s} {'x C API':>8s}")
        for name, us in times.items():
            print(f"  {name:34s} {us:10.2f} {us / base:8.2f}")


if __name__ == "__main__":
    main()
