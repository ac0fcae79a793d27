"""ONNX control flow with a trip count known at rewrite time (Scan, Loop),
unrolled: torch-mlir lowers neither (Scan fails with ``start is not
constant``, Loop stays an illegal ``torch.operator``), and StableHLO's
``while`` is not what its ONNX lowering makes of them.

The body is inlined into the main graph once per iteration: every value the
body defines gets a fresh name in each copy, the body's inputs are bound to
this iteration's values (the carried state, the scan slice, the iteration
number and condition of a Loop as constants), and names the body reads from
the enclosing graph keep theirs. Scan outputs are the per-iteration values
unsqueezed and concatenated along the scan axis.

Only what is certain at rewrite time is unrolled: a Scan over a static
sequence length, a Loop whose trip count and condition are constants and
whose body passes the condition through or sets it to a constant. The rest
(a data-dependent condition, a dynamic trip count, more iterations than
``_MAX_ITERATIONS``) is refused by name, for the device to fall back. A body
holding nodes that need rewrites of their own is fine: the inlined nodes are
looked at again, after shapes are inferred for them.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, Final

import numpy as np
import onnx
from onnx import helper, numpy_helper

from nx_hal.onnx.rewrites._graph import Block, Model, attributes, input_name, output, refuse

__all__ = ["CONTROL_REWRITES", "rewrite_loop", "rewrite_scan"]

# Unrolling grows the graph by the body per iteration: beyond these bounds a
# compiled while loop is what the model needs, not a rewrite.
_MAX_ITERATIONS: Final = 1024
_MAX_INLINED_NODES: Final = 100_000
# A trip count or condition computed from constants (an expanded Range:
# Ceil((limit - start) / delta)) is evaluated when it takes at most this many nodes.
_MAX_FOLDED: Final = 32
# Ops whose value is not a function of their inputs: never folded.
_NOT_FOLDED: Final = ("RandomNormal", "RandomNormalLike", "RandomUniform", "RandomUniformLike", "Bernoulli",
                      "Multinomial")
# The Unsqueeze with its axes as an input (and the other ops made here as
# they are spelt since opset 13); the converter upgrades models to 17.
_MIN_OPSET: Final = 13


# ---------------------------------------------------------------- inlining a body


def _defined(graph: Any) -> set[str]:
    """The names ``graph`` defines itself: its inputs, initializers, node outputs."""
    names = {v.name for v in graph.input}
    names.update(init.name for init in graph.initializer)
    names.update(o for node in graph.node for o in node.output if o)
    return names


def _rename_inputs(node: Any, names: dict[str, str]) -> None:
    """Renames in place what ``node`` reads, in its nested subgraphs too:
    a nested If or Scan of the body may read the body's values by name."""
    for index, name in enumerate(node.input):
        node.input[index] = names.get(name, name)
    for attr in node.attribute:
        if attr.HasField("g"):
            _rename_subgraph(attr.g, names)
        for sub in attr.graphs:
            _rename_subgraph(sub, names)


def _rename_subgraph(graph: Any, names: dict[str, str]) -> None:
    # A name the nested graph defines itself is its own value, not the body's.
    local = _defined(graph)
    visible = {old: new for old, new in names.items() if old not in local}
    if not visible:
        return
    for node in graph.node:
        _rename_inputs(node, visible)
    for value in graph.output:  # an output may pass an enclosing value through
        value.name = visible.get(value.name, value.name)


def _count_nodes(graph: Any) -> int:
    """Nodes of ``graph`` and of the subgraphs it nests: what one iteration inlines."""
    total = 0
    for node in graph.node:
        total += 1
        for attr in node.attribute:
            if attr.HasField("g"):
                total += _count_nodes(attr.g)
            total += sum(_count_nodes(sub) for sub in attr.graphs)
    return total


def _check_size(node: Any, steps: int, body: Any) -> None:
    if steps > _MAX_ITERATIONS:
        raise refuse(node, f"{steps} iterations (more than {_MAX_ITERATIONS} are not unrolled)")
    if steps * _count_nodes(body) > _MAX_INLINED_NODES:
        raise refuse(node, f"{steps} iterations of a body of {_count_nodes(body)} nodes "
                           f"(more than {_MAX_INLINED_NODES} inlined nodes)")


def _check_body(m: Model, node: Any, body: Any) -> None:
    if m.opset < _MIN_OPSET:
        raise refuse(node, f"opset {m.opset}: upgrade the model to opset {_MIN_OPSET} or newer first")
    if len(body.sparse_initializer):
        raise refuse(node, "a body with sparse initializers")


def _shared_initializers(m: Model, body: Any) -> dict[str, str]:
    """The body's initializers, added once to the main graph under fresh
    names (they are the same in every iteration); their renames."""
    names = {}
    for init in body.initializer:
        tensor = onnx.TensorProto()
        tensor.CopyFrom(init)
        tensor.name = m.fresh(init.name)
        m.graph.initializer.append(tensor)
        m.constants[tensor.name] = np.asarray(numpy_helper.to_array(tensor))
        m.added.add(tensor.name)  # dropped again when no copy reads it
        names[init.name] = tensor.name
    return names


def _inline(b: Block, body: Any, bindings: dict[str, str]) -> list[str]:
    """Appends one copy of ``body`` to ``b``, its inputs read from
    ``bindings`` (body input -> main graph value); the main graph's names of
    the body's outputs."""
    m = b.model
    names = dict(bindings)
    for inner in body.node:
        names.update((o, m.fresh(o)) for o in inner.output if o)
    copies = []
    for inner in body.node:
        copy = onnx.NodeProto()
        copy.CopyFrom(inner)
        _rename_inputs(copy, names)
        for index, name in enumerate(copy.output):
            copy.output[index] = names.get(name, name)
        copy.name = m.fresh(inner.name or inner.op_type)
        copies.append(copy)
    # Constants of the copies by their new names: a nested If on one is inlined in this round.
    m.add_values(helper.make_graph(copies, "inlined", [], []))
    m.outer.update(o for copy in copies for o in copy.output if o)
    b.nodes.extend(copies)
    # A body output that the body does not define is an enclosing value: its name stays.
    return [names.get(value.name, value.name) for value in body.output]


def _stack(b: Block, parts: Sequence[str], axis: int, reverse: bool, out: str) -> None:
    """``out``: the per-iteration values stacked along a new ``axis``, the
    last iteration first when ``reverse`` (a scan output that prepends)."""
    ordered = list(reversed(parts)) if reverse else list(parts)
    b.concat([b.unsqueeze(part, [axis]) for part in ordered], axis, out=out)


def _finish(b: Block, node: Any, states: Sequence[str], scans: Sequence[Sequence[str]],
            axes: Sequence[int], reverse: Sequence[bool]) -> list[Any]:
    """The node's outputs: the last states, then the stacked scan outputs."""
    for index, state in enumerate(states):
        name = output(node, index)
        if name is not None:
            b.op("Identity", state, out=name)
    for k, parts in enumerate(scans):
        name = output(node, len(states) + k)
        if name is not None:
            _stack(b, parts, axes[k], reverse[k], name)
    return b.nodes


def _no_scan_outputs_of_nothing(node: Any, steps: int, n_state: int, n_scan: int) -> None:
    """Zero iterations give scan outputs of length 0, whose element shape
    only running the body would tell: refused rather than guessed."""
    wanted = [k for k in range(n_scan) if output(node, n_state + k) is not None]
    if steps == 0 and wanted:
        raise refuse(node, "zero iterations with scan outputs (empty outputs of unknown shape)")


# ---------------------------------------------------------------- Scan


def _per_input(attrs: dict[str, Any], key: str, count: int, node: Any) -> list[int]:
    """One value per scan input or output from attribute ``key`` (0 by default)."""
    values = [int(v) for v in attrs.get(key, [0] * count)]
    if len(values) != count:
        raise refuse(node, f"attribute {key} has {len(values)} values for {count}")
    return values


def _axis(node: Any, axis: int, rank: int, what: str) -> int:
    """``axis`` made non-negative for a tensor of ``rank`` (opset 11 allows negative axes)."""
    if not -rank <= axis < rank:
        raise refuse(node, f"{what} axis {axis} out of range for rank {rank}")
    return axis + rank if axis < 0 else axis


def _scan_output_rank(m: Model, node: Any, index: int, body_value: Any) -> int:
    """The rank of one iteration's value of scan output ``index`` (needed
    only for a negative scan_output_axes): from the node's inferred output,
    else from the body's declared output."""
    name = output(node, index)
    if name is not None and name in m.types and m.types[name].HasField("shape"):
        return len(m.types[name].shape.dim) - 1
    ttype = body_value.type.tensor_type
    if body_value.type.HasField("tensor_type") and ttype.HasField("shape"):
        return len(ttype.shape.dim)
    raise refuse(node, f"the rank of scan output {index} is unknown (needed for a negative scan_output_axes)")


def _scan_length(m: Model, node: Any, scanned: Sequence[str], axes: list[int]) -> int:
    """The common length of the scan inputs along their scan axes (axes made non-negative in place)."""
    lengths = set()
    for j, name in enumerate(scanned):
        shape = m.shape(node, name)
        axes[j] = _axis(node, axes[j], len(shape), "scan input")
        lengths.add(shape[axes[j]])
    if len(lengths) != 1:
        raise refuse(node, f"scan inputs of different lengths {sorted(lengths)}")
    return lengths.pop()


def rewrite_scan(m: Model, node: Any) -> list[Any]:
    """Scan (opset 9 and later) unrolled over its static sequence length."""
    attrs = attributes(node)
    body = attrs["body"]
    _check_body(m, node, body)
    n_scan_in = int(attrs.get("num_scan_inputs", 0))
    n_state = len(node.input) - n_scan_in
    n_scan_out = len(body.output) - n_state
    if n_scan_in < 1 or n_state < 0 or n_scan_out < 0 or len(body.input) != len(node.input):
        raise refuse(node, f"{len(node.input)} inputs, num_scan_inputs={n_scan_in} and a body of "
                           f"{len(body.input)} inputs and {len(body.output)} outputs do not match")
    if not all(node.input):
        raise refuse(node, "an omitted input")
    in_axes = _per_input(attrs, "scan_input_axes", n_scan_in, node)
    in_reverse = [bool(d) for d in _per_input(attrs, "scan_input_directions", n_scan_in, node)]
    out_axes = _per_input(attrs, "scan_output_axes", n_scan_out, node)
    out_reverse = [bool(d) for d in _per_input(attrs, "scan_output_directions", n_scan_out, node)]
    scanned = list(node.input[n_state:])
    steps = _scan_length(m, node, scanned, in_axes)
    _check_size(node, steps, body)
    _no_scan_outputs_of_nothing(node, steps, n_state, n_scan_out)
    for k, axis in enumerate(out_axes):
        if axis < 0:
            rank = _scan_output_rank(m, node, n_state + k, body.output[n_state + k]) + 1
            out_axes[k] = _axis(node, axis, rank, "scan output")

    b = Block(m, node)
    shared = _shared_initializers(m, body)
    states = list(node.input[:n_state])
    scans: list[list[str]] = [[] for _ in range(n_scan_out)]
    body_inputs = [v.name for v in body.input]
    for step in range(steps):
        slices = [b.take(x, steps - 1 - step if rev else step, axis)
                  for x, axis, rev in zip(scanned, in_axes, in_reverse, strict=True)]
        outs = _inline(b, body, {**shared, **dict(zip(body_inputs, states + slices, strict=True))})
        states = outs[:n_state]
        for k in range(n_scan_out):
            scans[k].append(outs[n_state + k])
    return _finish(b, node, states, scans, out_axes, out_reverse)


# ---------------------------------------------------------------- Loop


def _constant_node_value(node: Any) -> np.ndarray | None:
    attrs = attributes(node)
    if "value" in attrs:
        return np.asarray(numpy_helper.to_array(attrs["value"]))
    if "value_int" in attrs:
        return np.asarray(attrs["value_int"])
    return None


def _scalar(value: np.ndarray | None) -> bool | None:
    return None if value is None or value.size != 1 else bool(value.reshape(()))


def _body_condition(m: Model, body: Any) -> bool | None:
    """What the body's condition output is in every iteration that starts
    with the condition true: True (the input passed through, a constant
    true), False (a constant false), None (computed: data-dependent)."""
    producers = {o: n for n in body.node for o in n.output if o}
    inits = {init.name: init for init in body.initializer}
    name = body.output[0].name
    for _ in range(len(body.node) + 1):  # an Identity chain is no longer than the body
        if name == body.input[1].name:
            return True
        if name in inits:
            return _scalar(np.asarray(numpy_helper.to_array(inits[name])))
        producer = producers.get(name)
        if producer is None:  # an enclosing value: constant or not
            return _scalar(m.value(name))
        if producer.domain not in ("", "ai.onnx"):
            return None
        if producer.op_type == "Constant":
            return _scalar(_constant_node_value(producer))
        if producer.op_type != "Identity":
            return None
        name = producer.input[0]
    return None


def _producers(m: Model, name: str) -> list[Any] | None:
    """The main-graph nodes that compute ``name`` from constants, in graph
    order; None when a graph input, a subgraph or too many nodes are in the way."""
    producers = {o: n for n in m.graph.node for o in n.output if o}
    needed: dict[int, Any] = {}
    stack, seen = [name], set()
    while stack:
        value = stack.pop()
        if not value or value in seen or m.value(value) is not None:
            continue
        seen.add(value)
        node = producers.get(value)
        if (node is None or node.domain not in ("", "ai.onnx") or node.op_type in _NOT_FOLDED
                or any(a.HasField("g") or len(a.graphs) for a in node.attribute) or len(needed) >= _MAX_FOLDED):
            return None
        needed[id(node)] = node
        stack.extend(node.input)
    return [n for n in m.graph.node if id(n) in needed]


def _constant(m: Model, name: str) -> np.ndarray | None:
    """The value of ``name``: a constant, or computed from constants by ONNX's reference implementation."""
    value = m.value(name)
    if value is not None:
        return value
    nodes = _producers(m, name)
    if nodes is None:
        return None
    from onnx.reference import ReferenceEvaluator

    leaves = {i for n in nodes for i in n.input if i and m.value(i) is not None}
    inits = [numpy_helper.from_array(np.asarray(m.value(leaf)), leaf) for leaf in sorted(leaves)]
    graph = helper.make_graph(nodes, "fold", [], [helper.make_empty_tensor_value_info(name)], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", m.opset)])
    try:
        result: Any = ReferenceEvaluator(model).run(None, {})
    except MemoryError:  # a constant too large for the converter's memory limit: say so, not "not a constant"
        raise
    except Exception:  # an op the reference lacks: not a constant then
        return None
    return np.asarray(result[0])


def _loop_steps(m: Model, node: Any, body: Any) -> int:
    """The number of iterations, known from constants; refuses the node when it is not."""
    trip, cond = input_name(node, 0), input_name(node, 1)
    limit = None
    if trip is not None:
        value = _constant(m, trip)
        if value is None or value.size != 1:
            raise refuse(node, f"trip count '{trip}' is not a constant")
        limit = max(int(value.reshape(())), 0)
    if cond is not None:
        first = _scalar(_constant(m, cond))
        if first is None:
            raise refuse(node, f"condition '{cond}' is not a constant")
        if not first:
            return 0
    later = _body_condition(m, body)
    if cond is None and later is not True:
        # The spec ignores the body's condition when the Loop has none (a for
        # loop); onnxruntime stops on it, ONNX's reference runs no iteration.
        raise refuse(node, f"no condition input and a body condition '{body.output[0].name}' that is not "
                           "always true (runtimes disagree on what that means)")
    if later is None:
        raise refuse(node, f"the body computes its condition output '{body.output[0].name}' (data-dependent)")
    if not later:  # a do-while that stops after one iteration
        return 1 if limit is None else min(limit, 1)
    if limit is None:
        raise refuse(node, "no trip count and a condition that stays true (an endless loop)")
    return limit


def rewrite_loop(m: Model, node: Any) -> list[Any]:
    """Loop with a constant trip count and condition, unrolled."""
    body = attributes(node)["body"]
    _check_body(m, node, body)
    n_state = len(body.input) - 2
    n_scan_out = len(body.output) - 1 - n_state
    if n_state < 0 or n_scan_out < 0 or len(node.input) != 2 + n_state:
        raise refuse(node, f"{len(node.input)} inputs and a body of {len(body.input)} inputs and "
                           f"{len(body.output)} outputs do not match")
    if not all(node.input[2:]):
        raise refuse(node, "an omitted loop-carried input")
    steps = _loop_steps(m, node, body)
    _check_size(node, steps, body)
    _no_scan_outputs_of_nothing(node, steps, n_state, n_scan_out)

    b = Block(m, node)
    shared = _shared_initializers(m, body)
    true = b.const(True)
    states = list(node.input[2:])
    scans: list[list[str]] = [[] for _ in range(n_scan_out)]
    body_inputs = [v.name for v in body.input]
    for step in range(steps):
        # The iteration number and the condition (true, or the loop would have stopped) as constants.
        bound = [b.const(step, np.int64), true, *states]
        outs = _inline(b, body, {**shared, **dict(zip(body_inputs, bound, strict=True))})
        states = outs[1:1 + n_state]
        for k in range(n_scan_out):
            scans[k].append(outs[1 + n_state + k])
    return _finish(b, node, states, scans, [0] * n_scan_out, [False] * n_scan_out)


# (domain, op type) -> rewrite (see nx_hal.onnx.rewrites.Rewrite).
CONTROL_REWRITES: Final[dict[tuple[str, str], Callable[[Model, Any], list[Any]]]] = {
    ("", "Scan"): rewrite_scan,
    ("", "Loop"): rewrite_loop,
}
