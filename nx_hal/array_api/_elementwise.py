"""The standard's elementwise functions: promotion and broadcasting of the
operands, then one graph per operation (``_dispatch``)."""

from __future__ import annotations

import builtins
from collections.abc import Callable
from typing import Any

import numpy as np

from nx_hal.array_api import _dtypes
from nx_hal.array_api._array import Array, scalar_array
from nx_hal.array_api._dispatch import apply
from nx_hal.array_api._graph import Graph, Sym

Scalar = bool | int | float | complex


def _check_array(x: object, name: str) -> Array:
    if not isinstance(x, Array):
        raise TypeError(f"{name}: expected an nx_hal.array_api array, got {type(x).__name__}")
    return x


def operands(x1: Array | Scalar, x2: Array | Scalar, name: str) -> tuple[Array, Array]:
    """Two arrays on one device; a Python scalar takes the other's dtype (the standard's rule)."""
    if isinstance(x1, Array) and isinstance(x2, Array):
        if x1._device is not x2._device:
            raise ValueError(f"{name}: arrays on different devices ({x1._device.selector}, "
                             f"{x2._device.selector}); move one with to_device first")
        return x1, x2
    if isinstance(x1, Array):
        return x1, _from_scalar(x2, x1, name)
    if isinstance(x2, Array):
        return _from_scalar(x1, x2, name), x2
    raise TypeError(f"{name}: at least one operand must be an array")


def _from_scalar(value: object, like: Array, name: str) -> Array:
    if not isinstance(value, (bool, int, float, complex)):
        raise TypeError(f"{name}: expected an array or a Python scalar, got {type(value).__name__}")
    kind = _dtypes.kind_of(like._dtype)
    dtype = like._dtype
    if isinstance(value, complex) and kind != "complex":
        if kind != "float":
            raise TypeError(f"{name}: a Python complex with a {like._dtype} array has no standard promotion")
        dtype = _dtypes.complex64 if dtype == _dtypes.float32 else _dtypes.complex128
    if kind == "bool" and not isinstance(value, bool):
        raise TypeError(f"{name}: a Python {type(value).__name__} with a bool array has no standard promotion")
    if kind == "int" and isinstance(value, float):
        dtype = _dtypes.default_float(like._device)
    return scalar_array(value, dtype, like._device)


def _bshape(*shapes: tuple[int, ...]) -> tuple[int, ...]:
    return tuple(np.broadcast_shapes(*shapes))


def _binary(g: Graph, x: Sym, y: Sym, op: str, dtype: str) -> Sym:
    shape = _bshape(x.shape, y.shape)
    return g.binary(op, g.broadcast(g.convert(x, dtype), shape), g.broadcast(g.convert(y, dtype), shape))


def _compare(g: Graph, x: Sym, y: Sym, op: str, dtype: str) -> Sym:
    shape = _bshape(x.shape, y.shape)
    return g.compare(op, g.broadcast(g.convert(x, dtype), shape), g.broadcast(g.convert(y, dtype), shape))


def _unary(g: Graph, x: Sym, op: str, dtype: str) -> Sym:
    return g.unary(op, g.convert(x, dtype))


def _result(a: Array, b: Array, name: str) -> np.dtype[Any]:
    try:
        return _dtypes.promote(a._dtype, b._dtype)
    except TypeError as exc:
        if {_dtypes.kind_of(a._dtype), _dtypes.kind_of(b._dtype)} == {"int", "float"}:
            return _dtypes.default_float(a._device) if a._dtype.kind != "f" and b._dtype.kind != "f" else (
                a._dtype if a._dtype.kind == "f" else b._dtype)
        raise TypeError(f"{name}: {exc}") from None


def _numeric(x: Array, name: str, allowed: str = "numeric") -> None:
    _kind_ok(x._dtype, name, allowed)


# numpy dtype kinds each check admits.
_ALLOWED = {"numeric": "iufc", "float": "f", "floatcomplex": "fc", "int": "iu", "intbool": "iub", "bool": "b", "any": "biufc"}


def _kind_ok(dtype: np.dtype[Any], name: str, allowed: str = "numeric") -> None:
    if dtype.kind not in _ALLOWED[allowed]:
        raise TypeError(f"{name} takes {allowed.replace('intbool', 'integer or bool')} arrays, not {dtype}")


def _named(fn: Callable[..., Array], name: str, doc: str) -> Callable[..., Array]:
    """``fn`` under the standard's name, with its docstring (the factories below make one per function)."""
    fn.__name__ = fn.__qualname__ = name
    fn.__doc__ = doc
    return fn


def _bin(name: str, op: str, allowed: str = "numeric") -> Callable[..., Array]:
    kinds = _ALLOWED[allowed]
    # Per dtype of two arrays alike (the common case): the static arguments, checked once.
    statics = {d: (op, d.name) for d in _dtypes.DTYPES.values() if d.kind in kinds}

    def fn(x1: Array | Scalar, x2: Array | Scalar, /) -> Array:
        if type(x1) is Array and type(x2) is Array and x1._dtype is x2._dtype and x1._device is x2._device:
            found = statics.get(x1._dtype)
            if found is not None:
                return apply(_binary, (x1, x2), *found)  # type: ignore[no-any-return]
        a, b = operands(x1, x2, name)
        dtype = _result(a, b, name)
        _kind_ok(dtype, name, allowed)
        return apply(_binary, (a, b), op, dtype.name)  # type: ignore[no-any-return]

    return _named(fn, name, f"The standard's ``{name}``, elementwise with broadcasting.")


def _cmp(name: str, op: str) -> Callable[..., Array]:
    def fn(x1: Array | Scalar, x2: Array | Scalar, /) -> Array:
        a, b = operands(x1, x2, name)
        if op not in ("eq", "ne") and "c" in (a._dtype.kind, b._dtype.kind):
            raise TypeError(f"{name}: complex numbers have no order")
        return apply(_compare, (a, b), op, _result(a, b, name).name)  # type: ignore[no-any-return]

    return _named(fn, name, f"The standard's ``{name}``: a bool array.")


def _un(name: str, op: str, allowed: str = "numeric", floats: bool = False) -> Callable[..., Array]:
    kinds = _ALLOWED[allowed]
    # Dtypes that keep their type (all of them, or the float ones): static arguments made once.
    statics = {d: (op, d.name) for d in _dtypes.DTYPES.values() if d.kind in kinds and (not floats or d.kind in "fc")}

    def fn(x: Array, /) -> Array:
        if type(x) is Array:
            found = statics.get(x._dtype)
            if found is not None:
                return apply(_unary, (x,), *found)  # type: ignore[no-any-return]
        _check_array(x, name)
        _numeric(x, name, allowed)
        dtype = _dtypes.default_float(x._device) if floats and x._dtype.kind not in "fc" else x._dtype
        return apply(_unary, (x,), op, dtype.name)  # type: ignore[no-any-return]

    return _named(fn, name, f"The standard's ``{name}``, elementwise.")


add = _bin("add", "add")
subtract = _bin("subtract", "sub")
multiply = _bin("multiply", "mul")
maximum = _bin("maximum", "max")
minimum = _bin("minimum", "min")
atan2 = _bin("atan2", "atan2", "float")
bitwise_and = _bin("bitwise_and", "and", "intbool")
bitwise_or = _bin("bitwise_or", "or", "intbool")
bitwise_xor = _bin("bitwise_xor", "xor", "intbool")
bitwise_left_shift = _bin("bitwise_left_shift", "shl", "int")
bitwise_right_shift = _bin("bitwise_right_shift", "shr", "int")
equal = _cmp("equal", "eq")
not_equal = _cmp("not_equal", "ne")
less = _cmp("less", "lt")
less_equal = _cmp("less_equal", "le")
greater = _cmp("greater", "gt")
greater_equal = _cmp("greater_equal", "ge")
negative = _un("negative", "neg")
abs = _un("abs", "abs")
sign = _un("sign", "sign")
floor = _un("floor", "floor")
ceil = _un("ceil", "ceil")
round = _un("round", "round")
sqrt = _un("sqrt", "sqrt", floats=True)
exp = _un("exp", "exp", floats=True)
expm1 = _un("expm1", "expm1", floats=True)
log = _un("log", "log", floats=True)
log1p = _un("log1p", "log1p", floats=True)
sin = _un("sin", "sin", floats=True)
cos = _un("cos", "cos", floats=True)
tan = _un("tan", "tan", floats=True)
asin = _un("asin", "asin", floats=True)
acos = _un("acos", "acos", floats=True)
atan = _un("atan", "atan", floats=True)
sinh = _un("sinh", "sinh", floats=True)
cosh = _un("cosh", "cosh", floats=True)
tanh = _un("tanh", "tanh", floats=True)
asinh = _un("asinh", "asinh", floats=True)
acosh = _un("acosh", "acosh", floats=True)
atanh = _un("atanh", "atanh", floats=True)
bitwise_invert = _un("bitwise_invert", "not", "intbool")


def _integer_rounding(g: Graph, x: Sym, op: str) -> Sym:
    return x  # integers are their own floor, ceil, round and trunc


def _rounding(name: str, op: str) -> Callable[..., Array]:
    float_fn = {"floor": floor, "ceil": ceil, "round": round}.get(op)

    def fn(x: Array, /) -> Array:
        _check_array(x, name)
        _numeric(x, name)
        if x._dtype.kind != "f":
            return apply(_integer_rounding, (x,), op)  # type: ignore[no-any-return]
        if float_fn is not None:
            return float_fn(x)
        return apply(_trunc, (x,))  # type: ignore[no-any-return]

    return _named(fn, name, f"The standard's ``{name}``, elementwise (integers unchanged).")


def _trunc(g: Graph, x: Sym) -> Sym:
    zero = g.broadcast(g.constant(0, x.dtype), x.shape)
    return g.select(g.compare("lt", x, zero), g.unary("ceil", x), g.unary("floor", x))


floor = _rounding("floor", "floor")  # noqa: F811 - the float kernels above, integers kept
ceil = _rounding("ceil", "ceil")  # noqa: F811
round = _rounding("round", "round")  # noqa: F811
trunc = _rounding("trunc", "trunc")


def positive(x: Array, /) -> Array:
    """The standard's ``positive``: ``x`` itself (a numeric array)."""
    _check_array(x, "positive")
    _numeric(x, "positive")
    return x


def _pred(g: Graph, x: Sym, op: str) -> Sym:
    if x.dtype.startswith("complex"):
        re, im = _pred(g, g.real(x), op), _pred(g, g.imag(x), op)
        return g.binary("and" if op == "isfinite" else "or", re, im)
    if x.dtype.startswith("float"):
        return g.unary(op, x)
    return g.broadcast(g.constant(op == "isfinite", "bool"), x.shape)


def _predicate(name: str) -> Callable[..., Array]:
    def fn(x: Array, /) -> Array:
        _check_array(x, name)
        _numeric(x, name)
        return apply(_pred, (x,), name)  # type: ignore[no-any-return]

    return _named(fn, name, f"The standard's ``{name}``: a bool array.")


isnan = _predicate("isnan")
isinf = _predicate("isinf")
isfinite = _predicate("isfinite")


def _divide(g: Graph, x: Sym, y: Sym, dtype: str) -> Sym:
    return _binary(g, x, y, "div", dtype)


def _promoted(name: str, impl: Callable[..., Sym], allowed: str, doc: str) -> Callable[..., Array]:
    """A binary function of the standard: operands promoted, kinds checked, ``impl`` run on the result dtype."""

    def fn(x1: Array | Scalar, x2: Array | Scalar, /) -> Array:
        a, b = operands(x1, x2, name)
        dtype = _result(a, b, name)
        _kind_ok(dtype, name, allowed)
        return apply(impl, (a, b), dtype.name)  # type: ignore[no-any-return]

    return _named(fn, name, doc)


def divide(x1: Array | Scalar, x2: Array | Scalar, /) -> Array:
    """The standard's ``divide``: true division (integers give the default float)."""
    a, b = operands(x1, x2, "divide")
    dtype = _result(a, b, "divide")
    _numeric(a, "divide")
    _numeric(b, "divide")
    if dtype.kind != "f":
        dtype = _dtypes.default_float(a._device)
    return apply(_divide, (a, b), dtype.name)  # type: ignore[no-any-return]


def _floor_div(g: Graph, x: Sym, y: Sym, dtype: str) -> Sym:
    shape = _bshape(x.shape, y.shape)
    x, y = g.broadcast(g.convert(x, dtype), shape), g.broadcast(g.convert(y, dtype), shape)
    if dtype.startswith("float"):
        return g.unary("floor", g.binary("div", x, y))
    q = g.binary("div", x, y)
    if dtype.startswith("uint"):
        return q
    zero = g.broadcast(g.constant(0, dtype), shape)
    # Truncation rounds toward zero; floor is one less where the signs differ and it is inexact.
    inexact = g.compare("ne", g.binary("mul", q, y), x)
    signs = g.compare("ne", g.compare("lt", x, zero), g.compare("lt", y, zero))
    fix = g.binary("and", inexact, signs)
    return g.select(fix, g.binary("sub", q, g.broadcast(g.constant(1, dtype), shape)), q)


floor_divide = _promoted("floor_divide", _floor_div, "numeric",
                          "The standard's ``floor_divide``: division rounded toward negative infinity.")


def _remainder(g: Graph, x: Sym, y: Sym, dtype: str) -> Sym:
    shape = _bshape(x.shape, y.shape)
    x, y = g.broadcast(g.convert(x, dtype), shape), g.broadcast(g.convert(y, dtype), shape)
    r = g.binary("rem", x, y)
    if dtype.startswith("uint"):
        return r
    zero = g.broadcast(g.constant(0, dtype), shape)
    # C's remainder has the dividend's sign; Python's has the divisor's.
    fix = g.binary("and", g.compare("ne", r, zero), g.compare("ne", g.compare("lt", r, zero), g.compare("lt", y, zero)))
    return g.select(fix, g.binary("add", r, y), r)


remainder = _promoted("remainder", _remainder, "numeric",
                       "The standard's ``remainder``: the result has the divisor's sign (Python's ``%``).")


def pow(x1: Array | Scalar, x2: Array | Scalar, /) -> Array:
    """The standard's ``pow``."""
    a, b = operands(x1, x2, "pow")
    dtype = _result(a, b, "pow")
    _kind_ok(dtype, "pow")
    return apply(_binary, (a, b), "pow", dtype.name)  # type: ignore[no-any-return]


def _square(g: Graph, x: Sym) -> Sym:
    return g.binary("mul", x, x)


def square(x: Array, /) -> Array:
    """The standard's ``square``."""
    _check_array(x, "square")
    _numeric(x, "square")
    return apply(_square, (x,))  # type: ignore[no-any-return]


def _log_base(g: Graph, x: Sym, base: float) -> Sym:
    return g.binary("div", g.unary("log", x), g.broadcast(g.constant(np.log(base), x.dtype), x.shape))


def log2(x: Array, /) -> Array:
    """The standard's ``log2``."""
    _check_array(x, "log2")
    _numeric(x, "log2", "float")
    return apply(_log_base, (x,), 2.0)  # type: ignore[no-any-return]


def log10(x: Array, /) -> Array:
    """The standard's ``log10``."""
    _check_array(x, "log10")
    _numeric(x, "log10", "float")
    return apply(_log_base, (x,), 10.0)  # type: ignore[no-any-return]


def _logaddexp(g: Graph, x: Sym, y: Sym, dtype: str) -> Sym:
    shape = _bshape(x.shape, y.shape)
    x, y = g.broadcast(x, shape), g.broadcast(y, shape)
    big = g.binary("max", x, y)
    diff = g.unary("neg", g.unary("abs", g.binary("sub", x, y)))
    out = g.binary("add", big, g.unary("log1p", g.unary("exp", diff)))
    # inf - inf is NaN: where both are the same infinity the result is that infinity.
    same = g.compare("eq", x, y)
    return g.select(same, g.binary("add", x, g.broadcast(g.constant(np.log(2.0), dtype), shape)), out)


logaddexp = _promoted("logaddexp", _logaddexp, "float",
                       "The standard's ``logaddexp``: log(exp(x1) + exp(x2)) without overflow.")


def _hypot(g: Graph, x: Sym, y: Sym, dtype: str) -> Sym:
    shape = _bshape(x.shape, y.shape)
    x, y = g.unary("abs", g.broadcast(x, shape)), g.unary("abs", g.broadcast(y, shape))
    big, small = g.binary("max", x, y), g.binary("min", x, y)
    zero = g.broadcast(g.constant(0, dtype), shape)
    one = g.broadcast(g.constant(1, dtype), shape)
    safe = g.select(g.compare("eq", big, zero), one, big)
    ratio = g.binary("div", small, safe)
    out = g.binary("mul", big, g.unary("sqrt", g.binary("add", one, g.binary("mul", ratio, ratio))))
    inf = g.binary("or", g.unary("isinf", x), g.unary("isinf", y))
    return g.select(inf, g.broadcast(g.constant(np.inf, dtype), shape), out)


hypot = _promoted("hypot", _hypot, "float",
                   "The standard's ``hypot``: sqrt(x1**2 + x2**2) without overflow.")


def _signbit(g: Graph, x: Sym) -> Sym:
    zero = g.broadcast(g.constant(0, x.dtype), x.shape)
    one = g.broadcast(g.constant(1, x.dtype), x.shape)
    # -0.0 < 0 is false; 1 / -0.0 is -inf, which is.
    neg_zero = g.binary("and", g.compare("eq", x, zero), g.compare("lt", g.binary("div", one, x), zero))
    return g.binary("or", g.compare("lt", x, zero), neg_zero)


def signbit(x: Array, /) -> Array:
    """The standard's ``signbit`` (-0.0 included; a NaN's sign bit is not read)."""
    _check_array(x, "signbit")
    _numeric(x, "signbit", "float")
    return apply(_signbit, (x,))  # type: ignore[no-any-return]


def _copysign(g: Graph, x: Sym, y: Sym, dtype: str) -> Sym:
    shape = _bshape(x.shape, y.shape)
    x, y = g.broadcast(g.convert(x, dtype), shape), g.broadcast(g.convert(y, dtype), shape)
    mag = g.unary("abs", x)
    return g.select(_signbit(g, y), g.unary("neg", mag), mag)


copysign = _promoted("copysign", _copysign, "float",
                      "The standard's ``copysign``.")


def _logical(g: Graph, x: Sym, y: Sym, op: str) -> Sym:
    return _binary(g, g.convert(x, "bool"), g.convert(y, "bool"), op, "bool")


def _logic(name: str, op: str) -> Callable[..., Array]:
    def fn(x1: Array | Scalar, x2: Array | Scalar, /) -> Array:
        a, b = operands(x1, x2, name)
        return apply(_logical, (a, b), op)  # type: ignore[no-any-return]

    return _named(fn, name, f"The standard's ``{name}`` of two bool arrays.")


logical_and = _logic("logical_and", "and")
logical_or = _logic("logical_or", "or")
logical_xor = _logic("logical_xor", "xor")


def _lnot(g: Graph, x: Sym) -> Sym:
    return g.unary("not", g.convert(x, "bool"))


def logical_not(x: Array, /) -> Array:
    """The standard's ``logical_not``."""
    _check_array(x, "logical_not")
    return apply(_lnot, (x,))  # type: ignore[no-any-return]


def _clip(g: Graph, x: Sym, lo: Sym | None, hi: Sym | None) -> Sym:
    out = x
    if lo is not None:
        out = g.binary("max", out, g.broadcast(g.convert(lo, x.dtype), x.shape))
    if hi is not None:
        out = g.binary("min", out, g.broadcast(g.convert(hi, x.dtype), x.shape))
    return out


def _clip_lo(g: Graph, x: Sym, lo: Sym) -> Sym:
    return _clip(g, x, lo, None)


def _clip_hi(g: Graph, x: Sym, hi: Sym) -> Sym:
    return _clip(g, x, None, hi)


def clip(x: Array, /, min: Array | Scalar | None = None, max: Array | Scalar | None = None) -> Array:
    """The standard's ``clip``: ``x`` limited to [min, max] (either may be None)."""
    _check_array(x, "clip")
    _numeric(x, "clip")
    bounds: list[Array | None] = []
    for bound in (min, max):
        if bound is None:
            bounds.append(None)
            continue
        if not isinstance(bound, Array) and isinstance(bound, (int, float)) and x._dtype.kind in "iu":
            info = np.iinfo(x._dtype)
            bound = builtins.max(info.min, builtins.min(info.max, bound)) if isinstance(bound, int) else bound
        bounds.append(operands(x, bound, "clip")[1])
    lo, hi = bounds
    for b in (lo, hi):
        if b is not None and _bshape(x._shape, b._shape) != x._shape:
            raise ValueError(f"clip: a bound of shape {b._shape} does not broadcast to x's shape {x._shape}")
    if lo is not None and hi is not None:
        return apply(_clip, (x, lo, hi))  # type: ignore[no-any-return]
    if lo is not None:
        return apply(_clip_lo, (x, lo))  # type: ignore[no-any-return]
    if hi is not None:
        return apply(_clip_hi, (x, hi))  # type: ignore[no-any-return]
    return x


def _part(g: Graph, x: Sym, which: str) -> Sym:
    if which == "real":
        return g.real(x)
    if which == "imag":
        return g.imag(x)
    return g.complex(g.real(x), g.unary("neg", g.imag(x)))  # conj


def real(x: Array, /) -> Array:
    """The standard's ``real``: the real part (``x`` itself for real arrays)."""
    _check_array(x, "real")
    return apply(_part, (x,), "real") if x._dtype.kind == "c" else x


def conj(x: Array, /) -> Array:
    """The standard's ``conj``: the complex conjugate (``x`` itself for real arrays)."""
    _check_array(x, "conj")
    return apply(_part, (x,), "conj") if x._dtype.kind == "c" else x


def imag(x: Array, /) -> Array:
    """The standard's ``imag``: the imaginary part (zeros for real arrays)."""
    from nx_hal.array_api import _creation

    _check_array(x, "imag")
    if x._dtype.kind == "c":
        return apply(_part, (x,), "imag")  # type: ignore[no-any-return]
    return _creation.zeros_like(x)


def _reciprocal(g: Graph, x: Sym) -> Sym:
    return g.binary("div", g.broadcast(g.constant(1, x.dtype), x.shape), x)


def reciprocal(x: Array, /) -> Array:
    """The standard's ``reciprocal``: 1 / x (float arrays)."""
    _check_array(x, "reciprocal")
    _numeric(x, "reciprocal", "floatcomplex")
    return apply(_reciprocal, (x,))  # type: ignore[no-any-return]


def nextafter(x1: Array | Scalar, x2: Array | Scalar, /) -> Array:
    """The standard's ``nextafter``: the next float after x1 toward x2 (PJRT devices)."""
    a, b = operands(x1, x2, "nextafter")
    dtype = _result(a, b, "nextafter")
    _kind_ok(dtype, "nextafter", "float")
    return apply(_binary, (a, b), "nextafter", dtype.name)  # type: ignore[no-any-return]
