"""If with a constant condition: the taken branch inlined into the graph.
Exporters leave such Ifs behind (a shape test folded to a constant); the
lowering of a real If makes ``torch.prim.If`` that StableHLO has no form for."""

from __future__ import annotations

from typing import Any

import numpy as np
import onnx

from nx_hal.onnx.rewrites._graph import Block, Model, attributes, refuse

__all__ = ["rewrite_if"]


def _renamed(graph: Any, taken: set[str], m: Model) -> dict[str, str]:
    """New names for the values the branch defines that clash with names of
    the main graph (a branch may reuse an outer name, or two inlined
    branches the same inner names)."""
    defined = [init.name for init in graph.initializer]
    for node in graph.node:
        defined.extend(o for o in node.output if o)
    return {name: m.fresh(name) for name in defined if name in taken}


def rewrite_if(m: Model, node: Any) -> list[Any]:
    """The branch the constant condition selects, its outputs renamed to the If's."""
    condition = m.value(node.input[0])
    if condition is None:
        raise refuse(node, f"condition '{node.input[0]}' is not a constant (only a constant If is inlined)")
    if condition.size != 1:
        raise refuse(node, f"condition of shape {condition.shape}")
    attrs = attributes(node)
    branch = attrs["then_branch" if bool(np.asarray(condition).reshape(())) else "else_branch"]
    if len(branch.output) != len(node.output):
        raise refuse(node, f"branch has {len(branch.output)} outputs for {len(node.output)}")
    renames = _renamed(branch, m.outer, m)
    nested = any(attr.HasField("g") or len(attr.graphs) for n in branch.node for attr in n.attribute)
    if renames and nested:
        raise refuse(node, "branch with nested subgraphs that reuse outer names")
    inlined = onnx.GraphProto()
    inlined.CopyFrom(branch)
    for init in inlined.initializer:
        init.name = renames.get(init.name, init.name)
    for value in (*inlined.value_info, *inlined.output):
        value.name = renames.get(value.name, value.name)
    for inner in inlined.node:
        for index, name in enumerate(inner.input):
            inner.input[index] = renames.get(name, name)
        for index, name in enumerate(inner.output):
            inner.output[index] = renames.get(name, name)
        inner.name = m.fresh(inner.name or inner.op_type)
    m.add_values(inlined)
    m.outer.update(init.name for init in inlined.initializer)
    m.outer.update(o for inner in inlined.node for o in inner.output)
    m.graph.initializer.extend(inlined.initializer)
    b = Block(m, node)
    b.nodes.extend(inlined.node)
    for value, out in zip(inlined.output, node.output, strict=True):
        if out:
            b.op("Identity", value.name, out=out)
    return b.nodes
