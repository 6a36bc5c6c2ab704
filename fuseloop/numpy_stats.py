"""numpy's reductions and statistics beyond the Array API standard (issue 27).

``cumsum``, the ``nan*`` reductions, ``ptp``, ``average``, ``median``, the quantiles,
``cov`` and ``corrcoef``: numpy's signatures and result dtypes, built from fuseloop's lazy
operations (reductions, ``where``, the device scan and sort, gathers), so the data stays on
the device.  A few of numpy's errors depend on values (an all-NaN slice in ``nanargmax``,
weights summing to zero in ``average``): those read one boolean back from the device.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from .array import Array, _coerce
from .array_protocol import _finish
from .errors import ShapeError
from .ops import reductions as _red
from .ops.shape import moveaxis, normalize_axes, reshape

_F64 = np.dtype(np.float64)


def _has_nan(dt: np.dtype) -> bool:
    return dt.kind in "fc"


def _uf(name: str) -> Any:
    """fuseloop's element-wise function ``name`` (made at import in :mod:`.ufuncs`)."""
    from .ufuncs import FUNCTIONS

    return FUNCTIONS[name]


def _isnan(a: Array) -> Array:
    return _uf("isnan")(a)


def _where(c: Any, x: Any, y: Any) -> Array:
    from .ufuncs import where

    return where(c, x, y)


def _filled(a: Array, value: float) -> Array:
    """``a`` with its NaNs replaced by ``value`` (in ``a``'s dtype)."""
    return _where(_isnan(a), a.dtype.type(value), a)


# {{{ cumulative sums and products


def _cum(op: str, a: Any, axis: Any, dtype: Any, out: Any, name: str) -> Any:
    from .ops.scan import cumulative_prod, cumulative_sum

    a = _coerce(a)
    if axis is None:  # numpy's: the flattened array
        a, axis = reshape(a, (-1,)), 0
    f = cumulative_sum if op == "sum" else cumulative_prod
    return _finish(f(a, axis=axis, dtype=dtype), out, name)


def cumsum(a: Any, axis: Any = None, dtype: Any = None, out: Any = None) -> Any:
    """``numpy.cumsum``: running sums along ``axis`` (``None``: of the flattened array)."""
    return _cum("sum", a, axis, dtype, out, "cumsum")


def cumprod(a: Any, axis: Any = None, dtype: Any = None, out: Any = None) -> Any:
    """``numpy.cumprod``: running products along ``axis`` (``None``: flattened)."""
    return _cum("prod", a, axis, dtype, out, "cumprod")


def nancumsum(a: Any, axis: Any = None, dtype: Any = None, out: Any = None) -> Any:
    """``numpy.nancumsum``: ``cumsum`` with NaNs counted as 0."""
    a = _coerce(a)
    return _cum("sum", _filled(a, 0) if _has_nan(a.dtype) else a, axis, dtype, out,
                "nancumsum")


def nancumprod(a: Any, axis: Any = None, dtype: Any = None, out: Any = None) -> Any:
    """``numpy.nancumprod``: ``cumprod`` with NaNs counted as 1."""
    a = _coerce(a)
    return _cum("prod", _filled(a, 1) if _has_nan(a.dtype) else a, axis, dtype, out,
                "nancumprod")

# }}}


# {{{ NaN-ignoring reductions


def nansum(a: Any, axis: Any = None, dtype: Any = None, out: Any = None,
           keepdims: bool = False) -> Any:
    """``numpy.nansum``: the sum with NaNs counted as 0 (all-NaN: 0)."""
    a = _coerce(a)
    a = _filled(a, 0) if _has_nan(a.dtype) else a
    return _finish(_red.sum(a, axis=axis, dtype=dtype, keepdims=keepdims), out, "nansum")


def nanprod(a: Any, axis: Any = None, dtype: Any = None, out: Any = None,
            keepdims: bool = False) -> Any:
    """``numpy.nanprod``: the product with NaNs counted as 1."""
    a = _coerce(a)
    a = _filled(a, 1) if _has_nan(a.dtype) else a
    return _finish(_red.prod(a, axis=axis, dtype=dtype, keepdims=keepdims), out, "nanprod")


def _nan_extreme(a: Any, axis: Any, out: Any, keepdims: bool, largest: bool) -> Any:
    a = _coerce(a)
    name = "nanmax" if largest else "nanmin"
    f = _red.max if largest else _red.min
    if a.dtype.kind != "f":  # (complex: numpy's order is lexicographic; max/min decide)
        return _finish(f(a, axis=axis, keepdims=keepdims), out, name)
    nan = _isnan(a)
    m = f(_filled(a, -np.inf if largest else np.inf), axis=axis, keepdims=keepdims)
    # an all-NaN slice gives NaN (numpy warns)
    res = _where(_red.all(nan, axis=axis, keepdims=keepdims), a.dtype.type(np.nan), m)
    return _finish(res, out, name)


def nanmax(a: Any, axis: Any = None, out: Any = None, keepdims: bool = False) -> Any:
    """``numpy.nanmax``: the largest element ignoring NaNs (all-NaN slice: NaN)."""
    return _nan_extreme(a, axis, out, keepdims, True)


def nanmin(a: Any, axis: Any = None, out: Any = None, keepdims: bool = False) -> Any:
    """``numpy.nanmin``: the smallest element ignoring NaNs (all-NaN slice: NaN)."""
    return _nan_extreme(a, axis, out, keepdims, False)


def _nan_arg(a: Any, axis: Any, out: Any, keepdims: bool, largest: bool) -> Any:
    a = _coerce(a)
    name = "nanargmax" if largest else "nanargmin"
    f = _red.argmax if largest else _red.argmin
    if a.dtype.kind != "f":
        return _finish(f(a, axis=axis, keepdims=keepdims), out, name)
    nan = _isnan(a)
    # numpy raises on an all-NaN slice: one boolean read back decides
    if a.size and bool(_red.any(_red.all(nan, axis=axis))):
        raise ValueError(f"{name}: All-NaN slice encountered (shape {a.shape}, "
                         f"axis={axis})")
    res = f(_filled(a, -np.inf if largest else np.inf), axis=axis, keepdims=keepdims)
    return _finish(res, out, name)


def nanargmax(a: Any, axis: Any = None, out: Any = None, *, keepdims: bool = False) -> Any:
    """``numpy.nanargmax``: the first position of the largest non-NaN element."""
    return _nan_arg(a, axis, out, keepdims, True)


def nanargmin(a: Any, axis: Any = None, out: Any = None, *, keepdims: bool = False) -> Any:
    """``numpy.nanargmin``: the first position of the smallest non-NaN element."""
    return _nan_arg(a, axis, out, keepdims, False)


def _nan_moments(a: Array, axis: Any, dtype: Any, keepdims: bool
                 ) -> tuple[Array, Array, Array]:
    """(filled ``a`` in the accumulator dtype, non-NaN count, mean), reduced dims kept."""
    acc, _ = _red._mean_dtypes(a.dtype, dtype)
    nan = _isnan(a)
    cnt = _red.sum(~nan, axis=axis, dtype=np.int64, keepdims=keepdims)
    filled = _where(nan, 0, a).astype(acc)
    tot = _red.sum(filled, axis=axis, dtype=acc, keepdims=keepdims)
    # (numpy divides in the promoted dtype, then casts into the sum's)
    return filled, cnt, (tot / cnt).astype(acc)


def nanmean(a: Any, axis: Any = None, dtype: Any = None, out: Any = None,
            keepdims: bool = False) -> Any:
    """``numpy.nanmean``: the mean of the non-NaN elements (all-NaN slice: NaN)."""
    a = _coerce(a)
    if not _has_nan(a.dtype):
        return _finish(_red.mean(a, axis=axis, dtype=dtype, keepdims=keepdims), out,
                       "nanmean")
    _, _, avg = _nan_moments(a, axis, dtype, keepdims)
    return _finish(avg, out, "nanmean")


def nanvar(a: Any, axis: Any = None, dtype: Any = None, out: Any = None, ddof: Any = 0,
           keepdims: bool = False, *, correction: Any = None) -> Any:
    """``numpy.nanvar``: the variance of the non-NaN elements (no degrees of freedom
    left: NaN)."""
    ddof = _red._ddof(ddof, correction)
    a = _coerce(a)
    if not _has_nan(a.dtype):
        return _finish(_red.var(a, axis=axis, dtype=dtype, ddof=ddof, keepdims=keepdims),
                       out, "nanvar")
    return _finish(_nanvar(a, axis, dtype, ddof, keepdims), out, "nanvar")


def _nanvar(a: Array, axis: Any, dtype: Any, ddof: Any, keepdims: bool) -> Array:
    conj = _uf("conj")
    acc, res = _red._mean_dtypes(a.dtype, dtype)
    filled, cnt, avg = _nan_moments(a, axis, dtype, True)
    d = _where(_isnan(a), 0, filled - avg)
    sq = (d * conj(d)).real if acc.kind == "c" else d * d
    total = _red.sum(sq, axis=axis, dtype=sq.dtype, keepdims=keepdims)
    dof = cnt - ddof
    if not keepdims:
        dof = reshape(dof, total.shape)
    out = _where(dof > 0, total / dof, np.nan)
    want = np.dtype(res).type(0).real.dtype if acc.kind == "c" else res
    return out.astype(want)


def nanstd(a: Any, axis: Any = None, dtype: Any = None, out: Any = None, ddof: Any = 0,
           keepdims: bool = False, *, correction: Any = None) -> Any:
    """``numpy.nanstd``: the square root of ``nanvar``."""
    sqrt = _uf("sqrt")
    ddof = _red._ddof(ddof, correction)
    a = _coerce(a)
    if not _has_nan(a.dtype):
        return _finish(_red.std(a, axis=axis, dtype=dtype, ddof=ddof, keepdims=keepdims),
                       out, "nanstd")
    return _finish(sqrt(_nanvar(a, axis, dtype, ddof, keepdims)), out, "nanstd")


def ptp(a: Any, axis: Any = None, out: Any = None, keepdims: bool = False) -> Any:
    """``numpy.ptp``: the range (maximum minus minimum) along ``axis``."""
    a = _coerce(a)
    if a.dtype == np.bool_:
        raise TypeError("ptp: numpy's subtract does not take booleans; use "
                        "x.astype(int) first")
    res = _red.max(a, axis=axis, keepdims=keepdims) - _red.min(a, axis=axis,
                                                               keepdims=keepdims)
    return _finish(res, out, "ptp")

# }}}


# {{{ average


def _weights_like(a: Array, w: Array, axis: Any) -> Array:
    """``w`` broadcast to ``a``'s shape (numpy's rule: same shape, or the shape of the
    axes in ``axis``)."""
    if w.shape == a.shape:
        return w
    if axis is None:
        raise TypeError(f"average: axis must be specified when the shapes of a {a.shape} "
                        f"and weights {w.shape} differ")
    given = (axis,) if isinstance(axis, int | np.integer) else tuple(axis)
    axes = tuple(int(d) % a.ndim for d in given) if a.ndim else ()
    if w.shape != tuple(a.shape[d] for d in axes):
        raise ValueError(f"average: the shape of weights {w.shape} must be that of a "
                         f"{a.shape} along axis={axis}")
    from .ops.shape import broadcast_to, permute_dims

    w = permute_dims(w, tuple(int(i) for i in np.argsort(axes)))
    w = reshape(w, tuple(a.shape[d] if d in axes else 1 for d in range(a.ndim)))
    return broadcast_to(w, a.shape)


def average(a: Any, axis: Any = None, weights: Any = None, returned: bool = False, *,
            keepdims: bool = False) -> Any:
    """``numpy.average``: the (weighted) mean along ``axis``; ``returned`` also gives the
    sum of the weights."""
    a = _coerce(a)
    if weights is None:
        avg = _red.mean(a, axis=axis, keepdims=keepdims)
        if not returned:
            return avg
        from .creation import full

        scl = avg.dtype.type(a.size / max(avg.size, 1))
        return avg, full(avg.shape, scl, avg.dtype, a.device)
    w = _coerce(weights)
    if a.dtype.kind in "biu" and w.dtype.kind in "biu":
        dt = np.result_type(a.dtype, w.dtype, _F64)
    else:
        dt = np.result_type(a.dtype, w.dtype)
    wb = _weights_like(a, w, axis)
    scl = _red.sum(wb, axis=axis, dtype=dt, keepdims=keepdims)
    # numpy's check reads the sums: one boolean back from the device
    if bool(_red.any(scl == 0)):
        raise ZeroDivisionError("average: weights sum to zero, can't be normalized")
    avg = _red.sum(a.astype(dt) * wb.astype(dt), axis=axis, dtype=dt,
                   keepdims=keepdims) / scl
    return (avg, scl) if returned else avg

# }}}


# {{{ median and quantiles


def _rows(a: Array, axis: Any) -> tuple[Array, tuple[int, ...]]:
    """``a`` with the reduced ``axis`` (None: all) moved last and merged into one."""
    axes = normalize_axes(axis, a.ndim)
    rest = tuple(d for d in range(a.ndim) if d not in axes)
    from .ops.shape import permute_dims

    moved = permute_dims(a, rest + axes) if a.ndim else a
    kept = tuple(a.shape[d] for d in rest)
    return reshape(moved, (*kept, math.prod(a.shape[d] for d in axes))), axes


def _restore(r: Array, a: Array, axes: tuple[int, ...], lead: tuple[int, ...],
             keepdims: bool) -> Array:
    """``r`` of shape ``(*kept, k)`` to numpy's ``lead + kept`` (with ``keepdims``: the
    reduced axes as 1)."""
    r = moveaxis(r, -1, 0)
    kept = [1 if d in axes else n for d, n in enumerate(a.shape)] if keepdims else \
        [n for d, n in enumerate(a.shape) if d not in axes]
    return reshape(r, (*lead, *kept))


# numpy's continuous methods of Hyndman and Fan: (alpha, beta) of the virtual index
# n q + alpha + q (1 - alpha - beta) - 1 ("linear" is alpha = beta = 1, as q (n - 1))
_ALPHA_BETA = {"interpolated_inverted_cdf": (0.0, 1.0), "hazen": (0.5, 0.5),
               "weibull": (0.0, 0.0), "median_unbiased": (1 / 3, 1 / 3),
               "normal_unbiased": (3 / 8, 3 / 8)}
_DISCRETE = ("inverted_cdf", "averaged_inverted_cdf", "closest_observation")
_METHODS = ("linear", "lower", "higher", "nearest", "midpoint", *_ALPHA_BETA, *_DISCRETE)


def _positions(q: np.ndarray, n: Any, method: str) -> tuple[Any, Any, Any]:
    """(lower index, upper index, weight of the upper) for quantiles ``q`` of ``n``
    sorted values (``n``: an int, or a device array of per-row counts)."""
    floor, ceil, rint, maximum, minimum = map(_uf, ("floor", "ceil", "rint", "maximum",
                                                   "minimum"))
    host = not isinstance(n, Array)
    fl_, cl_, rn = (np.floor, np.ceil, np.rint) if host else (floor, ceil, rint)
    v = q * (n - 1)
    top = max(n - 1, 0) if host else maximum(n - 1, 0)
    lo, hi = fl_(v), cl_(v)
    t: Any = v - lo
    if method in _ALPHA_BETA:  # (out of range: both ends clipped to the same element)
        alpha, beta = _ALPHA_BETA[method]
        v = _times(n, q) + (alpha + q * (1 - alpha - beta)) - 1
        lo = fl_(v)
        hi, t = lo + 1, v - lo
    elif method in _DISCRETE:
        lo, hi, t = _discrete(q, n, method, fl_, host)
    elif method == "lower":
        hi, t = lo, 0.0
    elif method == "higher":
        lo, t = hi, 0.0
    elif method == "nearest":  # (numpy rounds half to even)
        lo = hi = rn(v)
        t = 0.0
    elif method == "midpoint":
        t = _where(hi > lo, 0.5, 0.0) if not host else np.where(hi > lo, 0.5, 0.0)
    if host:
        return (np.clip(lo, 0, top).astype(np.int64), np.clip(hi, 0, top).astype(np.int64),
                t)
    return (minimum(maximum(lo, 0), top).astype(np.int64),
            minimum(maximum(hi, 0), top).astype(np.int64), t)


def _times(n: Any, q: np.ndarray) -> Any:
    """``n q``, rounded before any addition: a device's fused multiply-add would move a
    virtual index off a whole number that numpy's two roundings land on."""
    return n * q if not isinstance(n, Array) else (n * q).eval()


def _discrete(q: np.ndarray, n: Any, method: str, fl_: Any, host: bool
              ) -> tuple[Any, Any, Any]:
    """numpy's discontinuous methods: (lower, upper, weight) before clipping."""
    sel = np.where if host else _where
    v = _times(n, q) - (1.5 if method == "closest_observation" else 1)
    lo = fl_(v)
    exact = (v - lo) == 0
    if method == "averaged_inverted_cdf":  # the mean of two where n q is whole
        return lo, lo + 1, sel(exact, 0.5, 1.0)
    if method == "closest_observation":  # (ties: the even order statistic, 1-based)
        exact = exact & (lo % 2 != 0)
    at = sel(exact, lo, lo + 1)
    return at, at, 0.0


def _gather(s: Array, idx: Any) -> Array:
    from .ops.indexing import take
    from .ops.manipulation import take_along_axis
    from .ops.shape import broadcast_to

    if isinstance(idx, np.ndarray):
        return take(s, idx, axis=-1)
    return take_along_axis(s, broadcast_to(idx, (*s.shape[:-1], idx.shape[-1])), axis=-1)


def _lerp(lo: Array, hi: Array, t: Any, dt: np.dtype) -> Array:
    """numpy's ``_lerp``: ``lo + (hi - lo) t``, from ``hi`` where ``t >= 0.5``."""
    if isinstance(t, float) and t == 0.0:
        return lo.astype(dt)
    lo, hi = lo.astype(dt), hi.astype(dt)
    tt = t.astype(dt) if isinstance(t, Array) else np.asarray(t, dt)
    d = hi - lo
    return _where(tt >= 0.5, hi - d * (1 - tt), lo + d * tt)


def _quantile(a: Any, q: Any, axis: Any, out: Any, method: str, keepdims: bool,
              nan_aware: bool, name: str, scale: float) -> Any:
    a = _coerce(a)
    if method not in _METHODS:
        raise ValueError(f"{name}: {method!r} is not a valid method; use one of "
                         f"{', '.join(_METHODS)}")
    qh = np.asarray(q.get() if isinstance(q, Array) else q)
    qf = qh.astype(np.float64) / scale
    if qh.size and not (np.all(qf >= 0) and np.all(qf <= 1)):
        raise ValueError(f"{name}: quantiles must be in the range [0, {scale:g}], "
                         f"got {qh}")
    if a.dtype.kind == "c":
        raise TypeError(f"{name}: a complex array ({a.dtype}) has no order; pass its .real")
    # the result dtype is numpy's own answer for this input dtype, q and method
    probe: Any = np.percentile if scale == 100.0 else np.quantile
    dt = probe(np.zeros(1, a.dtype), q if not isinstance(q, Array) else qh,
               method=method).dtype
    rows, axes = _rows(a, axis)
    if rows.shape[-1] == 0:  # (numpy's quantile raises IndexError, nanquantile gives NaN)
        raise ShapeError(f"{name}: the reduced axes of shape {a.shape} are empty")
    from .ops.sorting import sort

    s = sort(rows, axis=-1)  # (NaNs last)
    flat = qf.reshape(-1)
    if nan_aware and _has_nan(a.dtype):
        n: Any = _red.sum(~_isnan(rows), axis=-1, dtype=np.int64, keepdims=True)
        lo, hi, t = _positions(flat, n, method)
        r = _lerp(_gather(s, lo), _gather(s, hi), t, dt)
        r = _where(n == 0, np.nan, r)  # (an all-NaN row: NaN, as numpy, which warns)
    else:
        lo, hi, t = _positions(flat, rows.shape[-1], method)
        r = _lerp(_gather(s, lo), _gather(s, hi), t, dt)
        if _has_nan(a.dtype):  # any NaN in a row makes its quantiles NaN
            r = _where(_isnan(s[..., -1:]), np.nan, r)
    return _finish(_restore(r.astype(dt), a, axes, qh.shape, keepdims), out, name)


def quantile(a: Any, q: Any, axis: Any = None, out: Any = None, overwrite_input: bool = False,
             method: str = "linear", keepdims: bool = False) -> Any:
    """``numpy.quantile`` (numpy's 13 methods), by a sort on the device; ``q`` is read
    on the host."""
    return _quantile(a, q, axis, out, method, keepdims, False, "quantile", 1.0)


def percentile(a: Any, q: Any, axis: Any = None, out: Any = None,
               overwrite_input: bool = False, method: str = "linear",
               keepdims: bool = False) -> Any:
    """``numpy.percentile``: ``quantile`` of ``q / 100``."""
    return _quantile(a, q, axis, out, method, keepdims, False, "percentile", 100.0)


def nanquantile(a: Any, q: Any, axis: Any = None, out: Any = None,
                overwrite_input: bool = False, method: str = "linear",
                keepdims: bool = False) -> Any:
    """``numpy.nanquantile``: ``quantile`` of the non-NaN elements (all-NaN: NaN)."""
    return _quantile(a, q, axis, out, method, keepdims, True, "nanquantile", 1.0)


def nanpercentile(a: Any, q: Any, axis: Any = None, out: Any = None,
                  overwrite_input: bool = False, method: str = "linear",
                  keepdims: bool = False) -> Any:
    """``numpy.nanpercentile``: ``nanquantile`` of ``q / 100``."""
    return _quantile(a, q, axis, out, method, keepdims, True, "nanpercentile", 100.0)


def _median(a: Any, axis: Any, out: Any, keepdims: bool, nan_aware: bool) -> Any:
    from .ops.sorting import sort

    name = "nanmedian" if nan_aware else "median"
    a = _coerce(a)
    dt = np.median(np.zeros(1, a.dtype)).dtype
    rows, axes = _rows(a, axis)
    if rows.shape[-1] == 0:  # numpy: NaN (with a warning)
        from .creation import full

        r = full((*rows.shape[:-1], 1), np.nan, dt, a.device)
        return _finish(_restore(r, a, axes, (), keepdims), out, name)
    s = sort(rows, axis=-1)
    if nan_aware and _has_nan(a.dtype):
        n: Any = _red.sum(~_isnan(rows), axis=-1, dtype=np.int64, keepdims=True)
        lo, hi = _gather(s, (n - 1) // 2), _gather(s, n // 2)
    else:
        m = rows.shape[-1]
        lo, hi = s[..., (m - 1) // 2:(m - 1) // 2 + 1], s[..., m // 2:m // 2 + 1]
    # numpy's median is the mean of the middle two
    r = (lo.astype(dt) + hi.astype(dt)) / dt.type(2)
    if _has_nan(a.dtype):
        bad = _isnan(s[..., -1:]) if not nan_aware else (n == 0)
        r = _where(bad, np.nan, r)
    return _finish(_restore(r.astype(dt), a, axes, (), keepdims), out, name)


def median(a: Any, axis: Any = None, out: Any = None, overwrite_input: bool = False,
           keepdims: bool = False) -> Any:
    """``numpy.median`` (a NaN in a slice makes it NaN), by a sort on the device."""
    return _median(a, axis, out, keepdims, False)


def nanmedian(a: Any, axis: Any = None, out: Any = None, overwrite_input: bool = False,
              keepdims: bool = False) -> Any:
    """``numpy.nanmedian``: the median of the non-NaN elements (all-NaN: NaN)."""
    return _median(a, axis, out, keepdims, True)

# }}}


# {{{ covariance


def _as_rows(x: Any, rowvar: bool, dt: np.dtype) -> Array:
    from .ops.manipulation import atleast_2d

    x = _coerce(x)
    if x.ndim > 2:
        raise ShapeError(f"cov: m and y take at most 2 dimensions, got shape {x.shape}")
    x = atleast_2d(x).astype(dt)
    return x.T if not rowvar and x.shape[0] != 1 else x


def cov(m: Any, y: Any = None, rowvar: bool = True, bias: bool = False, ddof: Any = None,
        fweights: Any = None, aweights: Any = None, *, dtype: Any = None) -> Array:
    """``numpy.cov``: the covariance matrix of the variables in the rows of ``m`` (and
    ``y``); the weights' values are not checked (numpy's negative-weight errors)."""
    from .ops.linalg import matmul
    from .ops.shape import squeeze

    conj = _uf("conj")
    mm = _coerce(m)
    if dtype is None:
        dt = np.result_type(mm.dtype, _F64) if y is None else \
            np.result_type(mm.dtype, _coerce(y).dtype, _F64)
    else:
        dt = np.dtype(dtype)
    x = _as_rows(mm, rowvar, dt)
    if y is not None:
        from .ops.manipulation import concat

        x = concat([x, _as_rows(y, rowvar, dt)], axis=0)
    if ddof is None:
        ddof = 0 if bias else 1
    n = x.shape[1]
    w: Array | None = None
    for given in (fweights, aweights):
        if given is not None:
            g = _coerce(given).astype(_F64)
            if g.shape != (n,):
                raise ShapeError(f"cov: weights of shape {g.shape} do not match the "
                                 f"{n} observations")
            w = g if w is None else w * g
    if w is None:
        avg = _red.mean(x, axis=1, keepdims=True)
        fact: Any = max(n - ddof, 0)
        xw = x
    else:
        wsum = _red.sum(w)
        avg = _red.sum(x * w.astype(dt), axis=1, keepdims=True) / wsum.astype(dt)
        if ddof == 0:
            fact = wsum
        elif aweights is None:
            fact = wsum - ddof
        else:
            fact = wsum - ddof * _red.sum(w * _coerce(aweights)) / wsum
        fact = _where(fact > 0, fact, 0.0).astype(dt)
        xw = (x - avg) * w.astype(dt)
    # the centred rows are computed first (a kernel of their own): fused, the means run
    # first anyway (fuseloop.expr.contraction.operand_producers) and the centring is
    # redone in every tile fill, 8-10% slower at 2000 x 300 on the CPU
    d = (x - avg).eval()
    xw = d if w is None else xw.eval()
    c = matmul(d, conj(xw).T if dt.kind == "c" else xw.T) / fact
    return squeeze(c) if c.shape == (1, 1) else c


def corrcoef(x: Any, y: Any = None, rowvar: bool = True, *, dtype: Any = None) -> Array:
    """``numpy.corrcoef``: Pearson correlation coefficients, clipped to [-1, 1]."""
    from .ops.shape import diagonal

    sqrt = _uf("sqrt")
    c = cov(x, y, rowvar, dtype=dtype)
    if c.ndim == 0:
        return c / c
    sd = sqrt(diagonal(c).real) if c.dtype.kind == "c" else sqrt(diagonal(c))
    c = c / sd[:, None] / sd[None, :]
    if c.dtype.kind == "c":
        return c
    from .ops.manipulation import clip

    return clip(c, -1, 1)

# }}}


__all__ = ["average", "corrcoef", "cov", "cumprod", "cumsum", "median", "nanargmax",
           "nanargmin", "nancumprod", "nancumsum", "nanmax", "nanmean", "nanmedian", "nanmin",
           "nanpercentile", "nanprod", "nanquantile", "nanstd", "nansum", "nanvar",
           "percentile", "ptp", "quantile"]
