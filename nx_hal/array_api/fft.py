"""The standard's FFT extension (``xp.fft``), on PJRT devices (stablehlo.fft).

ONNX devices have no complex arrays, so there the transforms say so; the
frequency helpers and the shifts run on any device.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from nx_hal.array_api import _dtypes
from nx_hal.array_api._array import Array, _device_of
from nx_hal.array_api._dispatch import apply
from nx_hal.array_api._graph import COMPLEX_PART, Graph, Sym
from nx_hal.array_api._manipulation import normalize_axis, roll

__all__ = ["fft", "ifft", "fftn", "ifftn", "rfft", "irfft", "rfftn", "irfftn", "hfft", "ihfft", "fftfreq",
           "rfftfreq", "fftshift", "ifftshift"]

_NORMS = ("backward", "ortho", "forward")
_SWAP = {"backward": "forward", "forward": "backward", "ortho": "ortho"}


def _resize(g: Graph, x: Sym, axis: int, n: int) -> Sym:
    """``x`` cut or zero-padded to ``n`` along ``axis``."""
    have = x.shape[axis]
    if have == n:
        return x
    if have > n:
        limit = list(x.shape)
        limit[axis] = n
        return g.slice(x, (0,) * x.ndim, tuple(limit), (1,) * x.ndim)
    pad = list(x.shape)
    pad[axis] = n - have
    return g.concat([x, g.broadcast(g.constant(0, x.dtype), tuple(pad))], axis)


def _scale(g: Graph, x: Sym, factor: float) -> Sym:
    if factor == 1.0:
        return x
    return g.binary("mul", x, g.broadcast(g.constant(factor, x.dtype), x.shape))


def _last(g: Graph, x: Sym, axis: int) -> tuple[Sym, tuple[int, ...]]:
    perm = tuple(i for i in range(x.ndim) if i != axis) + (axis,)
    return g.transpose(x, perm), perm


def _back(g: Graph, x: Sym, perm: tuple[int, ...]) -> Sym:
    inverse = tuple(int(i) for i in np.argsort(perm))
    return g.transpose(x, inverse)


def _fft1(g: Graph, x: Sym, axis: int, n: int, norm: str, kind: str) -> Sym:
    """One transform along ``axis`` of length ``n`` with the standard's ``norm``."""
    if kind == "IRFFT":
        x = _resize(g, x, axis, n // 2 + 1)
    else:
        x = _resize(g, x, axis, n)
    moved, perm = _last(g, x, axis)
    out = _back(g, g.fft(moved, kind, n), perm)
    inverse = kind in ("IFFT", "IRFFT")
    # XLA's inverse transforms divide by n already ("backward").
    if inverse:
        factor = {"backward": 1.0, "ortho": float(np.sqrt(n)), "forward": float(n)}[norm]
    else:
        factor = {"backward": 1.0, "ortho": 1.0 / float(np.sqrt(n)), "forward": 1.0 / n}[norm]
    return _scale(g, out, factor)


def _complex(g: Graph, x: Sym) -> Sym:
    if x.dtype in COMPLEX_PART:
        return x
    return g.convert(x, "complex64" if x.dtype == "float32" else "complex128")


def _transform(g: Graph, x: Sym, axes: tuple[int, ...], lengths: tuple[int, ...], norm: str, kinds: tuple[str, ...],
               conj_in: bool, conj_out: bool) -> Sym:
    if conj_in:
        x = g.complex(g.real(x), g.unary("neg", g.imag(x)))
    for axis, n, kind in zip(axes, lengths, kinds, strict=True):
        x = _fft1(g, _complex(g, x) if kind in ("FFT", "IFFT", "IRFFT") else x, axis, n, norm, kind)
    if conj_out:
        x = g.complex(g.real(x), g.unary("neg", g.imag(x)))
    return x


def _check(x: Array, name: str, complex_in: bool, norm: str) -> None:
    if norm not in _NORMS:
        raise ValueError(f"fft.{name}: norm must be one of {_NORMS}, not {norm!r}")
    if complex_in and x._dtype.kind != "c":
        raise TypeError(f"fft.{name} takes a complex array, not {x._dtype}")
    if not complex_in and x._dtype.kind != "f":
        raise TypeError(f"fft.{name} takes a real float array, not {x._dtype}")


def _run(x: Array, axes: tuple[int, ...], lengths: tuple[int, ...], norm: str, kinds: tuple[str, ...],
         conj_in: bool = False, conj_out: bool = False) -> Array:
    for n in lengths:
        if n < 1:
            raise ValueError(f"fft: a transform length must be >= 1, got {n}")
    return apply(_transform, (x,), axes, lengths, norm, kinds, conj_in, conj_out)  # type: ignore[no-any-return]


def fft(x: Array, /, *, n: int | None = None, axis: int = -1, norm: str = "backward") -> Array:
    """The 1-d discrete Fourier transform along ``axis``."""
    _check(x, "fft", True, norm)
    axis = normalize_axis(axis, x.ndim, "fft")
    return _run(x, (axis,), (n or x._shape[axis],), norm, ("FFT",))


def ifft(x: Array, /, *, n: int | None = None, axis: int = -1, norm: str = "backward") -> Array:
    """The 1-d inverse discrete Fourier transform along ``axis``."""
    _check(x, "ifft", True, norm)
    axis = normalize_axis(axis, x.ndim, "ifft")
    return _run(x, (axis,), (n or x._shape[axis],), norm, ("IFFT",))


def _nd_axes(x: Array, s: Sequence[int] | None, axes: Sequence[int] | None, name: str) -> tuple[tuple[int, ...],
                                                                                               tuple[int, ...]]:
    if axes is None:
        axes = tuple(range(x.ndim)) if s is None else tuple(range(x.ndim - len(s), x.ndim))
    norm_axes = tuple(normalize_axis(a, x.ndim, name) for a in axes)
    lengths = tuple(x._shape[a] for a in norm_axes) if s is None else tuple(
        x._shape[a] if n == -1 else int(n) for a, n in zip(norm_axes, s, strict=True))
    return norm_axes, lengths


def fftn(x: Array, /, *, s: Sequence[int] | None = None, axes: Sequence[int] | None = None,
         norm: str = "backward") -> Array:
    """The n-d discrete Fourier transform over ``axes``."""
    _check(x, "fftn", True, norm)
    a, lengths = _nd_axes(x, s, axes, "fftn")
    return _run(x, a, lengths, norm, ("FFT",) * len(a))


def ifftn(x: Array, /, *, s: Sequence[int] | None = None, axes: Sequence[int] | None = None,
          norm: str = "backward") -> Array:
    """The n-d inverse discrete Fourier transform over ``axes``."""
    _check(x, "ifftn", True, norm)
    a, lengths = _nd_axes(x, s, axes, "ifftn")
    return _run(x, a, lengths, norm, ("IFFT",) * len(a))


def rfft(x: Array, /, *, n: int | None = None, axis: int = -1, norm: str = "backward") -> Array:
    """The 1-d transform of a real array (n // 2 + 1 frequencies)."""
    _check(x, "rfft", False, norm)
    axis = normalize_axis(axis, x.ndim, "rfft")
    return _run(x, (axis,), (n or x._shape[axis],), norm, ("RFFT",))


def irfft(x: Array, /, *, n: int | None = None, axis: int = -1, norm: str = "backward") -> Array:
    """The inverse of ``rfft``: a real array of ``n`` (2 * (m - 1) by default) elements along ``axis``."""
    _check(x, "irfft", True, norm)
    axis = normalize_axis(axis, x.ndim, "irfft")
    return _run(x, (axis,), (n or 2 * (x._shape[axis] - 1),), norm, ("IRFFT",))


def rfftn(x: Array, /, *, s: Sequence[int] | None = None, axes: Sequence[int] | None = None,
          norm: str = "backward") -> Array:
    """The n-d transform of a real array (the last axis halved)."""
    _check(x, "rfftn", False, norm)
    a, lengths = _nd_axes(x, s, axes, "rfftn")
    # The real transform over the last axis first, then full transforms over the others.
    order = (a[-1],) + a[:-1]
    lens = (lengths[-1],) + lengths[:-1]
    return _run(x, order, lens, norm, ("RFFT",) + ("FFT",) * (len(a) - 1))


def irfftn(x: Array, /, *, s: Sequence[int] | None = None, axes: Sequence[int] | None = None,
           norm: str = "backward") -> Array:
    """The inverse of ``rfftn``."""
    _check(x, "irfftn", True, norm)
    if axes is None:
        axes = tuple(range(x.ndim)) if s is None else tuple(range(x.ndim - len(s), x.ndim))
    a = tuple(normalize_axis(v, x.ndim, "irfftn") for v in axes)
    if s is None:
        lengths = tuple(x._shape[v] for v in a[:-1]) + (2 * (x._shape[a[-1]] - 1),)
    else:
        lengths = tuple(int(n) for n in s)
    return _run(x, a, lengths, norm, ("IFFT",) * (len(a) - 1) + ("IRFFT",))


def hfft(x: Array, /, *, n: int | None = None, axis: int = -1, norm: str = "backward") -> Array:
    """The transform of a signal with Hermitian symmetry (a real spectrum)."""
    _check(x, "hfft", True, norm)
    axis = normalize_axis(axis, x.ndim, "hfft")
    return _run(x, (axis,), (n or 2 * (x._shape[axis] - 1),), _SWAP[norm], ("IRFFT",), conj_in=True)


def ihfft(x: Array, /, *, n: int | None = None, axis: int = -1, norm: str = "backward") -> Array:
    """The inverse of ``hfft``."""
    _check(x, "ihfft", False, norm)
    axis = normalize_axis(axis, x.ndim, "ihfft")
    return _run(x, (axis,), (n or x._shape[axis],), _SWAP[norm], ("RFFT",), conj_out=True)


def _freq(values: np.ndarray[Any, Any], dtype: object, device: object) -> Array:
    dev = _device_of(device)
    dt = _dtypes.default_float(dev) if dtype is None else _dtypes.as_dtype(dtype)
    _dtypes.check_dtype(dt, dev)
    return Array._from_host(values.astype(dt), dev)


def fftfreq(n: int, /, *, d: float = 1.0, dtype: object = None, device: object = None) -> Array:
    """The sample frequencies of an ``n``-point transform."""
    if n < 1:
        raise ValueError("fftfreq: n must be >= 1")
    return _freq(np.fft.fftfreq(n, d), dtype, device)


def rfftfreq(n: int, /, *, d: float = 1.0, dtype: object = None, device: object = None) -> Array:
    """The sample frequencies of an ``n``-point real transform."""
    if n < 1:
        raise ValueError("rfftfreq: n must be >= 1")
    return _freq(np.fft.rfftfreq(n, d), dtype, device)


def _shift(x: Array, axes: int | Sequence[int] | None, sign: int) -> Array:
    if axes is None:
        axes = tuple(range(x.ndim))
    elif isinstance(axes, int):
        axes = (axes,)
    axes = tuple(normalize_axis(a, x.ndim, "fftshift") for a in axes)
    if not axes:
        return x
    shifts = tuple(sign * (x._shape[a] // 2) if sign > 0 else -(x._shape[a] // 2) for a in axes)
    return roll(x, shifts, axis=axes)


def fftshift(x: Array, /, *, axes: int | Sequence[int] | None = None) -> Array:
    """``x`` with the zero frequency moved to the middle."""
    return _shift(x, axes, 1)


def ifftshift(x: Array, /, *, axes: int | Sequence[int] | None = None) -> Array:
    """The inverse of ``fftshift``."""
    return _shift(x, axes, -1)
