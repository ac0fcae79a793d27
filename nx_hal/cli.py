"""The ``nx-hal`` command: a thin layer over the library. Human-readable by
default, ``--json`` on every command. Plugins are probed in a child process
first, so a plugin that crashes or hangs is reported, not fatal."""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
import warnings
from pathlib import Path
from typing import Any

import numpy as np

from nx_hal import api, programs
from nx_hal.errors import NxHalError
from nx_hal.registry import Registry
from nx_hal.selection import FallbackWarning

__all__ = ["main"]


def _human_bytes(n: int) -> str:
    if n <= 0:
        return "-"
    size = float(n)
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if size < 1024 or unit == "TiB":
            return f"{size:.1f} {unit}" if unit != "B" else f"{int(size)} B"
        size /= 1024
    return str(n)


def _registry(args: argparse.Namespace) -> Registry:
    return api.configure(config_file=args.config_file, no_config=args.no_config, isolate_probe=True)


def _emit(args: argparse.Namespace, data: Any, text: str) -> None:
    print(json.dumps(data, indent=2, default=str) if args.json else text)


def cmd_plugins(args: argparse.Namespace) -> int:
    reg = _registry(args)
    rows = [r.to_dict() for r in reg.records.values()]
    lines = []
    for r in rows:
        lines.append(f"{r['name']}  [{r['state']}]")
        lines.append(f"  package: {r['package'] or '-'} {r['package_version'] or ''}".rstrip())
        lines.append(f"  library: {r['library'] or '-'}")
        lines.append(f"  ABI: {r['abi_version'] or '-'}")
        if r["info"]:
            info = r["info"]
            lines.append(f"  plugin: {info['vendor']} {info['plugin_version']}, SDK {info['sdk_version'] or '-'}")
        if r["state"] == "failed":
            lines.append(f"  reason: {r['code']}: {r['reason']}")
        elif r["state"] != "loaded":
            lines.append(f"  reason: {r['reason']}")
        for diag in (r["diagnostics"] or "").splitlines():
            lines.append(f"  note: {diag}")
    if not rows:
        lines.append("no nx_hal plugins installed.")
        lines.append("install one: pip install nx-hal-npu (OpenVINO: Intel NPU, CPU, GPU), "
                     "nx-hal-tpu (PJRT: TPU, CUDA GPU, XLA CPU), nx-hal-graphcore (Poplar: IPU)")
    _emit(args, rows, "\n".join(lines))
    return 0


def cmd_devices(args: argparse.Namespace) -> int:
    reg = _registry(args)
    devs = reg.devices()
    rows = [d.info() for d in devs]
    lines = [f"{'SELECTOR':<18} {'KIND':<5} {'MEMORY':>10}  {'FORMATS':<24} NAME"]
    for d in devs:
        lines.append(f"{d.selector:<18} {d.kind:<5} {_human_bytes(d.memory_bytes):>10}  "
                     f"{','.join(d.formats):<24} {d.name}")
    if not devs:
        lines = ["no devices: no plugin is installed or none found a device. Run 'nx-hal doctor' for why."]
    _emit(args, rows, "\n".join(lines))
    return 0


def cmd_doctor(args: argparse.Namespace) -> int:
    _registry(args)
    report = api.explain(args.device, program_format=args.format)
    loaded = api.registry().loaded_config
    text = str(report)
    files = ", ".join(str(f) for f in loaded.files) or "none (defaults and environment only)"
    text += f"\nconfig files: {files}"
    for warning in loaded.warnings:
        text += f"\nwarning: {warning}"
    data = report.to_dict() | {"warnings": loaded.warnings}
    _emit(args, data, text)
    return 0


def cmd_config(args: argparse.Namespace) -> int:
    from nx_hal.config import load_config

    loaded = load_config(config_file=args.config_file, no_config=args.no_config)
    values = loaded.config.model_dump(mode="json")
    values["prefer"] = [str(s) for s in loaded.config.prefer]
    rows = {k: {"value": v, "source": loaded.origin(k)} for k, v in values.items()}
    lines = [f"{k} = {json.dumps(r['value'])}    # from {r['source']}" for k, r in rows.items()]
    for plugin, opts in loaded.config.plugins.items():
        for opt in opts:
            lines.append(f"  plugins.{plugin}.{opt}    # from {loaded.origin('plugins', plugin, opt)}")
    lines += [f"warning: {w}" for w in loaded.warnings]
    _emit(args, {"settings": rows, "files": [str(f) for f in loaded.files], "warnings": loaded.warnings},
          "\n".join(lines))
    return 0


def _input_array(spec: Any, given: dict[str, np.ndarray], rng: np.random.Generator) -> np.ndarray:
    from nx_hal import dtypes

    if spec.name in given:
        return given[spec.name]
    shape = tuple(1 if d is None else d for d in (spec.shape or ()))
    dtype = dtypes.to_numpy(dtypes.DTYPE_NAMES_REVERSE[spec.dtype])
    if dtype.kind == "f":
        return rng.standard_normal(shape).astype(dtype)
    if dtype.kind == "b":
        return rng.integers(0, 2, shape).astype(dtype)
    return rng.integers(0, 10, shape).astype(dtype)


def cmd_run(args: argparse.Namespace) -> int:
    model = Path(args.model)
    fmt = args.format or programs.format_of_path(model)
    _registry(args)
    given: dict[str, np.ndarray] = {}
    for item in args.input or []:
        name, _, path = item.partition("=")
        if not path:
            print(f"error: --input takes name=file.npy, got '{item}'", file=sys.stderr)
            return 2
        given[name] = np.load(path)
    options: dict[str, object] = {}
    if args.input_shape:
        from nx_hal.onnx.convert import parse_input_shapes

        options["input_shapes"] = parse_input_shapes(args.input_shape)  # core option: fixes ONNX dims
    t0 = time.perf_counter()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", FallbackWarning)  # the report below says it
        exe, report = api.compile_anywhere(model, fmt, selector=args.device, input_shapes=options.get("input_shapes"))
    compile_s = time.perf_counter() - t0
    dev = exe.device
    unknown = set(given) - {s.name for s in exe.inputs}
    if unknown:
        print(f"error: no input named {', '.join(sorted(unknown))} (inputs: "
              f"{', '.join(s.name for s in exe.inputs)})", file=sys.stderr)
        return 2
    rng = np.random.default_rng(0)
    inputs = [_input_array(s, given, rng) for s in exe.inputs]
    buffers = [dev.put(x) for x in inputs]
    times = []
    outputs = []
    for _ in range(max(1, args.iterations)):
        t = time.perf_counter()
        outputs = exe(*buffers)
        times.append(time.perf_counter() - t)
    results = [o.to_numpy() for o in outputs]
    lat = {
        "compile_ms": compile_s * 1e3,
        "first_ms": times[0] * 1e3,
        "median_ms": statistics.median(times) * 1e3,
        "min_ms": min(times) * 1e3,
        "iterations": len(times),
    }
    data = {
        "model": str(model), "format": fmt, "device": dev.info(), "selection": report.to_dict(),
        "inputs": [s.to_dict() for s in exe.inputs],
        "outputs": [{"name": s.name, "dtype": r.dtype.name, "shape": list(r.shape)}
                    for s, r in zip(exe.outputs, results, strict=False)],
        "latency": lat,
    }
    lines = [f"device: {dev.selector} ({dev.name}) chosen for '{report.chosen_by}'"]
    for skip in report.skipped:
        lines.append(f"  skipped {skip.selector}: {skip.reason}")
    for s, x in zip(exe.inputs, inputs, strict=False):
        lines.append(f"input  {s.name}: {x.dtype} {list(x.shape)}{' (random)' if s.name not in given else ''}")
    for s, r in zip(exe.outputs, results, strict=False):
        lines.append(f"output {s.name}: {r.dtype} {list(r.shape)}  first values {np.ravel(r)[:4].tolist()}")
    lines.append(f"latency: compile {lat['compile_ms']:.1f} ms, first run {lat['first_ms']:.3f} ms, "
                 f"median {lat['median_ms']:.3f} ms, min {lat['min_ms']:.3f} ms over {len(times)} runs")
    _emit(args, data, "\n".join(lines))
    return 0


def cmd_convert(args: argparse.Namespace) -> int:
    from nx_hal.onnx.convert import convert_cli, parse_input_shapes

    if args.target and not args.target[0].isdigit():
        _registry(args)  # a plugin name: its devices say which StableHLO version they read
    shapes = parse_input_shapes(args.input_shape) if args.input_shape else None
    summary = convert_cli(args.model, args.output, target=args.target, bytecode=args.bytecode,
                          input_shapes=shapes, devices=api.devices)
    _emit(args, {"output": args.output, "summary": summary}, summary)
    return 0


def cmd_conformance(args: argparse.Namespace) -> int:
    from nx_hal.onnx import conformance as oc

    reg = _registry(args)
    groups = [g for g in args.groups.split(",") if g]
    cases = oc.collect(groups, name_filter=args.name_filter)
    targets = []
    for record in reg.records.values():
        if args.plugin and record.name != args.plugin:
            continue
        dev = next((d for d in record.devices if d.accepts("onnx") is None), None)
        if dev is None:
            why = record.status_text() if record.state != "loaded" else "no device accepts ONNX"
            print(f"{record.name}: skipped: {why}", file=sys.stderr)
            continue
        targets.append((dev.selector, dev))
    summaries = []
    for name, dev in targets:
        summaries.append(oc.summarize(name, oc.run_cases(dev, cases)))
    if not args.no_reference:
        summaries.append(oc.summarize("onnxruntime", (oc.run_onnxruntime(c) for c in cases)))
    if args.json:
        print(json.dumps([s.to_dict() for s in summaries], indent=2))
        return 0
    print(oc.format_table(summaries, details=args.details))
    return 0


def _versions() -> dict[str, Any]:
    """The core's version and ABI, and each installed plugin's package version
    and ABI (read from its library's query answer; no client is made)."""
    from nx_hal.config import load_config
    from nx_hal.library import open_library
    from nx_hal.version import __version__, abi_version

    registry = Registry(load_config(no_config=True))
    registry.discover()
    plugins = []
    for name, record in sorted(registry.records.items()):
        entry: dict[str, Any] = {"name": name, "package": None, "version": None, "abi_version": None}
        if record.spec is not None:
            entry.update(package=record.spec.package, version=record.spec.package_version)
            try:
                entry["abi_version"] = open_library(str(record.spec.library), name).info.abi_version
            except NxHalError as exc:
                entry["error"] = str(exc)
        else:
            entry["error"] = record.reason
        plugins.append(entry)
    return {"nx_hal": __version__, "abi_version": abi_version(), "plugins": plugins}


class _VersionAction(argparse.Action):
    """``--version``, computed only when asked (it discovers the plugins)."""

    def __init__(self, option_strings: list[str], dest: str, **kwargs: Any) -> None:
        super().__init__(option_strings, dest, nargs=0, help="the core's, each plugin's and the ABI versions")

    def __call__(self, parser: argparse.ArgumentParser, namespace: argparse.Namespace,
                 values: Any, option_string: str | None = None) -> None:
        data = _versions()
        lines = [f"nx-hal {data['nx_hal']} (ABI {data['abi_version']})"]
        for p in data["plugins"]:
            detail = f"ABI {p['abi_version']}" if p["abi_version"] else f"not loadable: {p.get('error', '')}"
            lines.append(f"  {p['package'] or p['name']} {p['version'] or '-'}: plugin '{p['name']}', {detail}")
        if not data["plugins"]:
            lines.append("  no plugins installed (pip install nx-hal-npu, 'nx-hal-tpu[cpu]', nx-hal-graphcore)")
        print("\n".join(lines))
        parser.exit()


def cmd_sdk(args: argparse.Namespace) -> int:
    from nx_hal import sdk

    try:
        values = {
            "include": sdk.get_include, "cflags": sdk.get_cflags, "libs": sdk.get_libs,
            "cmake_dir": sdk.get_cmake_dir, "pkgconfig_dir": sdk.get_pkgconfig_dir,
            "plugin_path": sdk.plugin_path,
        }
        wanted = [k for k in values if getattr(args, k)]
        if args.json:
            print(json.dumps({k: values[k]() for k in (wanted or list(values))}, indent=2))
        elif wanted:
            print(" ".join(values[k]() for k in wanted))
        else:
            for key, fn in values.items():
                print(f"{key.replace('_', '-')}: {fn()}")
    except sdk.SdkMissingError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    return 0


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="nx-hal", description="nx_hal: ML accelerators through one API")
    parser.add_argument("--version", action=_VersionAction)
    parser.add_argument("--config-file", help="read this TOML file instead of searching for nx_hal.toml")
    parser.add_argument("--no-config", action="store_true", help="read no config files")
    sub = parser.add_subparsers(dest="command", required=True)

    def add(name: str, help: str) -> argparse.ArgumentParser:
        p = sub.add_parser(name, help=help)
        p.add_argument("--json", action="store_true", help="machine-readable output")
        return p

    add("plugins", "installed plugins: package, library, ABI version, load status and reason")
    add("devices", "devices of every loaded plugin")
    doctor = add("doctor", "the device selection explained: every choice skipped and why")
    doctor.add_argument("--device", help="explain this selector instead of the preference list")
    doctor.add_argument("--format", help="only devices accepting this program format")
    add("config", "the effective config and where each value came from")
    run = add("run", "compile and run a model on the selected device")
    run.add_argument("model")
    run.add_argument("--device", help="selector, e.g. cpu, npu:cpu, tpu:cpu:0 (strict: no fallback)")
    run.add_argument("--format", help="program format (default: from the file suffix)")
    run.add_argument("--input", action="append", metavar="NAME=FILE.npy", help="an input from a .npy file")
    run.add_argument("--iterations", type=int, default=10, help="timed runs (default 10)")
    run.add_argument("--input-shape", action="append", metavar="NAME=D0,D1,...",
                     help="fix a dynamic input shape (ONNX on PJRT devices)")
    convert = add("convert", "convert an ONNX model to StableHLO for C/C++ programs")
    convert.add_argument("model")
    convert.add_argument("-o", "--output", required=True, help="output .mlir (or .mlirbc with --bytecode)")
    convert.add_argument("--target", help="plugin name or StableHLO version to serialise for")
    convert.add_argument("--bytecode", action="store_true", help="portable StableHLO bytecode")
    convert.add_argument("--input-shape", action="append", metavar="NAME=D0,D1,...",
                         help="fix a dynamic input shape")
    conf = add("conformance", "run the ONNX test cases and model corpus on every ONNX-capable device")
    conf.add_argument("--plugin", help="only this plugin")
    conf.add_argument("--groups", default="node,light,pytorch-converted,pytorch-operator,simple",
                      help="comma-separated: node and/or the model corpus directories")
    conf.add_argument("-k", dest="name_filter", help="only cases whose name contains this")
    conf.add_argument("--no-reference", action="store_true", help="skip the onnxruntime column")
    conf.add_argument("--details", action="store_true", help="print every failing case")
    sdk = add("sdk", "the C/C++ SDK in this environment: compiler and linker flags, CMake and pkg-config dirs")
    for flag, help in (("--include", "the include directory"), ("--cflags", "compiler flags"),
                       ("--libs", "linker flags for the loader (with its RPATH)"),
                       ("--cmake-dir", "nx_halConfig.cmake's directory (-Dnx_hal_DIR=...)"),
                       ("--pkgconfig-dir", "nx_hal.pc's directory (PKG_CONFIG_PATH)"),
                       ("--plugin-path", "NX_HAL_PLUGIN_PATH naming every installed plugin's directory")):
        sdk.add_argument(flag, action="store_true", help=help)
    return parser


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    handlers = {"plugins": cmd_plugins, "devices": cmd_devices, "doctor": cmd_doctor,
                "config": cmd_config, "run": cmd_run, "convert": cmd_convert,
                "conformance": cmd_conformance, "sdk": cmd_sdk}
    try:
        return handlers[args.command](args)
    except NxHalError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
