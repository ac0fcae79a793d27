"""Arrays on any nx_hal device, as a Python array API standard namespace (2024.12).

    import nx_hal.array_api as xp
    a = xp.asarray([[1.0, 2.0], [3.0, 4.0]], device="npu:cpu")   # or "tpu", a Device, the default
    b = xp.ones((2, 2), device=a.device)
    c = a @ b                                   # runs on a's device
    np.asarray(c)                               # back in numpy

Each operation is a small program for its device (StableHLO for PJRT devices,
ONNX for OpenVINO's), compiled once per operation, dtypes, shapes and device
and then called on the buffers already there. ``jit`` traces a function of
arrays into one program. Devices that compute 64-bit types in 32 bits
(OpenVINO's) offer the 32-bit dtypes only and default to them.
"""

from __future__ import annotations

import math as _math

from nx_hal.array_api import fft, linalg
from nx_hal.array_api._array import Array
from nx_hal.array_api._array import bind as _bind
from nx_hal.array_api._creation import (
    arange,
    asarray,
    empty,
    empty_like,
    eye,
    from_dlpack,
    full,
    full_like,
    linspace,
    meshgrid,
    ones,
    ones_like,
    tril,
    triu,
    zeros,
    zeros_like,
)
from nx_hal.array_api._data_types import astype, can_cast, finfo, iinfo, isdtype, result_type
from nx_hal.array_api._dispatch import OperationError
from nx_hal.array_api._dtypes import (
    bool_ as bool,
)
from nx_hal.array_api._dtypes import (
    complex64,
    complex128,
    float32,
    float64,
    int8,
    int16,
    int32,
    int64,
    uint8,
    uint16,
    uint32,
    uint64,
)
from nx_hal.array_api._elementwise import (
    abs,
    acos,
    acosh,
    add,
    asin,
    asinh,
    atan,
    atan2,
    atanh,
    bitwise_and,
    bitwise_invert,
    bitwise_left_shift,
    bitwise_or,
    bitwise_right_shift,
    bitwise_xor,
    ceil,
    clip,
    conj,
    copysign,
    cos,
    cosh,
    divide,
    equal,
    exp,
    expm1,
    floor,
    floor_divide,
    greater,
    greater_equal,
    hypot,
    imag,
    isfinite,
    isinf,
    isnan,
    less,
    less_equal,
    log,
    log1p,
    log2,
    log10,
    logaddexp,
    logical_and,
    logical_not,
    logical_or,
    logical_xor,
    maximum,
    minimum,
    multiply,
    negative,
    nextafter,
    not_equal,
    positive,
    pow,
    real,
    reciprocal,
    remainder,
    round,
    sign,
    signbit,
    sin,
    sinh,
    sqrt,
    square,
    subtract,
    tan,
    tanh,
    trunc,
)
from nx_hal.array_api._indexing import getitem as _getitem
from nx_hal.array_api._indexing import setitem as _setitem
from nx_hal.array_api._indexing import take, take_along_axis
from nx_hal.array_api._info import __array_namespace_info__
from nx_hal.array_api._jit import jit
from nx_hal.array_api._linalg import matmul, matrix_transpose, tensordot, vecdot
from nx_hal.array_api._manipulation import (
    broadcast_arrays,
    broadcast_to,
    concat,
    expand_dims,
    flip,
    moveaxis,
    permute_dims,
    repeat,
    reshape,
    roll,
    squeeze,
    stack,
    tile,
    unstack,
)
from nx_hal.array_api._searching import (
    argmax,
    argmin,
    argsort,
    nonzero,
    searchsorted,
    sort,
    unique_all,
    unique_counts,
    unique_inverse,
    unique_values,
    where,
)
from nx_hal.array_api._statistics import (
    all,
    any,
    count_nonzero,
    cumulative_prod,
    cumulative_sum,
    diff,
    max,
    mean,
    min,
    prod,
    std,
    sum,
    var,
)

_bind({**{name: value for name, value in globals().items() if callable(value) and not name.startswith("_")},
       "getitem": _getitem, "setitem": _setitem})

__array_api_version__ = "2024.12"

e = _math.e
inf = _math.inf
nan = _math.nan
pi = _math.pi
newaxis = None

__all__ = [
    "__array_api_version__", "__array_namespace_info__", "Array", "OperationError", "jit", "fft", "linalg",
    "e", "inf", "nan", "pi", "newaxis",
    "bool", "int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64", "float32", "float64", "complex64", "complex128",
    "arange", "asarray", "empty", "empty_like", "eye", "from_dlpack", "full", "full_like", "linspace", "meshgrid",
    "ones", "ones_like", "tril", "triu", "zeros", "zeros_like",
    "astype", "can_cast", "finfo", "iinfo", "isdtype", "result_type",
    "abs", "acos", "acosh", "add", "asin", "asinh", "atan", "atan2", "atanh", "bitwise_and", "bitwise_invert",
    "bitwise_left_shift", "bitwise_or", "bitwise_right_shift", "bitwise_xor", "ceil", "clip", "conj", "copysign",
    "cos", "cosh", "divide", "equal", "exp", "expm1", "floor", "floor_divide", "greater", "greater_equal", "hypot",
    "imag", "isfinite", "isinf", "isnan", "less", "less_equal", "log", "log1p", "log2", "log10", "logaddexp",
    "logical_and", "logical_not", "logical_or", "logical_xor", "maximum", "minimum", "multiply", "negative",
    "nextafter", "not_equal", "positive", "pow", "real", "reciprocal", "remainder", "round", "sign", "signbit", "sin", "sinh", "sqrt", "square",
    "subtract", "tan", "tanh", "trunc",
    "take", "take_along_axis", "matmul", "matrix_transpose", "tensordot", "vecdot",
    "broadcast_arrays", "broadcast_to", "concat", "expand_dims", "flip", "moveaxis", "permute_dims", "repeat",
    "reshape", "roll", "squeeze", "stack", "tile", "unstack",
    "argmax", "argmin", "argsort", "nonzero", "searchsorted", "sort", "unique_all", "unique_counts",
    "unique_inverse", "unique_values", "where",
    "all", "any", "count_nonzero", "cumulative_prod", "cumulative_sum", "diff", "max", "mean", "min", "prod", "std", "sum", "var",
]
