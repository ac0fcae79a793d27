"""What every rewrite needs from the model: shapes and constant values by
name, fresh names, and a block that collects the nodes replacing one node."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

import numpy as np
import onnx
from onnx import helper, numpy_helper

from nx_hal.onnx.convert import ConversionError
from nx_hal.onnx.prepass import FreshNames

__all__ = ["Block", "Model", "ShapeUnknown", "attributes", "input_name", "known_attributes", "np_dtype", "output", "refuse",
           "tensor_type_name"]


def refuse(node: Any, what: str) -> ConversionError:
    """The error for a node no rewrite covers: its name, op type and why."""
    name = f" '{node.name}'" if node.name else ""
    return ConversionError(
        f"{node.op_type} node{name}: {what}; the StableHLO lowering has no rewrite for it",
        reason="unsupported-operator",
        operators=[node.op_type],
    )


class ShapeUnknown(ConversionError):
    """A rewrite needs a shape or type that inference has not given (yet:
    the value may come out of a node that another rewrite replaces)."""


def _unknown(node: Any, what: str) -> ShapeUnknown:
    error = refuse(node, what)
    return ShapeUnknown(error.message, reason="dynamic-shape", operators=error.operators)


def _names(graph: Any, into: set[str]) -> None:
    for value in (*graph.input, *graph.output, *graph.value_info):
        into.add(value.name)
    for init in graph.initializer:
        into.add(init.name)
    for node in graph.node:
        into.update(node.input)
        into.update(node.output)
        into.add(node.name)
        for attr in node.attribute:
            if attr.HasField("g"):
                _names(attr.g, into)
            for sub in attr.graphs:
                _names(sub, into)


def _constant_node_value(node: Any) -> np.ndarray | None:
    for attr in node.attribute:
        if attr.name == "value":
            return np.asarray(numpy_helper.to_array(attr.t))
        if attr.name == "value_float":
            return np.asarray(attr.f, dtype=np.float32)
        if attr.name == "value_floats":
            return np.asarray(list(attr.floats), dtype=np.float32)
        if attr.name == "value_int":
            return np.asarray(attr.i, dtype=np.int64)
        if attr.name == "value_ints":
            return np.asarray(list(attr.ints), dtype=np.int64)
    return None  # sparse or string constants: not values a rewrite reads


class Model:
    """Shapes, element types and constant values of one (shape-inferred)
    graph, plus the initializers and names the rewrites add to it."""

    def __init__(self, model: Any, platform: str | None = None) -> None:
        self.model = model
        self.graph = model.graph
        # The target device's kind ("cpu", ...), for rewrites that pay off
        # on some platforms only (WHEN); None: converting for any platform.
        self.platform = platform
        self.opset = next((int(o.version) for o in model.opset_import if o.domain in ("", "ai.onnx")), 1)
        self.taken: set[str] = set()
        _names(self.graph, self.taken)
        # A value or node name not used anywhere in the model.
        self.fresh = FreshNames(self.taken, "{hint}__rw{n}")
        # Names of the main graph's own values, subgraphs apart: what an inlined branch must not redefine.
        self.outer: set[str] = {v.name for v in (*self.graph.input, *self.graph.initializer)}
        self.outer.update(o for n in self.graph.node for o in n.output)
        self.types: dict[str, Any] = {}
        self.constants: dict[str, np.ndarray] = {}
        self.add_values(self.graph)
        self.added: set[str] = set()  # initializers the rewrites made
        self._cache: dict[tuple[str, bytes, tuple[int, ...]], str] = {}

    def add_values(self, graph: Any) -> None:
        """Records the typed values and constants of ``graph`` (the main graph,
        or a branch being inlined into it)."""
        for value in (*graph.input, *graph.value_info, *graph.output):
            if value.type.HasField("tensor_type"):
                self.types[value.name] = value.type.tensor_type
        for init in graph.initializer:
            self.constants[init.name] = np.asarray(numpy_helper.to_array(init))
        for node in graph.node:
            if node.op_type == "Constant" and node.domain in ("", "ai.onnx") and len(node.output) == 1:
                value = _constant_node_value(node)
                if value is not None:
                    self.constants[node.output[0]] = value


    def constant(self, array: np.ndarray, hint: str = "const") -> str:
        """The name of an initializer holding ``array`` (one per distinct value)."""
        array = np.asarray(array)
        key = (array.dtype.str, array.tobytes(), array.shape)
        name = self._cache.get(key)
        if name is None:
            name = self.fresh(hint)
            self.graph.initializer.append(numpy_helper.from_array(array, name))
            self.added.add(name)
            self.constants[name] = array
            self._cache[key] = name
        return name

    def value(self, name: str) -> np.ndarray | None:
        """The constant value of ``name`` (initializer or Constant node), else None."""
        return self.constants.get(name)

    def shape(self, node: Any, name: str) -> tuple[int, ...]:
        """The static shape of ``name``; refuses ``node`` when it is unknown."""
        ttype = self.types.get(name)
        if ttype is None and name in self.constants:
            return tuple(int(d) for d in self.constants[name].shape)
        if ttype is None or not ttype.HasField("shape"):
            raise _unknown(node, f"the shape of '{name}' is unknown (run shape inference with static input shapes)")
        dims = []
        for dim in ttype.shape.dim:
            if not dim.HasField("dim_value"):
                raise _unknown(node, f"the shape of '{name}' is not static")
            dims.append(int(dim.dim_value))
        return tuple(dims)

    def static_shapes(self, node: Any, *names: str) -> tuple[tuple[int, ...], ...] | None:
        """The static shapes of ``names``, or None when one is unknown: for the
        predicates of rewrites made for speed, which leave such a node alone."""
        try:
            return tuple(self.shape(node, name) for name in names)
        except ShapeUnknown:
            return None

    def describe_inputs(self, node: Any) -> str:
        """The node's inputs with their shapes as inferred, for error messages:
        ``X float[4, 2, 3], W float[1, 20, 3]`` (``?`` where unknown)."""
        parts = []
        for name in node.input:
            if not name:
                continue
            ttype = self.types.get(name)
            if name in self.constants:
                value = self.constants[name]
                elem = tensor_type_name(int(helper.np_dtype_to_tensor_dtype(value.dtype)))
                parts.append(f"{name} {elem}{list(value.shape)} (constant)")
            elif ttype is not None and ttype.HasField("shape"):
                dims = [str(d.dim_value) if d.HasField("dim_value") else (d.dim_param or "?")
                        for d in ttype.shape.dim]
                parts.append(f"{name} {tensor_type_name(ttype.elem_type)}[{', '.join(dims)}]")
            else:
                parts.append(f"{name} ?")
        return ", ".join(parts)

    def elem_type(self, node: Any, name: str) -> int:
        """The ONNX element type (TensorProto.FLOAT...) of ``name``."""
        if name in self.constants:
            return int(helper.np_dtype_to_tensor_dtype(self.constants[name].dtype))
        ttype = self.types.get(name)
        if ttype is None or not ttype.elem_type:
            raise _unknown(node, f"the element type of '{name}' is unknown")
        return int(ttype.elem_type)


def np_dtype(elem_type: int) -> np.dtype[Any]:
    """numpy's dtype for an ONNX element type."""
    return np.dtype(helper.tensor_dtype_to_np_dtype(elem_type))


class Block:
    """The nodes that replace one node, in order. Each op gets one output
    unless ``out`` names it (a replaced node's own outputs keep their names,
    so that its consumers and the graph outputs need no change)."""

    def __init__(self, model: Model, node: Any) -> None:
        self.model = model
        self.node = node
        self.nodes: list[Any] = []
        self._hint = (node.name or node.op_type).replace("/", "_")

    def op(self, op_type: str, *inputs: str, out: str | None = None, **attrs: Any) -> str:
        """Appends one node; returns its output's name."""
        output = out if out is not None else self.model.fresh(f"{self._hint}_{op_type}")
        self.nodes.append(helper.make_node(op_type, list(inputs), [output],
                                           name=self.model.fresh(f"{self._hint}_{op_type}"), **attrs))
        return output

    def const(self, value: Any, dtype: Any = None) -> str:
        return self.model.constant(np.asarray(value, dtype=dtype), f"{self._hint}_const")

    def ints(self, values: Iterable[int]) -> str:
        return self.const(list(values), np.int64)

    def slice(self, data: str, axis: int, start: int, end: int) -> str:
        return self.op("Slice", data, self.ints([start]), self.ints([end]), self.ints([axis]))

    def take(self, data: str, index: int, axis: int = 0) -> str:
        """``data[index]`` along ``axis``, that axis removed."""
        return self.op("Gather", data, self.const(index, np.int64), axis=axis)

    def unsqueeze(self, data: str, axes: Sequence[int], out: str | None = None) -> str:
        return self.op("Unsqueeze", data, self.ints(axes), out=out)

    def concat(self, parts: Sequence[str], axis: int, out: str | None = None) -> str:
        if len(parts) == 1:
            return self.op("Identity", parts[0], out=out)
        return self.op("Concat", *parts, axis=axis, out=out)


def output(node: Any, index: int) -> str | None:
    """The name of output ``index`` of ``node``, None when it is not wanted."""
    return node.output[index] if len(node.output) > index and node.output[index] else None


def input_name(node: Any, index: int) -> str | None:
    """The name of input ``index`` of ``node``, None when it is left out."""
    return node.input[index] if len(node.input) > index and node.input[index] else None


def attributes(node: Any) -> dict[str, Any]:
    """The node's attributes as Python values (strings decoded)."""
    values: dict[str, Any] = {}
    for attr in node.attribute:
        value = helper.get_attribute_value(attr)
        if isinstance(value, bytes):
            value = value.decode()
        elif isinstance(value, list) and value and isinstance(value[0], bytes):
            value = [v.decode() for v in value]
        values[attr.name] = value
    return values


def known_attributes(node: Any, allowed: set[str]) -> dict[str, Any]:
    """The node's attributes; one not in ``allowed`` is refused rather than
    ignored (it might change the values)."""
    attrs = attributes(node)
    unknown = sorted(set(attrs) - allowed)
    if unknown:
        raise refuse(node, f"attribute(s) {', '.join(unknown)}")
    return attrs


def tensor_type_name(elem_type: int) -> str:
    return str(onnx.TensorProto.DataType.Name(elem_type)).lower()
