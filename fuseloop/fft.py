"""``fl.fft``: the Array API's ``fft`` extension, with numpy's results, on the device.

Each 1-D transform moves its axis last and, unless the input is an evaluated
contiguous array of the transform's dtype (read in place), evaluates it into a
contiguous buffer of its own in one fuseloop kernel (the axis move, the cast of real
input to complex, truncation or zero padding to ``n`` and, for ``irfft``, the Hermitian
extension of the half spectrum all fuse into that copy), then runs one launch per
sub-FFT factor of the length (:mod:`fuseloop.ops.fft_local`: a whole sub-FFT of up to
``max_sub`` points per work-group in local memory) over all rows at once, the norm's
factor applied by the last launch.  Lengths with a prime factor other than 2, 3, 5 use Bluestein's
algorithm: a chirp product, a transform of a 2-3-5-smooth length ``m >= 2n - 1``, a
product with the chirp filter's spectrum (computed once per length and device), the
inverse transform, and a last chirp product, those products being fuseloop
expressions.  ``rfft``/``irfft`` of even lengths pack the real signal into a complex one
of half the length (:func:`_r2c_packed`, :func:`_c2r_packed`).  n-D transforms are 1-D
transforms axis by axis.  The result of a transform is a view of the last pass's buffer
(moved back into place; the ``rfft`` spectrum and the odd-length ``irfft`` real part as
lazy expressions).
"""

from __future__ import annotations

import math
import threading
from collections.abc import Sequence
from typing import Any

import numpy as np

from . import caches as _caches
from .array import Array, _coerce
from .creation import arange, asarray, empty
from .errors import DTypeError
from .ops import fft_kernels as _k
from .ops import fft_local as _local
from .ops.shape import (
    broadcast_to,
    concatenate,
    flip,
    moveaxis,
    normalize_axis,
    roll,
    stack,
)

_NORMS = ("backward", "ortho", "forward")


# {{{ arguments

def _norm_scale(norm: str | None, n: int, inverse: bool) -> float:
    if norm is None:
        norm = "backward"
    if norm not in _NORMS:
        raise ValueError(f'norm must be "backward", "ortho" or "forward", not {norm!r}')
    if norm == "ortho":
        return 1 / math.sqrt(n)
    return 1 / n if (norm == "forward") != inverse else 1.0


def _swap(norm: str | None) -> str:
    """The norm of the opposite direction (hfft is irfft of the conjugate, ...)."""
    norm = norm or "backward"
    _norm_scale(norm, 1, False)  # (checks it)
    return {"backward": "forward", "forward": "backward"}.get(norm, norm)


def _points(n: Any, name: str) -> int:
    if not isinstance(n, int | np.integer) or isinstance(n, bool):
        raise TypeError(f"fl.fft.{name}: n must be an integer, not {type(n).__name__}")
    if n < 1:
        raise ValueError(f"fl.fft.{name}: invalid number of FFT data points ({n}); "
                         "it must be at least 1")
    return int(n)


def _complex_dtype(x: Array, name: str, real_only: bool = False) -> np.dtype:
    """The complex dtype a transform of ``x`` computes in (numpy's: float32 and
    complex64 stay single precision, everything else double)."""
    kind = x.dtype.kind
    if kind == "c" and real_only:
        raise DTypeError(f"fl.fft.{name} takes real input, not {x.dtype} (shape {x.shape}); "
                         "use fl.fft.fft for complex input")
    if kind not in "biufc":
        raise DTypeError(f"fl.fft.{name}: unsupported dtype {x.dtype}")
    if x.dtype in (np.float32, np.complex64):
        return np.dtype(np.complex64)
    return np.dtype(np.complex128)


def _array(x: Any, name: str) -> Array:
    a = _coerce(x)
    if not isinstance(a, Array):
        raise TypeError(f"fl.fft.{name} takes an array, not {type(x).__name__}")
    if a.ndim == 0:
        raise ValueError(f"fl.fft.{name} needs at least one dimension (got a 0-d array)")
    return a


def _s_axes(x: Array, s: Any, axes: Any, name: str) -> tuple[list[int], list[int]]:
    """numpy's rules: axes None is every axis (the last len(s) when s is given)."""
    if axes is None:
        axes = list(range(x.ndim)) if s is None else list(range(x.ndim - len(s), x.ndim))
    elif isinstance(axes, int | np.integer):
        axes = [axes]
    axes = [normalize_axis(a, x.ndim) for a in axes]
    if not axes and name in ("rfftn", "irfftn"):
        raise ValueError(f"fl.fft.{name} needs at least one axis (the real one is the last)")
    if s is None:
        return [x.shape[a] for a in axes], axes
    s = [s] if isinstance(s, int | np.integer) else list(s)
    if len(s) != len(axes):
        raise ValueError(f"fl.fft.{name}: s {tuple(s)} and axes {tuple(axes)} must have the "
                         "same length")
    return [_points(v, name) if v != -1 else x.shape[a] for v, a in zip(s, axes)], axes

# }}}


# {{{ the 1-D complex transform

def _resized(x: Array, n: int) -> Array:
    """``x`` (its last axis) truncated or zero-padded to length ``n``, lazily."""
    length = x.shape[-1]
    if n < length:
        return x[..., :n]
    if n > length:
        zero = asarray(np.zeros((1,) * x.ndim, x.dtype), device=x.device)
        return concatenate([x, broadcast_to(zero, (*x.shape[:-1], n - length))], axis=-1)
    return x


def _contiguous(x: Array, dtype: np.dtype) -> Array:
    """A new contiguous array holding ``x`` cast to ``dtype``: one fused kernel."""
    out = empty(x.shape, dtype, x.device)
    if out.size:
        out[...] = x
    return out


def _transform_last(x: Array, sign: int, scale: float) -> Array:
    """The DFT along the last axis of ``x`` (complex; its length the transform's),
    times ``scale``: exp(sign 2 pi i jk/n)."""
    n, dev = x.shape[-1], x.device
    if x.size == 0:
        return _contiguous(x, x.dtype)
    if n == 1:
        return x * scale if scale != 1 else _contiguous(x, x.dtype)
    if _k.factor(n) is None:
        return _bluestein(x, sign, scale)
    rows = x.size // n
    if not _local.params(dev, x.dtype).local_for(n):
        a = _contiguous(x, x.dtype)
        b = empty(a.shape, a.dtype, dev)
        in_b = _k.stockham(_storage(a), _storage(b), rows, n, a.dtype, sign, scale, dev)
        return b if in_b else a
    # an evaluated contiguous input is read in place (no copy: one trip less through
    # memory); the passes then write two buffers of their own
    src = x if x.is_contiguous and x._storage is not None else _contiguous(x, x.dtype)
    bufs = {id(b._storage): b for b in (src, empty(x.shape, x.dtype, dev))}
    outs = list(bufs.values())

    def spare() -> Any:
        if src is not x:  # our own copy: the passes may overwrite it
            return _storage(src)
        outs.append(empty(x.shape, x.dtype, dev))
        bufs[id(outs[-1]._storage)] = outs[-1]
        return _storage(outs[-1])

    done = _local.transform(_storage(src), _storage(outs[1]), spare, rows, n, x.dtype,
                            sign, scale, dev)
    return bufs[id(done)]


def _storage(a: Array) -> Any:
    s = a._storage
    assert s is not None and a.is_contiguous
    return s


def _c2c(x: Array, n: int, axis: int, sign: int, scale: float, dtype: np.dtype) -> Array:
    """The complex DFT of ``x`` along ``axis``, resized to ``n`` first."""
    moved = moveaxis(x, axis, -1)
    if moved.dtype != dtype:
        moved = moved.astype(dtype)
    out = _transform_last(_resized(moved, n), sign, scale)
    return moveaxis(out, -1, axis)

# }}}


# {{{ Bluestein's algorithm for lengths with other prime factors

_chirps: dict[tuple[int, int, int, str, int], tuple[Array, Array]] = {}
_chirps_lock = threading.Lock()
_caches.register("fft.chirps", _chirps.clear, lambda: len(_chirps),
                 why="Bluestein chirps per length, direction, dtype and device (bounded: 64)")


def _smooth_length(at_least: int) -> int:
    """The smallest 2-3-5-smooth number >= at_least."""
    m = at_least
    while _k.factor(m) is None:
        m += 1
    return m


def _chirp(n: int, m: int, sign: int, dtype: np.dtype, x: Array) -> tuple[Array, Array]:
    """The chirp ``w_k = exp(sign pi i k^2 / n)`` and the spectrum of the filter
    ``conj(w)`` wrapped around a length-``m`` circle, on ``x``'s device."""
    key = (n, m, sign, dtype.name, x.device.index)
    found = _chirps.get(key)
    if found is not None:
        return found
    k = np.arange(n, dtype=np.int64)
    # k^2 mod 2n exactly, so that the angle is exact before the one rounding
    w = np.exp(sign * 1j * np.pi * ((k * k) % (2 * n)) / n)
    filt = np.zeros(m, np.complex128)
    filt[:n] = np.conj(w)
    filt[m - n + 1:] = np.conj(w[1:][::-1])
    spectrum = _transform_last(asarray(filt.astype(dtype), device=x.device), -1, 1.0)
    found = (asarray(w.astype(dtype), device=x.device), spectrum)
    with _chirps_lock:
        if len(_chirps) >= 64:
            _chirps.clear()
        _chirps[key] = found
    return found


def _bluestein(x: Array, sign: int, scale: float) -> Array:
    n = x.shape[-1]
    m = _smooth_length(2 * n - 1)
    w, spectrum = _chirp(n, m, sign, x.dtype, x)
    a = _transform_last(_resized(x * w, m), -1, 1.0)
    c = _transform_last(a * spectrum, 1, 1 / m)
    return c[..., :n] * (w * scale) if scale != 1 else c[..., :n] * w

# }}}


# {{{ the standard's functions

def fft(x: Any, /, *, n: int | None = None, axis: int = -1,
        norm: str = "backward") -> Array:
    """The 1-D discrete Fourier transform along ``axis`` (``numpy.fft.fft``)."""
    return _one(x, n, axis, norm, "fft", inverse=False)


def ifft(x: Any, /, *, n: int | None = None, axis: int = -1,
         norm: str = "backward") -> Array:
    """The inverse of :func:`fft` (``numpy.fft.ifft``)."""
    return _one(x, n, axis, norm, "ifft", inverse=True)


def _one(x: Any, n: Any, axis: int, norm: str, name: str, inverse: bool) -> Array:
    a = _array(x, name)
    dt = _complex_dtype(a, name)
    ax = normalize_axis(axis, a.ndim)
    length = _points(a.shape[ax] if n is None else n, name)
    return _c2c(a, length, ax, 1 if inverse else -1, _norm_scale(norm, length, inverse), dt)


def fftn(x: Any, /, *, s: Sequence[int] | None = None, axes: Sequence[int] | None = None,
         norm: str = "backward") -> Array:
    """The n-D transform over ``axes`` (every axis by default; ``numpy.fft.fftn``)."""
    return _many(x, s, axes, norm, "fftn", inverse=False)


def ifftn(x: Any, /, *, s: Sequence[int] | None = None, axes: Sequence[int] | None = None,
          norm: str = "backward") -> Array:
    """The inverse of :func:`fftn` (``numpy.fft.ifftn``)."""
    return _many(x, s, axes, norm, "ifftn", inverse=True)


def _many(x: Any, s: Any, axes: Any, norm: str, name: str, inverse: bool) -> Array:
    a = _array(x, name)
    dt = _complex_dtype(a, name)
    sizes, axs = _s_axes(a, s, axes, name)
    out = a.astype(dt) if a.dtype != dt else a
    _norm_scale(norm, 1, inverse)
    for size, ax in reversed(list(zip(sizes, axs))):  # the last axis first, as numpy
        out = _c2c(out, size, ax, 1 if inverse else -1, _norm_scale(norm, size, inverse), dt)
    return out


def rfft(x: Any, /, *, n: int | None = None, axis: int = -1,
         norm: str = "backward") -> Array:
    """The transform of real input: the ``n // 2 + 1`` non-negative frequencies."""
    a = _array(x, "rfft")
    dt = _complex_dtype(a, "rfft", real_only=True)
    ax = normalize_axis(axis, a.ndim)
    length = _points(a.shape[ax] if n is None else n, "rfft")
    scale = _norm_scale(norm, length, False)
    if length % 2 or length < 4:
        full = _c2c(a, length, ax, -1, scale, dt)
        return moveaxis(moveaxis(full, ax, -1)[..., :length // 2 + 1], -1, ax)
    real = np.dtype(np.float32 if dt == np.complex64 else np.float64)
    moved = moveaxis(a if a.dtype == real else a.astype(real), ax, -1)
    return moveaxis(_r2c_packed(_resized(moved, length), scale, dt), -1, ax)


def _twiddles(kind: str, n: int, dtype: np.dtype, x: Array) -> Array:
    """The half-length tricks' factors on ``x``'s device, cached like the chirps:
    ``r2c``: ``-i/2 W^k`` for k <= n/2; ``c2r``: ``i/2 conj(W^k)`` for k < n/2, with
    ``W = exp(-2 pi i / n)``."""
    key = (n, {"r2c": -2, "c2r": -3}[kind], 0, dtype.name, x.device.index)
    found = _chirps.get(key)
    if found is not None:
        return found[0]
    k = np.arange(n // 2 + (kind == "r2c"), dtype=np.int64)
    w = np.exp(-2j * np.pi * k / n)
    host = -0.5j * w if kind == "r2c" else 0.5j * np.conj(w)
    arr = asarray(host.astype(dtype), device=x.device)
    with _chirps_lock:
        if len(_chirps) >= 64:
            _chirps.clear()
        _chirps[key] = (arr, arr)
    return arr


def _r2c_packed(x: Array, scale: float, dt: np.dtype) -> Array:
    """rfft of real ``x`` (last axis, even length n >= 4) through a complex transform of
    half the length: ``z = x[0::2] + i x[1::2]``, ``Z = fft(z)``, then
    ``X[k] = (Z[k] + conj Z[h-k]) / 2 - i/2 W^k (Z[k] - conj Z[h-k])`` (indices mod h),
    the last step a lazy expression that fuses into the consumer."""
    n = x.shape[-1]
    if x.is_contiguous and x._storage is not None:
        # an evaluated contiguous real signal already is z in memory (re, im pairs):
        # the passes read it in place, no packing copy
        z = Array._concrete(x._storage, dt, (*x.shape[:-1], n // 2))
    else:
        z = x[..., 0::2].astype(dt) + x[..., 1::2].astype(dt) * 1j
    big = _transform_last(z, -1, 1.0)
    first = big[..., :1]
    zk = concatenate([big, first], axis=-1)
    zc = concatenate([first, flip(big[..., 1:], axis=-1), first], axis=-1).conj()
    return (zk + zc) * (0.5 * scale) + (zk - zc) * (_twiddles("r2c", n, dt, x) * scale)


def irfft(x: Any, /, *, n: int | None = None, axis: int = -1,
          norm: str = "backward") -> Array:
    """The inverse of :func:`rfft`: a real result of length ``n`` (by default
    ``2 * (m - 1)`` for ``m`` input points); the imaginary parts of the zero (and,
    for even ``n``, the Nyquist) frequency are ignored, as numpy ignores them."""
    a = _array(x, "irfft")
    dt = _complex_dtype(a, "irfft")
    ax = normalize_axis(axis, a.ndim)
    length = _points(2 * (a.shape[ax] - 1) if n is None else n, "irfft")
    return _c2r(a, length, ax, _norm_scale(norm, length, True), dt)


def _c2r(a: Array, n: int, ax: int, scale: float, dt: np.dtype) -> Array:
    half = moveaxis(a if a.dtype == dt else a.astype(dt), ax, -1)
    half = _resized(half, n // 2 + 1)
    if n % 2 == 0 and n >= 4:
        return moveaxis(_c2r_packed(half, n, scale, dt), -1, ax)
    # the full spectrum of a real signal: X[n - k] = conj(X[k]) (the copy fuses this)
    tail = flip(half[..., 1:n - n // 2], axis=-1).conj()
    full = concatenate([half, tail], axis=-1) if tail.shape[-1] else half[..., :n]
    out = _transform_last(full, 1, scale)
    return moveaxis(out.real, -1, ax)


def _c2r_packed(half: Array, n: int, scale: float, dt: np.dtype) -> Array:
    """irfft of the half spectrum ``half`` (last axis, n/2 + 1 points; even n >= 4) by
    a complex transform of half the length (the inverse of :func:`_r2c_packed`): the
    imaginary parts of X[0] and X[h] dropped (numpy ignores them),
    ``Z[k] = (X[k] + conj X[h-k]) / 2 + i/2 conj(W^k) (X[k] - conj X[h-k])``,
    ``z = ifft(Z)``, and ``x[2m], x[2m+1]`` the real and imaginary parts of ``z[m]``."""
    h = n // 2
    ends = [half[..., :1].real.astype(dt), half[..., 1:h], half[..., h:].real.astype(dt)]
    xfix = concatenate(ends, axis=-1)
    xk = xfix[..., :h]
    xc = flip(xfix[..., 1:], axis=-1).conj()
    packed = (xk + xc) * 0.5 + (xk - xc) * _twiddles("c2r", n, dt, half)
    z = _transform_last(packed, 1, 2 * scale)
    real = np.dtype(np.float32 if dt == np.complex64 else np.float64)
    if z.is_contiguous and z._storage is not None:  # (a buffer of the passes' own)
        return Array._concrete(z._storage, real, (*z.shape[:-1], n))  # its pairs, as reals
    pairs = stack([z.real, z.imag], axis=-1)
    return pairs.reshape((*z.shape[:-1], n))


def rfftn(x: Any, /, *, s: Sequence[int] | None = None, axes: Sequence[int] | None = None,
          norm: str = "backward") -> Array:
    """:func:`rfft` over the last of ``axes``, then :func:`fft` over the others."""
    a = _array(x, "rfftn")
    dt = _complex_dtype(a, "rfftn", real_only=True)
    sizes, axs = _s_axes(a, s, axes, "rfftn")
    out = rfft(a, n=sizes[-1], axis=axs[-1], norm=norm)
    for size, ax in reversed(list(zip(sizes[:-1], axs[:-1]))):
        out = _c2c(out, size, ax, -1, _norm_scale(norm, size, False), dt)
    return out


def irfftn(x: Any, /, *, s: Sequence[int] | None = None, axes: Sequence[int] | None = None,
           norm: str = "backward") -> Array:
    """The inverse of :func:`rfftn`: :func:`ifft` over all but the last of ``axes``,
    then :func:`irfft` over it (length ``s[-1]``, by default ``2 * (m - 1)``)."""
    a = _array(x, "irfftn")
    dt = _complex_dtype(a, "irfftn")
    if s is None:
        sizes, axs = _s_axes(a, None, axes, "irfftn")
        sizes[-1] = 2 * (sizes[-1] - 1)
    else:
        sizes, axs = _s_axes(a, s, axes, "irfftn")
    out = a.astype(dt) if a.dtype != dt else a
    for size, ax in reversed(list(zip(sizes[:-1], axs[:-1]))):
        out = _c2c(out, size, ax, 1, _norm_scale(norm, size, True), dt)
    last = _points(sizes[-1], "irfftn")
    return _c2r(out, last, axs[-1], _norm_scale(norm, last, True), dt)


def hfft(x: Any, /, *, n: int | None = None, axis: int = -1,
         norm: str = "backward") -> Array:
    """The transform of a Hermitian-symmetric signal given by its first half: a real
    spectrum of length ``n`` (``irfft`` of the conjugate, the norm's direction
    swapped, as numpy).  Real input is taken as complex with zero imaginary part."""
    a = _array(x, "hfft")
    return irfft(a.conj() if a.dtype.kind == "c" else a, n=n, axis=axis, norm=_swap(norm))


def ihfft(x: Any, /, *, n: int | None = None, axis: int = -1,
          norm: str = "backward") -> Array:
    """The inverse of :func:`hfft`: the conjugate of ``rfft`` (norm swapped); real
    input only."""
    a = _array(x, "ihfft")
    _complex_dtype(a, "ihfft", real_only=True)
    return rfft(a, n=n, axis=axis, norm=_swap(norm)).conj()


def fftfreq(n: int, /, *, d: float = 1.0, dtype: Any = None, device: Any = None) -> Array:
    """The sample frequencies of an ``n``-point transform: ``[0, 1, ..., -1] / (d n)``
    (one lazy index expression)."""
    n = _points(n, "fftfreq")
    i = arange(n, dtype=np.int64, device=device)
    shifted = i - n * (i >= (n + 1) // 2)
    return _freq(shifted, n * d, dtype)


def rfftfreq(n: int, /, *, d: float = 1.0, dtype: Any = None, device: Any = None) -> Array:
    """The sample frequencies of :func:`rfft`: ``[0, 1, ..., n // 2] / (d n)``."""
    n = _points(n, "rfftfreq")
    return _freq(arange(n // 2 + 1, dtype=np.int64, device=device), n * d, dtype)


def _freq(i: Array, span: float, dtype: Any) -> Array:
    dt = np.dtype(dtype) if dtype is not None else (
        np.dtype(np.float64) if i.device.has_fp64 else np.dtype(np.float32))
    if dt.kind != "f":
        raise DTypeError(f"fl.fft frequencies are real floating point, not {dt}")
    return i.astype(dt) / dt.type(span)


def fftshift(x: Any, /, *, axes: int | Sequence[int] | None = None) -> Array:
    """``x`` rolled so that the zero frequency is in the middle of each of ``axes``."""
    return _shift(x, axes, 1)


def ifftshift(x: Any, /, *, axes: int | Sequence[int] | None = None) -> Array:
    """The inverse of :func:`fftshift`."""
    return _shift(x, axes, -1)


def _shift(x: Any, axes: Any, direction: int) -> Array:
    a = _coerce(x)
    if axes is None:
        axes = list(range(a.ndim))
    elif isinstance(axes, int | np.integer):
        axes = [axes]
    axs = [normalize_axis(ax, a.ndim) for ax in axes]
    if not axs:
        return a
    return roll(a, [direction * (a.shape[ax] // 2) for ax in axs], axs)

# }}}


__all__ = ["fft", "fftfreq", "fftn", "fftshift", "hfft", "ifft", "ifftn", "ifftshift",
           "ihfft", "irfft", "irfftn", "rfft", "rfftfreq", "rfftn"]
