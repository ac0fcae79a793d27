"""The commands of ``nx-hal``, one function each: ``cmd_<name>(args,
out)`` returns the exit status; ``out`` prints the result (text or JSON)
and draws progress."""

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
from nx_hal.cli.args import UsageError
from nx_hal.cli.output import Output
from nx_hal.errors import FailedPreconditionError, NxHalError
from nx_hal.registry import Registry
from nx_hal.selection import FallbackWarning

__all__ = ["HANDLERS", "versions"]


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
    reg = api.configure(config_file=args.config_file, no_config=args.no_config, isolate_probe=True)
    device = getattr(args, "device", None)
    if device is not None:  # its syntax was checked when read (cli.args.selector); now, its name
        from nx_hal.selectors import Selector

        unknown = api.unknown_name(reg, Selector.parse(device))
        if unknown:
            raise UsageError(f"--device {unknown}")
    return reg


def cmd_plugins(args: argparse.Namespace, out: Output) -> int:
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
    out.emit(rows, "\n".join(lines))
    return 0


def cmd_devices(args: argparse.Namespace, out: Output) -> int:
    if args.ray is not None:
        return _ray_devices(args.ray, out)
    reg = _registry(args)
    devs = reg.devices()
    rows = [d.info() for d in devs]
    cells = [[d.selector, d.kind, _human_bytes(d.memory_bytes), ",".join(d.formats), d.name] for d in devs]
    lines = [f"{'SELECTOR':<18} {'KIND':<5} {'MEMORY':>10}  {'FORMATS':<24} NAME"]
    for selector, kind, memory, formats, name in cells:
        lines.append(f"{selector:<18} {kind:<5} {memory:>10}  {formats:<24} {name}")
    if not devs:
        lines = ["no devices: no plugin is installed or none found a device. Run 'nx-hal doctor' for why."]
    out.table(rows, ["SELECTOR", "KIND", "MEMORY", "FORMATS", "NAME"], cells, "\n".join(lines))
    return 0


def _ray_devices(address: str, out: Output) -> int:
    """``devices --ray``: the table with each device's node first, then what
    each node chooses and every choice it skipped, with reasons."""
    try:
        import nx_hal.ray as nx_ray
    except ImportError as exc:
        raise FailedPreconditionError(str(exc)) from None
    nodes = nx_ray.survey(address)
    rows = [d for node in nodes for d in node["devices"]]
    cells = [[str(d["node_id"])[:12], str(d["node_address"]), str(d["selector"]), str(d["kind"]),
              _human_bytes(int(d["memory_bytes"] or 0)), ",".join(d["formats"]), str(d["name"])] for d in rows]
    lines = [f"{'NODE':<12} {'ADDRESS':<15} {'SELECTOR':<18} {'KIND':<5} {'MEMORY':>10}  {'FORMATS':<24} NAME"]
    for node_id, addr, selector, kind, memory, formats, name in cells:
        lines.append(f"{node_id:<12} {addr:<15} {selector:<18} {kind:<5} {memory:>10}  {formats:<24} {name}")
    notes = []
    for node in nodes:
        where = f"node {node['node_id'][:12]} ({node['address']})"
        if node["error"]:
            notes.append(f"{where}: not asked: {node['error']}")
            continue
        chosen = f"chosen {node['chosen']} for '{node['chosen_by']}'" if node["chosen"] else "no device chosen"
        notes.append(f"{where}: {chosen}")
        notes += [f"  skipped {s['selector']}: {s['reason']}" for s in node["skipped"]]
    if not rows:
        lines = ["no devices on any node of the cluster: is nx_hal with a plugin installed on its nodes?"]
    data = {"devices": rows, "nodes": [{k: v for k, v in n.items() if k != "devices"} for n in nodes]}
    out.table(data, ["NODE", "ADDRESS", "SELECTOR", "KIND", "MEMORY", "FORMATS", "NAME"], cells,
              "\n".join(lines + notes))
    if not out.json and rows and sys.stdout.isatty():
        print("\n".join(notes))  # under rich's table, which carries no notes
    return 0


def cmd_doctor(args: argparse.Namespace, out: Output) -> int:
    _registry(args)
    report = api.explain(args.device, program_format=args.format)
    loaded = api.registry().loaded_config
    text = str(report)
    files = ", ".join(str(f) for f in loaded.files) or "none (defaults and environment only)"
    text += f"\nconfig files: {files}"
    for warning in loaded.warnings:
        text += f"\nwarning: {warning}"
    data = report.to_dict() | {"warnings": loaded.warnings}
    out.emit(data, text)
    # A diagnosis that finds no device to use is a failure a script can see.
    return 0 if report.chosen is not None else 1


def cmd_config(args: argparse.Namespace, out: Output) -> int:
    from nx_hal.config import load_config

    loaded = load_config(config_file=args.config_file, no_config=args.no_config)
    if loaded.config.plugins:  # each installed plugin's options, by its own model: a bad value is said here
        reg = _registry(args)
        for name in loaded.config.plugins:
            if name in reg.records:
                reg.plugin_options(reg.records[name])
    values = loaded.config.model_dump(mode="json")
    values["prefer"] = [str(s) for s in loaded.config.prefer]
    rows = {k: {"value": v, "source": loaded.origin(k)} for k, v in values.items()}
    lines = [f"{k} = {json.dumps(r['value'])}    # from {r['source']}" for k, r in rows.items()]
    for plugin, opts in loaded.config.plugins.items():
        for opt in opts:
            lines.append(f"  plugins.{plugin}.{opt}    # from {loaded.origin('plugins', plugin, opt)}")
    lines += [f"warning: {w}" for w in loaded.warnings]
    out.emit({"settings": rows, "files": [str(f) for f in loaded.files], "warnings": loaded.warnings},
          "\n".join(lines))
    return 0


def _load_given(items: list[tuple[str, Path]] | None) -> dict[str, np.ndarray]:
    given: dict[str, np.ndarray] = {}
    for name, path in items or []:
        try:
            with path.open("rb") as fh:
                magic = fh.read(6)
        except OSError as exc:
            raise UsageError(f"--input {name}={path}: not a readable .npy file ({exc})") from None
        if magic != b"\x93NUMPY" and not magic.startswith(b"PK"):  # .npy, or a zip: .npz
            raise UsageError(f"--input {name}={path}: not a .npy file (numpy.save writes them)")
        try:
            given[name] = np.load(path, allow_pickle=False)
        except (OSError, EOFError) as exc:
            raise UsageError(f"--input {name}={path}: not a readable .npy file ({exc})") from None
        except ValueError as exc:
            # numpy's words for an object array advise allow_pickle: running a
            # pickle is not something an input file gets to do here.
            why = "it holds Python objects, not numbers" if "allow_pickle" in str(exc) else str(exc)
            raise UsageError(f"--input {name}={path}: not a readable .npy file ({why})") from None
        if not isinstance(given[name], np.ndarray):
            raise UsageError(f"--input {name}={path}: holds several arrays (.npz); pass one .npy per input")
    return given


def _check_given(specs: tuple[Any, ...], given: dict[str, np.ndarray]) -> None:
    """Names, dtypes and static dimensions of the user's inputs, checked
    before anything runs, each mismatch said against what the model takes."""
    from nx_hal import dtypes

    by_name = {s.name: s for s in specs}
    unknown = sorted(set(given) - set(by_name))
    if unknown:
        raise UsageError(f"no input named {', '.join(unknown)} (inputs: "
                                   f"{', '.join(s.name for s in specs)})")
    for name, array in given.items():
        spec = by_name[name]
        try:
            got = dtypes.name_of(dtypes.from_numpy(array.dtype))
        except ValueError:
            got = str(array.dtype)
        if got != spec.dtype:
            raise UsageError(f"input {name}: the model takes {spec.dtype}, the file holds {got} "
                                       f"({array.dtype})")
        if spec.shape is not None and (len(spec.shape) != array.ndim or any(
                d is not None and d != n for d, n in zip(spec.shape, array.shape, strict=True))):
            want = ["?" if d is None else d for d in spec.shape]
            raise UsageError(f"input {name}: the model takes shape {want}, the file holds "
                                       f"{list(array.shape)}")


def _compile(args: argparse.Namespace, out: Output, model: Path, fmt: str | None) -> tuple[Any, Any, float]:
    shapes = dict(args.input_shape) if args.input_shape else None  # core option: fixes ONNX dims
    t0 = time.perf_counter()
    with warnings.catch_warnings(), out.progress.activity(f"compiling {model.name}"):
        warnings.simplefilter("ignore", FallbackWarning)  # the report below says it
        exe, report = api.compile_anywhere(model, fmt, selector=args.device, input_shapes=shapes)
    return exe, report, time.perf_counter() - t0


def _format_of(model: Path) -> str:
    """The format by the file's suffix or first bytes; an error naming
    ``--format`` when neither tells."""
    with model.open("rb") as fh:
        fmt = programs.format_of_path(model) or programs.sniff(fh.read(4096))
    if fmt is None:
        raise UsageError(
            f"cannot tell what kind of program {model} is: neither its name nor its first bytes are those of "
            f"a format nx_hal knows; pass --format (one of: {', '.join(programs.KNOWN_FORMATS)})")
    return fmt


def cmd_run(args: argparse.Namespace, out: Output) -> int:
    from nx_hal.cli.inputs import index_ranges, sample_inputs

    model, expected = _model_of(args)
    fmt = args.format or _format_of(model)
    problem = programs.onnx_problem(model.read_bytes()) if fmt == "onnx" else None
    if problem is not None:  # a mistake on the command line, said before any device is tried
        raise UsageError(f"not a model nx_hal can read: {model}: {problem}")
    given = _load_given(args.input)
    if expected is not None:
        given = {**expected[0], **given}  # the reference's inputs, unless given
    _registry(args)
    exe, report, compile_s = _compile(args, out, model, fmt)
    dev = exe.device
    _check_given(exe.inputs, given)
    missing = [s for s in exe.inputs if s.name not in given]
    ranges = index_ranges(model) if missing and fmt == "onnx" else {}
    made = sample_inputs(missing, ranges)
    inputs = [given[s.name] if s.name in given else made[s.name].array for s in exe.inputs]
    buffers = [dev.put(x) for x in inputs]
    from nx_hal.dynamic import DynamicExecutable

    if isinstance(exe, DynamicExecutable):  # compiled per shape: for these inputs now, not in the timed runs
        t0 = time.perf_counter()
        with out.progress.activity(f"compiling {model.name} for these shapes"):
            exe.executable_for(*buffers)
        compile_s += time.perf_counter() - t0
    if args.throughput:
        outputs, rate = _throughput_runs(exe, buffers, args, out)
    else:
        outputs, times = _timed_runs(exe, buffers, args, out)
    results = [o.to_numpy() for o in outputs]
    data = {
        "model": str(model), "format": fmt, "device": dev.info(), "selection": report.to_dict(),
        "inputs": [s.to_dict() | {"values": "given" if s.name in given else made[s.name].note}
                   for s in exe.inputs],
        "outputs": [{"name": s.name, "dtype": r.dtype.name, "shape": list(r.shape)}
                    for s, r in zip(exe.outputs, results, strict=False)],
    }
    if args.throughput:
        data["throughput"] = rate | {"compile_ms": compile_s * 1e3}
    else:
        lat = {"compile_ms": compile_s * 1e3, "first_ms": times[0] * 1e3,
               "median_ms": statistics.median(times) * 1e3, "min_ms": min(times) * 1e3, "iterations": len(times)}
        data["latency"] = lat
    lines = [f"device: {dev.selector} ({dev.name}) chosen for '{report.chosen_by}'"]
    if report.quiet() and report.skipped and not args.verbose:
        # What is not on this machine, in one line: the same on every run.
        lines[0] += f": {report.absent_line()} (nx-hal doctor says why)"
    else:
        lines += [f"  skipped {skip.selector}: {skip.reason}" for skip in report.skipped]
    for s, x in zip(exe.inputs, inputs, strict=False):
        files = dict(args.input or [])
        how = (f"from {files[s.name]}" if s.name in files else "the example's reference input" if s.name in given
               else made[s.name].note)
        lines.append(f"input  {s.name}: {x.dtype} {list(x.shape)}: {how}")
    for s, r in zip(exe.outputs, results, strict=False):
        lines.append(f"output {s.name}: {r.dtype} {list(r.shape)}  first values {np.ravel(r)[:4].tolist()}")
    if args.throughput:
        lines.append(f"throughput: {rate['inferences_per_s']:.1f} inferences/s ({rate['inferences']} in "
                     f"{rate['seconds']:.2f} s, {rate['in_flight']} in flight; compile {compile_s * 1e3:.1f} ms); "
                     f"latency p50 {rate['p50_ms']:.3f} ms, p90 {rate['p90_ms']:.3f} ms, p99 {rate['p99_ms']:.3f} ms")
    else:
        lines.append(f"latency: compile {lat['compile_ms']:.1f} ms, first run {lat['first_ms']:.3f} ms, "
                     f"median {lat['median_ms']:.3f} ms, min {lat['min_ms']:.3f} ms over {len(times)} runs")
    status = 0
    if expected is not None and not args.input:
        check = _against_reference(expected[1], [s.name for s in exe.outputs], results)
        data["reference"] = check
        lines.append(f"reference: {'matches' if check['matches'] else 'DOES NOT MATCH'} numpy's output "
                     f"(max abs error {check['max_abs_error']:.1e}; tolerance rtol {check['rtol']:g}, "
                     f"atol {check['atol']:g})")
        status = 0 if check["matches"] else 1
    out.emit(data, "\n".join(lines))
    return status


def _timed_runs(exe: Any, buffers: list[Any], args: argparse.Namespace, out: Output) -> tuple[list[Any], list[float]]:
    """``--iterations`` runs one at a time: the last outputs and each run's seconds."""
    times: list[float] = []
    outputs: list[Any] = []
    with out.progress.steps(f"running on {exe.device.selector}", args.iterations) as advance:
        for i in range(args.iterations):
            t = time.perf_counter()
            outputs = exe(*buffers)
            times.append(time.perf_counter() - t)
            advance(f"run {i + 1}")
    return outputs, times


def _throughput_runs(exe: Any, buffers: list[Any], args: argparse.Namespace,
                     out: Output) -> tuple[list[Any], dict[str, Any]]:
    """``exe.map`` over the same inputs for ``--seconds`` with ``--in-flight``
    runs going: the last outputs, and inferences/s with latency percentiles
    (each from the item's start, when map takes it, to its result)."""
    started: list[float] = []
    deadline = time.perf_counter() + args.seconds

    def items() -> Any:
        while time.perf_counter() < deadline or not started:
            started.append(time.perf_counter())
            yield tuple(buffers)

    latencies: list[float] = []
    outputs: list[Any] = []
    t0 = time.perf_counter()
    with out.progress.activity(f"running on {exe.device.selector} for {args.seconds:g} s, "
                               f"{args.in_flight} in flight"):
        for i, result in enumerate(exe.map(items(), in_flight=args.in_flight)):
            latencies.append(time.perf_counter() - started[i])
            outputs = result
    elapsed = time.perf_counter() - t0
    cuts = statistics.quantiles(latencies, n=100, method="inclusive") if len(latencies) > 1 else latencies * 99
    return outputs, {"inferences": len(latencies), "seconds": elapsed, "in_flight": args.in_flight,
                     "inferences_per_s": len(latencies) / elapsed, "p50_ms": cuts[49] * 1e3,
                     "p90_ms": cuts[89] * 1e3, "p99_ms": cuts[98] * 1e3}


def _model_of(args: argparse.Namespace) -> tuple[Path, tuple[dict[str, Any], dict[str, Any]] | None]:
    """The model file to run and, for ``--example``, its reference (inputs, outputs)."""
    from nx_hal import examples

    if args.example is None:
        if args.model is None:
            raise UsageError(f"give a model file, or --example NAME ({', '.join(examples.NAMES)})")
        return args.model, None
    if args.model is not None:
        raise UsageError(f"give a model file or --example {args.example}, not both")
    return examples.path(args.example), examples.reference(args.example)


def _against_reference(want: dict[str, Any], names: list[str], got: list[Any]) -> dict[str, Any]:
    """How the outputs compare with an example's reference. The tolerance
    admits a device computing in half precision (an NPU's default), not a
    wrong result."""
    rtol, atol = 1e-2, 1e-3
    errors = [float(np.max(np.abs(g.astype(np.float64) - want[n]))) for n, g in zip(names, got, strict=True)]
    matches = all(np.allclose(g, want[n], rtol=rtol, atol=atol) for n, g in zip(names, got, strict=True))
    return {"matches": bool(matches), "max_abs_error": max(errors), "rtol": rtol, "atol": atol}


def cmd_convert(args: argparse.Namespace, out: Output) -> int:
    from nx_hal.child import set_memory_limit
    from nx_hal.config import load_config
    from nx_hal.onnx.convert import convert_cli, summary_text

    if args.target and not args.target[0].isdigit():
        settings = _registry(args).loaded_config.settings  # a plugin: its devices say which version they read
    else:
        settings = load_config(config_file=args.config_file, no_config=args.no_config).config
    set_memory_limit(int(settings.child_memory_limit))  # the converter's child runs under it
    shapes = dict(args.input_shape) if args.input_shape else None
    with out.progress.activity(f"converting {args.model.name} to StableHLO"):
        summary = convert_cli(str(args.model), args.output, target=args.target, bytecode=args.bytecode,
                              input_shapes=shapes, devices=api.devices, cache_dir=settings.cache_dir,
                              cache_max_bytes=int(settings.cache_max_bytes), platform=args.platform)
    out.emit(summary, summary_text(summary))
    return 0


def _conformance_targets(args: argparse.Namespace, out: Output, reg: Registry) -> list[Any]:
    targets = []
    for record in reg.records.values():
        if args.plugin and record.name != args.plugin:
            continue
        dev = next((d for d in record.devices if d.accepts("onnx") is None), None)
        if dev is None:
            why = record.status_text() if record.state != "loaded" else "no device accepts ONNX"
            out.note(f"{record.name}: skipped: {why}")
            continue
        targets.append(dev)
    if args.plugin and not targets and args.plugin not in reg.records:
        raise UsageError(f"no plugin named '{args.plugin}' (installed: {', '.join(reg.records) or 'none'})")
    return targets


def _floor_failures(summaries: list[Any], args: argparse.Namespace) -> list[str]:
    """Why the run is under its floor: a pass count or rate below
    --fail-under, cases that passed in --baseline and do not now, or (with
    neither) any failing case."""
    problems: list[str] = []
    devices = [s for s in summaries if s.target != "onnxruntime"]
    for s in devices:
        passed, failed = s.totals["pass"], s.totals["fail"]
        if args.fail_under is not None:
            value, is_percent = args.fail_under
            rate = 100.0 * passed / (passed + failed) if passed + failed else 100.0
            if (rate if is_percent else passed) < value:
                got = f"{rate:.1f}%" if is_percent else f"{passed}"
                want = f"{value:g}%" if is_percent else f"{int(value)}"
                problems.append(f"{s.target}: {got} passed, under the floor of {want}")
        elif args.baseline is None and failed:
            problems.append(f"{s.target}: {failed} failed")
    if args.baseline is not None:
        problems += _regressions(devices, args.baseline)
    return problems


def _baseline_passes(baseline: Path) -> set[tuple[str, str, str]]:
    """(target, group, case) of every case that passed in ``baseline`` (an
    earlier ``--json`` result or ``--save-baseline`` file)."""
    try:
        earlier = json.loads(baseline.read_text())
        if not isinstance(earlier, list) or not all(isinstance(t, dict) for t in earlier):
            raise TypeError("expected a list of results, one per target")
        return {(t["target"], c["group"], c["case"]) for t in earlier for c in t["cases"] if c["status"] == "pass"}
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise UsageError(f"--baseline {baseline}: not a conformance result from --json "
                                   f"or --save-baseline ({exc})") from None


def _regressions(summaries: list[Any], baseline: Path) -> list[str]:
    """Cases that passed in ``baseline`` and do not pass now, per target."""
    passed_before = _baseline_passes(baseline)
    problems = []
    for s in summaries:
        now = {(o.group, o.case): o.status for o in s.outcomes}
        lost = sorted(f"{g}/{c}" for t, g, c in passed_before if t == s.target and now.get((g, c), "pass") != "pass")
        if lost:
            problems.append(f"{s.target}: {len(lost)} case(s) passed in {baseline} and not now: "
                            f"{', '.join(lost[:10])}{', ...' if len(lost) > 10 else ''}")
    return problems


def _summary_line(s: Any) -> str:
    t = s.totals
    run = t["pass"] + t["fail"]
    rate = f" ({100.0 * t['pass'] / run:.1f}% of those it runs)" if run else ""
    # Passes that needed small inputs bound as constants (nx_hal.onnx.conformance._bindable).
    bound = sum(1 for o in s.outcomes if o.status == "pass" and o.message)
    with_bound = f" ({bound} with inputs bound as constants)" if bound else ""
    return (f"{s.target}: {t['pass']} passed{with_bound}, {t['fail']} failed, {t['unsupported']} unsupported"
            f"{rate}")


def cmd_conformance(args: argparse.Namespace, out: Output) -> int:
    from nx_hal.onnx import conformance as oc

    if args.baseline is not None:
        _baseline_passes(args.baseline)  # a bad file is said now, not after the run
    reg = _registry(args)
    if args.deviations:
        targets = [d.selector for d in _conformance_targets(args, out, reg)]
        if out.json:
            print(json.dumps([{"target": t, "known_deviations": oc.known_deviations(t)} for t in targets], indent=2))
        else:
            print(oc.format_deviations(targets))
        return 0
    # The devices first: a plugin name that is wrong is said before the test
    # cases are read (tens of seconds).
    columns: list[tuple[str, Any]] = [(d.selector, lambda cs, d=d: oc.run_cases(d, cs))
                                      for d in _conformance_targets(args, out, reg)]
    groups = [g for g in args.groups.split(",") if g]
    with out.progress.activity("reading the test cases"):
        cases = oc.collect(groups, name_filter=args.name_filter)
    summaries = []
    if not args.no_reference:
        columns.append(("onnxruntime", lambda cs: (oc.run_onnxruntime(c) for c in cs)))
    for name, run in columns:
        with out.progress.steps(name, len(cases)) as advance:
            outcomes = []
            for outcome in run(cases):
                outcomes.append(outcome)
                advance(outcome.case)
        summaries.append(oc.summarize(name, outcomes))
    if args.save_baseline is not None:
        args.save_baseline.write_text(json.dumps([s.to_dict() for s in summaries], indent=2))
    problems = _floor_failures(summaries, args)
    if out.json:
        print(json.dumps([s.to_dict() for s in summaries], indent=2))
    else:
        print(oc.format_table(summaries, details=args.details))
        if any(s.target != "onnxruntime" for s in summaries):
            print()
            print(oc.format_deviations(s.target for s in summaries))
        print()
        print("; ".join(_summary_line(s) for s in summaries) or "no targets")
    for problem in problems:
        out.note(f"under the floor: {problem}")
    return 1 if problems else 0


def versions() -> dict[str, Any]:
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


def cmd_sdk(args: argparse.Namespace, out: Output) -> int:
    from nx_hal import sdk

    try:
        values = {
            "include": sdk.get_include, "cflags": sdk.get_cflags, "libs": sdk.get_libs,
            "cmake_dir": sdk.get_cmake_dir, "pkgconfig_dir": sdk.get_pkgconfig_dir,
            "plugin_path": sdk.plugin_path,
        }
        wanted = [k for k in values if getattr(args, k)]
        if out.json:
            print(json.dumps({k: values[k]() for k in (wanted or list(values))}, indent=2))
        elif wanted:
            print(" ".join(values[k]() for k in wanted))
        else:
            for key, fn in values.items():
                print(f"{key.replace('_', '-')}: {fn()}")
    except sdk.SdkMissingError as exc:
        return out.error("NOT_FOUND", str(exc), 1)
    return 0


def cmd_cache(args: argparse.Namespace, out: Output) -> int:
    from nx_hal.config import load_config
    from nx_hal.store import maintenance as cache_files

    settings = load_config(config_file=args.config_file, no_config=args.no_config).config
    if args.action == "info":
        info = cache_files.info(settings.cache_dir, max_bytes=int(settings.cache_max_bytes))
        out.emit(info.to_dict(), str(info))
    else:
        removed = cache_files.clear(settings.cache_dir, args.section or None)
        out.emit(removed.to_dict(), str(removed))
    return 0


HANDLERS = {"plugins": cmd_plugins, "devices": cmd_devices, "doctor": cmd_doctor, "config": cmd_config,
            "run": cmd_run, "convert": cmd_convert, "conformance": cmd_conformance, "sdk": cmd_sdk, "cache": cmd_cache}
