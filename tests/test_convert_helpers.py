"""The ONNX converter's work around its child (nx_hal.onnx.convert): shapes
and cache keys before, reading the child's exit, stderr and reply after, and
the command line's shapes and target. Direct calls: no torch-mlir child."""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path
from typing import Any

import pytest

from nx_hal.errors import InvalidArgumentError, ResourceExhaustedError
from nx_hal.onnx.convert import (
    ConversionError,
    _cache_key,
    _interpret,
    _last_stage,
    _normalise_shapes,
    _resolve_target,
    _signal_name,
    _torch_mlir_version,
    parse_input_shapes,
)

# -- shapes and cache keys -------------------------------------------------------------


def test_normalise_shapes() -> None:
    assert _normalise_shapes(None) == {}
    shapes = _normalise_shapes({"y": (1, 128), "x": [2, 0]})
    assert shapes == {"x": [2, 0], "y": [1, 128]} and list(shapes) == ["x", "y"]
    with pytest.raises(InvalidArgumentError) as err:
        _normalise_shapes({"x": [2, -1]})
    assert (err.value.message, err.value.plugin) == ("input_shapes['x'] has dimension -1, expected >= 0", None)


def test_cache_key_names_everything_the_output_depends_on() -> None:
    key = _cache_key(b"model", {"x": [1, 4]}, "1.9.0", False, "20250101")
    assert re.fullmatch(r"[0-9a-f]{64}", key)
    assert _cache_key(b"model", {"x": [1, 4]}, "1.9.0", False, "20250101") == key
    others = {
        _cache_key(b"other model", {"x": [1, 4]}, "1.9.0", False, "20250101"),
        _cache_key(b"model", {"x": [2, 4]}, "1.9.0", False, "20250101"),
        _cache_key(b"model", {}, "1.9.0", False, "20250101"),
        _cache_key(b"model", {"x": [1, 4]}, "1.8.0", False, "20250101"),
        _cache_key(b"model", {"x": [1, 4]}, None, False, "20250101"),
        _cache_key(b"model", {"x": [1, 4]}, "1.9.0", True, "20250101"),
        _cache_key(b"model", {"x": [1, 4]}, "1.9.0", False, "20250202"),
        _cache_key(b"model", {"x": [1, 4]}, "1.9.0", False, "20250101", "cpu"),
        _cache_key(b"model", {"x": [1, 4]}, "1.9.0", False, "20250101", "gpu"),
        _cache_key(b"model", {"x": [1, 4]}, "1.9.0", False, "20250101", None, "bf16"),
        _cache_key(b"model", {"x": [1, 4]}, "1.9.0", False, "20250101", None, "f16"),
        _cache_key(b"model", {"x": [1, 4]}, "1.9.0", False, "20250101", "cpu", "bf16"),
    }
    assert key not in others and len(others) == 12
    # No precision (the model's own types) is the key as it was before the option.
    assert _cache_key(b"model", {"x": [1, 4]}, "1.9.0", False, "20250101", None, None) == key


def test_cache_key_without_a_platform_is_the_one_before_platforms() -> None:
    """A key without a platform is built from the facts it was built from before platforms:
    the model's SHA-256 (hashed once per compile, nx_hal.store.digest_scope), then the facts."""
    import hashlib
    import json

    from nx_hal.onnx.convert import _CACHE_SCHEMA, _code_digest

    facts = [{"x": [1, 4]}, "1.9.0", False, "20250101", _CACHE_SCHEMA, _code_digest()]
    model = hashlib.sha256(b"model").digest()
    before = hashlib.sha256(model + json.dumps(facts, sort_keys=True).encode()).hexdigest()
    assert _cache_key(b"model", {"x": [1, 4]}, "1.9.0", False, "20250101", None) == before
    assert _cache_key(b"model", {"x": [1, 4]}, "1.9.0", False, "20250101") == before


def test_cache_key_follows_the_converters_code(monkeypatch: pytest.MonkeyPatch) -> None:
    """Another version of the pre-passes and rewrites is another key: an upgrade or a fixed
    rewrite never reads the old code's conversion."""
    from nx_hal.onnx import convert

    key = _cache_key(b"model", {"x": [1, 4]}, None, False, "t", "cpu")
    monkeypatch.setattr(convert, "_code_digest", lambda: "0" * 16)
    assert _cache_key(b"model", {"x": [1, 4]}, None, False, "t", "cpu") != key


def test_code_digest_reads_every_source(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    from nx_hal.onnx import convert

    copy = tmp_path / "onnx"
    shutil.copytree(Path(convert.__file__).parent, copy, ignore=shutil.ignore_patterns("__pycache__"))
    monkeypatch.setattr(convert, "__file__", str(copy / "convert.py"))
    digest = convert._code_digest.__wrapped__()
    assert len(digest) == 16 and digest == convert._code_digest()  # the copy is the package's code
    conv = copy / "rewrites" / "conv.py"
    conv.write_text(conv.read_text() + "\n# changed\n")
    assert convert._code_digest.__wrapped__() != digest
    conv.unlink()
    assert convert._code_digest.__wrapped__() not in (digest, "")


def test_code_digest_without_readable_sources_is_the_version(monkeypatch: pytest.MonkeyPatch) -> None:
    from nx_hal.onnx import convert
    from nx_hal.version import __version__

    def unreadable(self: Path) -> bytes:
        raise PermissionError(str(self))

    monkeypatch.setattr(Path, "read_bytes", unreadable)
    assert convert._code_digest.__wrapped__() == "version " + __version__


def test_cache_key_does_not_depend_on_the_order_of_inputs() -> None:
    assert (_cache_key(b"m", {"x": [1], "mask": [1, 8]}, None, False, "t")
            == _cache_key(b"m", {"mask": [1, 8], "x": [1]}, None, False, "t"))


# -- the child's exit and stderr -----------------------------------------------------------


@pytest.mark.parametrize(("returncode", "name"), [(-11, "SIGSEGV"), (-9, "SIGKILL"), (-6, "SIGABRT"),
                                                  (-200, "signal 200")])
def test_signal_name(returncode: int, name: str) -> None:
    assert _signal_name(returncode) == name


@pytest.mark.parametrize(
    ("stderr", "stage"),
    [
        ("", None),
        ("warning: slow\n", None),
        ("stage: import\n", "import"),
        ("stage: import\nsome output\nstage: lower\nmore output\n", "lower"),
        ("stage: import\n  stage: indented\nstage: two words\n", "import"),  # whole lines only
        ("xstage: nope\nstage: import", "import"),
    ],
)
def test_last_stage(stderr: str, stage: str | None) -> None:
    assert _last_stage(stderr) == stage


TM = _torch_mlir_version()


def interpret_error(returncode: int | None, stderr: str, reply_text: str) -> ConversionError:
    with pytest.raises(ConversionError) as err:
        _interpret(returncode, stderr, reply_text)
    assert err.value.code == "INVALID_ARGUMENT"
    return err.value


@pytest.mark.parametrize(
    ("stderr", "where", "ops"),
    [
        ("", "start-up", ""),
        ("stage: import\nstage: lower\n", "lower", ""),
        ("stage: import\nonnx-ops: AveragePool,Relu\nstage: lower\n", "lower",
         " (model's ONNX ops: AveragePool, Relu)"),
        ("onnx-ops: \nstage: import\n", "import", ""),
        ("onnx-ops: Add\nonnx-ops: \n", "start-up", ""),  # the last report counts
        ("onnx-ops: \nonnx-ops: Conv,Add\n", "start-up", " (model's ONNX ops: Conv, Add)"),
    ],
)
def test_crash_names_signal_stage_and_ops(stderr: str, where: str, ops: str) -> None:
    err = interpret_error(-11, stderr, '{"ok": true}')  # a reply before the crash does not count
    assert err.message == (f"converter crashed (SIGSEGV) in {where}: torch-mlir {TM} cannot convert this "
                           f"model{ops}; the calling process is unaffected")
    assert err.reason == "crash"


@pytest.mark.parametrize(
    ("returncode", "reply_text", "status"),
    [
        (1, "", "exit status 1"),
        (0, "", "exit status 0"),  # exited cleanly without a word
        (2, "Traceback: not json", "exit status 2"),
        (0, "{not json", "exit status 0"),
        (0, '["ok"]', "exit status 0"),  # JSON, but not a reply
        (None, "", "no reply"),
        (None, "   \n", "no reply"),
    ],
)
def test_no_reply_is_a_failure_with_the_stderr_tail(returncode: int | None, reply_text: str,
                                                    status: str) -> None:
    err = interpret_error(returncode, "stage: import\nImportError: libfoo.so\n", reply_text)
    assert err.message == f"converter failed ({status}) in import:\nstage: import\nImportError: libfoo.so"
    assert err.reason == "converter-error"
    assert (err.operators, err.leftover_ops) == ((), ())


def test_failure_before_any_stage_is_in_start_up() -> None:
    err = interpret_error(1, "  Fatal Python error\n", "")
    assert err.message == "converter failed (exit status 1) in start-up:\nFatal Python error"


def test_failure_keeps_only_the_end_of_a_long_stderr() -> None:
    stderr = "stage: lower\n" + "".join(f"line {i:05d}\n" for i in range(1000))
    err = interpret_error(1, stderr, "")
    head, tail = err.message.split(":\n", 1)
    assert head == "converter failed (exit status 1) in lower"
    assert tail == stderr.strip()[-1500:] and len(tail) == 1500
    assert tail.endswith("line 00999")


def test_reply_is_its_last_line() -> None:
    reply = _interpret(None, "stage: serialize\n", 'log line\n{"ok": false}\n{"ok": true, "version": "1.9.0"}\n\n')
    assert reply == {"ok": True, "version": "1.9.0"}
    assert _interpret(0, "", '{"ok": 1, "ops": {"stablehlo.add": 1}}') == {"ok": 1, "ops": {"stablehlo.add": 1}}


def test_refusal_in_the_reply() -> None:
    reply: dict[str, Any] = {"ok": False, "message": "Resize is not supported", "reason": "unsupported-operator",
                             "operators": ["Resize", 3], "leftover_ops": ["torch.operator"]}
    err = interpret_error(0, "stage: lower\n", json.dumps(reply))
    assert err.message == "Resize is not supported"
    assert (err.reason, err.operators, err.leftover_ops) == ("unsupported-operator", ("Resize", "3"),
                                                             ("torch.operator",))
    err = interpret_error(None, "", '{"ok": false}')
    assert (err.message, err.reason, err.operators, err.leftover_ops) == (
        "conversion failed", "converter-error", (), ())


# -- the command line ------------------------------------------------------------------------


def test_parse_input_shapes() -> None:
    assert parse_input_shapes([]) == {}
    assert parse_input_shapes(["x=1,3,224,224", "mask=1x128", "s=", "t=2,"]) == {
        "x": (1, 3, 224, 224), "mask": (1, 128), "s": (), "t": (2,)}
    assert parse_input_shapes(["x=1", "x=2,2"]) == {"x": (2, 2)}  # the last one given


@pytest.mark.parametrize("spec", ["x", "x:1,2", "=1,2", "x=1,two", "x=1.5"])
def test_parse_input_shapes_refuses(spec: str) -> None:
    with pytest.raises(InvalidArgumentError) as err:
        parse_input_shapes(["y=1", spec])
    assert err.value.message == f"--input-shape {spec!r}: expected NAME=D0,D1,... (e.g. x=1,3,224,224)"


class Dev:
    def __init__(self, plugin: str, version: str | None = None) -> None:
        self.plugin = plugin
        self.attributes = {"stablehlo_version": version} if version else {}


def test_resolve_target_version_or_none() -> None:
    def devices() -> list[Dev]:
        raise AssertionError("a version needs no devices")

    assert _resolve_target(None, devices) is None
    assert _resolve_target(None, None) is None
    assert _resolve_target("1.9.0", devices) == "1.9.0"


def test_resolve_target_by_plugin() -> None:
    found = [Dev("npu"), Dev("tpu"), Dev("tpu", "1.9.3"), Dev("other", "1.2.0")]
    assert _resolve_target("tpu", lambda: found) == "1.9.3"
    assert _resolve_target("other", lambda: found) == "1.2.0"
    with pytest.raises(InvalidArgumentError) as err:
        _resolve_target("npu", lambda: found)
    assert err.value.message == "--target 'npu': plugin 'npu' does not state a StableHLO version"


@pytest.mark.parametrize("devices", [None, lambda: [], lambda: [Dev("tpu", "1.9.3")]])
def test_resolve_target_without_that_plugin(devices: Any) -> None:
    with pytest.raises(InvalidArgumentError) as err:
        _resolve_target("graphcore", devices)
    assert err.value.message == ("--target 'graphcore': no device of plugin 'graphcore' is available; "
                                 "pass a StableHLO version (e.g. 1.9.0) instead")


def test_memory_words_decide_only_without_a_reply_or_after_a_signal() -> None:
    """A child's stderr holding an allocation failure's words makes the
    outcome "out of memory" only where the child died of a signal or gave
    no reply: a child that exited cleanly, or answered, said what happened."""
    words = "Traceback ...\nMemoryError\n"
    ok = '{"ok": true, "version": "1.9.0"}'
    assert _interpret(0, words, ok) == {"ok": True, "version": "1.9.0"}  # exit status 0: its reply stands
    assert _interpret(None, words, ok) == {"ok": True, "version": "1.9.0"}  # a worker that replied
    with pytest.raises(ConversionError, match="no lowering") as info:
        _interpret(None, words, '{"ok": false, "reason": "unsupported-operator", "message": "no lowering"}')
    assert info.value.reason == "unsupported-operator"
    with pytest.raises(ResourceExhaustedError):
        _interpret(-9, words, "")  # killed, with the words: out of memory
    for signal_number in (1, 6):  # any signal: SIGHUP's -1 too; SIGABRT is what std::bad_alloc ends in
        with pytest.raises(ResourceExhaustedError):
            _interpret(-signal_number, words, "")
    with pytest.raises(ResourceExhaustedError):
        _interpret(1, words, "")  # no reply at all, with the words
