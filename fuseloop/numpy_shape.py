"""numpy's shape, creation and placement functions beyond the Array API standard
(issue 27: numpy code runs unchanged).

Everything here is built from fuseloop's lazy operations (views, gathers, scatters,
``where``, ``concat``, scans); index arrays that depend only on shapes and host
arguments (``pad``'s reflections, ``insert``'s permutation) are made with numpy on the
host and uploaded, as ``arange`` would be. Data-dependent shapes (``compress`` with a
device mask, ``trim_zeros``) read a count back, as boolean masks do. The functions
that write in place or select are in :mod:`fuseloop.numpy_select`.
"""

from __future__ import annotations

import itertools
import operator
from collections.abc import Sequence
from typing import Any, Literal, cast

import numpy as np

import fuseloop as fl

from .array import Array
from .errors import AxisError, DTypeError, NoEquivalentError

_INTP = np.dtype(np.intp)


def _arr(a: Any) -> Array:
    return a if isinstance(a, Array) else fl.asarray(a)


def _axis(axis: int, ndim: int) -> int:
    if not -ndim <= axis < ndim:
        raise AxisError(f"axis {axis} is out of bounds for an array of dimension {ndim}")
    return axis % ndim


def _idx(values: Any, device: Any) -> Array:
    """Host indices uploaded as numpy's intp."""
    return fl.asarray(np.asarray(values, dtype=_INTP), device=device)


def _host_ints(obj: Any) -> np.ndarray:
    # a device index array is small metadata here: read back once
    return np.asarray(obj.get() if isinstance(obj, Array) else obj)


# {{{ copies and properties

def copy(a: Any, order: str = "K", subok: bool = False) -> Array:
    """A new array with ``a``'s values (``np.copy``)."""
    return fl.asarray(a, copy=True)


def asanyarray(a: Any, dtype: Any = None, order: Any = None, *, device: Any = None,
               copy: bool | None = None) -> Array:
    """``np.asanyarray``: fuseloop has no subclasses, so :func:`fuseloop.asarray`."""
    return fl.asarray(a, dtype=dtype, device=device, copy=copy)


def _like_device(like: Any, device: Any) -> Any:
    # numpy's like= (its dispatch passes the fuseloop array): that array's device
    return like.device if device is None and isinstance(like, Array) else device


def ascontiguousarray(a: Any, dtype: Any = None, *, like: Any = None) -> Array:
    """``np.ascontiguousarray``: at least 1-d; a strided view is copied."""
    x = fl.asarray(a, dtype=dtype, device=_like_device(like, None))
    if x.ndim == 0:
        return fl.reshape(x, (1,))
    if x._storage is not None and not x.is_contiguous:  # (a lazy one is made contiguous)
        return fl.asarray(x, copy=True)
    return x


def ndim(a: Any) -> int:
    """The number of dimensions of an array or of host data."""
    return a.ndim if isinstance(a, Array) else int(np.ndim(a))


def shape(a: Any) -> tuple[int, ...]:
    """The shape of an array or of host data."""
    return tuple(a.shape) if isinstance(a, Array) else tuple(np.shape(a))


def size(a: Any, axis: int | None = None) -> int:
    """The number of elements (along ``axis`` if given)."""
    shp = shape(a)
    if axis is None:
        return int(np.prod(shp, dtype=np.int64))
    return shp[_axis(axis, len(shp))]

# }}}


# {{{ splitting, joining, inserting

def array_split(ary: Any, indices_or_sections: Any, axis: int = 0) -> list[Array]:
    """Views of ``ary`` split along ``axis`` (sections may differ in length by one)."""
    a = _arr(ary)
    ax = _axis(axis, a.ndim)
    n = a.shape[ax]
    if np.ndim(indices_or_sections) == 0:
        sections = operator.index(indices_or_sections)
        if sections <= 0:
            raise ValueError("number sections must be larger than 0.")
        each, extra = divmod(n, sections)
        sizes = [0] + extra * [each + 1] + (sections - extra) * [each]
        bounds = list(np.cumsum(sizes))
    else:
        bounds = [0, *(int(i) for i in indices_or_sections), n]
    out = []
    for lo, hi in itertools.pairwise(bounds):
        key = [slice(None)] * a.ndim
        key[ax] = slice(int(lo), int(hi))
        out.append(a[tuple(key)])
    return out


def split(ary: Any, indices_or_sections: Any, axis: int = 0) -> list[Array]:
    """As :func:`array_split`, but a number of sections must divide the axis."""
    a = _arr(ary)
    if np.ndim(indices_or_sections) == 0:
        n = a.shape[_axis(axis, a.ndim)]
        if n % operator.index(indices_or_sections):
            raise ValueError(f"array split does not result in an equal division: axis "
                             f"{axis} of shape {a.shape} into {indices_or_sections}")
    return array_split(a, indices_or_sections, axis)


def _split_nd(name: str, least: int, axis: int) -> Any:
    def f(ary: Any, indices_or_sections: Any) -> list[Array]:
        a = _arr(ary)
        if a.ndim < least:
            raise ValueError(f"{name} only works on arrays of {least} or more dimensions "
                             f"(got shape {a.shape})")
        ax = 0 if name == "hsplit" and a.ndim == 1 else axis
        return split(a, indices_or_sections, ax)
    f.__name__ = f.__qualname__ = name
    f.__doc__ = f"``np.{name}``: :func:`split` along axis {axis}."
    return f


hsplit = _split_nd("hsplit", 1, 1)
vsplit = _split_nd("vsplit", 2, 0)
dsplit = _split_nd("dsplit", 3, 2)


def row_stack(tup: Sequence[Any], *, dtype: Any = None, casting: str = "same_kind") -> Array:
    """numpy's old name of :func:`fuseloop.vstack`."""
    out = fl.vstack(list(tup))
    return out if dtype is None else fl.astype(out, dtype)


def append(arr: Any, values: Any, axis: int | None = None) -> Array:
    """``arr`` with ``values`` added at the end (both flattened where ``axis`` is None)."""
    a, v = _arr(arr), fl.asarray(values, device=_arr(arr).device)
    if axis is None:
        return fl.concat([fl.reshape(a, (-1,)), fl.reshape(v, (-1,))])
    return fl.concat([a, v], axis=axis)


def delete(arr: Any, obj: Any, axis: int | None = None) -> Array:
    """``arr`` without the entries ``obj`` (an int, slice or indices) along ``axis``."""
    a = _arr(arr)
    if axis is None:
        a, axis = fl.reshape(a, (-1,)), 0
    ax = _axis(axis, a.ndim)
    n = a.shape[ax]
    keep = np.ones(n, dtype=bool)
    if isinstance(obj, slice):
        keep[obj] = False
    else:
        o = _host_ints(obj)
        if o.dtype == bool:
            if o.shape != (n,):
                raise ValueError(f"boolean array argument obj to delete must be one "
                                 f"dimensional and match the axis length of {n}")
            keep = ~o
        else:
            o = o.astype(_INTP, casting="safe") if o.size else o.astype(_INTP)
            if ((o < -n) | (o >= n)).any():
                raise IndexError(f"index {o[(o < -n) | (o >= n)][0]} is out of bounds "
                                 f"for axis {ax} with size {n}")
            keep[o] = False
    return fl.take(a, _idx(np.flatnonzero(keep), a.device), axis=ax)


def insert(arr: Any, obj: Any, values: Any, axis: int | None = None) -> Array:
    """``arr`` with ``values`` inserted before the index/indices ``obj`` along ``axis``."""
    a = _arr(arr)
    if axis is None:
        a, axis = fl.reshape(a, (-1,)), 0
    ax = _axis(axis, a.ndim)
    n = a.shape[ax]
    v = fl.astype(fl.asarray(values, device=a.device), a.dtype)
    if isinstance(obj, slice):
        scalar, where_ = False, np.arange(*obj.indices(n))
    else:
        where_ = _host_ints(obj).astype(_INTP)
        scalar = where_.ndim == 0
    if ((where_ < -n) | (where_ > n)).any():
        raise IndexError(f"index {obj} is out of bounds for axis {ax} with size {n}")
    where_ = np.where(where_ < 0, where_ + n, where_)
    # numpy: values get leading unit axes up to arr's rank
    v = fl.reshape(v, (1,) * (a.ndim - v.ndim) + tuple(v.shape))
    new_shape = list(a.shape)
    if scalar:
        # one index: values keep their own length along the axis (their first axis
        # moves there), as numpy's a[:, i:i+1] = values
        v = fl.moveaxis(v, 0, ax)
        new_shape[ax] = v.shape[ax]
        where_ = np.full(new_shape[ax], int(where_))
    else:
        where_ = where_.ravel()
        new_shape[ax] = where_.size
    v = fl.broadcast_to(v, tuple(new_shape))
    k = where_.size
    order = np.argsort(where_, kind="stable")
    new_pos = np.empty(k, dtype=_INTP)
    new_pos[order] = where_[order] + np.arange(k)
    perm = np.empty(n + k, dtype=_INTP)
    old = np.ones(n + k, dtype=bool)
    old[new_pos] = False
    perm[old] = np.arange(n)
    perm[new_pos] = n + np.arange(k)
    return fl.take(fl.concat([a, v], axis=ax), _idx(perm, a.device), axis=ax)


def block(arrays: Any) -> Array:
    """Joins nested lists of arrays (``np.block``): the innermost lists along the last
    axis, the next along the one before, ..."""
    def depth(x: Any, path: str) -> int:
        if isinstance(x, tuple):
            raise TypeError(f"{path} is a tuple. Only lists can be used to arrange blocks, "
                            "and np.block does not allow implicit conversion from tuple "
                            "to ndarray.")
        if isinstance(x, list):
            if not x:
                raise ValueError(f"List at {path} cannot be empty")
            ds = {depth(e, f"{path}[{i}]") for i, e in enumerate(x)}
            if len(ds) != 1:
                raise ValueError(f"List depths are mismatched at {path}")
            return 1 + ds.pop()
        return 0

    d = depth(arrays, "arrays")

    def leaves(x: Any) -> list[Any]:
        return [y for e in x for y in leaves(e)] if isinstance(x, list) else [x]

    all_ = [_arr(x) for x in leaves(arrays)]
    nd = max([d, *(x.ndim for x in all_)])
    it = iter(all_)

    def build(x: Any, level: int) -> Array:
        if not isinstance(x, list):
            y = next(it)
            return fl.reshape(y, (1,) * (nd - y.ndim) + tuple(y.shape))
        parts = [build(e, level + 1) for e in x]
        return fl.concat(parts, axis=-(d - level))

    return build(arrays, 0)


def kron(a: Any, b: Any) -> Array:
    """The Kronecker product: blocks ``a[i, j] * b``."""
    x, y = _arr(a), _arr(b)
    nd = max(x.ndim, y.ndim)
    xs = (1,) * (nd - x.ndim) + tuple(x.shape)
    ys = (1,) * (nd - y.ndim) + tuple(y.shape)
    xr = fl.reshape(x, tuple(s for p in xs for s in (p, 1)))
    yr = fl.reshape(y, tuple(s for p in ys for s in (1, p)))
    return fl.reshape(xr * yr, tuple(p * q for p, q in zip(xs, ys, strict=True)))

# }}}


# {{{ padding, flipping, resizing

# mode -> the keyword arguments numpy takes with it
_PAD_MODES: dict[str, set[str]] = {
    "constant": {"constant_values"}, "empty": set(), "edge": set(), "wrap": set(),
    "reflect": {"reflect_type"}, "symmetric": {"reflect_type"},
    "maximum": {"stat_length"}, "minimum": {"stat_length"}, "mean": {"stat_length"},
    "median": {"stat_length"}, "linear_ramp": {"end_values"}}


def pad(array: Any, pad_width: Any, mode: str = "constant", **kwargs: Any) -> Array:
    """``np.pad`` in the modes constant (``constant_values``), empty (zeros), edge,
    reflect, symmetric, wrap (``reflect_type="even"``), linear_ramp (``end_values``)
    and maximum, minimum, mean, median (``stat_length``)."""
    a = _arr(array)
    widths = _pairs(pad_width, a.ndim, "pad_width")
    if not isinstance(mode, str) or mode not in _PAD_MODES:
        raise NoEquivalentError(
            f"fuseloop's pad has the modes {', '.join(_PAD_MODES)}; not {mode!r} (a "
            "callable mode: build it from these)")
    extra = set(kwargs) - _PAD_MODES[mode]
    if extra:
        raise ValueError(f"unsupported keyword arguments for mode {mode!r}: {sorted(extra)}")
    if kwargs.get("reflect_type", "even") != "even":
        raise NoEquivalentError("pad: only reflect_type='even' is supported")
    cv = np.broadcast_to(np.asarray(kwargs.get("constant_values", 0)), (a.ndim, 2))
    stat = kwargs.get("stat_length")
    lengths = None if stat is None else _pairs(stat, a.ndim, "stat_length")
    for ax in range(a.ndim):
        before, after = (int(w) for w in widths[ax])
        if not before and not after:
            continue
        n = a.shape[ax]
        if mode in ("constant", "empty"):
            ends = [fl.full(_side(a, ax, w), c.item(), dtype=a.dtype, device=a.device)
                    for w, c in ((before, cv[ax, 0]), (after, cv[ax, 1]))]
            a = fl.concat([ends[0], a, ends[1]], axis=ax)
            continue
        if n == 0:
            raise ValueError(f"can't extend empty axis {ax} using modes other than "
                             f"'constant' or 'empty' (shape {a.shape})")
        if mode == "linear_ramp":
            ev = np.broadcast_to(np.asarray(kwargs.get("end_values", 0)), (a.ndim, 2))
            a = _pad_ramp(a, ax, (before, after), ev[ax])
            continue
        if mode in ("maximum", "minimum", "mean", "median"):
            a = _pad_stat(a, ax, (before, after), mode,
                          (n, n) if lengths is None else tuple(lengths[ax]))
            continue
        # numpy's own padding of the positions 0..n-1 gives the gather's indices
        src = np.pad(np.arange(n), (before, after), mode=cast(Any, mode))
        a = fl.take(a, _idx(src, a.device), axis=ax)
    return a


def _pairs(x: Any, ndim: int, name: str) -> np.ndarray:
    out = np.broadcast_to(np.asarray(x, dtype=np.int64), (ndim, 2))
    if (out < 0).any():
        raise ValueError(f"index can't contain negative values ({name} {x})")
    return out


def _side(a: Array, ax: int, width: int) -> tuple[int, ...]:
    shp = list(a.shape)
    shp[ax] = width
    return tuple(shp)


def _pad_stat(a: Array, ax: int, widths: tuple[int, int], mode: str,
              lengths: Any) -> Array:
    """One axis of ``pad``'s statistical modes: the statistic of the first / last
    ``stat_length`` values along the axis, broadcast over the padding."""
    n = a.shape[ax]
    reduce: Any = {"maximum": fl.max, "minimum": fl.min, "mean": fl.mean,
                   "median": _median_keepdims}[mode]

    def stat(lo: int, hi: int) -> Array:
        if hi <= lo:
            raise ValueError("stat_length of 0 yields no value for padding")
        key = [slice(None)] * a.ndim
        key[ax] = slice(lo, hi)
        s = reduce(a[tuple(key)], axis=ax, keepdims=True)
        if mode in ("mean", "median") and a.dtype.kind in "iub":
            s = fl.round(s)  # (numpy rounds an integer array's mean, half to even)
        return fl.astype(s, a.dtype)

    left_n, right_n = (min(int(v), n) for v in lengths)
    left = stat(0, left_n)
    right = left if left_n == right_n == n else stat(n - right_n, n)
    ends = [fl.broadcast_to(v, _side(a, ax, w)) for v, w in zip((left, right), widths,
                                                                  strict=True)]
    return fl.concat([ends[0], a, ends[1]], axis=ax)


def _median_keepdims(x: Array, axis: int, keepdims: bool = True) -> Array:
    """numpy's median along ``axis`` (kept as length 1) by a sort on the device: the
    middle value, or the mean of the two middle ones; NaN where the values hold one."""
    n = x.shape[axis]
    srt = fl.sort(x, axis=axis)  # (NaNs last)
    key = [slice(None)] * x.ndim
    key[axis] = slice((n - 1) // 2, n // 2 + 1)
    mid = fl.mean(srt[tuple(key)], axis=axis, keepdims=True)
    if x.dtype.kind == "f":
        key[axis] = slice(n - 1, n)
        last = srt[tuple(key)]
        mid = fl.where(fl.isnan(last), last, mid)
    return mid


def _pad_ramp(a: Array, ax: int, widths: tuple[int, int], end_values: Any) -> Array:
    """One axis of ``pad``'s linear_ramp: from each end value toward the edge value (the
    edge excluded), as numpy's ``linspace(end, edge, width, endpoint=False)``."""
    n = a.shape[ax]
    work = np.result_type(a.dtype, np.float64)
    ends = []
    for side, (w, end) in enumerate(zip(widths, end_values, strict=True)):
        key = [slice(None)] * a.ndim
        key[ax] = slice(0, 1) if side == 0 else slice(n - 1, n)
        edge = fl.astype(a[tuple(key)], work)
        shp = [1] * a.ndim
        shp[ax] = w
        t = fl.reshape(fl.arange(w, dtype=work, device=a.device), tuple(shp))
        ramp = t * ((edge - float(end)) / w) + float(end) if w else \
            fl.zeros(_side(a, ax, 0), dtype=work, device=a.device)
        if a.dtype.kind in "iub":
            ramp = fl.floor(ramp)  # (numpy 2's linspace rounds toward -inf for ints)
        ramp = fl.astype(fl.broadcast_to(ramp, _side(a, ax, w)), a.dtype)
        ends.append(ramp if side == 0 else fl.flip(ramp, axis=ax))
    return fl.concat([ends[0], a, ends[1]], axis=ax)


def fliplr(m: Any) -> Array:
    """Reverses axis 1 (of an array of at least 2 dimensions)."""
    x = _arr(m)
    if x.ndim < 2:
        raise ValueError(f"Input must be >= 2-d (got shape {x.shape}).")
    return fl.flip(x, axis=1)


def flipud(m: Any) -> Array:
    """Reverses axis 0 (of an array of at least 1 dimension)."""
    x = _arr(m)
    if x.ndim < 1:
        raise ValueError("Input must be >= 1-d.")
    return fl.flip(x, axis=0)


def rot90(m: Any, k: int = 1, axes: Sequence[int] = (0, 1)) -> Array:
    """Rotates by 90 degrees ``k`` times in the plane of ``axes`` (from the first toward
    the second)."""
    x = _arr(m)
    axes = tuple(axes)
    if len(axes) != 2:
        raise ValueError("len(axes) must be 2.")
    a0, a1 = _axis(axes[0], x.ndim), _axis(axes[1], x.ndim)
    if a0 == a1:
        raise ValueError("Axes must be different.")
    k %= 4
    if k == 0:
        return x[...]
    if k == 2:
        return fl.flip(fl.flip(x, axis=a0), axis=a1)
    perm = list(range(x.ndim))
    perm[a0], perm[a1] = perm[a1], perm[a0]
    if k == 1:
        return fl.permute_dims(fl.flip(x, axis=a1), tuple(perm))
    return fl.flip(fl.permute_dims(x, tuple(perm)), axis=a1)


def rollaxis(a: Any, axis: int, start: int = 0) -> Array:
    """Moves ``axis`` to before position ``start`` (numpy's older ``moveaxis``)."""
    x = _arr(a)
    n = x.ndim
    axis = _axis(axis, n)
    if start < 0:
        start += n
    if not 0 <= start < n + 1:
        raise AxisError(f"start {start} is out of bounds for {n} dimensions (-{n}..{n})")
    if axis < start:
        start -= 1
    if axis == start:
        return x[...]
    order = [i for i in range(n) if i != axis]
    order.insert(start, axis)
    return fl.permute_dims(x, tuple(order))


def resize(a: Any, new_shape: Any) -> Array:
    """``a``'s values repeated in order to fill ``new_shape`` (``np.resize``)."""
    x = _arr(a)
    shp = (operator.index(new_shape),) if np.ndim(new_shape) == 0 else \
        tuple(operator.index(s) for s in new_shape)
    if any(s < 0 for s in shp):
        raise ValueError("all elements of `new_shape` must be non-negative")
    total = int(np.prod(shp, dtype=np.int64))
    if x.size == 0 or total == 0:
        return fl.zeros(shp, dtype=x.dtype, device=x.device)
    flat = fl.reshape(x, (-1,))
    reps = -(-total // x.size)
    if reps > 1:
        flat = fl.tile(flat, (reps,))
    return fl.reshape(flat[:total], shp)

# }}}


# {{{ diagonals and triangles

def diag(v: Any, k: int = 0) -> Array:
    """A 1-d ``v``: the square matrix with ``v`` on diagonal ``k``; 2-d: diagonal ``k``."""
    x = _arr(v)
    if x.ndim == 2:
        return fl.diagonal(x, offset=k)
    if x.ndim != 1:
        raise ValueError(f"Input must be 1- or 2-d (got shape {x.shape}).")
    n = x.shape[0] + abs(k)
    out = fl.zeros((n, n), dtype=x.dtype, device=x.device)
    if x.shape[0]:
        i = np.arange(x.shape[0])
        rows, cols = (i, i + k) if k >= 0 else (i - k, i)
        out[_idx(rows, x.device), _idx(cols, x.device)] = x
    return out


def diagflat(v: Any, k: int = 0) -> Array:
    """:func:`diag` of ``v`` flattened."""
    return diag(fl.reshape(_arr(v), (-1,)), k)


def tri(N: int, M: int | None = None, k: int = 0, dtype: Any = float, *,
        like: Any = None, device: Any = None) -> Array:
    """Ones at and below diagonal ``k`` of an ``N`` x ``M`` array, zeros elsewhere."""
    device = _like_device(like, device)
    M = N if M is None else M
    rows = fl.reshape(fl.arange(N, dtype=np.int64, device=device), (N, 1))
    cols = fl.reshape(fl.arange(-k, M - k, dtype=np.int64, device=device), (1, M))
    return fl.astype(rows >= cols, dtype)


def identity(n: int, dtype: Any = None, *, like: Any = None, device: Any = None) -> Array:
    """The ``n`` x ``n`` identity (of the default float dtype, float64 where the device
    has it)."""
    return fl.eye(n, dtype=dtype, device=_like_device(like, device))


def _tri_indices(lower: bool, n: int, k: int, m: int | None,
                 device: Any) -> tuple[Array, Array]:
    f = np.tril_indices if lower else np.triu_indices
    r, c = f(n, k, m)
    return _idx(r, device), _idx(c, device)


def tril_indices(n: int, k: int = 0, m: int | None = None, *,
                 device: Any = None) -> tuple[Array, Array]:
    """Row and column indices of the lower triangle of an ``n`` x ``m`` array."""
    return _tri_indices(True, n, k, m, device)


def triu_indices(n: int, k: int = 0, m: int | None = None, *,
                 device: Any = None) -> tuple[Array, Array]:
    """Row and column indices of the upper triangle of an ``n`` x ``m`` array."""
    return _tri_indices(False, n, k, m, device)


def _two_d(arr: Any) -> Array:
    x = _arr(arr)
    if x.ndim != 2:
        raise ValueError(f"input array must be 2-d (got shape {x.shape})")
    return x


def tril_indices_from(arr: Any, k: int = 0) -> tuple[Array, Array]:
    """:func:`tril_indices` for ``arr``'s shape."""
    x = _two_d(arr)
    return _tri_indices(True, x.shape[0], k, x.shape[1], x.device)


def triu_indices_from(arr: Any, k: int = 0) -> tuple[Array, Array]:
    """:func:`triu_indices` for ``arr``'s shape."""
    x = _two_d(arr)
    return _tri_indices(False, x.shape[0], k, x.shape[1], x.device)


def diag_indices(n: int, ndim: int = 2, *, device: Any = None) -> tuple[Array, ...]:
    """Indices of the main diagonal of an ``(n,) * ndim`` array."""
    i = fl.arange(n, dtype=_INTP, device=device)
    return (i,) * ndim


def diag_indices_from(arr: Any) -> tuple[Array, ...]:
    """:func:`diag_indices` for ``arr`` (all of whose sides must be equal)."""
    x = _arr(arr)
    if x.ndim < 2:
        raise ValueError(f"input array must be at least 2-d (got shape {x.shape})")
    if len(set(x.shape)) != 1:
        raise ValueError(f"All dimensions of input must be of equal length "
                         f"(got shape {x.shape})")
    return diag_indices(x.shape[0], x.ndim, device=x.device)


# }}}


# {{{ grids and sequences

def indices(dimensions: Sequence[int], dtype: Any = int, sparse: bool = False, *,
            device: Any = None) -> Any:
    """Index grids of a shape: one array of shape ``(len(dimensions), *dimensions)``,
    or (``sparse``) a tuple of broadcastable arrays."""
    dims = tuple(dimensions)
    out = []
    for i, d in enumerate(dims):
        shp = (1,) * i + (d,) + (1,) * (len(dims) - i - 1)
        out.append(fl.reshape(fl.arange(d, dtype=dtype, device=device), shp))
    if sparse:
        return tuple(out)
    if not dims:
        return fl.zeros((0,), dtype=dtype, device=device)
    return fl.stack([fl.broadcast_to(o, dims) for o in out])


def ix_(*args: Any) -> tuple[Array, ...]:
    """Open-mesh index arrays: each 1-d input shaped to broadcast along its own axis."""
    n = len(args)
    out = []
    for i, s in enumerate(args):
        x = fl.asarray(s) if isinstance(s, Array) else \
            fl.asarray(np.asarray(s, dtype=_INTP if np.size(s) == 0 else None))
        if x.ndim != 1:
            raise ValueError(f"Cross index must be 1 dimensional (argument {i} has shape "
                             f"{x.shape})")
        if x.dtype == np.bool_:
            x = fl.nonzero(x)[0]
        out.append(fl.reshape(x, (1,) * i + (x.shape[0],) + (1,) * (n - i - 1)))
    return tuple(out)


def logspace(start: Any, stop: Any, num: int = 50, endpoint: bool = True,
             base: Any = 10.0, dtype: Any = None, axis: int = 0, *,
             device: Any = None) -> Array:
    """``base ** linspace(start, stop, num)``; array ``start``, ``stop`` or ``base``
    broadcast together, the samples along ``axis`` of the result."""
    if any(isinstance(x, Array) or np.ndim(x) for x in (start, stop, base)):
        y = _linspace_nd(start, stop, num, endpoint, axis, device)
        b = fl.asarray(base, device=y.device)
        y = fl.power(fl.expand_dims(b, axis=axis) if b.ndim else b, y)
    else:
        _scalars("logspace", start, stop, base)
        y = fl.power(float(base), fl.linspace(float(start), float(stop), num,
                                              endpoint=endpoint, device=device))
    return y if dtype is None else fl.astype(y, dtype)


def _linspace_nd(start: Any, stop: Any, num: int, endpoint: bool, axis: int,
                 device: Any) -> Array:
    """numpy's linspace of broadcast array ends (its order of operations: ``t * step +
    start``, the last sample exactly ``stop``), the samples along ``axis``."""
    s = fl.asarray(start, device=device)
    s = fl.astype(s, np.result_type(s.dtype, np.float64))
    e = fl.astype(fl.asarray(stop, device=s.device), s.dtype)
    shp = np.broadcast_shapes(tuple(s.shape), tuple(e.shape))
    num = operator.index(num)
    if num < 0:
        raise ValueError(f"Number of samples, {num}, must be non-negative.")
    div = num - 1 if endpoint else num
    t = fl.reshape(fl.arange(num, dtype=s.dtype, device=s.device), (num,) + (1,) * len(shp))
    y = t * ((e - s) / div) + s if div > 0 else t * (e - s) + s
    if endpoint and num > 1:
        y = fl.where(t == num - 1, e, y)
    y = fl.broadcast_to(y, (num, *shp))
    return fl.moveaxis(y, 0, _axis(axis, len(shp) + 1)) if axis else y


def geomspace(start: Any, stop: Any, num: int = 50, endpoint: bool = True,
              dtype: Any = None, axis: int = 0, *, device: Any = None) -> Array:
    """A geometric sequence from ``start`` to ``stop`` (real; arrays broadcast, the
    samples along ``axis``). Ends of different signs give NaNs inside, as numpy's."""
    if any(np.iscomplexobj(x) for x in (start, stop)) or any(
            isinstance(x, Array) and x.dtype.kind == "c" for x in (start, stop)):
        raise DTypeError("fuseloop's geomspace takes real start/stop")
    s = fl.asarray(start, device=device)
    s = fl.astype(s, np.result_type(s.dtype, np.float64))
    e = fl.asarray(stop, dtype=s.dtype, device=s.device)
    host = not isinstance(start, Array) and not isinstance(stop, Array)
    zero = (np.any(np.asarray(start) == 0) or np.any(np.asarray(stop) == 0)) if host else \
        bool(fl.any((s == 0) | (e == 0)))  # (one flag read back for numpy's error)
    if zero:
        raise ValueError("Geometric sequence cannot include zero")
    sign = fl.sign(s)
    s, e = s / sign, e / sign
    y = fl.power(10.0, _linspace_nd(fl.log10(s), fl.log10(e), num, endpoint, 0, None))
    # the ends exactly, as numpy's
    t = fl.reshape(fl.arange(num, device=s.device), (num,) + (1,) * (y.ndim - 1))
    y = fl.where(t == 0, s, y)
    if endpoint and num > 1:
        y = fl.where(t == num - 1, e, y)
    y = sign * y
    if axis:
        y = fl.moveaxis(y, 0, _axis(axis, y.ndim))
    return y if dtype is None else fl.astype(y, dtype)


def _scalars(name: str, *xs: Any) -> None:
    if any(isinstance(x, Array) or np.ndim(x) for x in xs):
        raise NoEquivalentError(f"fuseloop's {name} takes scalar start/stop; for arrays "
                                  "build it from fl.linspace and broadcasting")
    if any(np.iscomplexobj(x) for x in xs):
        raise DTypeError(f"fuseloop's {name} takes real start/stop")


def vander(x: Any, N: int | None = None, increasing: bool = False) -> Array:
    """The Vandermonde matrix of a 1-d ``x``: columns ``x**(N-1), ..., x**0`` (or
    increasing), by a running product as numpy's."""
    v = _arr(x)
    if v.ndim != 1:
        raise ValueError(f"x must be a one-dimensional array or sequence (got shape "
                         f"{v.shape})")
    n = v.shape[0] if N is None else N
    dtype = np.result_type(v.dtype, np.int64) if v.dtype != np.bool_ else np.int64
    v = fl.astype(v, dtype)
    ones = fl.ones((v.shape[0], min(n, 1)), dtype=dtype, device=v.device)
    if n <= 1:
        out = ones
    else:
        cols = fl.broadcast_to(fl.reshape(v, (-1, 1)), (v.shape[0], n - 1))
        out = fl.cumulative_prod(fl.concat([ones, cols], axis=1), axis=1)
    return out if increasing else fl.flip(out, axis=1)

# }}}


# {{{ flat indices

def unravel_index(indices: Any, shape: Any, order: Literal["C", "F"] = "C") -> tuple[Any, ...]:
    """Flat indices into a ``shape`` as a tuple of coordinate arrays (ints for an int)."""
    dims = (operator.index(shape),) if np.ndim(shape) == 0 else tuple(shape)
    total = int(np.prod(dims, dtype=np.int64))
    if order not in ("C", "F"):
        raise ValueError("only 'C' or 'F' order is permitted")
    if not isinstance(indices, Array):
        return tuple(np.unravel_index(indices, dims, order=order))  # host ints: host answer
    if indices.dtype.kind not in "iu":
        raise TypeError(f"only int indices permitted (got {indices.dtype})")
    idx = fl.check_bounded(fl.astype(indices, _INTP), 0, total - 1, "index")
    out: list[Array] = []
    walk = reversed(dims) if order == "C" else iter(dims)
    rest = idx
    for d in walk:
        out.append(rest % d)
        rest = rest // d
    return tuple(out[::-1] if order == "C" else out)


def ravel_multi_index(multi_index: Any, dims: Sequence[int], mode: Any = "raise",
                      order: Literal["C", "F"] = "C") -> Any:
    """Flat indices of coordinate arrays into ``dims`` (``mode`` raise, wrap or clip,
    one or one per dimension)."""
    dims = tuple(int(d) for d in dims)
    if not any(isinstance(m, Array) for m in multi_index):
        return np.ravel_multi_index(multi_index, dims, mode=mode, order=order)
    if len(multi_index) != len(dims):
        raise ValueError(f"parameter multi_index must be a sequence of length {len(dims)}")
    modes = [mode] * len(dims) if isinstance(mode, str) else list(mode)
    strides = np.ones(len(dims), dtype=np.int64)
    axes = range(len(dims) - 2, -1, -1) if order == "C" else range(1, len(dims))
    for i in axes:
        j = i + 1 if order == "C" else i - 1
        strides[i] = strides[j] * dims[j]
    flat: Any = 0
    for i, (m, d, md) in enumerate(zip(multi_index, dims, modes, strict=True)):
        c = fl.astype(_arr(m), _INTP)
        if md == "wrap":
            c = c % d
        elif md == "clip":
            c = fl.clip(c, 0, d - 1)
        elif md == "raise":
            c = fl.check_bounded(c, 0, d - 1, f"multi_index[{i}]")
        else:
            raise ValueError(f"clipmode must be one of 'clip', 'raise', or 'wrap' (got "
                             f"{md!r})")
        flat = flat + c * int(strides[i])
    return flat

# }}}
