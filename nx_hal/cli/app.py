"""The command line: its grammar, and what any failure looks like.

``--json``, ``--no-progress``, ``--config-file`` and ``--no-config`` may
stand anywhere on the line. Exit status: 0 done; 1 the work failed (a
plugin's or nx_hal's error, a conformance run under its floor); 2 the line
itself is wrong (a missing file, a bad value); 130 interrupted; 70 a bug in
nx_hal (with its traceback on stderr, under --json too)."""

from __future__ import annotations

import argparse
import os
import sys
import traceback
from pathlib import Path
from typing import Any, NoReturn

from nx_hal.cli import args as types
from nx_hal.cli.args import UsageError
from nx_hal.cli.output import Output
from nx_hal.errors import ConfigError, NxHalError
from nx_hal.store.maintenance import SECTIONS

__all__ = ["main"]

EXIT_FAILED, EXIT_USAGE, EXIT_BUG, EXIT_INTERRUPTED = 1, 2, 70, 130
# What a shell reports for a command a closed pipe stopped (128 + SIGPIPE), as for `yes | head`.
EXIT_PIPE = 141


class _Parser(argparse.ArgumentParser):
    """argparse that raises instead of printing and exiting, so an error
    can be reported as JSON."""

    def error(self, message: str) -> NoReturn:
        raise UsageError(f"{message} (see '{self.prog} --help')")


class _VersionAction(argparse.Action):
    """``--version``: the core's, each plugin's and the ABI versions,
    computed only when asked (it discovers the plugins)."""

    def __init__(self, option_strings: list[str], dest: str, **kwargs: Any) -> None:
        super().__init__(option_strings, dest, nargs=0, help="the core's, each plugin's and the ABI versions")

    def __call__(self, parser: argparse.ArgumentParser, namespace: argparse.Namespace,
                 values: Any, option_string: str | None = None) -> None:
        from nx_hal.cli.commands import versions

        data = versions()
        lines = [f"nx-hal {data['nx_hal']} (ABI {data['abi_version']})"]
        for p in data["plugins"]:
            detail = f"ABI {p['abi_version']}" if p["abi_version"] else f"not loadable: {p.get('error', '')}"
            lines.append(f"  {p['package'] or p['name']} {p['version'] or '-'}: plugin '{p['name']}', {detail}")
        if not data["plugins"]:
            lines.append("  no plugins installed (pip install nx-hal-npu, 'nx-hal-tpu[cpu]', nx-hal-graphcore)")
        Output(getattr(parser, "json_requested", False)).emit(data, "\n".join(lines))
        parser.exit()


def _common(parser: argparse.ArgumentParser, top: bool) -> None:
    """The options every command takes, before or after its name. Below the
    top level they default to SUPPRESS, so they only set what was given."""
    default: dict[str, Any] = {} if top else {"default": argparse.SUPPRESS}
    parser.add_argument("--json", action="store_true", help="machine-readable output, errors too",
                        **({"default": False} if top else default))
    parser.add_argument("--no-progress", action="store_true", help="no progress display",
                        **({"default": False} if top else default))
    parser.add_argument("--config-file", help="read this TOML file instead of searching for nx_hal.toml",
                        **default)
    parser.add_argument("--no-config", action="store_true", help="read no config files",
                        **({"default": False} if top else default))


def _add_run(add: Any) -> None:
    from nx_hal import examples

    run = add("run", "compile and run a model on the selected device")
    run.add_argument("model", type=types.existing_file, nargs="?", help="the model file (or --example)")
    run.add_argument("--example", choices=examples.NAMES, metavar="NAME",
                     help="run an example model that ships with nx_hal and check its output against numpy's: "
                          + "; ".join(f"{n}: {examples.describe(n)}" for n in examples.NAMES))
    run.add_argument("--device", type=types.selector,
                     help="selector, e.g. cpu, npu:cpu, tpu:cpu:0 (strict: no fallback)")
    run.add_argument("--format", help="program format (default: from the file suffix or content)")
    run.add_argument("--input", action="append", type=types.input_spec, metavar="NAME=FILE.npy",
                     help="an input from a .npy file (others are made up and said how)")
    run.add_argument("--iterations", type=types.positive_int, default=10, help="timed runs (default 10)")
    run.add_argument("-v", "--verbose", action="store_true",
                     help="why each preferred device was skipped, also when none is on this machine")
    run.add_argument("--input-shape", action="append", type=types.shape_spec, metavar="NAME=D0,D1,...",
                     help="fix a dynamic input shape (ONNX on PJRT devices)")
    run.add_argument("--throughput", action="store_true",
                     help="measure throughput instead of latency: runs with Executable.map, several requests in "
                          "flight, for --seconds, and prints inferences/s and latency percentiles")
    run.add_argument("--in-flight", type=types.positive_int, default=4, metavar="N",
                     help="with --throughput: requests kept in flight (default 4)")
    run.add_argument("--seconds", type=types.positive_seconds, default=3.0, metavar="S",
                     help="with --throughput: how long to run (default 3)")


def _add_conformance(add: Any) -> None:
    conf = add("conformance", "run the ONNX test cases and model corpus on every ONNX-capable device")
    conf.add_argument("--plugin", help="only this plugin")
    conf.add_argument("--groups", default="node,light,pytorch-converted,pytorch-operator,simple",
                      help="comma-separated: node and/or the model corpus directories")
    conf.add_argument("-k", dest="name_filter", help="only cases whose name contains this")
    conf.add_argument("--no-reference", action="store_true", help="skip the onnxruntime column")
    conf.add_argument("--details", action="store_true", help="print every failing case")
    conf.add_argument("--deviations", action="store_true",
                      help="only list each device's known deviations from ONNX and what nx_hal does about them")
    floor = conf.add_mutually_exclusive_group()
    floor.add_argument("--fail-under", type=types.percent_or_count, metavar="COUNT|RATE%",
                       help="exit 1 when a device passes fewer cases (1400) or a lower share of "
                            "those it runs (95%%); default: exit 1 on any failure")
    floor.add_argument("--baseline", type=types.existing_file, metavar="FILE.json",
                       help="exit 1 when a case that passed in this earlier result does not pass now")
    conf.add_argument("--save-baseline", type=Path, metavar="FILE.json",
                      help="write this run's result, for --baseline later")


def _parser() -> _Parser:
    parser = _Parser(prog="nx-hal", description="nx_hal: ML accelerators through one API")
    parser.add_argument("--version", action=_VersionAction)
    _common(parser, top=True)
    sub = parser.add_subparsers(dest="command", required=True, parser_class=_Parser)

    def add(name: str, help: str) -> argparse.ArgumentParser:
        p = sub.add_parser(name, help=help, description=help)
        _common(p, top=False)
        return p

    add("plugins", "installed plugins: package, library, ABI version, load status and reason")
    devices = add("devices", "devices of every loaded plugin")
    devices.add_argument("--ray", metavar="ADDRESS",
                         help="the devices of every node of the Ray cluster at ADDRESS ('auto': the one Ray finds), "
                              "and what each node chooses (needs nx-hal[ray])")
    doctor = add("doctor", "the device selection explained: every choice skipped and why")
    doctor.add_argument("--device", type=types.selector, help="explain this selector instead of the preference list")
    doctor.add_argument("--format", help="only devices accepting this program format")
    add("config", "the effective config and where each value came from")
    _add_run(add)
    convert = add("convert", "convert an ONNX model to StableHLO for C/C++ programs")
    convert.add_argument("model", type=types.existing_file)
    convert.add_argument("-o", "--output", required=True, type=types.output_file,
                         help="output .mlir (or .mlirbc with --bytecode), in a directory that exists")
    convert.add_argument("--target", type=types.target_spec, help="plugin name or StableHLO version to serialise for")
    convert.add_argument("--bytecode", action="store_true", help="portable StableHLO bytecode")
    convert.add_argument("--platform", choices=("cpu", "gpu", "tpu"),
                         help="the device kind it will run on: rewrites that pay off there (depthwise convolutions "
                         "as MatMuls on a CPU); default: for any")
    convert.add_argument("--input-shape", action="append", type=types.shape_spec, metavar="NAME=D0,D1,...",
                         help="fix a dynamic input shape")
    _add_conformance(add)
    cache = add("cache", "what the cache directory holds (info), or remove its entries (clear)")
    cache.add_argument("action", choices=("info", "clear"))
    cache.add_argument("--section", action="append", choices=SECTIONS,
                       help="clear only this section (may be repeated)")
    sdk = add("sdk", "the C/C++ SDK in this environment: compiler and linker flags, CMake and pkg-config dirs")
    for flag, help in (("--include", "the include directory"), ("--cflags", "compiler flags"),
                       ("--libs", "linker flags for the loader (with its RPATH)"),
                       ("--cmake-dir", "nx_halConfig.cmake's directory (-Dnx_hal_DIR=...)"),
                       ("--pkgconfig-dir", "nx_hal.pc's directory (PKG_CONFIG_PATH)"),
                       ("--plugin-path", "NX_HAL_PLUGIN_PATH naming every installed plugin's directory")):
        sdk.add_argument(flag, action="store_true", help=help)
    return parser


def _wants_json(argv: list[str]) -> bool:
    """--json given anywhere before a ``--``: known before parsing, so a
    parse error is JSON too."""
    return "--json" in (argv[:argv.index("--")] if "--" in argv else argv)


def main(argv: list[str] | None = None) -> int:
    """Runs ``nx-hal`` with ``argv`` (default: the process's); returns the exit status."""
    from nx_hal.cli.commands import HANDLERS

    argv = list(sys.argv[1:] if argv is None else argv)
    out = Output(_wants_json(argv))
    parser = _parser()
    parser.json_requested = out.json  # type: ignore[attr-defined]
    try:
        args = parser.parse_args(argv)
        out = Output(args.json, progress=not args.no_progress)
        status = HANDLERS[args.command](args, out)
        sys.stdout.flush()  # here, where a closed pipe is caught, not at exit
        return status
    except BrokenPipeError:
        # The reader stopped reading (`nx-hal doctor | head`): nothing is
        # wrong and nothing more can be said there. Python's own advice: point
        # stdout at /dev/null, so that the flush at exit does not fail again.
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        os.close(devnull)
        return EXIT_PIPE
    except UsageError as exc:
        return out.error("INVALID_ARGUMENT", str(exc), EXIT_USAGE)
    except ConfigError as exc:  # a setting the user wrote, like a mistake on the command line
        return out.error(exc.code, str(exc) if not out.json else exc.message, EXIT_USAGE)
    except NxHalError as exc:
        return out.error(exc.code, str(exc) if not out.json else exc.message, EXIT_FAILED, plugin=exc.plugin)
    except FileNotFoundError as exc:
        return out.error("NOT_FOUND", f"{exc.strerror}: {exc.filename}", EXIT_USAGE)
    except OSError as exc:
        where = f": {exc.filename}" if exc.filename else ""
        return out.error("FAILED_PRECONDITION", f"{exc.strerror or exc}{where}", EXIT_FAILED)
    except KeyboardInterrupt:
        return out.error("CANCELLED", "interrupted", EXIT_INTERRUPTED)
    except Exception as exc:  # noqa: BLE001 -- a bug: said so, with its traceback, never a bare crash
        traceback.print_exc(file=sys.stderr)
        return out.error("INTERNAL", f"a bug in nx_hal ({type(exc).__name__}: {exc}); please report it "
                         "with the traceback above", EXIT_BUG)
