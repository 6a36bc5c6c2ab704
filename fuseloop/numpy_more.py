"""numpy's remaining array functions (issue 27): window functions, ``fromfunction``,
multi-dimensional histograms, ``put_along_axis``, ``piecewise``, ``apply_along_axis``,
polynomial fitting and division, ``unpackbits``, memory-overlap queries and order helpers.

All of them compute on the device with fuseloop's lazy operations.  What numpy gives as
host values stays on the host: bin edges of ``histogram2d``/``histogramdd`` (numpy
arrays, as :func:`fuseloop.histogram`'s), ``polyfit``'s rank, ``einsum_path``'s plan.
``roots`` (and ``poly`` of a square matrix) need the eigenvalues of a non-symmetric
matrix, for which fuseloop has no device algorithm: they run numpy on the host and warn
(:class:`~fuseloop.errors.HostFallbackWarning`), as fl.linalg's host fallbacks do.
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Callable
from typing import Any

import numpy as np

import fuseloop as fl

from .array import Array, _coerce
from .errors import AxisError, DTypeError, HostFallbackWarning, ShapeError

_INTP = np.dtype(np.intp)


def _arr(x: Any, like: Array | None = None) -> Array:
    """``x`` as a device Array (host data goes to ``like``'s device, else the default)."""
    x = _coerce(x)
    if isinstance(x, Array):
        return x
    return fl.asarray(np.asarray(x), device=None if like is None else like.device)


def _axis(axis: int, ndim: int) -> int:
    if not -ndim <= axis < ndim:
        raise AxisError(f"axis {axis} is out of bounds for an array of dimension {ndim}")
    return axis % ndim


def _host_fallback(name: str) -> None:
    warnings.warn(f"fl.{name} runs on the host through numpy (copies to and from the "
                  "device): fuseloop has no device algorithm for the eigenvalues of a "
                  "non-symmetric matrix", HostFallbackWarning, stacklevel=3)


# {{{ window functions

def _window_length(M: Any) -> float:
    # numpy computes in float64 whatever M's type (np.array([0.0, M]))
    return float(np.array([0.0, M])[1])


def _symmetric_n(M: float, device: Any) -> Array:
    """``arange(1 - M, M, 2)`` in float64: the positions numpy's cosine windows use."""
    return fl.arange(1 - M, M, 2, dtype=np.float64, device=device)


def _short_window(M: float, device: Any) -> Array | None:
    if M < 1:
        return fl.zeros((0,), dtype=np.float64, device=device)
    if M == 1:
        return fl.ones((1,), dtype=np.float64, device=device)
    return None


def bartlett(M: Any, *, device: Any = None) -> Array:
    """The Bartlett (triangular) window of ``M`` points, float64 (``numpy.bartlett``)."""
    m = _window_length(M)
    short = _short_window(m, device)
    if short is not None:
        return short
    n = _symmetric_n(m, device)
    return fl.where(n <= 0, 1 + n / (m - 1), 1 - n / (m - 1))


def _cosine_window(M: Any, terms: tuple[float, ...], device: Any) -> Array:
    """``sum(terms[k] * cos(k * pi * n / (M - 1)))`` over numpy's symmetric positions."""
    m = _window_length(M)
    short = _short_window(m, device)
    if short is not None:
        return short
    n = _symmetric_n(m, device)
    out: Any = terms[0]
    for k, c in enumerate(terms[1:], start=1):
        out = out + c * fl.cos(k * np.pi * n / (m - 1))
    return out


def blackman(M: Any, *, device: Any = None) -> Array:
    """The Blackman window of ``M`` points, float64 (``numpy.blackman``)."""
    return _cosine_window(M, (0.42, 0.5, 0.08), device)


def hamming(M: Any, *, device: Any = None) -> Array:
    """The Hamming window of ``M`` points, float64 (``numpy.hamming``)."""
    return _cosine_window(M, (0.54, 0.46), device)


def hanning(M: Any, *, device: Any = None) -> Array:
    """The Hann window of ``M`` points, float64 (``numpy.hanning``)."""
    return _cosine_window(M, (0.5, 0.5), device)


def kaiser(M: Any, beta: Any, *, device: Any = None) -> Array:
    """The Kaiser window of ``M`` points and shape ``beta``, float64 (``numpy.kaiser``):
    ``i0(beta * sqrt(1 - ((n - alpha) / alpha)**2)) / i0(beta)``."""
    m, b = _window_length(M), float(beta)
    if m == 1:
        return fl.ones((1,), dtype=np.float64, device=device)
    n = fl.arange(0, m, dtype=np.float64, device=device)
    alpha = (m - 1) / 2.0
    return fl.i0(b * fl.sqrt(1 - ((n - alpha) / alpha) ** 2.0)) / float(np.i0(b))

# }}}


def fromfunction(function: Callable[..., Any], shape: Any, *, dtype: Any = float,
                 like: Any = None, device: Any = None, **kwargs: Any) -> Any:
    """``function(*indices)``: called once with one fuseloop index array per axis (each of
    the full ``shape``, in ``dtype``), as ``numpy.fromfunction``; its result is returned
    as is."""
    if device is None and isinstance(like, Array):
        device = like.device
    dims = tuple(int(d) for d in shape)
    grids = fl.indices(dims, dtype=dtype, sparse=True, device=device)
    return function(*(fl.broadcast_to(g, dims) for g in grids), **kwargs)


# {{{ histograms

def _outer_edges(lo: Any, hi: Any, given: Any, what: str) -> tuple[Any, Any]:
    """numpy's range of one histogram axis: ``given`` checked, else the data's extremes
    (``lo``/``hi``: numpy scalars, None for no data), widened by 0.5 when equal."""
    if given is not None:
        first, last = given
        if first > last:
            raise ValueError("max must be larger than min in range parameter.")
        if not (np.isfinite(first) and np.isfinite(last)):
            raise ValueError(f"supplied range of [{first}, {last}] is not finite")
    elif lo is None:
        first, last = 0, 1
    else:
        first, last = lo, hi
        if not (np.isfinite(first) and np.isfinite(last)):
            raise ValueError(f"autodetected range of [{first}, {last}] {what}is not finite")
    if first == last:
        first, last = first - 0.5, last + 0.5
    return first, last


def _extremes(cols: list[Array]) -> list[tuple[Any, Any]]:
    """(min, max) of each non-empty column as numpy scalars: one kernel, one read."""
    if not cols or cols[0].size == 0:
        return [(None, None)] * len(cols)
    found = fl.compute(*[fl.min(c) for c in cols], *[fl.max(c) for c in cols])
    vals = [r.get()[()] for r in found]
    return list(zip(vals[:len(cols)], vals[len(cols):]))


def histogram_bin_edges(a: Any, bins: Any = 10, range: Any = None,
                        weights: Any = None) -> Array:
    """numpy's ``histogram_bin_edges`` of the flattened ``a``, as a fuseloop array.

    A bin count takes the range from ``a``'s minimum and maximum (one reduction, read
    back); explicit edges are checked as numpy does.  numpy's estimators by name
    (``bins="auto"``, ``"fd"``, ...) need the data's spread: ``a`` is read back and numpy
    computes the edges on the host (with a HostFallbackWarning)."""
    x = fl.reshape(_arr(a), (-1,))
    if x.dtype.kind not in "iubf":
        raise DTypeError(f"histogram_bin_edges takes real numbers, got dtype {x.dtype}")
    if isinstance(bins, str):
        warnings.warn(f"fl.histogram_bin_edges(bins={bins!r}) reads the data back and lets "
                      "numpy choose the bins on the host", HostFallbackWarning, stacklevel=2)
        w = None if weights is None else np.asarray(_arr(weights).get())
        edges = np.histogram_bin_edges(x.get(), bins, range=range, weights=w)
    else:
        if isinstance(bins, Array):
            bins = bins.get()
        limits = range
        if np.ndim(bins) == 0 and range is None and x.size:
            ((lo, hi),) = _extremes([x])
            if not (math.isfinite(lo) and math.isfinite(hi)):
                raise ValueError(f"autodetected range of [{lo}, {hi}] is not finite")
            limits = (lo, hi)
        # (numpy's own edges: an empty array of a's dtype carries the precision)
        edges = np.histogram_bin_edges(np.empty(0, x.dtype), bins, range=limits)
    return fl.asarray(edges, device=x.device)


def _sample_columns(sample: Any) -> list[Array]:
    """numpy's reading of ``histogramdd``'s sample: an (N, D) array, or D arrays of N."""
    if isinstance(sample, Array | np.ndarray) and np.ndim(sample) == 2:
        s = _arr(sample)
        return [s[:, i] for i in builtins_range(s.shape[1])]
    if isinstance(sample, Array | np.ndarray) and np.ndim(sample) <= 1:
        return [fl.reshape(_arr(sample), (-1,))]
    cols = [fl.reshape(_arr(c), (-1,)) for c in sample]
    if len({c.shape for c in cols}) > 1:
        raise ShapeError(f"histogramdd: the sample's arrays differ in length "
                         f"({[c.shape[0] for c in cols]})")
    dt = fl.result_type(*cols)
    return [c.astype(dt, copy=False) for c in cols]


builtins_range = range  # (the histogram functions' argument is named range, as numpy's)


def _axis_edges(i: int, b: Any, extremes: tuple[Any, Any], given: Any) -> np.ndarray:
    if isinstance(b, Array):
        b = b.get()
    if np.ndim(b) == 0:
        if b < 1:
            raise ValueError(f"`bins[{i}]` must be positive, when an integer")
        try:
            n = int(np.asarray(b).__index__())
        except TypeError:
            raise TypeError(f"`bins[{i}]` must be an integer, when a scalar") from None
        first, last = _outer_edges(*extremes, given, "")
        return np.linspace(first, last, n + 1)
    if np.ndim(b) == 1:
        edges = np.asarray(b)
        if np.any(edges[:-1] > edges[1:]):
            raise ValueError(f"`bins[{i}]` must be monotonically increasing, when an array")
        return edges
    raise ValueError(f"`bins[{i}]` must be a scalar or 1d array")


def histogramdd(sample: Any, bins: Any = 10, range: Any = None, density: Any = None,
                weights: Any = None) -> tuple[Array, list[np.ndarray]]:
    """numpy's ``histogramdd``: ``(hist, edges)`` with ``hist`` a float64 device array of
    shape ``(len(edges[0]) - 1, ...)`` and ``edges`` numpy arrays (one per axis).

    Each axis's bin is a binary search over its edges (``searchsorted``, the last bin
    closed); the bins' flat index is counted by one ``bincount`` (with ``weights``)."""
    cols = _sample_columns(sample)
    D = len(cols)
    try:
        if len(bins) != D:
            raise ValueError("The dimension of bins must be equal to the dimension of the "
                             "sample x.")
    except TypeError:
        bins = D * [bins]
    if range is None:
        range = (None,) * D
    elif len(range) != D:
        raise ValueError("range argument must have one entry per dimension")
    need = [i for i in builtins_range(D) if np.ndim(bins[i]) == 0 and range[i] is None]
    found = dict(zip(need, _extremes([cols[i] for i in need])))
    edges = [_axis_edges(i, bins[i], found.get(i, (None, None)), range[i])
             for i in builtins_range(D)]
    nbin = [len(e) + 1 for e in edges]  # (one outlier bin each side)
    dev = cols[0].device
    flat: Any = 0
    for i, (c, e) in enumerate(zip(cols, edges)):
        k = fl.searchsorted(fl.asarray(e, device=dev), c, side="right")
        k = k - (c == e[-1]).astype(_INTP)  # (the last bin includes its right edge)
        flat = flat * nbin[i] + k
    if not isinstance(flat, Array):
        flat = fl.zeros((0,), dtype=_INTP, device=dev)
    w = None if weights is None else fl.reshape(_arr(weights, cols[0]), (-1,))
    hist = fl.bincount(flat, weights=w, minlength=math.prod(nbin))
    hist = fl.reshape(hist, tuple(nbin)).astype(np.float64)
    hist = hist[(slice(1, -1),) * D]
    if density:
        total = fl.sum(hist)
        for i in builtins_range(D):
            shape = [1] * D
            shape[i] = nbin[i] - 2
            hist = hist / fl.asarray(np.diff(edges[i]).reshape(shape), device=dev)
        hist = hist / total
    return hist, edges


def histogram2d(x: Any, y: Any, bins: Any = 10, range: Any = None, density: Any = None,
                weights: Any = None) -> tuple[Array, np.ndarray, np.ndarray]:
    """numpy's ``histogram2d``: ``(hist, xedges, yedges)`` through :func:`histogramdd`."""
    if len(x) != len(y):
        raise ValueError("x and y must have the same length.")
    try:
        N = len(bins)
    except TypeError:
        N = 1
    if N not in (1, 2):
        edges = bins.get() if isinstance(bins, Array) else np.asarray(bins)
        bins = [edges, edges]
    hist, edges2 = histogramdd([x, y], bins, range, density, weights)
    return hist, edges2[0], edges2[1]

# }}}


# {{{ placing and applying

def put_along_axis(arr: Array, indices: Any, values: Any, axis: int | None) -> None:
    """``arr[...along axis at indices] = values`` in place (``numpy.put_along_axis``): one
    scatter; negative indices count from the end, out-of-range ones raise."""
    if not isinstance(arr, Array):
        raise TypeError(f"put_along_axis writes in place: needs a fuseloop array, not "
                        f"{type(arr).__name__}")
    idx = _arr(indices, arr)
    if idx.dtype.kind not in "iu":
        raise IndexError("`indices` must be an integer array")
    target = arr
    if axis is None:
        if idx.ndim != 1:
            raise ValueError("when axis=None, `indices` must have a single dimension.")
        target, ax = fl.reshape(arr, (-1,)), 0
    else:
        ax = _axis(axis, arr.ndim)
    if idx.ndim != target.ndim:
        raise ValueError("`indices` and `arr` must have the same number of dimensions")
    n = target.shape[ax]
    idx = fl.where(idx < 0, idx + n, idx).astype(_INTP)
    fancy = []
    for dim, size in enumerate(target.shape):
        if dim == ax:
            fancy.append(idx)
        else:
            shape = (1,) * dim + (size,) + (1,) * (target.ndim - dim - 1)
            fancy.append(fl.reshape(fl.arange(size, dtype=_INTP, device=arr.device), shape))
    # (the index arrays broadcast together, as numpy's fancy index does)
    shape = np.broadcast_shapes(*(f.shape for f in fancy))
    vals = fl.broadcast_to(_arr(values, arr).astype(arr.dtype), shape)
    target[tuple(fl.broadcast_to(f, shape) for f in fancy)] = vals


def piecewise(x: Any, condlist: Any, funclist: Any, *args: Any, **kw: Any) -> Array:
    """numpy's ``piecewise``: where ``condlist[i]`` holds, ``funclist[i]`` (a callable
    given ``x`` and ``*args, **kw``, or a value); one more function than conditions
    covers where none holds; a later condition wins.  The result has ``x``'s dtype.

    Unlike numpy, each callable is called once with the whole of ``x`` (not with the
    selected elements) and the results are merged with ``where``, in one fused kernel:
    functions must be element-wise."""
    xa = _arr(x)
    n2 = len(funclist)
    single = (np.isscalar(condlist) or isinstance(condlist, bool)
              or (isinstance(condlist, Array) and condlist.ndim == xa.ndim)
              or (not isinstance(condlist, Array) and xa.ndim != 0
                  and not isinstance(condlist[0], list | np.ndarray | Array)))
    conds = [condlist] if single else list(condlist)
    masks = [fl.broadcast_to(_arr(c, xa).astype(bool), xa.shape) for c in conds]
    if len(masks) == n2 - 1:
        none = masks[0] if masks else fl.zeros(xa.shape, dtype=bool, device=xa.device)
        for m in masks[1:]:
            none = none | m
        masks.append(~none)
    elif len(masks) != n2:
        raise ValueError(f"with {len(masks)} condition(s), either {len(masks)} or "
                         f"{len(masks) + 1} functions are expected")
    y: Any = fl.zeros_like(xa)
    for mask, func in zip(masks, funclist):
        value = func(xa, *args, **kw) if callable(func) else func
        y = fl.where(mask, value, y)
    return y.astype(xa.dtype, copy=False)


def apply_along_axis(func1d: Callable[..., Any], axis: int, arr: Any, *args: Any,
                     **kwargs: Any) -> Array:
    """numpy's ``apply_along_axis``: ``func1d`` called (in Python) on each 1-d slice
    along ``axis``, given as a fuseloop array; the results (all of the first one's
    shape, cast to its dtype) stacked where ``axis`` was.  One call per slice: meant for
    a few slices; prefer an element-wise expression or a reduction with ``axis=``."""
    a = _arr(arr)
    ax = _axis(axis, a.ndim)
    inner = fl.moveaxis(a, ax, -1)
    outer = inner.shape[:-1]
    if math.prod(outer) == 0:
        raise ValueError("Cannot apply_along_axis when any iteration dimensions are 0")
    results: list[Array] = []
    for ind in np.ndindex(*outer):
        res = _arr(func1d(inner[(*ind, Ellipsis)], *args, **kwargs), a)
        if results and res.shape != results[0].shape:
            raise ValueError(f"apply_along_axis: func1d returned shape {res.shape} for "
                             f"slice {ind}, but {results[0].shape} for the first slice")
        results.append(res if not results else res.astype(results[0].dtype, copy=False))
    first = results[0]
    buff = fl.reshape(fl.stack(results), outer + first.shape)
    dims = list(builtins_range(buff.ndim))
    r = first.ndim
    # (the result's axes go where the slices' axis was)
    order = dims[:ax] + dims[buff.ndim - r:] + dims[ax:buff.ndim - r]
    return fl.permute_dims(buff, tuple(order))


def apply_over_axes(func: Callable[[Any, int], Any], a: Any, axes: Any) -> Array:
    """numpy's ``apply_over_axes``: ``a = func(a, axis)`` for each axis in turn, the
    axis kept (with length 1) where ``func`` drops it."""
    val = _arr(a)
    N = val.ndim
    for axis in np.atleast_1d(np.asarray(axes)).tolist():
        if axis < 0:
            axis = N + axis
        res = _arr(func(val, axis), val)
        if res.ndim != val.ndim:
            res = fl.expand_dims(res, axis=axis)
            if res.ndim != val.ndim:
                raise ValueError("function is not returning an array of the correct shape")
        val = res
    return val

# }}}


# {{{ polynomials

def poly(seq_of_zeros: Any) -> Any:
    """The coefficients of the monic polynomial with the given zeros
    (``numpy.poly``): one convolution per zero on the device.  A square matrix gives its
    characteristic polynomial: its eigenvalues are found by numpy on the host (warns)."""
    seq = fl.atleast_1d(_arr(seq_of_zeros))
    sh = seq.shape
    if len(sh) == 2 and sh[0] == sh[1] and sh[0] != 0:
        _host_fallback("poly")
        seq = fl.asarray(np.linalg.eigvals(seq.get()), device=seq.device)
    elif len(sh) == 1:
        seq = seq.astype(np.mintypecode(seq.dtype.char), copy=False)
    else:
        raise ValueError("input must be 1d or non-empty square 2d array.")
    if sh[0] == 0:
        return 1.0
    dt = seq.dtype
    a = fl.ones((1,), dtype=dt, device=seq.device)
    for k in builtins_range(seq.shape[0]):
        a = fl.convolve(a, fl.concat([fl.ones((1,), dtype=dt, device=seq.device),
                                      -seq[k:k + 1]]), mode="full")
    if dt.kind == "c":
        # (numpy's test for conjugate pairs, on the host: the zeros are few, one
        # convolution each above, and two device sorts cost more than reading them)
        z = seq.get()
        if np.all(np.sort(z) == np.sort(z.conj())):
            a = fl.real(a).copy()
    return a


def polydiv(u: Any, v: Any) -> tuple[Array, Array]:
    """Quotient and remainder of polynomial division (``numpy.polydiv``): numpy's long
    division, one device update per quotient term; leading remainder terms within 1e-8
    of zero are dropped (their values are read back)."""
    ua, va = fl.atleast_1d(_arr(u)) + 0.0, fl.atleast_1d(_arr(v)) + 0.0
    w_dtype = fl.result_type(ua, va)
    m, n = ua.shape[0] - 1, va.shape[0] - 1
    scale = 1.0 / va[0]
    q = fl.zeros((max(m - n + 1, 1),), dtype=w_dtype, device=ua.device)
    r = ua.astype(w_dtype).copy()
    for k in builtins_range(m - n + 1):
        d = (scale * r[k]).eval()
        q[k] = d
        r[k:k + n + 1] -= d * va
    host_r = r.get()
    drop = 0
    while drop < host_r.shape[0] - 1 and np.allclose(host_r[drop], 0, rtol=1e-14):
        drop += 1
    return q, r[drop:]


def polyfit(x: Any, y: Any, deg: int, rcond: Any = None, full: bool = False, w: Any = None,
            cov: Any = False) -> Any:
    """numpy's least-squares polynomial fit (``numpy.polyfit``, all its options): the
    column-scaled Vandermonde system solved through fl.linalg.svd on the device, singular
    values below ``rcond`` times the largest dropped (numpy's ``lstsq``)."""
    order = int(deg) + 1
    xa, ya = _arr(x), _arr(y)
    xa = xa + 0.0 if xa.dtype.kind in "fc" else xa.astype(np.float64)
    ya = ya + 0.0 if ya.dtype.kind in "fc" else ya.astype(np.float64)
    if deg < 0:
        raise ValueError("expected deg >= 0")
    if xa.ndim != 1:
        raise TypeError("expected 1D vector for x")
    if xa.size == 0:
        raise TypeError("expected non-empty vector for x")
    if ya.ndim < 1 or ya.ndim > 2:
        raise TypeError("expected 1D or 2D array for y")
    if xa.shape[0] != ya.shape[0]:
        raise TypeError("expected x and y to have same length")
    if rcond is None:
        rcond = xa.shape[0] * np.finfo(xa.dtype).eps
    # numpy's Vandermonde matrix (a running product, so the same roundings) as one
    # stack of lazy columns: one element-wise kernel, where fl.vander's scan is several
    cols = [fl.ones_like(xa)]
    for _ in builtins_range(order - 1):
        cols.append(cols[-1] * xa)
    lhs, rhs = fl.stack(cols[::-1], axis=1), ya
    if w is not None:
        wa = _arr(w, xa) + 0.0
        if wa.ndim != 1:
            raise TypeError("expected a 1-d array for weights")
        if wa.shape[0] != ya.shape[0]:
            raise TypeError("expected w and y to have the same length")
        lhs = lhs * wa[:, None]
        rhs = rhs * (wa[:, None] if rhs.ndim == 2 else wa)
    mag = fl.real(lhs) ** 2 + fl.imag(lhs) ** 2 if lhs.dtype.kind == "c" else lhs * lhs
    scale = fl.sqrt(fl.sum(mag, axis=0))
    lhs = lhs / scale
    c, resids, rank, s, v_inv_s = _lstsq(lhs, rhs, rcond)
    c = (c.T / scale).T
    if rank != order and not full:
        warnings.warn("Polyfit may be poorly conditioned", np.exceptions.RankWarning,
                      stacklevel=2)
    if full:
        return c, resids, rank, s, rcond
    if not cov:
        return c
    if lhs.dtype.kind == "c":  # (numpy's inv(lhs.T @ lhs): a transpose, not conjugated)
        vbase = fl.linalg.inv(fl.matrix_transpose(lhs) @ lhs)
    else:
        # inv(lhs.T @ lhs) from the SVD already made: V diag(1/s**2) V.T (the same
        # matrix at full rank, without squaring the condition number; no LU to build)
        vbase = v_inv_s @ fl.matrix_transpose(v_inv_s)
    vbase = vbase / fl.outer(scale, scale)
    if cov == "unscaled":
        fac: Any = 1
    else:
        if xa.shape[0] <= order:
            raise ValueError("the number of data points must exceed order to scale the "
                             "covariance matrix")
        fac = resids / (xa.shape[0] - order)
    if ya.ndim == 1:
        return c, vbase * fac
    return c, vbase[:, :, None] * fac


def _lstsq(a: Array, b: Array, rcond: float) -> tuple[Array, Array, int, Array, Array]:
    """numpy's ``lstsq(a, b, rcond)`` for ``a`` (m, n): the minimum-norm solution through
    the SVD, residuals (only where the rank is n < m), rank (read back) and singular
    values; last ``V diag(1/s)`` (the kept singular values only)."""
    m, n = a.shape
    u, s, vh = fl.linalg.svd(a, full_matrices=False)
    large = s > rcond * fl.max(s)
    rank = int(fl.count_nonzero(large))
    inv_s = fl.where(large, 1 / fl.where(large, s, 1), 0)
    uh, v = fl.conj(fl.matrix_transpose(u)), fl.conj(fl.matrix_transpose(vh))
    rhs = b if b.ndim == 2 else b[:, None]
    v_inv_s = v * inv_s
    c = v_inv_s @ (uh @ rhs)
    if rank == n and m > n:
        diff = a @ c - rhs
        resids = fl.sum(fl.abs(diff) ** 2, axis=0)
    else:
        resids = fl.zeros((0,), dtype=s.dtype, device=a.device)
    return (c if b.ndim == 2 else c[:, 0]), resids, rank, s, v_inv_s


def roots(p: Any) -> Array:
    """The roots of the polynomial with coefficients ``p`` (``numpy.roots``): the
    eigenvalues of its companion matrix, found by numpy on the host (warns: fuseloop has
    no device eigenvalue algorithm for non-symmetric matrices)."""
    pa = fl.atleast_1d(_arr(p))
    if pa.ndim != 1:
        raise ValueError("Input must be a rank-1 array.")
    _host_fallback("roots")
    return fl.asarray(np.roots(pa.get()), device=pa.device)

# }}}


def unpackbits(a: Any, /, axis: int | None = None, count: int | None = None,
               bitorder: str = "big") -> Array:
    """numpy's ``unpackbits``: each uint8 of ``a`` as 8 uint8 bits along ``axis``
    (flattened when None), most significant first (``bitorder="little"``: least);
    ``count`` keeps the first bits (negative: drops the last), zero-padding past the end."""
    x = _arr(a)
    if x.dtype != np.uint8:
        raise DTypeError(f"Expected an input array of unsigned byte data type, got {x.dtype}")
    if bitorder not in ("big", "little"):
        raise ValueError("'order' must be either 'little' or 'big'")
    if axis is None:
        x, ax = fl.reshape(x, (-1,)), 0
    else:
        ax = _axis(axis, x.ndim)
    x = fl.moveaxis(x, ax, -1)
    order = np.arange(8, dtype=np.uint8)
    shifts = fl.asarray(order[::-1] if bitorder == "big" else order, device=x.device)
    bits = (x[..., None] >> shifts) & np.uint8(1)
    total = 8 * x.shape[-1]
    bits = fl.reshape(bits, (*x.shape[:-1], total))
    if count is not None:
        keep = count if count >= 0 else max(total + count, 0)
        if keep <= total:
            bits = bits[..., :keep]
        else:
            pad = fl.zeros((*bits.shape[:-1], keep - total), dtype=np.uint8,
                           device=x.device)
            bits = fl.concat([bits, pad], axis=-1)
    return fl.moveaxis(bits, -1, ax)


def mask_indices(n: int, mask_func: Callable[[Any, int], Any], k: Any = 0) -> tuple:
    """The indices where ``mask_func(ones((n, n)), k)`` is nonzero (``numpy.mask_indices``;
    e.g. ``mask_func=fl.triu``)."""
    m = fl.ones((n, n), dtype=int)
    return fl.nonzero(_arr(mask_func(m, k)) != 0)


# {{{ order, checks and memory

def asarray_chkfinite(a: Any, dtype: Any = None, order: Any = None, *,
                      device: Any = None) -> Array:
    """``fl.asarray(a, dtype)``, raising numpy's ValueError when an element is inf or
    NaN (one reduction, read back).  fuseloop arrays are C-ordered: ``order`` is
    accepted and changes nothing."""
    x = fl.asarray(a, dtype=dtype, device=device)
    if x.dtype.kind in "fc" and not bool(fl.all(fl.isfinite(x))):
        raise ValueError("array must not contain infs or NaNs")
    return x


def asfortranarray(a: Any, dtype: Any = None, *, like: Any = None) -> Array:
    """``fl.asarray(a, dtype)``.  fuseloop has no Fortran layout (every evaluated array
    is C-ordered and strides are not exposed): the values are numpy's, the layout is C."""
    return fl.asarray(a, dtype=dtype, device=like.device if isinstance(like, Array) else None)


def isfortran(a: Any) -> bool:
    """numpy's answer for a numpy array; False for a fuseloop array (C order only)."""
    if isinstance(a, Array):
        return False
    return bool(np.isfortran(a))


_REQUIREMENTS = {"C": "C", "C_CONTIGUOUS": "C", "CONTIGUOUS": "C", "F": "F",
                 "F_CONTIGUOUS": "F", "FORTRAN": "F", "A": "A", "ALIGNED": "A", "W": "W",
                 "WRITEABLE": "W", "O": "O", "OWNDATA": "O", "E": "E", "ENSUREARRAY": "E"}


def require(a: Any, dtype: Any = None, requirements: Any = None, *, like: Any = None
            ) -> Array:
    """numpy's ``require``: ``a`` as a fuseloop array of ``dtype`` meeting
    ``requirements``.  Every fuseloop array is aligned, writeable and C-ordered; "O"
    (own data) copies a view of a larger buffer; "F" gives a C-ordered array (see
    :func:`asfortranarray`)."""
    reqs = set()  # (a string is read as numpy reads it: one flag per character)
    for r in requirements or ():
        key = str(r).upper()
        if key not in _REQUIREMENTS:
            raise KeyError(r)
        reqs.add(_REQUIREMENTS[key])
    if {"C", "F"} <= reqs:
        raise ValueError("Cannot specify both 'C' and 'F' order")
    dev = like.device if isinstance(like, Array) else None
    x = fl.asarray(a, dtype=dtype, device=dev)
    if "O" in reqs and x is a and not _owns_buffer(x):
        x = x.copy()
    return x


def _owns_buffer(x: Array) -> bool:
    """Whether ``x`` is the whole of its buffer (numpy's OWNDATA); a lazy array is (its
    evaluation makes a buffer of its own)."""
    view = _view_of(x)
    if view is None:
        return x._storage is None
    storage, _, itemsize = view
    node: Any = x._node  # (a Leaf: _view_of checked)
    return node.strides is None and node.offset == 0 and x.size * itemsize == storage.nbytes


def _view_of(x: Any) -> tuple[Any, tuple, int] | None:
    """(buffer, (shape, strides, offset) in elements, item size) of an evaluated
    fuseloop array; None for a lazy one (it owns no memory yet)."""
    from .expr.nodes import Leaf

    storage = x._storage
    node = x._node
    if storage is None or not isinstance(node, Leaf):
        return None
    return storage, (node.shape, node.view_strides(), node.offset), x.dtype.itemsize


def _offsets(view: tuple) -> np.ndarray:
    shape, strides, offset = view
    out = np.full((), offset, dtype=np.int64)
    for n, s in zip(shape, strides):
        out = out[..., None] + np.arange(n, dtype=np.int64) * s
    return out.ravel()


def _overlap(a: Any, b: Any, exact: bool) -> bool:
    from .expr.overlap import _extent, views_disjoint

    if not (isinstance(a, Array) and isinstance(b, Array)):
        if isinstance(a, Array) or isinstance(b, Array):
            return False  # (device memory and host memory never meet)
        return bool(np.shares_memory(a, b) if exact else np.may_share_memory(a, b))
    va, vb = _view_of(a), _view_of(b)
    if va is None or vb is None or va[0] is not vb[0] or a.size == 0 or b.size == 0:
        return False
    (_, view_a, size_a), (_, view_b, size_b) = va, vb
    if size_a != size_b:  # (views of one buffer in two item sizes: compare byte ranges)
        lo_a, hi_a = (e * size_a for e in _extent(view_a))
        lo_b, hi_b = (e * size_b for e in _extent(view_b))
        return not (hi_a + size_a <= lo_b or hi_b + size_b <= lo_a)
    if not exact:
        (lo_a, hi_a), (lo_b, hi_b) = _extent(view_a), _extent(view_b)
        return not (hi_a < lo_b or hi_b < lo_a)
    if views_disjoint(view_a, view_b):
        return False
    if a.size + b.size <= 1 << 22:
        # views_disjoint may answer "can meet" for views that do not: the offsets
        # themselves (host index arithmetic, no data) settle it
        return bool(np.intersect1d(_offsets(view_a), _offsets(view_b)).size)
    return True


def may_share_memory(a: Any, b: Any, /, max_work: Any = None) -> bool:
    """Whether ``a`` and ``b`` may share memory (``numpy.may_share_memory``): evaluated
    fuseloop arrays over one buffer whose element ranges meet.  Lazy arrays own no
    memory; fuseloop and numpy arrays never share it."""
    if max_work is not None and max_work == -1:  # (numpy's MAY_SHARE_EXACT)
        return _overlap(a, b, exact=True)
    return _overlap(a, b, exact=False)


def shares_memory(a: Any, b: Any, /, max_work: Any = None) -> bool:
    """Whether ``a`` and ``b`` share an element of memory (``numpy.shares_memory``), for
    views of one buffer: exact (disjoint strided views are proved apart, else their
    offsets are compared; above 4M elements a view pair that cannot be proved apart
    counts as sharing).  ``max_work=0`` asks only for the bounds check."""
    if max_work is not None and max_work == 0:  # (numpy's MAY_SHARE_BOUNDS)
        return _overlap(a, b, exact=False)
    return _overlap(a, b, exact=True)


def einsum_path(subscripts: Any, *operands: Any, optimize: Any = "greedy",
                einsum_call: Any = False) -> Any:
    """numpy's contraction order and report for operands of these shapes and dtypes
    (``numpy.einsum_path``): numpy plans on zero-stride stand-ins, no data is read."""
    stand_ins = [np.broadcast_to(np.zeros((), o.dtype), o.shape) if isinstance(o, Array)
                 else o for o in operands]
    return np.einsum_path(subscripts, *stand_ins, optimize=optimize,
                          einsum_call=einsum_call)

# }}}


__all__ = [
    "apply_along_axis", "apply_over_axes", "asarray_chkfinite", "asfortranarray",
    "bartlett", "blackman", "einsum_path", "fromfunction", "hamming", "hanning",
    "histogram2d", "histogram_bin_edges", "histogramdd", "isfortran", "kaiser",
    "mask_indices", "may_share_memory", "piecewise", "poly", "polydiv", "polyfit",
    "put_along_axis", "require", "roots", "shares_memory", "unpackbits",
]
