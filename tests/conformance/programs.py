"""Conformance programs: ``z = x + y`` on f32[4], in each format a plugin may accept."""

from __future__ import annotations

from collections.abc import Callable


def _onnx_add() -> bytes:
    import onnx
    from onnx import TensorProto, helper

    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [4])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [4])
    z = helper.make_tensor_value_info("z", TensorProto.FLOAT, [4])
    graph = helper.make_graph([helper.make_node("Add", ["x", "y"], ["z"])], "main", [x, y], [z])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.checker.check_model(model)
    serialized: bytes = model.SerializeToString()  # protobuf ships no type information
    return serialized


def _stablehlo_add() -> bytes:
    return (
        b"func.func @main(%x: tensor<4xf32>, %y: tensor<4xf32>) -> tensor<4xf32> {\n"
        b"  %z = stablehlo.add %x, %y : tensor<4xf32>\n"
        b"  return %z : tensor<4xf32>\n"
        b"}\n"
    )


ADD_PROGRAMS: dict[str, Callable[[], bytes]] = {
    "fixture-elementwise": lambda: b"add f32 4",
    "template-elementwise": lambda: b"add f32 4",  # examples/plugin-template
    "stablehlo": _stablehlo_add,
    "onnx": _onnx_add,
}


def add_program(formats: tuple[str, ...]) -> tuple[str, bytes] | None:
    """The first format in ``formats`` we have an add program for, and its bytes."""
    for fmt in formats:
        if fmt in ADD_PROGRAMS:
            return fmt, ADD_PROGRAMS[fmt]()
    return None
