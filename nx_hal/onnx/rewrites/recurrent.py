"""LSTM, GRU and RNN unrolled over their static sequence length into MatMul,
Add, Mul, Slice, Gather and the gate activations: torch-mlir's lowering of
the recurrent ops fails on all but the simplest (``start is not constant``,
bidirectional GRU left illegal). The input projection of every time step is
one MatMul; each step adds its recurrent MatMul and the gates."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Final

import numpy as np

from nx_hal.onnx.rewrites._graph import Block, Model, attributes, input_name, np_dtype, output, refuse

__all__ = ["rewrite_gru", "rewrite_lstm", "rewrite_rnn"]

# Gate activations that are ONNX ops of their own, without alpha or beta.
_ACTIVATIONS: Final = {"sigmoid": "Sigmoid", "tanh": "Tanh", "relu": "Relu", "softsign": "Softsign",
                       "softplus": "Softplus"}
_DEFAULTS: Final = {"LSTM": ("Sigmoid", "Tanh", "Tanh"), "GRU": ("Sigmoid", "Tanh"), "RNN": ("Tanh",)}
_GATES: Final = {"LSTM": 4, "GRU": 3, "RNN": 1}
_KNOWN: Final = {
    "LSTM": {"activations", "activation_alpha", "activation_beta", "clip", "direction", "hidden_size",
             "input_forget", "layout"},
    "GRU": {"activations", "activation_alpha", "activation_beta", "clip", "direction", "hidden_size",
            "layout", "linear_before_reset"},
    "RNN": {"activations", "activation_alpha", "activation_beta", "clip", "direction", "hidden_size", "layout"},
}


@dataclass
class _Direction:
    """One direction's values: the input projection of every step (biases
    that do not depend on the state folded in), R^T, the initial state."""

    xw: str  # [seq, batch, gates*hidden]: X W^T + biases that do not depend on the state
    rt: str  # [hidden, gates*hidden]; for GRU the z and r columns only
    rt_hidden: str | None  # GRU: the columns of the hidden gate, [hidden, hidden]
    h0: str
    c0: str | None
    recurrent_bias: str | None  # GRU's Rb for the hidden gate (not foldable when linear_before_reset)
    peepholes: tuple[str, str, str] | None  # LSTM's P: input, output, forget


class _Cell:
    """One time step of one kind of cell, as nodes appended to a block."""

    def __init__(self, block: Block, kind: str, hidden: int, dtype: np.dtype[Any], clip: float | None,
                 linear_before_reset: bool) -> None:
        self.b = block
        self.kind = kind
        self.hidden = hidden
        self.activations: list[str] = []
        self.clip = clip
        self.lbr = linear_before_reset
        self.bounds = (block.const(-clip, dtype), block.const(clip, dtype)) if clip is not None else None
        self.one = block.const(1, dtype)

    def act(self, which: int, value: str) -> str:
        return self.b.op(self.activations[which], value)

    def clipped(self, value: str) -> str:
        if self.bounds is None:
            return value
        return self.b.op("Clip", value, *self.bounds)

    def gate(self, pre: str, index: int) -> str:
        h = self.hidden
        return self.b.slice(pre, 1, index * h, (index + 1) * h)

    def step(self, d: _Direction, x_t: str, h: str, c: str | None) -> tuple[str, str | None]:
        b = self.b
        if self.kind == "RNN":
            pre = self.clipped(b.op("Add", x_t, b.op("MatMul", h, d.rt)))
            return self.act(0, pre), None
        if self.kind == "LSTM":
            assert c is not None
            pre = b.op("Add", x_t, b.op("MatMul", h, d.rt))
            i, o, f, g = (self.gate(pre, k) for k in range(4))
            if d.peepholes is not None:
                pi, po, pf = d.peepholes
                i = b.op("Add", i, b.op("Mul", pi, c))
                f = b.op("Add", f, b.op("Mul", pf, c))
            i = self.act(0, self.clipped(i))
            f = self.act(0, self.clipped(f))
            g = self.act(1, self.clipped(g))
            c_new = b.op("Add", b.op("Mul", f, c), b.op("Mul", i, g))
            if d.peepholes is not None:
                o = b.op("Add", o, b.op("Mul", d.peepholes[1], c_new))
            o = self.act(0, self.clipped(o))
            return b.op("Mul", o, self.act(2, c_new)), c_new
        # GRU: gates z, r, h; Rb of z and r is folded into xw, Rb of h is not.
        assert d.rt_hidden is not None
        h2 = 2 * self.hidden
        x_zr = b.slice(x_t, 1, 0, h2)
        x_h = b.slice(x_t, 1, h2, 3 * self.hidden)
        r_h = d.rt_hidden
        zr = self.act(0, self.clipped(b.op("Add", x_zr, b.op("MatMul", h, d.rt))))
        z = b.slice(zr, 1, 0, self.hidden)
        r = b.slice(zr, 1, self.hidden, h2)
        if self.lbr:
            hr = b.op("MatMul", h, r_h)
            if d.recurrent_bias is not None:
                hr = b.op("Add", hr, d.recurrent_bias)
            pre = b.op("Add", x_h, b.op("Mul", r, hr))
        else:
            pre = b.op("Add", x_h, b.op("MatMul", b.op("Mul", r, h), r_h))
            if d.recurrent_bias is not None:
                pre = b.op("Add", pre, d.recurrent_bias)
        cand = self.act(1, self.clipped(pre))
        return b.op("Add", b.op("Mul", b.op("Sub", self.one, z), cand), b.op("Mul", z, h)), None


def _activations(node: Any, attrs: dict[str, Any], directions: int) -> list[list[str]]:
    defaults = list(_DEFAULTS[node.op_type])
    names = attrs.get("activations")
    if attrs.get("activation_alpha") or attrs.get("activation_beta"):
        raise refuse(node, "attributes activation_alpha / activation_beta (parameterised activations)")
    if not names:
        return [defaults] * directions
    per = len(defaults)
    if len(names) not in (per, per * directions):
        raise refuse(node, f"attribute activations has {len(names)} entries, expected {per * directions}")
    ops = []
    for name in names:
        op = _ACTIVATIONS.get(str(name).lower())
        if op is None:
            raise refuse(node, f"attribute activations: {name} is not one of "
                               f"{', '.join(sorted(_ACTIVATIONS.values()))}")
        ops.append(op)
    return [ops[k * per:(k + 1) * per] if len(ops) > per else ops for k in range(directions)]


def _check(m: Model, node: Any, attrs: dict[str, Any]) -> None:
    unknown = sorted(set(attrs) - _KNOWN[node.op_type])
    if unknown:
        raise refuse(node, f"attribute(s) {', '.join(unknown)}")
    if m.opset < 13:
        raise refuse(node, f"opset {m.opset}: upgrade the model to opset 13 or newer first")
    if attrs.get("input_forget", 0):
        raise refuse(node, "attribute input_forget=1 (coupled input and forget gates)")
    if attrs.get("layout", 0) not in (0, 1):
        raise refuse(node, f"attribute layout={attrs['layout']}")
    if attrs.get("direction", "forward") not in ("forward", "reverse", "bidirectional"):
        raise refuse(node, f"attribute direction={attrs['direction']!r}")


def _rewrite(m: Model, node: Any) -> list[Any]:
    kind = node.op_type
    attrs = attributes(node)
    _check(m, node, attrs)
    b = Block(m, node)
    x = node.input[0]
    layout = int(attrs.get("layout", 0))
    shape = m.shape(node, x)
    if len(shape) != 3:
        raise refuse(node, f"input X has shape {shape}, expected rank 3")
    seq, batch = (shape[1], shape[0]) if layout else (shape[0], shape[1])
    if seq == 0:
        raise refuse(node, "an empty sequence")
    w_shape = m.shape(node, node.input[1])
    directions = 2 if attrs.get("direction", "forward") == "bidirectional" else 1
    gates = _GATES[kind]
    hidden = int(attrs.get("hidden_size", w_shape[1] // gates))
    if w_shape[0] != directions or w_shape[1] != gates * hidden:
        raise refuse(node, f"W has shape {w_shape}, expected ({directions}, {gates * hidden}, input size)")
    lens = input_name(node, 4)
    if lens is not None:
        value = m.value(lens)
        if value is None or not np.all(value == seq):
            raise refuse(node, "input sequence_lens shorter than the sequence, or not constant "
                               "(sequences of different lengths)")
    elem = m.elem_type(node, x)
    dtype = np_dtype(elem)
    activations = _activations(node, attrs, directions)
    clip = attrs.get("clip")
    cell = _Cell(b, kind, hidden, dtype, float(clip) if clip is not None else None,
                 bool(attrs.get("linear_before_reset", 0)))
    xs = b.op("Transpose", x, perm=[1, 0, 2]) if layout else x  # [seq, batch, input]
    bias = input_name(node, 3)
    init_h = input_name(node, 5)
    init_c = input_name(node, 6) if kind == "LSTM" else None
    peep = input_name(node, 7) if kind == "LSTM" else None
    zeros = b.const(np.zeros((batch, hidden), dtype))
    width = gates * hidden
    ys: list[str] = []
    last_h: list[str] = []
    last_c: list[str] = []
    for d in range(directions):
        reverse = attrs.get("direction") == "reverse" or d == 1
        xw = b.op("MatMul", xs, b.op("Transpose", b.take(node.input[1], d), perm=[1, 0]))
        recurrent_bias = None
        if bias is not None:
            bd = b.take(bias, d)
            folded = b.slice(bd, 0, 0, width)
            rb = b.slice(bd, 0, width, 2 * width)
            if kind == "GRU":  # Rb of z and r adds like Wb; Rb of h waits for the reset gate
                folded = b.op("Add", folded, b.op("Concat", b.slice(rb, 0, 0, 2 * hidden),
                                                  b.const(np.zeros(hidden, dtype)), axis=0))
                recurrent_bias = b.slice(rb, 0, 2 * hidden, width)
            else:
                folded = b.op("Add", folded, rb)
            xw = b.op("Add", xw, folded)
        peepholes = None
        if peep is not None:
            pd = b.take(peep, d)
            peepholes = (b.slice(pd, 0, 0, hidden), b.slice(pd, 0, hidden, 2 * hidden),
                         b.slice(pd, 0, 2 * hidden, 3 * hidden))
        rt = b.op("Transpose", b.take(node.input[2], d), perm=[1, 0])
        rt_hidden = None
        if kind == "GRU":
            rt, rt_hidden = b.slice(rt, 1, 0, 2 * hidden), b.slice(rt, 1, 2 * hidden, width)
        direction = _Direction(
            xw=xw, rt=rt, rt_hidden=rt_hidden,
            h0=b.take(init_h, d, axis=layout) if init_h is not None else zeros,  # [batch, hidden]
            c0=(b.take(init_c, d, axis=layout) if init_c is not None else zeros) if kind == "LSTM" else None,
            recurrent_bias=recurrent_bias, peepholes=peepholes)
        cell.activations = activations[d]
        h, c = direction.h0, direction.c0
        steps: dict[int, str] = {}
        for t in (range(seq - 1, -1, -1) if reverse else range(seq)):
            h, c = cell.step(direction, b.take(xw, t), h, c)
            steps[t] = h
        if output(node, 0) is not None:
            ys.append(b.concat([b.unsqueeze(steps[t], [0, 1]) for t in range(seq)], axis=0))
        last_h.append(h)
        if c is not None:
            last_c.append(c)
    _outputs(b, node, layout, ys, last_h, last_c)
    return b.nodes


def _outputs(b: Block, node: Any, layout: int, ys: list[str], last_h: list[str], last_c: list[str]) -> None:
    y, y_h, y_c = output(node, 0), output(node, 1), output(node, 2)
    if y is not None:
        stacked = b.concat(ys, axis=1, out=None if layout else y)  # [seq, dirs, batch, hidden]
        if layout:
            b.op("Transpose", stacked, perm=[2, 0, 1, 3], out=y)
    for name, states in ((y_h, last_h), (y_c, last_c)):
        if name is None:
            continue
        stacked = b.concat([b.unsqueeze(s, [0]) for s in states], axis=0, out=None if layout else name)
        if layout:
            b.op("Transpose", stacked, perm=[1, 0, 2], out=name)


def rewrite_lstm(m: Model, node: Any) -> list[Any]:
    """ONNX LSTM (forward, reverse, bidirectional; B, initial_h, initial_c,
    peepholes, clip, layout 0 or 1) unrolled."""
    return _rewrite(m, node)


def rewrite_gru(m: Model, node: Any) -> list[Any]:
    """ONNX GRU (linear_before_reset 0 or 1) unrolled."""
    return _rewrite(m, node)


def rewrite_rnn(m: Model, node: Any) -> list[Any]:
    """ONNX RNN unrolled."""
    return _rewrite(m, node)
