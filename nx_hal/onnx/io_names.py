"""An ONNX model's input and output names, read with the ``onnx`` package."""

from __future__ import annotations

__all__ = ["onnx_io_names"]


def onnx_io_names(model: bytes) -> tuple[list[str], list[str]] | None:
    """The graph's input (initializers excluded) and output names; None if
    the bytes do not parse as ONNX (the converter then says why)."""
    try:
        import onnx

        proto = onnx.ModelProto()
        proto.ParseFromString(model)
    except Exception:
        return None
    inits = {i.name for i in proto.graph.initializer}
    return [x.name for x in proto.graph.input if x.name not in inits], [y.name for y in proto.graph.output]
