"""Programs: what a user passes to ``compile`` (bytes, text, a path, an
onnx.ModelProto) as a format and bytes; compile options checked by the
plugin's model; the StableHLO version a portable artifact was written for."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import numpy as np
import pytest
from pydantic import BaseModel, ConfigDict, Field

from nx_hal.config import load_config
from nx_hal.device import Device
from nx_hal.errors import InvalidArgumentError
from nx_hal.plugin import PluginSpec
from nx_hal.programs import (
    Program,
    format_of_path,
    load,
    onnx_problem,
    sniff,
    stablehlo_artifact_version,
    validate_options,
)
from nx_hal.registry import Registry
from tests.cbuild import build_fixture

MLIR_TEXT = 'module {\n  func.func @main(%x: tensor<4xf32>) -> tensor<4xf32> {\n    return %x : tensor<4xf32>\n  }\n}\n'
ONNX_BYTES = b"\x08\x07\x12\x07pytorch:\x00"  # ir_version 7 first, as every serializer writes it
IR_XML = b'<?xml version="1.0"?>\n<net name="model" version="11">\n</net>\n'
KNOWN = "onnx, stablehlo, openvino-ir, popef"


def bytecode(producer: bytes, *, version: int = 1, rest: bytes = b"\x05\x00\x00") -> bytes:
    """An MLIR bytecode header: magic, version varint, producer string (NUL-ended)."""
    return b"ML\xefR" + bytes([version]) + producer + rest


def unknown_format_message(what: str, known: str) -> str:
    return (f"INVALID_ARGUMENT: cannot tell what kind of program {what} is: neither its name nor its first "
            f"bytes are those of a format nx_hal knows; pass format= (one of: {known})")


# ---------------------------------------------------------------- format detection


@pytest.mark.parametrize(("name", "format"), [
    ("model.onnx", "onnx"), ("MODEL.ONNX", "onnx"), ("m.mlir", "stablehlo"), ("m.mlirbc", "stablehlo"),
    ("m.MlirBc", "stablehlo"), ("model.xml", "openvino-ir"), ("model.popef", "popef"),
    ("model.bin", None), ("model", None), ("model.onnx.txt", None), ("dir.onnx/model", None),
])
def test_format_of_path(name: str, format: str | None) -> None:
    assert format_of_path(Path(name)) == format


@pytest.mark.parametrize(("data", "format"), [
    (bytecode(b"StableHLO_v1.0.0\x00"), "stablehlo"),
    (MLIR_TEXT.encode(), "stablehlo"),
    (b"\n\t  func.func @f() {\n}", "stablehlo"),
    (b"#loc = loc(unknown)\nmodule {}", "stablehlo"),
    (b'"builtin.module"() ({\n}) : () -> ()', "stablehlo"),
    (IR_XML, "openvino-ir"),
    (b'  <net name="model" version="11">\n</net>\n', "openvino-ir"),
    (ONNX_BYTES, "onnx"),
    (b"add f32 4", None),
    (b"  \x08 onnx after spaces is not onnx", None),
    (b"<html></html>", None),
    (b"", None),
])
def test_sniff(data: bytes, format: str | None) -> None:
    assert sniff(data) == format


def test_sniff_reads_the_first_4096_bytes() -> None:
    # The CLI passes sniff the first 4096 bytes of a file; leading blank
    # space counts against them.
    assert sniff(b" " * (4096 - len(b"module")) + b"module {}") == "stablehlo"
    assert sniff(b" " * (4097 - len(b"module")) + b"module {}") is None
    assert sniff(b"\n" * (4096 - len(b"<net")) + b"<net>") == "openvino-ir"
    assert sniff(b"\n" * (4097 - len(b"<net")) + b"<net>") is None


# ---------------------------------------------------------------- load: in-memory programs


def test_load_bytes_and_text() -> None:
    assert load(ONNX_BYTES, None, ()) == Program("onnx", ONNX_BYTES)
    assert load(bytearray(ONNX_BYTES), None, ()) == Program("onnx", ONNX_BYTES)
    assert load(memoryview(IR_XML), None, ()) == Program("openvino-ir", IR_XML)
    assert load(MLIR_TEXT, None, ()) == Program("stablehlo", MLIR_TEXT.encode())
    assert type(load(bytearray(b"x"), "popef", ()).data) is bytes


def test_load_one_line_text_is_not_a_path(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    assert load("add f32 4", "fixture-elementwise", ()) == Program("fixture-elementwise", b"add f32 4")
    assert load("add f32 4", None, ("fixture-elementwise",)) == Program("fixture-elementwise", b"add f32 4")


def test_load_long_one_line_text(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # Longer than a file name may be (255 bytes): still the program's text.
    monkeypatch.chdir(tmp_path)
    text = '"builtin.module"() ({' + " " * 300 + "}) : () -> ()"
    assert load(text, None, ()) == Program("stablehlo", text.encode())


def test_load_text_length_boundary(tmp_path: Path) -> None:
    # One line under 4096 characters with a program suffix names a file; one
    # of 4096 or more is the program itself.
    name = "x" * (4095 - len(".mlir")) + ".mlir"
    with pytest.raises(InvalidArgumentError) as info:
        load(name, None, ())
    assert str(info.value).startswith(f"INVALID_ARGUMENT: cannot read program {name}: ")
    text = "y" + name
    assert len(text) == 4096
    assert load(text, "stablehlo", ()) == Program("stablehlo", text.encode())


def test_format_argument_wins_over_content() -> None:
    assert load(MLIR_TEXT, "custom", ()) == Program("custom", MLIR_TEXT.encode())


def test_only_accepted_format_is_the_default() -> None:
    assert load(b"add f32 4", None, ("fixture-elementwise",)) == Program("fixture-elementwise", b"add f32 4")
    # Content that shows a format wins over the only one accepted.
    assert load(ONNX_BYTES, None, ("fixture-elementwise",)) == Program("onnx", ONNX_BYTES)


def test_unknown_content_names_the_formats() -> None:
    with pytest.raises(InvalidArgumentError) as info:
        load(b"add f32 4", None, ())
    assert str(info.value) == unknown_format_message("the program", KNOWN)
    with pytest.raises(InvalidArgumentError) as info:
        load(b"add f32 4", None, ("stablehlo", "popef"))
    assert str(info.value) == unknown_format_message("the program", "stablehlo, popef")


def test_program_passes_through() -> None:
    prog = Program("openvino-ir", IR_XML, b"weights")
    assert load(prog, None, ()) is prog
    assert load(prog, "openvino-ir", ()) is prog
    assert load(prog, "custom", ()) == Program("custom", IR_XML, b"weights")


def test_program_is_an_immutable_value() -> None:
    prog = Program("onnx", ONNX_BYTES)
    with pytest.raises(dataclasses.FrozenInstanceError):
        prog.format = "stablehlo"  # type: ignore[misc]
    assert {prog, Program("onnx", ONNX_BYTES)} == {Program("onnx", ONNX_BYTES, None)}


def test_load_onnx_model_proto() -> None:
    onnx = pytest.importorskip("onnx")
    from onnx import TensorProto, helper

    graph = helper.make_graph([helper.make_node("Relu", ["x"], ["y"])], "g",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2])])
    model = helper.make_model(graph)
    prog = load(model, None, ())
    assert prog == Program("onnx", model.SerializeToString())
    assert onnx.load_from_string(prog.data) == model
    assert load(model, "onnx", ("stablehlo",)).format == "onnx"
    # Another protobuf message is not a model.
    with pytest.raises(InvalidArgumentError) as info:
        load(graph, None, ())
    assert str(info.value) == ("INVALID_ARGUMENT: cannot compile a GraphProto: pass bytes, text, a path, an "
                               "onnx.ModelProto, jax.jit(f).lower(*args) or a jax.export.Exported")


@pytest.mark.parametrize(("program", "kind"), [(42, "int"), (None, "NoneType"), ([b"x"], "list")])
def test_load_refuses_other_objects(program: object, kind: str) -> None:
    with pytest.raises(InvalidArgumentError) as info:
        load(program, "onnx", ())
    assert str(info.value) == (f"INVALID_ARGUMENT: cannot compile a {kind}: pass bytes, text, a path, an "
                               "onnx.ModelProto, jax.jit(f).lower(*args) or a jax.export.Exported")


# ---------------------------------------------------------------- load: files


def test_load_path_format_from_suffix(tmp_path: Path) -> None:
    # The suffix wins over the content.
    path = tmp_path / "model.mlir"
    path.write_bytes(ONNX_BYTES)
    assert load(path, None, ()) == Program("stablehlo", ONNX_BYTES)
    assert load(str(path), None, ()) == Program("stablehlo", ONNX_BYTES)
    # and the format argument over the suffix.
    assert load(path, "onnx", ()) == Program("onnx", ONNX_BYTES)


def test_load_path_format_from_content(tmp_path: Path) -> None:
    path = tmp_path / "model"
    path.write_text(MLIR_TEXT)
    assert load(path, None, ()) == Program("stablehlo", MLIR_TEXT.encode())
    assert load(str(path), None, ()) == Program("stablehlo", MLIR_TEXT.encode())


def test_load_path_str_of_unknown_suffix(tmp_path: Path) -> None:
    path = tmp_path / "model.bytes"
    path.write_bytes(ONNX_BYTES)
    assert load(str(path), None, ()) == Program("onnx", ONNX_BYTES)


def test_load_path_of_unknown_content_names_it(tmp_path: Path) -> None:
    path = tmp_path / "program.txt"
    path.write_bytes(b"add f32 4")
    with pytest.raises(InvalidArgumentError) as info:
        load(path, None, ("stablehlo", "onnx"))
    assert str(info.value) == unknown_format_message(str(path), "stablehlo, onnx")
    assert load(path, None, ("fixture-elementwise",)) == Program("fixture-elementwise", b"add f32 4")


def test_load_missing_file(tmp_path: Path) -> None:
    path = tmp_path / "missing.onnx"
    for given in (path, str(path)):
        with pytest.raises(InvalidArgumentError) as info:
            load(given, None, ())
        assert str(info.value) == f"INVALID_ARGUMENT: cannot read program {path}: No such file or directory"


def test_openvino_ir_reads_its_weights(tmp_path: Path) -> None:
    xml = tmp_path / "model.xml"
    xml.write_bytes(IR_XML)
    assert load(xml, None, ()) == Program("openvino-ir", IR_XML, None)
    (tmp_path / "model.bin").write_bytes(b"\x00\x01weights")
    assert load(xml, None, ()) == Program("openvino-ir", IR_XML, b"\x00\x01weights")
    assert load(str(xml), None, ()).extra == b"\x00\x01weights"


def test_openvino_ir_by_content_reads_its_weights(tmp_path: Path) -> None:
    ir = tmp_path / "model.ir"
    ir.write_bytes(IR_XML)
    (tmp_path / "model.bin").write_bytes(b"w")
    assert load(ir, None, ()) == Program("openvino-ir", IR_XML, b"w")
    assert load(ir, "openvino-ir", ()) == Program("openvino-ir", IR_XML, b"w")


def test_only_openvino_ir_has_weights(tmp_path: Path) -> None:
    onnx_path = tmp_path / "model.onnx"
    onnx_path.write_bytes(ONNX_BYTES)
    (tmp_path / "model.bin").write_bytes(b"w")
    assert load(onnx_path, None, ()) == Program("onnx", ONNX_BYTES, None)


# ---------------------------------------------------------------- validate_options


class Tiling(BaseModel):
    model_config = ConfigDict(extra="forbid")
    rows: int = 1


class Options(BaseModel):
    model_config = ConfigDict(extra="forbid")
    opt_level: int = Field(1, ge=0, le=3)
    name: str = "main"
    tiling: Tiling = Tiling()


def test_validate_options_gives_only_what_was_set() -> None:
    assert validate_options(Options, {"opt_level": "2"}, "npu") == {"opt_level": 2}
    assert validate_options(Options, {"opt_level": 0, "tiling": {"rows": "4"}}, "npu") == {
        "opt_level": 0, "tiling": {"rows": 4}}
    assert validate_options(Options, {}, "npu") == {}


def test_validate_options_errors_name_each_option() -> None:
    with pytest.raises(InvalidArgumentError) as info:
        validate_options(Options, {"opt_level": 7, "tiling": {"rows": "many"}, "bogus": 1}, "npu")
    assert info.value.plugin == "npu"
    assert str(info.value) == (
        "[npu] INVALID_ARGUMENT: option 'opt_level': Input should be less than or equal to 3; "
        "option 'tiling.rows': Input should be a valid integer, unable to parse string as an integer; "
        "option 'bogus': Extra inputs are not permitted")


class FixtureOptions(BaseModel):
    model_config = ConfigDict(extra="forbid")
    opt_level: int = Field(0, ge=0, le=3)


def options_device(tmp_path: Path) -> Device:
    lib = build_fixture("hostmem", tmp_path / "libs")
    reg = Registry(load_config({"cache_dir": str(tmp_path / "cache")}, no_config=True, cwd=tmp_path))
    rec = reg.load(reg.add(PluginSpec(name="fixture-hostmem", library=lib, compile_options_model=FixtureOptions)))
    assert rec.state == "loaded", rec.reason
    return rec.devices[0]


def test_compile_checks_options_with_the_plugins_model(tmp_path: Path) -> None:
    dev = options_device(tmp_path)
    # The fixture library takes any int64 opt_level: the model is what refuses 7.
    with pytest.raises(InvalidArgumentError) as info:
        dev.compile(b"add f32 4", "fixture-elementwise", cache=False, verify="off", opt_level=7)
    assert str(info.value) == ("[fixture-hostmem] INVALID_ARGUMENT: option 'opt_level': "
                               "Input should be less than or equal to 3")
    # and what makes "2" the int the library needs.
    exe = dev.compile(b"add f32 4", "fixture-elementwise", cache=False, verify="off", opt_level="2")
    x = np.arange(4, dtype=np.float32)
    np.testing.assert_allclose(exe(x, x)[0].to_numpy(), 2 * x)


# ---------------------------------------------------------------- stablehlo_artifact_version


@pytest.mark.parametrize(("data", "version"), [
    (bytecode(b"StableHLO_v1.13.3\x00"), "1.13.3"),
    (bytecode(b"StableHLO_v0.9.0\x00", version=6), "0.9.0"),
    (bytecode(b"StableHLO_v10.20.300\x00", rest=b"StableHLO_v9.9.9\x00"), "10.20.300"),
])
def test_stablehlo_artifact_version(data: bytes, version: str) -> None:
    assert stablehlo_artifact_version(data) == version


@pytest.mark.parametrize("data", [
    MLIR_TEXT.encode(),
    b"module attributes {producer = \"StableHLO_v1.0.0\x00\"} {}",  # text, not bytecode
    bytecode(b"MLIR20.0.0git\x00"),  # plain MLIR bytecode
    bytecode(b"MLIR19.1.7\x00", rest=b""),  # its header alone, a version in its producer
    bytecode(b"StableHLO_v1.2\x00"),  # not X.Y.Z
    bytecode(b"StableHLO_v1.2.3-rc1\x00"),
    bytecode(b"StableHLO_v\x00"),
    bytecode(b"StableHLO_v1.2.3", rest=b""),  # not NUL-ended
    b"ML\xefR",
    b"",
])
def test_no_stablehlo_artifact_version(data: bytes) -> None:
    assert stablehlo_artifact_version(data) is None


def test_stablehlo_producer_is_read_from_the_header() -> None:
    # The producer string sits in the bytecode's header, within its first 64
    # bytes; the same text further on is the program's, not the producer.
    name = b"StableHLO_v"
    ends_at_64 = b"ML\xefR" + b"\x01" * (64 - 4 - len(name)) + name + b"1.0.0\x00"
    assert ends_at_64.index(name) + len(name) == 64
    assert stablehlo_artifact_version(ends_at_64) == "1.0.0"
    ends_at_65 = b"ML\xefR" + b"\x01" * (65 - 4 - len(name)) + name + b"1.0.0\x00"
    assert stablehlo_artifact_version(ends_at_65) is None


def test_sources_name_every_file_read(tmp_path: Path) -> None:
    """A Program names the files it was read from (the compile pipeline's
    in-process lookup re-checks them): the program, IR weights when there
    are any, and an ONNX model's external data files; bytes name none."""
    xml = tmp_path / "model.xml"
    xml.write_bytes(IR_XML)
    assert load(xml, None, ()).sources == (str(xml.resolve()),)
    (tmp_path / "model.bin").write_bytes(b"w")
    assert load(xml, None, ()).sources == (str(xml.resolve()), str((tmp_path / "model.bin").resolve()))
    assert load(IR_XML, "openvino-ir", ()).sources == ()


def test_onnx_external_data_is_put_inside_the_program(tmp_path: Path) -> None:
    onnx = pytest.importorskip("onnx")
    import numpy as np
    from onnx import TensorProto, helper, numpy_helper
    from onnx.external_data_helper import convert_model_to_external_data

    w = numpy_helper.from_array(np.arange(4, dtype=np.float32), "W")
    graph = helper.make_graph([helper.make_node("Mul", ["x", "W"], ["y"])], "g",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, [4])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [4])], [w])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    convert_model_to_external_data(model, all_tensors_to_one_file=True, location="weights.bin", size_threshold=0)
    path = tmp_path / "model.onnx"
    onnx.save_model(model, path)
    prog = load(path, None, ())
    assert prog.format == "onnx"
    assert prog.sources == (str(path.resolve()), str((tmp_path / "weights.bin").resolve()))
    inside = onnx.load_model_from_string(prog.data)
    np.testing.assert_array_equal(numpy_helper.to_array(inside.graph.initializer[0]), np.arange(4, dtype=np.float32))
    # Not ONNX: left as it was, nothing else read.
    other = tmp_path / "model.mlir"
    other.write_bytes(b"module {}\nlocation")
    assert load(other, None, ()).sources == (str(other.resolve()),)


# ---------------------------------------------------------------- what is no ONNX model at all


def _onnx_model(nodes: int, outputs: int) -> bytes:
    onnx = pytest.importorskip("onnx")
    h = onnx.helper
    x = h.make_tensor_value_info("x", onnx.TensorProto.FLOAT, [2])
    ys = [h.make_tensor_value_info("x", onnx.TensorProto.FLOAT, [2])][:outputs]
    graph = h.make_graph([h.make_node("Relu", ["x"], ["x"])][:nodes], "g", [x], ys)
    return bytes(h.make_model(graph).SerializeToString())


@pytest.mark.parametrize(("data", "why"), [
    (b"", "it is empty"),
    (b" \n\t", "it is empty"),
    (b"hello world\n", "its bytes are not an ONNX model (ModelProto)"),
    (b"\x08\x08", "it holds no ONNX graph"),  # ir_version 8 and nothing else
])
def test_onnx_problem_says_why_it_is_no_model(data: bytes, why: str) -> None:
    pytest.importorskip("onnx")
    assert onnx_problem(data) == why


@pytest.mark.parametrize(("nodes", "outputs", "why"), [
    (1, 1, None), (1, 0, None), (0, 1, None),  # a graph passing its input through is still a model
    (0, 0, "it holds no ONNX graph"),
])
def test_onnx_problem_accepts_any_graph(nodes: int, outputs: int, why: str | None) -> None:
    assert onnx_problem(_onnx_model(nodes, outputs)) == why


def test_onnx_problem_without_the_onnx_package_sees_only_emptiness(monkeypatch: pytest.MonkeyPatch) -> None:
    import sys

    monkeypatch.setitem(sys.modules, "onnx", None)  # import onnx raises ImportError
    assert onnx_problem(b"") == "it is empty"
    assert onnx_problem(b"hello world") is None  # the devices' own parsers say the rest


def test_a_model_proto_naming_external_data_needs_its_path() -> None:
    """An onnx.ModelProto passed as it is (format None or "onnx") goes through
    the external-data step: one that still names external files cannot be
    read without the model's directory, and says so."""
    onnx = pytest.importorskip("onnx")
    from onnx.external_data_helper import set_external_data

    model = onnx.ModelProto()
    model.CopyFrom(onnx.load_model_from_string(_onnx_model(1, 1)))
    weight = onnx.numpy_helper.from_array(np.ones(2, np.float32), "w")
    set_external_data(weight, location="weights.bin")
    weight.data_location = onnx.TensorProto.EXTERNAL
    weight.ClearField("raw_data")
    model.graph.initializer.append(weight)
    for fmt in (None, "onnx"):
        with pytest.raises(InvalidArgumentError, match="external data files"):
            load(model, fmt, ("onnx",))
