"""numpy's functions that write into arrays in place (``put``, ``putmask``, ``place``,
``copyto``, ``fill_diagonal``) or select from them (``compress``, ``extract``,
``choose``, ``select``, ``trim_zeros``), on the device (issue 27).

In-place writes are scatters or ``where`` over the whole array; a selection whose
length depends on device data reads that count back, as a boolean mask does.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, cast

import numpy as np

import fuseloop as fl

from .array import Array
from .errors import DTypeError
from .numpy_shape import _INTP, _arr, _axis, _idx, resize

# {{{ writing into arrays

def fill_diagonal(a: Array, val: Any, wrap: bool = False) -> None:
    """Writes ``val`` (repeated as needed) on ``a``'s main diagonal, in place."""
    if not isinstance(a, Array):
        raise TypeError(f"fill_diagonal writes in place: needs a fuseloop array, "
                        f"not {type(a).__name__}")
    if a.ndim < 2:
        raise ValueError("array must be at least 2-d")
    if a.ndim == 2:
        step, end = a.shape[1] + 1, None if wrap else a.shape[1] * a.shape[1]
    else:
        if len(set(a.shape)) != 1:
            raise ValueError(f"All dimensions of input must be of equal length "
                             f"(got shape {a.shape})")
        step, end = 1 + int(np.cumprod(a.shape[:-1]).sum()), None
    where_ = np.arange(0, a.size if end is None else min(end, a.size), step)  # (not O(size))
    put(a, where_, val)



def _flat_view(a: Any, name: str) -> Array:
    if not isinstance(a, Array):
        raise TypeError(f"{name} writes in place: needs a fuseloop array, not "
                        f"{type(a).__name__}")
    return fl.reshape(a, (-1,))


def put(a: Array, ind: Any, v: Any, mode: str = "raise") -> None:
    """``a.flat[ind] = v`` in place (``v`` repeated as needed; ``mode`` raise, wrap or
    clip)."""
    flat = _flat_view(a, "put")
    n = a.size
    if isinstance(ind, Array):
        idx = fl.reshape(fl.astype(ind, _INTP), (-1,))
        count = idx.shape[0]
        if mode == "wrap":
            idx = idx % n
        elif mode == "clip":
            idx = fl.clip(idx, 0, n - 1)
        else:
            # (out-of-range indices: the scatter's own check raises IndexOutOfBoundsError)
            idx = fl.where(idx < 0, idx + n, idx)
    else:
        h = np.asarray(ind, dtype=_INTP).ravel()
        if mode == "wrap":
            h = h % max(n, 1)
        elif mode == "clip":
            h = np.clip(h, 0, n - 1)
        elif ((h < -n) | (h >= n)).any():
            raise IndexError(f"index {h[(h < -n) | (h >= n)][0]} is out of bounds for "
                             f"axis 0 with size {n}")
        count, idx = h.size, _idx(np.where(h < 0, h + n, h), a.device)
    if count == 0:
        return
    vals = resize(fl.astype(fl.asarray(v, device=a.device), a.dtype), (count,))
    flat[idx] = vals


def putmask(a: Array, mask: Any, values: Any) -> None:
    """Where ``mask``: ``a.flat[i] = values.flat[i % values.size]``, in place."""
    _flat_view(a, "putmask")
    m = fl.asarray(mask, device=a.device)
    if tuple(m.shape) != tuple(a.shape):
        raise ValueError(f"putmask: mask and data must be the same size (mask {m.shape}, "
                         f"data {a.shape})")
    vals = fl.asarray(values, device=a.device)
    if vals.size == 0:
        return
    a[...] = fl.where(m, resize(fl.astype(vals, a.dtype), a.shape), a)


def place(arr: Array, mask: Any, vals: Any) -> None:
    """The k-th True of ``mask`` gets ``vals[k % len(vals)]``, in place (by a running
    count of the mask on the device)."""
    flat = _flat_view(arr, "place")
    m = fl.reshape(fl.asarray(mask, device=arr.device), (-1,))
    if m.shape[0] != arr.size:
        raise ValueError(f"place: mask and data must be the same size (mask {m.shape}, "
                         f"data {arr.shape})")
    v = fl.reshape(fl.astype(fl.asarray(vals, device=arr.device), arr.dtype), (-1,))
    if v.shape[0] == 0:
        if bool(fl.any(m)):
            raise ValueError("Cannot insert from an empty array!")
        return
    k = fl.cumulative_sum(fl.astype(m != 0, _INTP)) - 1
    picked = fl.take(v, fl.where(m != 0, k % v.shape[0], 0))
    flat[...] = fl.where(m != 0, picked, flat)


def copyto(dst: Array, src: Any, casting: str = "same_kind", where: Any = True) -> None:
    """Copies ``src`` (broadcast) into ``dst`` where ``where`` is true, in place."""
    if not isinstance(dst, Array):
        raise TypeError(f"copyto writes in place: needs a fuseloop array as dst, not "
                        f"{type(dst).__name__}")
    if isinstance(src, bool | int | float | complex):
        sdt = np.result_type(src, dst.dtype)  # (a Python scalar is weak, as in numpy 2)
    else:
        sdt = src.dtype if isinstance(src, Array) else np.asarray(src).dtype
    if not np.can_cast(sdt, dst.dtype, casting=cast(Any, casting)):
        raise DTypeError(f"Cannot cast array data from dtype('{np.dtype(sdt)}') to "
                         f"dtype('{dst.dtype}') according to the rule '{casting}'")
    val = fl.astype(fl.asarray(src, device=dst.device), dst.dtype)
    if where is True:
        dst[...] = fl.broadcast_to(val, tuple(dst.shape))
    else:
        dst[...] = fl.where(fl.asarray(where, device=dst.device), val, dst)

# }}}


# {{{ selecting

def compress(condition: Any, a: Any, axis: int | None = None, out: Any = None) -> Array:
    """The slices of ``a`` along ``axis`` where the 1-d ``condition`` is true."""
    x = _arr(a)
    if axis is None:
        x, axis = fl.reshape(x, (-1,)), 0
    ax = _axis(axis, x.ndim)
    n = x.shape[ax]
    if isinstance(condition, Array):
        c = condition
        if c.ndim != 1:
            raise ValueError(f"condition must be a 1-d array (got shape {c.shape})")
        if c.shape[0] > n:
            # numpy: extra falses are fine, an extra true is out of bounds
            if bool(fl.any(c[n:])):
                raise IndexError(f"index out of bounds: condition of length {c.shape[0]} "
                                 f"for axis {ax} with size {n}")
            c = c[:n]
        idx = fl.nonzero(c)[0]
    else:
        h = np.asarray(condition)
        if h.ndim != 1:
            raise ValueError(f"condition must be a 1-d array (got shape {h.shape})")
        found = np.flatnonzero(h)
        if found.size and found[-1] >= n:
            raise IndexError(f"index {found[-1]} is out of bounds for axis {ax} with "
                             f"size {n}")
        idx = _idx(found, x.device)
    res = fl.take(x, idx, axis=ax)
    if out is not None:
        out[...] = res
        return cast(Array, out)
    return res


def trim_zeros(filt: Any, trim: str = "fb", axis: Any = None) -> Array:
    """``filt`` without its leading (``"f"``) and/or trailing (``"b"``) zeros; on
    every axis (``axis=None``) or the given ones. The bounds are found on the device
    (one small read-back: the result's shape depends on them)."""
    x = _arr(filt)
    trim = trim.lower()
    if not set(trim) <= {"f", "b"}:
        raise ValueError(f"unexpected character(s) in `trim`: {trim!r}")
    if x.ndim == 0:
        return x
    axes = range(x.ndim) if axis is None else \
        [_axis(a, x.ndim) for a in ((axis,) if np.ndim(axis) == 0 else axis)]
    nz = x != 0
    key = [slice(None)] * x.ndim
    for ax in axes:
        others = tuple(i for i in range(x.ndim) if i != ax)
        line = fl.any(nz, axis=others) if others else nz
        n = x.shape[ax]
        if not bool(fl.any(line)):
            lo = hi = n if "f" in trim else 0
            key[ax] = slice(lo, hi)
            continue
        lo = int(fl.argmax(line)) if "f" in trim else 0
        hi = n - int(fl.argmax(fl.flip(line))) if "b" in trim else n
        key[ax] = slice(lo, hi)
    return x[tuple(key)]


def extract(condition: Any, arr: Any) -> Array:
    """The elements of ``arr`` where ``condition`` (flattened) is nonzero."""
    x = fl.reshape(_arr(arr), (-1,))
    c = fl.reshape(fl.asarray(condition, device=x.device), (-1,))
    return fl.take(x, fl.nonzero(c)[0])


def choose(a: Any, choices: Sequence[Any], out: Any = None, mode: str = "raise") -> Array:
    """``choices[a[i]][i]`` for every ``i`` (all broadcast together)."""
    idx = _arr(a)
    if idx.dtype.kind not in "biu":
        raise TypeError(f"choose: the index array must be of integer type (got "
                        f"{idx.dtype})")
    cs = [c if isinstance(c, Array) else fl.asarray(c, device=idx.device) for c in choices]
    n = len(cs)
    if n == 0:
        raise ValueError("0-length sequence passed to choose")
    if mode == "wrap":
        idx = idx % n
    elif mode == "clip":
        idx = fl.clip(idx, 0, n - 1)
    elif mode == "raise":
        idx = fl.check_bounded(idx, 0, n - 1, "choose index")
    else:
        raise ValueError(f"clipmode must be one of 'clip', 'raise', or 'wrap' (got {mode!r})")
    res = cs[-1]
    for i in range(n - 2, -1, -1):
        res = fl.where(idx == i, cs[i], res)
    shp = np.broadcast_shapes(tuple(idx.shape), *(tuple(c.shape) for c in cs))
    dtype = np.result_type(*(c.dtype for c in cs))
    res = fl.astype(fl.broadcast_to(res, shp), dtype)
    if out is not None:
        out[...] = res
        return cast(Array, out)
    return res


def select(condlist: Sequence[Any], choicelist: Sequence[Any], default: Any = 0) -> Array:
    """The first choice whose condition is true, element-wise; ``default`` elsewhere."""
    if len(condlist) != len(choicelist):
        raise ValueError("list of cases must be same length as list of conditions")
    if not condlist:
        raise ValueError("select with an empty condition list is not possible")
    conds = [_arr(c) for c in condlist]
    dev = conds[0].device
    choices = [c if isinstance(c, Array) else fl.asarray(c, device=dev) for c in choicelist]
    for i, c in enumerate(conds):
        if c.dtype != np.bool_:
            raise TypeError(f"invalid entry {i} in condlist: should be boolean ndarray "
                            f"(got {c.dtype})")
    d = fl.asarray(default, device=dev)
    # a Python scalar default is weak in numpy 2's promotion: it keeps the choices' dtype
    weak = isinstance(default, int | float | complex) and not isinstance(default, bool)
    dtype = np.result_type(*(c.dtype for c in choices), default if weak else d.dtype)
    res: Any = d
    for c, v in zip(conds[::-1], choices[::-1], strict=True):
        res = fl.where(c, v, res)
    shp = np.broadcast_shapes(*(tuple(c.shape) for c in conds),
                              *(tuple(c.shape) for c in choices))
    return fl.astype(fl.broadcast_to(res, shp), dtype)

# }}}
