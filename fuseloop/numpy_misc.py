"""numpy's element-wise, comparison, set, polynomial and dtype functions that the Array API
lacks (issue 27: numpy code runs unchanged), built from fuseloop's lazy operations.

Everything with array data runs on the device: results that numpy gives as Python values
(``allclose``, ``array_equal``) read back one boolean; ``gcd`` loops Euclid's steps on the
device until every pair is done (one boolean read per step).  The dtype functions
(``promote_types`` ...) are numpy's own answers.
"""

from __future__ import annotations

from typing import Any

import numpy as np

import fuseloop as fl

from .array import Array, _coerce
from .errors import DTypeError, ShapeError
from .numpy_sets import (
    argpartition,
    intersect1d,
    lexsort,
    partition,
    setdiff1d,
    setxor1d,
    sort_complex,
    union1d,
    unique,
)
from .ops.shape import normalize_axis

_INT64 = np.dtype(np.int64)


def _arr(x: Any, like: Array | None = None) -> Array:
    """``x`` as a device Array (host data goes to ``like``'s device, else the default)."""
    x = _coerce(x)
    if isinstance(x, Array):
        return x
    return fl.asarray(np.asarray(x), device=None if like is None else like.device)


def _with_out(fn: Any) -> Any:
    """numpy's ``out=`` for a ufunc-like function: the result written into ``out`` (a
    fuseloop array) under numpy's 'same_kind' casting rule."""
    import functools

    from .ufuncs import _into, _out_arg

    @functools.wraps(fn)
    def wrapped(*args: Any, out: Any = None, **kwargs: Any) -> Any:
        result = fn(*args, **kwargs)
        if out is None:
            return result
        return _into(result, _out_arg((), out, fn.__name__), fn.__name__)

    return wrapped


def _float_of(x: Array) -> Array:
    """``x`` in numpy's float result dtype of a float function (ints and bools: float64)."""
    return x if x.dtype.kind in "fc" else x.astype(np.float64)


# {{{ element-wise

@_with_out
def float_power(x1: Any, x2: Any, /) -> Array:
    """``x1 ** x2`` in float64 (complex128 for complex inputs), as ``numpy.float_power``."""
    a, b = _arr(x1), _arr(x2)
    dt = np.complex128 if "c" in (a.dtype.kind, b.dtype.kind) else np.float64
    return fl.power(a.astype(dt), b.astype(dt))


def divmod(x1: Any, x2: Any, /) -> tuple[Array, Array]:
    """``(x1 // x2, x1 % x2)`` (``numpy.divmod``)."""
    return fl.floor_divide(x1, x2), fl.remainder(x1, x2)


def _check_int(name: str, *xs: Array) -> None:
    for x in xs:
        if x.dtype.kind not in "iub":
            raise DTypeError(f"{name}: integer inputs only, got dtype {x.dtype}")


def _int_result(x1: Any, x2: Any, a: Array, b: Array) -> np.dtype:
    """numpy's result dtype of ``x1`` and ``x2`` (a Python int is weak: NEP 50)."""
    return fl.result_type(*(x if isinstance(x, int) and not isinstance(x, bool) else t.dtype
                            for x, t in ((x1, a), (x2, b))))


@_with_out
def gcd(x1: Any, x2: Any, /) -> Array:
    """Greatest common divisor, element-wise (non-negative; ``gcd(0, 0) == 0``): Euclid's
    steps on the device, repeated until every remainder is zero."""
    a, b = _arr(x1), _arr(x2)
    _check_int("gcd", a, b)
    dt = _int_result(x1, x2, a, b)
    a, b = fl.broadcast_arrays(fl.abs(a.astype(dt)), fl.abs(b.astype(dt)))
    a, b = fl.compute(a, b)
    # (at most ~93 steps for 64-bit integers: Euclid's worst case is Fibonacci pairs)
    while bool(fl.any(b != 0)):
        safe = fl.where(b == 0, 1, b)
        # (both in one kernel: fl.compute reads a and b once)
        a, b = fl.compute(fl.where(b == 0, a, b), fl.where(b == 0, 0, a % safe).astype(dt))
    return a


@_with_out
def lcm(x1: Any, x2: Any, /) -> Array:
    """Least common multiple, element-wise (non-negative; 0 where either is 0)."""
    a, b = _arr(x1), _arr(x2)
    dt = _int_result(x1, x2, a, b)
    g = gcd(a.astype(dt), b.astype(dt))
    return fl.where(g == 0, 0, fl.abs((a.astype(dt) // fl.where(g == 0, 1, g))
                                      * b.astype(dt))).astype(dt)


@_with_out
def fix(x: Any, /) -> Array:
    """Round toward zero, keeping the dtype (``numpy.fix``)."""
    a = _arr(x)
    return a if a.dtype.kind in "iub" else fl.trunc(a)


def sinc(x: Any, /) -> Array:
    """``sin(pi x) / (pi x)``, 1 at 0 (``numpy.sinc``)."""
    a = _float_of(_arr(x))
    y = fl.where(a == 0, 1e-20, a) * np.pi
    return fl.where(a == 0, 1, fl.sin(y) / y).astype(a.dtype)


def i0(x: Any, /) -> Array:
    """Modified Bessel function of the first kind, order 0 (``numpy.i0``): the power
    series below |x| = 20, the large-argument asymptotic series above."""
    a = _float_of(_arr(x))
    if a.dtype.kind == "c":
        raise DTypeError("i0: complex input is not supported (numpy's neither)")
    t = fl.abs(a)
    small = fl.where(t > 20, 20.0, t)
    q = (small * 0.5) ** 2
    # sum of q^k / (k!)^2 by Horner's rule: 60 terms reach 1e-17 relative at |x| = 20
    # (Horner rather than running terms: a shared running term makes an expression
    # Loopy cannot schedule)
    total = fl.ones_like(small)
    for k in range(60, 0, -1):
        total = 1.0 + total * q / float(k * k)
    big = fl.where(t > 20, t, 21.0)
    inv = 1.0 / (8.0 * big)
    # asymptotic series: sum of c_k (1/8x)^k, c_k = ((2k-1)!!)^2 / k!
    coef = [1.0]
    for k in range(1, 30):
        coef.append(coef[-1] * (2 * k - 1) ** 2 / k)
    series = fl.full_like(big, coef[-1])
    for c in reversed(coef[:-1]):
        series = c + series * inv
    large = fl.exp(big) / fl.sqrt(2 * np.pi * big) * series
    return fl.where(t > 20, large, total).astype(a.dtype)


@_with_out
def spacing(x: Any, /) -> Array:
    """The distance from ``x`` to the next float away from zero (negative for negative
    ``x``), as ``numpy.spacing``."""
    a = _float_of(_arr(x))
    inf = fl.full_like(a, np.inf)
    away = fl.where(fl.signbit(a), -inf, inf)
    return fl.nextafter(a, away) - a


@_with_out
def isposinf(x: Any, /) -> Array:
    """Whether each element is +inf."""
    a = _arr(x)
    if a.dtype.kind == "c":
        raise TypeError("isposinf: not defined for complex input (numpy raises too)")
    return fl.isinf(a) & ~fl.signbit(a) if a.dtype.kind == "f" else fl.zeros_like(a, dtype=bool)


@_with_out
def isneginf(x: Any, /) -> Array:
    """Whether each element is -inf."""
    a = _arr(x)
    if a.dtype.kind == "c":
        raise TypeError("isneginf: not defined for complex input (numpy raises too)")
    return fl.isinf(a) & fl.signbit(a) if a.dtype.kind == "f" else fl.zeros_like(a, dtype=bool)


def iscomplex(x: Any, /) -> Array:
    """Whether each element has a nonzero imaginary part (False throughout for real x)."""
    a = _arr(x)
    return fl.imag(a) != 0 if a.dtype.kind == "c" else fl.zeros_like(a, dtype=bool)


def isreal(x: Any, /) -> Array:
    """Whether each element has a zero imaginary part (True throughout for real x)."""
    a = _arr(x)
    return fl.imag(a) == 0 if a.dtype.kind == "c" else fl.ones_like(a, dtype=bool)


def iscomplexobj(x: Any, /) -> bool:
    """Whether ``x``'s dtype is complex (the dtype only: no data is read)."""
    dt = getattr(x, "dtype", None)
    return np.iscomplexobj(x) if dt is None else np.dtype(dt).kind == "c"


def isrealobj(x: Any, /) -> bool:
    """Whether ``x``'s dtype is not complex."""
    return not iscomplexobj(x)


def isscalar(element: Any, /) -> bool:
    """numpy's answer: Python and numpy scalars are; arrays (fuseloop's, 0-d too) are not."""
    return False if isinstance(element, Array) else bool(np.isscalar(element))


def real_if_close(a: Any, /, tol: float = 100) -> Array:
    """The real part when every imaginary part is within ``tol`` machine epsilons of zero
    (``tol`` > 1), or an absolute tolerance (``tol`` <= 1); else ``a`` unchanged."""
    x = _arr(a)
    if x.dtype.kind != "c":
        return x
    if tol > 1:
        tol = float(np.finfo(x.dtype).eps) * tol
    return fl.real(x) if bool(fl.all(fl.abs(fl.imag(x)) < tol)) else x

# }}}


# {{{ whole-array comparisons (Python bools, as numpy)

def allclose(a: Any, b: Any, rtol: float = 1e-05, atol: float = 1e-08,
             equal_nan: bool = False) -> bool:
    """Whether every pair is close (``numpy.allclose``): one boolean read back."""
    x = _arr(a)
    return bool(fl.all(fl.isclose(x, _arr(b, x), rtol=rtol, atol=atol, equal_nan=equal_nan)))


def array_equal(a1: Any, a2: Any, equal_nan: bool = False) -> bool:
    """Same shape and equal elements (NaNs equal where ``equal_nan``)."""
    x = _arr(a1)
    y = _arr(a2, x)
    if x.shape != y.shape:
        return False
    same = x == y
    if equal_nan and "c" not in (x.dtype.kind, y.dtype.kind):
        if x.dtype.kind == "f" or y.dtype.kind == "f":
            same = same | (fl.isnan(x) & fl.isnan(y))
    elif equal_nan:
        same = same | ((fl.isnan(x.real) | fl.isnan(x.imag))
                       & (fl.isnan(y.real) | fl.isnan(y.imag)))
    return bool(fl.all(same))


def array_equiv(a1: Any, a2: Any) -> bool:
    """Broadcastable to one shape, and equal there."""
    x = _arr(a1)
    y = _arr(a2, x)
    try:
        np.broadcast_shapes(x.shape, y.shape)
    except ValueError:
        return False
    return bool(fl.all(x == y))

# }}}


# {{{ sequences: interp, convolve, gradient, trapezoid, ediff1d, unwrap, digitize

def interp(x: Any, xp: Any, fp: Any, left: Any = None, right: Any = None,
           period: Any = None) -> Array:
    """Piecewise-linear interpolation of ``(xp, fp)`` at ``x`` (``numpy.interp``;
    ``xp`` increasing; ``period`` wraps as numpy does)."""
    xv = _float_of(_arr(x))
    xpv = _float_of(_arr(xp, xv)).astype(np.float64)
    fpv = _float_of(_arr(fp, xv))
    if xpv.ndim != 1 or fpv.ndim != 1 or xpv.shape != fpv.shape:
        raise ShapeError(f"interp: xp and fp must be 1-D of one length, got {xpv.shape} "
                         f"and {fpv.shape}")
    if xpv.size == 0:
        raise ValueError("interp: array of sample points is empty")
    xv = xv.astype(np.float64)
    if period is not None:
        if period == 0:
            raise ValueError("interp: period must be a non-zero value")
        period = abs(period)
        left = right = None
        xv, xpv = xv % period, xpv % period
        order = fl.argsort(xpv)
        xpv, fpv = xpv[order], fpv[order]
        xpv = fl.concat([xpv[-1:] - period, xpv, xpv[:1] + period])
        fpv = fl.concat([fpv[-1:], fpv, fpv[:1]])
    n = xpv.shape[0]
    if n == 1:
        lo_i = hi_i = fl.zeros(xv.shape, dtype=_INT64)
        slope_part = fl.zeros_like(xv)
    else:
        j = fl.searchsorted(xpv, xv, side="right")
        lo_i = fl.clip(j - 1, 0, n - 2)
        hi_i = lo_i + 1
        x0, x1 = xpv[lo_i], xpv[hi_i]
        slope_part = (xv - x0) / (x1 - x0)
    f0, f1 = fpv[lo_i], fpv[hi_i]
    y = fl.where(xv == xpv[hi_i], f1, f0 + (f1 - f0) * slope_part)
    first = fpv[0] if left is None else left
    last = fpv[n - 1] if right is None else right
    y = fl.where(xv < xpv[0], first, fl.where(xv > xpv[n - 1], last, y))
    return y.astype(fpv.dtype if fpv.dtype.kind == "c" else np.float64)


_MODES = ("full", "same", "valid")


def convolve(a: Any, v: Any, mode: str = "full") -> Array:
    """Discrete linear convolution of two 1-D arrays (``numpy.convolve``): every output
    element one fused sum over the shorter input (O(n m) work)."""
    x = _arr(a)
    y = _arr(v, x)
    x, y = (fl.reshape(t, (1,)) if t.ndim == 0 else t for t in (x, y))
    if x.ndim != 1 or y.ndim != 1:
        raise ShapeError(f"convolve: 1-D inputs only, got shapes {x.shape} and {y.shape}")
    if x.size == 0:
        raise ValueError("convolve: a cannot be empty")
    if y.size == 0:
        raise ValueError("convolve: v cannot be empty")
    if mode not in _MODES:
        raise ValueError(f"convolve: mode must be one of {_MODES}, not {mode!r}")
    if y.size > x.size:
        x, y = y, x
    n, m = x.size, y.size
    dt = np.result_type(x.dtype, y.dtype)
    pad = fl.zeros(m - 1, dtype=dt, device=x.device)
    padded = fl.concat([pad, x.astype(dt), pad])
    length = n + m - 1
    idx = fl.arange(length, dtype=_INT64)[:, None] + fl.arange(m, dtype=_INT64)[None, :]
    full = fl.sum(padded[idx] * y.astype(dt)[::-1][None, :], axis=1, dtype=dt)
    if mode == "full":
        return full
    if mode == "same":
        start = (m - 1) // 2
        return full[start:start + n]
    return full[m - 1:n]


def correlate(a: Any, v: Any, mode: str = "valid") -> Array:
    """Cross-correlation of two 1-D arrays, ``c[k] = sum_n a[n + k] conj(v[n])``
    (``numpy.correlate``)."""
    x = _arr(a)
    y = _arr(v, x)
    if mode not in _MODES:
        raise ValueError(f"correlate: mode must be one of {_MODES}, not {mode!r}")
    if x.ndim == 1 and y.ndim == 1 and y.size > x.size:
        # numpy correlates the longer one first and reverses (conjugates) the result:
        # the same numbers, but 'same' centres on the other input
        swapped = correlate(y, x, mode)[::-1]
        return fl.conj(swapped) if swapped.dtype.kind == "c" else swapped
    flipped = fl.conj(y)[::-1] if y.dtype.kind == "c" else y[::-1]
    return convolve(x, flipped, mode)


def _axes(axis: Any, ndim: int) -> list[int]:
    if axis is None:
        return list(range(ndim))
    items = [axis] if isinstance(axis, int) else list(axis)
    return [normalize_axis(ax, ndim) for ax in items]


def _sl(ndim: int, axis: int, part: slice) -> tuple[slice, ...]:
    return tuple(part if i == axis else slice(None) for i in range(ndim))


def _gradient_axis(f: Array, ax: int, h: Any, edge_order: int) -> Array:
    """One axis of ``gradient``: central differences inside, one-sided at the ends
    (first or second order); ``h`` a scalar spacing or the axis' coordinates."""
    nd = f.ndim
    n = f.shape[ax]

    def s(a: int | None, b: int | None) -> tuple[slice, ...]:
        return _sl(nd, ax, slice(a, b))

    if n < edge_order + 1:
        raise ValueError("gradient: each axis needs at least edge_order + 1 elements, got "
                         f"shape {f.shape}")
    shape = [1] * nd
    shape[ax] = -1
    if np.ndim(h) == 0 and not isinstance(h, Array):
        h = float(h)
        inner = (f[s(2, None)] - f[s(None, -2)]) / (2.0 * h)
        if edge_order == 1:
            a0 = (f[s(1, 2)] - f[s(0, 1)]) / h
            a1 = (f[s(-1, None)] - f[s(-2, -1)]) / h
        else:
            a0 = (-1.5 * f[s(0, 1)] + 2.0 * f[s(1, 2)] - 0.5 * f[s(2, 3)]) / h
            a1 = (0.5 * f[s(-3, -2)] - 2.0 * f[s(-2, -1)] + 1.5 * f[s(-1, None)]) / h
        return fl.concat([a0, inner, a1], axis=ax)
    xs = _float_of(_arr(h, f)).astype(np.float64)
    if xs.ndim != 1 or xs.shape[0] != n:
        raise ShapeError(f"gradient: coordinates of shape {xs.shape} do not match axis "
                         f"{ax} of length {n}")
    dx = fl.reshape(xs[1:] - xs[:-1], shape)
    d1, d2 = dx[s(None, -1)], dx[s(1, None)]
    inner = (-(d2 / (d1 * (d1 + d2))) * f[s(None, -2)] + ((d2 - d1) / (d1 * d2)) * f[s(1, -1)]
             + (d1 / (d2 * (d1 + d2))) * f[s(2, None)])
    if edge_order == 1:
        a0 = (f[s(1, 2)] - f[s(0, 1)]) / dx[s(0, 1)]
        a1 = (f[s(-1, None)] - f[s(-2, -1)]) / dx[s(-1, None)]
    else:
        p, q = dx[s(0, 1)], dx[s(1, 2)]
        a0 = (-(2 * p + q) / (p * (p + q)) * f[s(0, 1)] + (p + q) / (p * q) * f[s(1, 2)]
              - p / (q * (p + q)) * f[s(2, 3)])
        p, q = dx[s(-2, -1)], dx[s(-1, None)]
        a1 = (q / (p * (p + q)) * f[s(-3, -2)] - (p + q) / (p * q) * f[s(-2, -1)]
              + (2 * q + p) / (q * (p + q)) * f[s(-1, None)])
    return fl.concat([a0, inner, a1], axis=ax)


def gradient(f: Any, *varargs: Any, axis: Any = None, edge_order: int = 1) -> Any:
    """numpy's ``gradient``: second-order central differences inside, first- or
    second-order one-sided ones at the ends; a list for several axes, as numpy."""
    x = _arr(f)
    if edge_order not in (1, 2):
        raise ValueError("gradient: edge_order must be 1 or 2")
    axes = _axes(axis, x.ndim)
    if len(varargs) == 0:
        spacings: list[Any] = [1.0] * len(axes)
    elif len(varargs) == 1 and np.ndim(varargs[0]) == 0:
        spacings = [varargs[0]] * len(axes)
    elif len(varargs) == len(axes):
        spacings = list(varargs)
    else:
        raise TypeError(f"gradient: {len(varargs)} spacings for {len(axes)} axes")
    y = x if x.dtype.kind in "fc" else x.astype(np.float64)
    out = [_gradient_axis(y, ax, h, edge_order) for ax, h in zip(axes, spacings)]
    return out[0] if len(out) == 1 else tuple(out)


def trapezoid(y: Any, x: Any = None, dx: float = 1.0, axis: int = -1) -> Array:
    """Integral of ``y`` by the trapezoidal rule along ``axis`` (``numpy.trapezoid``)."""
    yv = _arr(y)
    ax = _axes(axis, yv.ndim)[0]
    nd = yv.ndim
    if x is None:
        d: Any = dx
    else:
        xv = _arr(x, yv)
        if xv.ndim == 1:
            shape = [1] * nd
            shape[ax] = -1
            d = fl.reshape(xv[1:] - xv[:-1], shape)
        else:
            d = xv[_sl(xv.ndim, ax, slice(1, None))] - xv[_sl(xv.ndim, ax, slice(None, -1))]
    pairs = yv[_sl(nd, ax, slice(1, None))] + yv[_sl(nd, ax, slice(None, -1))]
    return fl.sum(d * pairs / 2.0, axis=ax)


def ediff1d(ary: Any, to_end: Any = None, to_begin: Any = None) -> Array:
    """Differences of consecutive elements of the flattened array, with optional values
    before and after (``numpy.ediff1d``)."""
    x = fl.reshape(_arr(ary), (-1,))
    parts = [x[1:] - x[:-1]]
    dt = parts[0].dtype
    if to_begin is not None:
        parts.insert(0, fl.reshape(_arr(to_begin, x), (-1,)).astype(dt))
    if to_end is not None:
        parts.append(fl.reshape(_arr(to_end, x), (-1,)).astype(dt))
    return fl.concat(parts) if len(parts) > 1 else parts[0]


def unwrap(p: Any, discont: Any = None, axis: int = -1, *, period: float = 2 * np.pi) -> Array:
    """Unwrap by taking the period's complement of jumps larger than ``max(discont,
    period/2)`` along ``axis`` (``numpy.unwrap``, float input)."""
    x = _float_of(_arr(p))
    ax = _axes(axis, x.ndim)[0]
    nd = x.ndim
    half = period / 2
    discont = half if discont is None else max(discont, half)
    dd = x[_sl(nd, ax, slice(1, None))] - x[_sl(nd, ax, slice(None, -1))]
    mod = fl.remainder(dd + half, period) - half
    mod = fl.where((mod == -half) & (dd > 0), half, mod)
    correct = fl.where(fl.abs(dd) < discont, 0.0, mod - dd)
    total = fl.cumulative_sum(correct, axis=ax)
    head = x[_sl(nd, ax, slice(0, 1))]
    return fl.concat([head, x[_sl(nd, ax, slice(1, None))] + total], axis=ax)


def digitize(x: Any, bins: Any, right: bool = False) -> Array:
    """The bin of each value (``numpy.digitize``): ``bins`` increasing or decreasing."""
    xv = _arr(x)
    b = _arr(bins, xv)
    if b.ndim != 1:
        raise ShapeError(f"digitize: bins must be 1-D, got shape {b.shape}")
    if xv.dtype.kind == "c":
        raise TypeError("digitize: x may not be complex")
    if b.size > 1:
        up = bool(fl.all(b[1:] >= b[:-1]))
        if not up and not bool(fl.all(b[1:] <= b[:-1])):
            raise ValueError("digitize: bins must be monotonically increasing or decreasing")
    else:
        up = True
    if up:
        return fl.searchsorted(b, xv, side="left" if right else "right")
    return b.size - fl.searchsorted(b[::-1], xv, side="left" if right else "right")

# }}}


# {{{ vectors and polynomials

def cross(a: Any, b: Any, axisa: int = -1, axisb: int = -1, axisc: int = -1,
          axis: int | None = None) -> Array:
    """Cross product of 2- or 3-vectors (``numpy.cross``; 2-vectors only with a 3-vector
    partner, numpy 2's rule)."""
    x = _arr(a)
    y = _arr(b, x)
    if axis is not None:
        axisa = axisb = axisc = axis
    x, y = fl.moveaxis(x, axisa, -1), fl.moveaxis(y, axisb, -1)
    na, nb = x.shape[-1], y.shape[-1]
    if na not in (2, 3) or nb not in (2, 3):
        raise ShapeError("cross: incompatible dimensions for cross product (dimension must "
                         f"be 2 or 3), got {na} and {nb}")
    if na == 2 and nb == 2:
        raise ShapeError("cross: both vectors 2-D is deprecated in numpy 2; use "
                         "x[..., 0] * y[..., 1] - x[..., 1] * y[..., 0]")
    dt = np.result_type(x.dtype, y.dtype)
    x, y = x.astype(dt), y.astype(dt)
    a0, a1 = x[..., 0], x[..., 1]
    b0, b1 = y[..., 0], y[..., 1]
    a2 = x[..., 2] if na == 3 else fl.zeros_like(a0)
    b2 = y[..., 2] if nb == 3 else fl.zeros_like(b0)
    c = fl.stack([a1 * b2 - a2 * b1, a2 * b0 - a0 * b2, a0 * b1 - a1 * b0], axis=-1)
    return fl.moveaxis(c, -1, axisc if c.ndim > 0 else -1)


def _poly(p: Any, name: str, like: Array | None = None) -> Array:
    c = _arr(p, like)
    if c.ndim == 0:
        c = fl.reshape(c, (1,))
    if c.ndim != 1:
        raise ShapeError(f"{name}: coefficients must be 1-D, got shape {c.shape}")
    return c


def polyval(p: Any, x: Any) -> Array:
    """The polynomial with coefficients ``p`` (highest power first) at ``x``: Horner's
    scheme fused into one element-wise expression."""
    xv = _arr(x)
    c = _poly(p, "polyval", xv)
    dt = np.result_type(c.dtype, xv.dtype)
    y = fl.zeros_like(xv, dtype=dt)
    for i in range(c.shape[0]):
        y = y * xv + c[i]
    return y.astype(dt)


def _aligned(a1: Any, a2: Any, name: str) -> tuple[Array, Array]:
    x = _poly(a1, name)
    y = _poly(a2, name, x)
    dt = np.result_type(x.dtype, y.dtype)
    n = max(x.size, y.size)
    x, y = (fl.concat([fl.zeros(n - v.size, dtype=dt, device=x.device), v.astype(dt)])
            if v.size < n else v.astype(dt) for v in (x, y))
    return x, y


def polyadd(a1: Any, a2: Any) -> Array:
    """Sum of two polynomials (coefficients highest power first)."""
    x, y = _aligned(a1, a2, "polyadd")
    return x + y


def polysub(a1: Any, a2: Any) -> Array:
    """Difference of two polynomials (coefficients highest power first)."""
    x, y = _aligned(a1, a2, "polysub")
    return x - y


def polymul(a1: Any, a2: Any) -> Array:
    """Product of two polynomials: the convolution of their coefficients."""
    return convolve(_poly(a1, "polymul"), _poly(a2, "polymul"))


def polyder(p: Any, m: int = 1) -> Array:
    """The ``m``-th derivative's coefficients."""
    if m < 0:
        raise ValueError("polyder: order of derivative must be positive (see polyint)")
    c = _poly(p, "polyder")
    for _ in range(m):
        n = c.size - 1
        if n <= 0:
            return fl.zeros(1, dtype=c.dtype, device=c.device)
        c = c[:-1] * fl.arange(n, 0, -1, dtype=_INT64)  # (numpy's int64 factors promote)
    return c


def polyint(p: Any, m: int = 1, k: Any = None) -> Array:
    """The ``m``-th antiderivative's coefficients, integration constants ``k`` (zeros)."""
    if m < 0:
        raise ValueError("polyint: order of integral must be positive (see polyder)")
    consts = np.zeros(m) if k is None else np.atleast_1d(np.asarray(k, dtype=float))
    if consts.size == 1 and m > 1:
        consts = np.full(m, consts[0])
    if consts.size < m:
        raise ValueError("polyint: k must be a scalar or a rank-1 array of length 1 or > m")
    c = _float_of(_poly(p, "polyint"))
    for i in range(m):
        n = c.size
        c = fl.concat([c / fl.arange(n, 0, -1, dtype=np.float64),
                       fl.full(1, consts[i], dtype=c.dtype, device=c.device)])
    return c


_M1 = 0x5555555555555555
_M2 = 0x3333333333333333
_M4 = 0x0F0F0F0F0F0F0F0F


@_with_out
def bitwise_count(x: Any, /) -> Array:
    """The number of 1 bits in ``|x|`` (uint8), as ``numpy.bitwise_count``."""
    a = _arr(x)
    if a.dtype.kind not in "iub":
        raise TypeError(f"bitwise_count: integer input only, got dtype {a.dtype}")
    if a.dtype.kind == "b":
        return a.astype(np.uint8)
    width = a.dtype.itemsize * 8
    u = np.dtype(f"uint{width}")
    v = (fl.abs(a) if a.dtype.kind == "i" else a).astype(u)
    mask = (1 << width) - 1
    # (population count by bit fields: pairs, nibbles, bytes, then the bytes summed)
    v = v - ((v >> 1) & (_M1 & mask))
    v = (v & (_M2 & mask)) + ((v >> 2) & (_M2 & mask))
    v = (v + (v >> 4)) & (_M4 & mask)
    total = v & 0xFF
    for shift in range(8, width, 8):
        total = total + ((v >> shift) & 0xFF)
    return total.astype(np.uint8)


@_with_out
def matvec(x1: Any, x2: Any, /) -> Array:
    """Matrix-vector products over stacks: ``x1[..., i, :] @ x2[..., :]``."""
    a = _arr(x1)
    b = _arr(x2, a)
    if a.ndim < 2 or b.ndim < 1:
        raise ShapeError(f"matvec: needs a matrix and a vector, got shapes {a.shape}, "
                         f"{b.shape}")
    return fl.matmul(a, b[..., None])[..., 0]


@_with_out
def vecmat(x1: Any, x2: Any, /) -> Array:
    """Vector-matrix products over stacks: ``conj(x1[..., :]) @ x2[..., :, j]``."""
    a = _arr(x1)
    b = _arr(x2, a)
    if a.ndim < 1 or b.ndim < 2:
        raise ShapeError(f"vecmat: needs a vector and a matrix, got shapes {a.shape}, "
                         f"{b.shape}")
    if a.dtype.kind == "c":
        a = fl.conj(a)
    return fl.matmul(a[..., None, :], b)[..., 0, :]

# }}}


# {{{ dtype functions: numpy's own answers

def promote_types(type1: Any, type2: Any) -> np.dtype:
    """The smallest dtype both cast to safely (``numpy.promote_types``)."""
    return np.promote_types(type1, type2)


def min_scalar_type(a: Any, /) -> np.dtype:
    """numpy's ``min_scalar_type``: an array's own dtype; for a 0-d array or a scalar, the
    smallest dtype holding its value (one value read back for a 0-d device array)."""
    if isinstance(a, Array):
        return a.dtype if a.ndim else np.min_scalar_type(np.asarray(a))
    return np.min_scalar_type(a)


def common_type(*arrays: Any) -> type:
    """The inexact scalar type all ``arrays`` convert to (``numpy.common_type``)."""
    return np.common_type(*(np.empty(0, dtype=_dtype_of(x)) for x in arrays))


def _dtype_of(x: Any) -> np.dtype:
    dt = getattr(x, "dtype", None)
    return np.asarray(x).dtype if dt is None else np.dtype(dt)


def issubdtype(arg1: Any, arg2: Any) -> bool:
    """Whether ``arg1`` is lower in numpy's type hierarchy than ``arg2``."""
    return bool(np.issubdtype(arg1, arg2))

# }}}


__all__ = [
    "allclose", "argpartition", "array_equal", "array_equiv", "bitwise_count",
    "common_type", "convolve", "correlate", "cross", "digitize", "divmod", "ediff1d",
    "fix", "float_power", "gcd", "gradient", "i0", "interp", "intersect1d",
    "iscomplex", "iscomplexobj", "isneginf", "isposinf", "isreal", "isrealobj",
    "isscalar", "issubdtype", "lcm", "lexsort", "matvec", "min_scalar_type",
    "partition", "polyadd", "polyder", "polyint", "polymul", "polysub", "polyval",
    "promote_types", "real_if_close", "setdiff1d", "setxor1d", "sinc", "sort_complex",
    "spacing", "trapezoid", "union1d", "unique", "unwrap", "vecmat",
]
