"""Mutators. Each takes a random.Random and returns new bytes or values; the
input with index i of a run is made from ``Random(f"{seed}/{path}/{i}")`` alone,
so any input is rebuilt from the seed and index a run prints."""

from __future__ import annotations

import json
import math
import random
import re
import struct
from collections.abc import Callable
from typing import Any

INTERESTING_INTS = [
    0, 1, -1, 2, 3, 4, 7, 8, 16, 31, 32, 33, 63, 64, 127, 128, 255, 256, 1023, 1024, 4096, 65535, 65536,
    2**31 - 1, 2**31, -(2**31), 2**32 - 1, 2**32, 2**40, 2**53, 2**62, 2**63 - 1, -(2**63), 2**64 - 1,
]
INTERESTING_FLOATS = [0.0, -0.0, 1.0, -1.0, 0.5, 1e-300, 1e300, math.inf, -math.inf, math.nan, 2.0**63]


def _pos(rng: random.Random, data: bytes) -> int:
    return rng.randrange(len(data) + 1)


def flip_bit(rng: random.Random, data: bytes, _: list[bytes]) -> bytes:
    if not data:
        return bytes([rng.randrange(256)])
    b = bytearray(data)
    i = rng.randrange(len(b))
    b[i] ^= 1 << rng.randrange(8)
    return bytes(b)


def set_byte(rng: random.Random, data: bytes, _: list[bytes]) -> bytes:
    if not data:
        return data
    b = bytearray(data)
    b[rng.randrange(len(b))] = rng.choice([0, 1, 0x7F, 0x80, 0xFF, rng.randrange(256)])
    return bytes(b)


def set_int(rng: random.Random, data: bytes, _: list[bytes]) -> bytes:
    """Overwrites 1, 2, 4 or 8 bytes with an interesting integer (sizes, counts, offsets)."""
    width = rng.choice([1, 2, 4, 8])
    if len(data) < width:
        return data
    v = rng.choice(INTERESTING_INTS) % (1 << (8 * width))
    i = rng.randrange(len(data) - width + 1)
    return data[:i] + v.to_bytes(width, rng.choice(["little", "big"])) + data[i + width:]


def truncate(rng: random.Random, data: bytes, _: list[bytes]) -> bytes:
    return data[: _pos(rng, data)] if rng.random() < 0.8 else data[_pos(rng, data):]


def insert(rng: random.Random, data: bytes, _: list[bytes]) -> bytes:
    i = _pos(rng, data)
    n = rng.choice([1, 1, 2, 4, 8, 64, 1024])
    if rng.random() < 0.5:
        chunk = bytes(rng.randrange(256) for _ in range(n))
    else:
        chunk = bytes([rng.choice([0, 0xFF, 0x41])]) * n
    return data[:i] + chunk + data[i:]


def delete(rng: random.Random, data: bytes, _: list[bytes]) -> bytes:
    i = _pos(rng, data)
    return data[:i] + data[i + rng.choice([1, 2, 4, 16, 256]):]


def duplicate(rng: random.Random, data: bytes, _: list[bytes]) -> bytes:
    if not data:
        return data
    i = rng.randrange(len(data))
    j = min(len(data), i + rng.choice([1, 4, 16, 128, 1024]))
    k = _pos(rng, data)
    return data[:k] + data[i:j] * rng.choice([1, 2, 8]) + data[k:]


def splice(rng: random.Random, data: bytes, corpus: list[bytes]) -> bytes:
    other = rng.choice(corpus)
    return data[: _pos(rng, data)] + other[_pos(rng, other):]


BYTE_MUTATORS: list[Callable[[random.Random, bytes, list[bytes]], bytes]] = [
    flip_bit, set_byte, set_int, truncate, insert, delete, duplicate, splice,
]


def mutate_bytes(rng: random.Random, data: bytes, corpus: list[bytes]) -> bytes:
    """One to four stacked byte mutations."""
    for _ in range(rng.choice([1, 1, 1, 2, 2, 3, 4])):
        data = rng.choice(BYTE_MUTATORS)(rng, data, corpus)
    return data


# -- ONNX: dims, attributes, dtypes, ops of a parsed ModelProto ----------------------


def mutate_onnx(rng: random.Random, data: bytes) -> bytes | None:
    """A structural mutation of a serialized ModelProto; None if it does not parse."""
    import onnx

    model = onnx.ModelProto()
    try:
        model.ParseFromString(data)
    except Exception:
        return None
    g = model.graph
    for _ in range(rng.choice([1, 1, 2, 3])):
        what = rng.randrange(9)
        infos = list(g.input) + list(g.output) + list(g.value_info)
        if what == 0 and infos:  # a dimension
            t = rng.choice(infos).type.tensor_type
            if t.shape.dim:
                d = rng.choice(t.shape.dim)
                if rng.random() < 0.2:
                    d.dim_param = rng.choice(["N", "", "batch", "?"])
                else:
                    d.dim_value = rng.choice([0, 1, 2, 3, 5, 7, 64, 2**31, 2**40, -1, -(2**40)])
            else:
                t.shape.dim.add().dim_value = rng.choice([0, 1, 3])
        elif what == 1 and infos:  # rank
            t = rng.choice(infos).type.tensor_type
            if t.shape.dim and rng.random() < 0.5:
                del t.shape.dim[rng.randrange(len(t.shape.dim))]
            elif rng.random() < 0.5:
                t.ClearField("shape")
            else:
                t.shape.dim.add().dim_value = rng.choice([1, 2, 4])
        elif what == 2 and infos:  # element type
            rng.choice(infos).type.tensor_type.elem_type = rng.randrange(0, 27)
        elif what == 3 and g.node:  # an attribute value
            node = rng.choice(g.node)
            if node.attribute:
                a = rng.choice(node.attribute)
                if a.ints:
                    a.ints[rng.randrange(len(a.ints))] = rng.choice(INTERESTING_INTS[:30]) * rng.choice([1, -1])
                elif a.type == onnx.AttributeProto.INT:
                    a.i = rng.choice(INTERESTING_INTS[:30]) * rng.choice([1, -1])
                elif a.type == onnx.AttributeProto.FLOAT:
                    a.f = rng.choice(INTERESTING_FLOATS)
                elif a.type == onnx.AttributeProto.STRING:
                    a.s = rng.choice([b"", b"NOTSET", b"SAME_UPPER", b"\xff" * 3, b"x" * 300])
                else:
                    a.type = rng.randrange(0, 15)
            else:
                a = node.attribute.add()
                a.name = rng.choice(["axis", "perm", "kernel_shape", "strides", "pads", "group", "to", "x"])
                a.type = onnx.AttributeProto.INTS
                a.ints.extend(rng.choice([-1, 0, 1, 2, 2**40]) for _ in range(rng.randrange(4)))
        elif what == 4 and g.node:  # the operator
            rng.choice(g.node).op_type = rng.choice(
                ["Add", "MatMul", "Relu", "Conv", "Reshape", "Transpose", "Gemm", "Softmax", "Concat",
                 "Gather", "Slice", "Resize", "LSTM", "If", "Loop", "AveragePool", "Foo", ""])
        elif what == 5 and g.node:  # wiring
            node = rng.choice(g.node)
            names = [v.name for v in infos] + [i.name for i in g.initializer] + ["", "missing"]
            if node.input and rng.random() < 0.5:
                node.input[rng.randrange(len(node.input))] = rng.choice(names)
            elif rng.random() < 0.5 and node.input:
                del node.input[rng.randrange(len(node.input))]
            else:
                node.input.append(rng.choice(names))
        elif what == 6 and g.initializer:  # an initializer
            init = rng.choice(g.initializer)
            if init.dims and rng.random() < 0.5:
                init.dims[rng.randrange(len(init.dims))] = rng.choice([0, 1, 2, 3, 2**40, -1])
            elif init.raw_data:
                init.raw_data = init.raw_data[: rng.randrange(len(init.raw_data) + 1)]
            else:
                init.data_type = rng.randrange(0, 27)
        elif what == 7:  # opset / IR version
            if model.opset_import and rng.random() < 0.7:
                model.opset_import[0].version = rng.choice([1, 6, 11, 13, 17, 21, 99, 0])
            else:
                model.ir_version = rng.choice([0, 3, 7, 8, 9, 10, 99])
        elif what == 8 and g.node and len(g.node) > 1:  # node order
            nodes = list(g.node)
            rng.shuffle(nodes)
            del g.node[:]
            g.node.extend(nodes)
    mutated: bytes = model.SerializeToString()  # protobuf ships no type information
    return mutated


# -- StableHLO text: types, shapes, ops, numbers ---------------------------------------

_DTYPES = ["f32", "f16", "bf16", "f64", "i1", "i8", "i32", "i64", "ui8", "complex<f32>", "f8E4M3FN", "index",
           "i0", "f7"]
_OPS = ["stablehlo.add", "stablehlo.multiply", "stablehlo.dot_general", "stablehlo.reshape", "stablehlo.maximum",
        "stablehlo.convert", "stablehlo.broadcast_in_dim", "stablehlo.reduce", "stablehlo.while", "stablehlo.custom_call",
        "stablehlo.transpose", "stablehlo.nope", "func.call", "stablehlo.tuple"]


def mutate_mlir_text(rng: random.Random, data: bytes) -> bytes:
    """Token-level edits: a number, a dtype, an op name, an SSA value or a line."""
    text = data.decode("utf-8", "replace")
    for _ in range(rng.choice([1, 1, 2, 3])):
        what = rng.randrange(6)
        if what == 0:
            nums = list(re.finditer(r"\d+", text))
            if nums:
                m = rng.choice(nums)
                v = str(rng.choice([0, 1, 2, 3, 4, 5, 8, 100, 2**31, 2**63, 2**64, 99999999999999999999]))
                text = text[: m.start()] + v + text[m.end():]
        elif what == 1:
            types = list(re.finditer(r"\b(f32|f16|bf16|f64|i1|i8|i32|i64|ui8)\b", text))
            if types:
                m = rng.choice(types)
                text = text[: m.start()] + rng.choice(_DTYPES) + text[m.end():]
        elif what == 2:
            ops = list(re.finditer(r"\bstablehlo\.[a-z_]+", text))
            if ops:
                m = rng.choice(ops)
                text = text[: m.start()] + rng.choice(_OPS) + text[m.end():]
        elif what == 3:
            vals = list(re.finditer(r"%[A-Za-z0-9_]+", text))
            if vals:
                m = rng.choice(vals)
                text = text[: m.start()] + rng.choice(vals).group(0) + text[m.end():]
        elif what == 4:
            lines = text.split("\n")
            i, j = rng.randrange(len(lines)), rng.randrange(len(lines))
            if rng.random() < 0.5:
                lines.insert(i, lines[j])
            else:
                del lines[i]
            text = "\n".join(lines)
        else:
            dims = list(re.finditer(r"tensor<([0-9x?]*)", text))
            if dims:
                m = rng.choice(dims)
                shape = "x".join(str(rng.choice([0, 1, 2, 4, 7, 2**31, "?"])) for _ in range(rng.randrange(4)))
                text = text[: m.start(1)] + (shape + "x" if shape else "") + text[m.end(1):]
    return text.encode()


# -- values for options and config ---------------------------------------------------


def random_value(rng: random.Random, depth: int = 0) -> Any:
    kind = rng.randrange(10 if depth < 2 else 7)
    if kind == 0:
        return rng.choice(INTERESTING_INTS) * rng.choice([1, 1, -1])
    if kind == 1:
        return rng.choice(INTERESTING_FLOATS)
    if kind == 2:
        return rng.choice([True, False])
    if kind == 3:
        return None
    if kind in (4, 5):
        return random_string(rng)
    if kind == 6:
        return rng.choice(["npu", "tpu", "cpu", "npu:cpu", "tpu:cpu!", "CPU", "AUTO:NPU,CPU", "f16", "latency"])
    if kind in (7, 8):
        return [random_value(rng, depth + 1) for _ in range(rng.randrange(4))]
    return {random_string(rng): random_value(rng, depth + 1) for _ in range(rng.randrange(3))}


def random_string(rng: random.Random) -> str:
    return rng.choice([
        "", "x", " ", "\x00", "a\x00b", "é", "\u202e", "../" * 8, "/", "~", "$HOME", "%s%n",
        "A" * 4096, ",", ";", "=", ":", "1e400", "nan", "-1", "0x10", "true", "[1]",
        "".join(chr(rng.randrange(1, 0x250)) for _ in range(rng.randrange(1, 12))),
    ])


def mutate_json(rng: random.Random, value: Any) -> Any:
    """Replaces, adds or drops one key or element somewhere in a JSON-like value."""
    if isinstance(value, dict):
        if value and rng.random() < 0.6:
            key = rng.choice(sorted(value, key=str))
            if rng.random() < 0.3:
                del value[key]
            elif rng.random() < 0.5:
                value[key] = mutate_json(rng, value[key])
            else:
                value[key] = random_value(rng)
        else:
            value[random_string(rng) if rng.random() < 0.5 else rng.choice(["x", "prefer", "disable"])] = \
                random_value(rng)
        return value
    if isinstance(value, list):
        if value and rng.random() < 0.5:
            i = rng.randrange(len(value))
            value[i] = mutate_json(rng, value[i])
        else:
            value.append(random_value(rng))
        return value
    return random_value(rng) if rng.random() < 0.8 else value


def dumps(value: Any) -> bytes:
    return json.dumps(value, allow_nan=True, ensure_ascii=True).encode()


def pack_ints(values: list[int]) -> bytes:
    return struct.pack(f"<{len(values)}q", *values)
