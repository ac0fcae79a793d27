"""The command line's manners, as a user meets them: --json anywhere and
errors as JSON, arguments checked before work starts, no traceback for a
mistake, progress only on a terminal, conformance that fails under its
floor, inputs that make sense; and the API's: configure(**settings) and
warnings that point at the caller's line."""

from __future__ import annotations

import argparse
import json
import os
import select
import subprocess
import sys
import warnings
from collections import Counter
from pathlib import Path

import numpy as np
import pytest

from tests.cbuild import build_fixture

EXAMPLE = Path(__file__).resolve().parent.parent / "examples" / "mlp.onnx"


def cli(*args: str, env: dict[str, str] | None = None, cwd: Path | None = None,
        module: str = "nx_hal") -> subprocess.CompletedProcess[str]:
    full_env = {k: v for k, v in os.environ.items() if not k.startswith("NX_HAL_")}
    full_env.update(env or {})
    return subprocess.run([sys.executable, "-m", module, *args], capture_output=True, text=True,
                          env=full_env, cwd=cwd, timeout=300)


@pytest.fixture(scope="module")
def fixture_env(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    d = tmp_path_factory.mktemp("plugins")
    build_fixture("hostmem", d)
    return {"NX_HAL_PLUGIN_PATH": str(d), "NX_HAL_DISABLE": "npu,tpu,graphcore",
            "NX_HAL_CACHE_DIR": str(d / "cache")}


def error_of(out: subprocess.CompletedProcess[str]) -> dict[str, str]:
    assert "Traceback" not in out.stderr, out.stderr
    body = json.loads(out.stdout)
    assert set(body) == {"error"}, body
    return body["error"]  # type: ignore[no-any-return]


def test_python_dash_m_nx_hal_is_the_command(fixture_env: dict[str, str], tmp_path: Path) -> None:
    for module in ("nx_hal", "nx_hal.cli"):
        out = cli("devices", "--json", env=fixture_env, cwd=tmp_path, module=module)
        assert out.returncode == 0, out.stderr
        assert [d["name"] for d in json.loads(out.stdout)] == ["fixture host memory"]


@pytest.mark.parametrize("command", [["doctor"], ["devices"], ["devices", "--json"]])
def test_a_reader_that_stops_reading_is_not_an_error(fixture_env: dict[str, str], tmp_path: Path,
                                                     command: list[str]) -> None:
    """`nx-hal doctor | head`: stdout's reader is gone before the first line.
    Nothing on stderr, and the status a shell gives a command a closed pipe
    stopped (141), not an error message."""
    read_end, write_end = os.pipe()
    os.close(read_end)  # closed before the command starts: its first write fails
    try:
        env = {k: v for k, v in os.environ.items() if not k.startswith("NX_HAL_")} | fixture_env
        out = subprocess.run([sys.executable, "-m", "nx_hal", *command], stdout=write_end, stderr=subprocess.PIPE,
                             text=True, env=env, cwd=tmp_path, timeout=300)
    finally:
        os.close(write_end)
    assert (out.returncode, out.stderr) == (141, "")


@pytest.mark.parametrize("where", ["before", "after"])
def test_json_anywhere(fixture_env: dict[str, str], tmp_path: Path, where: str) -> None:
    args = ["--json", "devices"] if where == "before" else ["devices", "--json"]
    out = cli(*args, env=fixture_env, cwd=tmp_path)
    assert out.returncode == 0, out.stderr
    assert json.loads(out.stdout)[0]["plugin"] == "fixture_hostmem"


def test_version_as_json(fixture_env: dict[str, str], tmp_path: Path) -> None:
    from nx_hal.version import __version__

    out = cli("--json", "--version", env=fixture_env, cwd=tmp_path)
    assert out.returncode == 0, out.stderr
    assert json.loads(out.stdout)["nx_hal"] == __version__


@pytest.mark.parametrize(("args", "needle"), [
    (["run", "missing.onnx"], "no such file: missing.onnx"),
    (["run", str(EXAMPLE), "--input", "image=nofile.npy"], "no such file: nofile.npy"),
    (["run", str(EXAMPLE), "--input", "image"], "expected NAME=FILE.npy"),
    (["run", str(EXAMPLE), "--input-shape", "image=1,x"], "dimension 'x' is not a whole number"),
    (["run", str(EXAMPLE), "--input-shape", "image=1,0"], "dimension '0' is not a whole number of at least 1"),
    (["run", str(EXAMPLE), "--iterations", "-5"], "must be at least 1, got -5"),
    (["run", str(EXAMPLE), "--iterations", "0"], "must be at least 1, got 0"),
    (["run", str(EXAMPLE), "--iterations", "many"], "'many' is not a whole number"),
    (["conformance", "--fail-under", "lots"], "neither a count"),
    (["convert", str(EXAMPLE), "-o", "/no/such/dir/x.mlir"], "cannot write /no/such/dir/x.mlir: no directory "
                                                             "/no/such/dir"),
    (["convert", str(EXAMPLE), "-o", "x.mlir", "--target", "99.0"], "'99.0': not a StableHLO version"),
    (["convert", str(EXAMPLE), "-o", "x.mlir", "--target", "1.9"], "'1.9': not a StableHLO version"),
    (["convert", str(EXAMPLE), "-o", "x.mlir", "--target", "1.9.0.1"], "'1.9.0.1': not a StableHLO version"),
    (["conformance", "--fail-under", "101%"], "out of range"),
    (["nonsense"], "invalid choice: 'nonsense'"),
])
def test_mistakes_on_the_line_are_usage_errors(tmp_path: Path, args: list[str], needle: str) -> None:
    text = cli(*args, cwd=tmp_path)
    assert text.returncode == 2 and needle in text.stderr and "Traceback" not in text.stderr, text.stderr
    assert text.stderr.startswith("error: ")
    as_json = cli(*args, "--json", cwd=tmp_path)
    assert as_json.returncode == 2
    err = error_of(as_json)
    assert err["code"] == "INVALID_ARGUMENT" and needle in err["message"]


def test_bad_selector_keeps_its_reason(fixture_env: dict[str, str], tmp_path: Path) -> None:
    out = cli("doctor", "--device", "nonsense::", env=fixture_env, cwd=tmp_path)
    assert out.returncode == 2
    assert "argument --device: bad device selector 'nonsense::'" in out.stderr and "pydantic" not in out.stderr
    assert "Value error" not in out.stderr
    err = error_of(cli("doctor", "--device", "nonsense::", "--json", env=fixture_env, cwd=tmp_path))
    assert err["code"] == "INVALID_ARGUMENT" and "bad device selector 'nonsense::'" in err["message"]


@pytest.mark.parametrize(("command", "selector", "hint"), [
    ("run", "npuu", "; did you mean 'npu'?"),
    ("doctor", "gpus:cpu", "; did you mean 'gpu'?"),
    ("run", "zzzz", " ("),  # nothing close: no guess
])
def test_a_device_naming_nothing_known_is_a_usage_error(fixture_env: dict[str, str], tmp_path: Path,
                                                        command: str, selector: str, hint: str) -> None:
    """Not "plugin 'npuu' is not installed (pip install nx-hal-npuu)" after
    every device was tried: a typo, exit 2, with the closest name."""
    model = [str(EXAMPLE)] if command == "run" else []
    out = cli(command, *model, "--device", selector, env=fixture_env, cwd=tmp_path)
    assert out.returncode == 2, out.stderr
    assert out.stderr.startswith(f"error: --device '{selector}' names no device kind"), out.stderr
    assert "no plugin nx_hal knows (" in out.stderr and "pip install" not in out.stderr
    assert out.stderr.rstrip().endswith("?") == (hint != " (") and hint in out.stderr


def test_not_a_model_names_the_flag_and_the_formats(fixture_env: dict[str, str], tmp_path: Path) -> None:
    junk = tmp_path / "notes.txt"
    junk.write_text("hello\n")
    out = cli("run", str(junk), env=fixture_env, cwd=tmp_path)
    assert out.returncode == 2 and "Traceback" not in out.stderr
    assert f"cannot tell what kind of program {junk} is" in out.stderr
    assert "pass --format (one of: onnx, stablehlo, openvino-ir, popef)" in out.stderr


def test_given_inputs_are_checked_against_the_model(fixture_env: dict[str, str], tmp_path: Path) -> None:
    prog = tmp_path / "prog.txt"
    prog.write_text("add f32 2,3")
    np.save(tmp_path / "wrong_dtype.npy", np.ones((2, 3), np.int32))
    np.save(tmp_path / "wrong_shape.npy", np.ones((3, 2), np.float32))
    (tmp_path / "text.npy").write_bytes(b"not numpy at all")
    np.save(tmp_path / "objects.npy", np.array([{"a": 1}], dtype=object), allow_pickle=True)
    (tmp_path / "cut.npy").write_bytes((tmp_path / "wrong_shape.npy").read_bytes()[:20])
    base = ["run", str(prog), "--format", "fixture-elementwise", "--device", "fixture_hostmem", "--json"]
    cases = {
        "wrong_dtype": "input lhs: the model takes f32, the file holds i32",
        "wrong_shape": "input lhs: the model takes shape [2, 3], the file holds [3, 2]",
        "text": "not a .npy file (numpy.save writes them)",
        # never numpy's advice to allow pickles: an input file does not get to run code
        "objects": "not a readable .npy file (it holds Python objects, not numbers)",
        "cut": "not a readable .npy file (",
    }
    for stem, needle in cases.items():
        err = error_of(cli(*base, "--input", f"lhs={tmp_path / stem}.npy", env=fixture_env, cwd=tmp_path))
        assert err["code"] == "INVALID_ARGUMENT" and needle in err["message"], err
        assert "pickle" not in err["message"], err
    err = error_of(cli(*base, "--input", f"nope={tmp_path / 'wrong_shape.npy'}", env=fixture_env, cwd=tmp_path))
    assert err["message"] == "no input named nope (inputs: lhs, rhs)"


def test_plugin_errors_as_json_keep_code_and_plugin(fixture_env: dict[str, str], tmp_path: Path) -> None:
    prog = tmp_path / "prog.txt"
    prog.write_text("this is not an elementwise program")
    out = cli("run", str(prog), "--format", "fixture-elementwise", "--device", "fixture_hostmem", "--json",
              env=fixture_env, cwd=tmp_path)
    assert out.returncode == 1
    err = error_of(out)
    assert err["code"] in ("INVALID_ARGUMENT", "INVALID_PROGRAM") and err["plugin"] == "fixture_hostmem"


def read_through_terminal(args: list[str], env: dict[str, str], cwd: Path,
                          stdout_too: bool = False) -> tuple[int, str, str]:
    """Runs the command with stderr on a pseudo-terminal (stdout a pipe, or
    the terminal too with ``stdout_too``)."""
    master, slave = os.openpty()
    full_env = {k: v for k, v in os.environ.items() if not k.startswith("NX_HAL_")} | env | {"COLUMNS": "100"}
    proc = subprocess.Popen([sys.executable, "-m", "nx_hal", *args],
                            stdout=slave if stdout_too else subprocess.PIPE, stderr=slave,
                            stdin=subprocess.DEVNULL, env=full_env, cwd=cwd)
    os.close(slave)
    seen = b""
    while True:
        ready, _, _ = select.select([master], [], [], 0.2)
        if ready:
            try:
                chunk = os.read(master, 65536)
            except OSError:
                break
            if not chunk:
                break
            seen += chunk
        elif proc.poll() is not None:
            break
    os.close(master)
    stdout = proc.stdout.read().decode() if proc.stdout else ""
    return proc.wait(timeout=60), stdout, seen.decode(errors="replace")


def test_progress_on_a_terminal_only(fixture_env: dict[str, str], tmp_path: Path) -> None:
    prog = tmp_path / "prog.txt"
    prog.write_text("add f32 2,3")
    args = ["run", str(prog), "--format", "fixture-elementwise", "--device", "fixture_hostmem",
            "--iterations", "200"]
    rc, stdout, terminal = read_through_terminal(args, fixture_env, tmp_path)
    assert rc == 0 and "latency:" in stdout
    assert "running on fixture_hostmem" in terminal and "200/200" in terminal
    rc, _, terminal = read_through_terminal([*args, "--no-progress"], fixture_env, tmp_path)
    assert rc == 0 and "running on" not in terminal
    rc, stdout, terminal = read_through_terminal([*args, "--json"], fixture_env, tmp_path)
    assert rc == 0 and "running on" not in terminal and json.loads(stdout)["latency"]["iterations"] == 200
    piped = cli(*args, env=fixture_env, cwd=tmp_path)  # stderr a pipe: no progress
    assert piped.returncode == 0 and piped.stderr == ""


def test_device_table_drawn_on_a_terminal_only(fixture_env: dict[str, str], tmp_path: Path) -> None:
    rc, _, terminal = read_through_terminal(["devices"], fixture_env, tmp_path, stdout_too=True)
    assert rc == 0
    header = next(line for line in terminal.splitlines() if "SELECTOR" in line)
    assert "┃" in header and "NAME" in header  # rich's table
    assert any(line.split("│")[0].strip() == "fixture_hostmem:cpu:0" for line in terminal.splitlines())
    piped = cli("devices", env=fixture_env, cwd=tmp_path)
    lines = piped.stdout.splitlines()
    assert piped.returncode == 0 and "┃" not in piped.stdout
    assert lines[0].split() == ["SELECTOR", "KIND", "MEMORY", "FORMATS", "NAME"]
    assert lines[1].split()[0] == "fixture_hostmem:cpu:0"
    assert json.loads(cli("devices", "--json", env=fixture_env, cwd=tmp_path).stdout)[0]["selector"] \
        == "fixture_hostmem:cpu:0"


def test_integer_inputs_by_role(tmp_path: Path) -> None:
    """Token ids stay inside the embedding table, masks are ones."""
    onnx = pytest.importorskip("onnx")
    from onnx import TensorProto as T
    from onnx import helper as h
    from onnx import numpy_helper as nh

    from nx_hal.cli.inputs import index_ranges, sample_inputs
    from nx_hal.executable import TensorSpec

    table = nh.from_array(np.zeros((37, 4), np.float32), "embedding")
    nodes = [h.make_node("Cast", ["input_ids"], ["ids32"], to=T.INT32),
             h.make_node("Gather", ["embedding", "ids32"], ["e"])]
    graph = h.make_graph(nodes, "g", [h.make_tensor_value_info("input_ids", T.INT64, [2, 50])],
                         [h.make_tensor_value_info("e", T.FLOAT, [2, 50, 4])], [table])
    path = tmp_path / "ids.onnx"
    onnx.save(h.make_model(graph), path)
    ranges = index_ranges(path)
    assert ranges == {"input_ids": 37}
    specs = [TensorSpec("input_ids", "i64", (2, 50)), TensorSpec("attention_mask", "i64", (2, None)),
             TensorSpec("token_type_ids", "i32", (2, 50)), TensorSpec("position_ids", "i64", (1, 5)),
             TensorSpec("count", "i32", (3,)), TensorSpec("keep", "bool", (4,)), TensorSpec("x", "bf16", (3,))]
    made = sample_inputs(specs, ranges)
    ids = made["input_ids"].array
    assert ids.dtype == np.int64 and ids.min() >= 0 and ids.max() < 37 and len(np.unique(ids)) > 5
    assert "[0, 37)" in made["input_ids"].note
    mask = made["attention_mask"]
    assert mask.array.shape == (2, 1) and (mask.array == 1).all() and "--input-shape" in mask.note
    assert (made["token_type_ids"].array == 0).all() and made["token_type_ids"].array.dtype == np.int32
    assert made["position_ids"].array.tolist() == [[0, 1, 2, 3, 4]]
    assert (made["count"].array == 0).all() and "--input NAME=FILE.npy" in made["count"].note
    bf16 = made["x"].array
    assert bf16.dtype == np.uint16
    as_f32 = (bf16.astype(np.uint32) << 16).view(np.float32)
    assert np.isfinite(as_f32).all() and 0 < np.abs(as_f32).max() < 10


def test_floor_decisions() -> None:
    from nx_hal.cli.commands import _floor_failures
    from nx_hal.onnx.conformance import Outcome, summarize

    def run(passed: int, failed: int) -> object:
        outcomes = [Outcome(f"p{i}", "node", ("Abs",), "pass") for i in range(passed)]
        outcomes += [Outcome(f"f{i}", "node", ("Abs",), "fail") for i in range(failed)]
        return summarize("dev", outcomes)

    def args(fail_under: tuple[float, bool] | None = None, baseline: Path | None = None) -> argparse.Namespace:
        return argparse.Namespace(fail_under=fail_under, baseline=baseline)

    assert _floor_failures([run(9, 1)], args()) == ["dev: 1 failed"]
    assert _floor_failures([run(10, 0)], args()) == []
    assert _floor_failures([run(9, 1)], args((9, False))) == []
    assert _floor_failures([run(9, 1)], args((10, False))) == ["dev: 9 passed, under the floor of 10"]
    assert _floor_failures([run(9, 1)], args((90.0, True))) == []
    assert _floor_failures([run(9, 1)], args((90.5, True))) == ["dev: 90.0% passed, under the floor of 90.5%"]
    reference = summarize("onnxruntime", [Outcome("x", "node", (), "fail")])
    assert _floor_failures([run(1, 0), reference], args()) == []  # the reference column is no device


def test_baseline_regressions(tmp_path: Path) -> None:
    from nx_hal.cli.commands import _floor_failures
    from nx_hal.onnx.conformance import Outcome, summarize

    before = summarize("dev", [Outcome("a", "node", (), "pass"), Outcome("b", "node", (), "pass"),
                               Outcome("c", "node", (), "fail")])
    path = tmp_path / "base.json"
    path.write_text(json.dumps([before.to_dict()]))
    now = summarize("dev", [Outcome("a", "node", (), "pass"), Outcome("b", "node", (), "unsupported"),
                            Outcome("c", "node", (), "fail")])
    problems = _floor_failures([now], argparse.Namespace(fail_under=None, baseline=path))
    assert problems == [f"dev: 1 case(s) passed in {path} and not now: node/b"]
    assert Counter(o.status for o in now.outcomes)["fail"] == 1  # a known failure is no regression
    same = _floor_failures([before], argparse.Namespace(fail_under=None, baseline=path))
    assert same == []


@pytest.mark.usefixtures("keep_api_state")
def test_conformance_exit_status_and_summary(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """On the real npu plugin: the summary line, and the floor deciding the exit. In this
    process, so ONNX's generators make the test cases once for the five runs."""
    pytest.importorskip("nx_hal_npu")
    pytest.importorskip("onnx")
    from nx_hal.cli import app

    base = ["conformance", "--plugin", "npu", "--groups", "node", "-k", "test_mod_", "--no-reference"]

    def run(*args: str) -> tuple[int, str, str]:
        status = app.main([*base, *args])
        out = capsys.readouterr()
        return status, out.out, out.err

    status, out, _ = run("--save-baseline", str(tmp_path / "b.json"))
    last = out.strip().splitlines()[-1]
    assert status == 0 and last.startswith("npu:cpu:0: ") and " passed, " in last, out
    passed = json.loads((tmp_path / "b.json").read_text())[0]["totals"]["pass"]
    assert passed > 0
    assert run("--fail-under", str(passed))[0] == 0
    status, _, err = run("--fail-under", str(passed + 1))
    assert status == 1 and f"under the floor of {passed + 1}" in err
    assert run("--baseline", str(tmp_path / "b.json"))[0] == 0
    wrong = tmp_path / "wrong.json"
    wrong.write_text("{}")
    status, _, err = run("--baseline", str(wrong))
    assert status == 2 and "not a conformance result" in err


@pytest.mark.usefixtures("keep_api_state")
def test_configure_takes_settings_as_keywords(tmp_path: Path) -> None:
    import nx_hal
    from nx_hal.errors import ConfigError

    try:
        reg = nx_hal.configure(prefer=["cpu"], disable=["npu", "tpu", "graphcore"], no_config=True,
                               cache_dir=str(tmp_path / "cache"))
        assert [str(s) for s in reg.loaded_config.settings.prefer] == ["cpu"]
        reg = nx_hal.configure({"prefer": ["gpu"], "probe_timeout": 7}, prefer=["npu"], no_config=True,
                               disable=["npu", "tpu", "graphcore"], cache_dir=str(tmp_path / "cache"))
        assert [str(s) for s in reg.loaded_config.settings.prefer] == ["npu"]  # keywords win
        assert reg.loaded_config.settings.probe_timeout == 7
        with pytest.raises(ConfigError, match="argument 'prefr'"):
            nx_hal.configure(prefr=["cpu"], no_config=True)
    finally:
        nx_hal.configure(no_config=True, disable=["npu", "tpu", "graphcore"], cache_dir=str(tmp_path / "cache"))


@pytest.mark.usefixtures("keep_api_state")
def test_fallback_warning_points_at_the_callers_line(tmp_path: Path) -> None:
    import nx_hal
    from nx_hal.selection import FallbackWarning

    d = tmp_path / "plugins"
    build_fixture("hostmem", d)
    try:
        nx_hal.configure(prefer=["gpu", "cpu"], plugin_path=[str(d)], disable=["npu", "tpu", "graphcore"],
                         no_config=True, cache_dir=str(tmp_path / "cache"))
        for call in (lambda: nx_hal.put(np.ones(3, np.float32)), lambda: nx_hal.device()):
            nx_hal.set_default_device(None)
            with warnings.catch_warnings(record=True) as caught:
                warnings.simplefilter("always")
                call()
            fallbacks = [w for w in caught if issubclass(w.category, FallbackWarning)]
            assert fallbacks, [str(w.message) for w in caught]
            assert fallbacks[0].filename == __file__, fallbacks[0].filename
            # No gpu here and nothing failed: the one quiet line.
            assert str(fallbacks[0].message) == ("nx_hal runs on fixture_hostmem:cpu:0 (fixture host memory): "
                                                 "no gpu device here (nx_hal.explain() says why)")
    finally:
        nx_hal.configure(no_config=True, disable=["npu", "tpu", "graphcore"], cache_dir=str(tmp_path / "cache"))


def test_cache_info_and_clear(tmp_path: Path) -> None:
    cache = tmp_path / "cache"
    (cache / "executables" / "ab").mkdir(parents=True, mode=0o700)
    cache.chmod(0o700)
    (cache / "executables" / "ab" / ("ab" * 32)).write_bytes(b"x" * 1000)  # the store's layout
    (cache / "notes.txt").write_text("mine")
    env = {"NX_HAL_CACHE_DIR": str(cache), "NX_HAL_CACHE_MAX_BYTES": "1MiB"}
    info = json.loads(cli("cache", "info", "--json", env=env, cwd=tmp_path).stdout)
    assert info["sections"]["executables"] == {"files": 1, "bytes": 1000}
    assert info["max_bytes"] == 1024 * 1024 and info["sections"]["other"]["files"] == 1
    text = cli("cache", "info", env=env, cwd=tmp_path).stdout
    assert f"cache_dir: {cache}" in text and "executables" in text
    bad = cli("cache", "clear", "--section", "bogus", "--json", env=env, cwd=tmp_path)
    assert bad.returncode == 2 and "invalid choice: 'bogus'" in error_of(bad)["message"]
    out = cli("cache", "clear", "--section", "executables", "--json", env=env, cwd=tmp_path)
    assert out.returncode == 0, out.stderr
    assert json.loads(out.stdout)["sections"]["executables"] == {"files": 1, "bytes": 1000}
    assert not any((cache / "executables").iterdir()) and (cache / "notes.txt").read_text() == "mine"


@pytest.mark.usefixtures("keep_api_state")
def test_an_unknown_plugin_is_refused_before_the_test_cases_are_read(
        fixture_env: dict[str, str], monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    """`conformance --plugin nope` answered after reading every ONNX test case (40 s)."""
    pytest.importorskip("onnx")
    from nx_hal.cli import app
    from nx_hal.onnx import conformance as oc

    def collect(*args: object, **kwargs: object) -> None:
        raise AssertionError("the test cases were read before the plugin's name was checked")

    monkeypatch.setattr(oc, "collect", collect)
    for name, value in fixture_env.items():
        monkeypatch.setenv(name, value)
    assert app.main(["conformance", "--plugin", "nope"]) == 2  # a mistake on the command line
    err = capsys.readouterr().err
    assert "no plugin named 'nope' (installed: " in err and "fixture_hostmem" in err, err


@pytest.mark.parametrize(("content", "why"), [
    (b"", "it is empty"),
    (b"  \n", "it is empty"),
    (b"hello world\n", "its bytes are not an ONNX model (ModelProto)"),
    (b"\x89PNG\r\n\x1a\n" + bytes(range(256)), "its bytes are not an ONNX model (ModelProto)"),
    (b"\x08\x08", "it holds no ONNX graph"),  # a ModelProto: ir_version 8 and nothing else
])
def test_a_file_that_is_no_model_is_a_usage_error_before_any_device(
        fixture_env: dict[str, str], tmp_path: Path, content: bytes, why: str) -> None:
    """Not "no device could compile this program" and every device's report:
    one line, exit 2, whatever devices there are."""
    pytest.importorskip("onnx")
    model = tmp_path / "model.onnx"
    model.write_bytes(content)
    out = cli("run", str(model), env=fixture_env, cwd=tmp_path)
    assert (out.returncode, out.stderr) == (2, f"error: not a model nx_hal can read: {model}: {why}\n")


@pytest.mark.usefixtures("keep_api_state")
def test_compile_anywhere_refuses_what_is_no_model_before_any_device(
        fixture_env: dict[str, str], monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    pytest.importorskip("onnx")
    import nx_hal
    from nx_hal import api
    from nx_hal.errors import InvalidArgumentError

    def select(*args: object, **kwargs: object) -> None:
        raise AssertionError("a device was chosen for a file that is no model")

    monkeypatch.setattr(api, "select", select)
    model = tmp_path / "model.onnx"
    model.write_bytes(b"not a model")
    with pytest.raises(InvalidArgumentError) as err:
        nx_hal.compile_anywhere(model)
    assert err.value.message == f"not a model nx_hal can read: {model}: its bytes are not an ONNX model (ModelProto)"
    with pytest.raises(InvalidArgumentError) as err:
        nx_hal.compile_anywhere(b"", format="onnx")
    assert err.value.message == "not a model nx_hal can read: it is empty"
