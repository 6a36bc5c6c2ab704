"""numpy's set and sorting functions beyond the Array API's (issue 27): ``unique`` with
numpy's flags, ``union1d`` ... ``setxor1d``, ``partition``, ``lexsort``, ``sort_complex``;
re-exported by :mod:`fuseloop.numpy_misc`.  All of them sort on the device and compact with
boolean masks; membership tests are ``isin``'s fused all-pairs comparison.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

import fuseloop as fl

from .array import Array, _coerce

_INT64 = np.dtype(np.int64)


def _arr(x: Any, like: Array | None = None) -> Array:
    """``x`` as a device Array (host data goes to ``like``'s device, else the default)."""
    x = _coerce(x)
    if isinstance(x, Array):
        return x
    return fl.asarray(np.asarray(x), device=None if like is None else like.device)


# {{{ unique and set functions

def unique(ar: Any, return_index: bool = False, return_inverse: bool = False,
           return_counts: bool = False, axis: Any = None, *, equal_nan: bool = True,
           sorted: bool = True) -> Any:
    """numpy's ``unique``: sorted distinct values (of the flattened array, or the distinct
    slices along ``axis`` in lexicographic order), and on request the first index of each,
    each element's (slice's) position among them and the counts; NaNs collapse to one
    where ``equal_nan`` (``axis=None`` only, as numpy)."""
    from .ops.sorting import _counts, _inverse, _sort_rows

    x = _arr(ar)
    if axis is not None:
        return _unique_axis(x, axis, return_index, return_inverse, return_counts)
    flat = fl.reshape(x, (-1,))
    done = _sort_rows(flat, False)
    s = done.values
    if s.size == 0:
        first = s != s
        starts = fl.zeros(0, dtype=_INT64, device=x.device)
    else:
        differ = s[1:] != s[:-1]
        if equal_nan and s.dtype.kind in "fc":
            differ = differ & ~(fl.isnan(s[1:]) & fl.isnan(s[:-1]))
        first = fl.concat([fl.ones(1, dtype=bool, device=x.device), differ]).eval()
        starts = fl.flatnonzero(first)
    values = s[first]
    if not (return_index or return_inverse or return_counts):
        return values
    out: list[Array] = [values]
    if return_index:
        out.append(done.order[starts])
    if return_inverse:
        out.append(_inverse(x, done, first))
    if return_counts:
        out.append(_counts(starts, flat.size))
    return tuple(out)


def _unique_axis(x: Array, axis: Any, return_index: bool, return_inverse: bool,
                 return_counts: bool) -> Any:
    """``unique`` along ``axis``: the slices as rows, sorted by ``lexsort`` over their
    columns (first column primary), runs of equal rows compacted."""
    from .ops.shape import normalize_axis
    from .ops.sorting import _counts

    ax = normalize_axis(axis, x.ndim)
    moved = fl.moveaxis(x, ax, 0)
    n, rest = moved.shape[0], moved.shape[1:]
    rows = fl.reshape(moved, (n, -1))
    m = rows.shape[1]
    if n == 0 or m == 0:
        raise ValueError(f"unique: cannot take unique slices along axis {axis} of an "
                         f"array of shape {x.shape} (no elements)")
    order = fl.lexsort([rows[:, j] for j in range(m - 1, -1, -1)]).eval()
    ordered = rows[order]
    differ = fl.any(ordered[1:] != ordered[:-1], axis=1)
    first = fl.concat([fl.ones(1, dtype=bool, device=x.device), differ]).eval()
    starts = fl.flatnonzero(first)
    values = fl.moveaxis(fl.reshape(ordered[first], (-1, *rest)), 0, ax)
    if not (return_index or return_inverse or return_counts):
        return values
    out: list[Array] = [values]
    if return_index:
        out.append(order[starts])
    if return_inverse:
        inverse = fl.empty(n, dtype=_INT64, device=x.device)
        inverse[order] = fl.cumulative_sum(first, dtype=_INT64) - 1
        out.append(inverse)
    if return_counts:
        out.append(_counts(starts, n))
    return tuple(out)


def _flat_unique(a: Any, like: Array | None = None) -> Array:
    return fl.reshape(_arr(a, like), (-1,))


def union1d(ar1: Any, ar2: Any) -> Array:
    """The sorted distinct values in either array."""
    x = _flat_unique(ar1)
    return unique(fl.concat([x, _flat_unique(ar2, x)]))


def intersect1d(ar1: Any, ar2: Any, assume_unique: bool = False,
                return_indices: bool = False) -> Any:
    """The sorted distinct values in both arrays; with ``return_indices`` the first index
    of each in either input (``numpy.intersect1d``)."""
    x = _flat_unique(ar1)
    y = _flat_unique(ar2, x)
    if return_indices:
        ux, ix = unique(x, return_index=True)
        uy, iy = unique(y, return_index=True)
        keep_x, keep_y = fl.isin(ux, uy), fl.isin(uy, ux)
        return ux[keep_x], ix[keep_x], iy[keep_y]
    if not assume_unique:
        x, y = unique(x), unique(y)
        return x[fl.isin(x, y)]
    return fl.sort(x[fl.isin(x, y)])


def setdiff1d(ar1: Any, ar2: Any, assume_unique: bool = False) -> Array:
    """The distinct values of ``ar1`` not in ``ar2`` (sorted unless ``assume_unique``)."""
    x = _flat_unique(ar1)
    if not assume_unique:
        x = unique(x)
    return x[fl.isin(x, _flat_unique(ar2, x), invert=True)]


def setxor1d(ar1: Any, ar2: Any, assume_unique: bool = False) -> Array:
    """The sorted values in exactly one of the arrays."""
    x = _flat_unique(ar1)
    y = _flat_unique(ar2, x)
    if not assume_unique:
        x, y = unique(x), unique(y)
    aux = fl.sort(fl.concat([x, y]))
    if aux.size == 0:
        return aux
    edge = fl.ones(1, dtype=bool, device=aux.device)
    flag = fl.concat([edge, aux[1:] != aux[:-1], edge])
    return aux[(flag[1:] & flag[:-1]).eval()]

# }}}


# {{{ partial and key sorts

def _check_kth(kth: Any, n: int, name: str) -> None:
    for k in np.atleast_1d(kth):
        if not -n <= int(k) < n:
            raise ValueError(f"{name}: kth(={int(k)}) out of bounds ({n})")


def partition(a: Any, kth: Any, axis: int | None = -1, kind: str = "introselect",
              order: Any = None) -> Array:
    """``a`` with each ``kth`` element in its sorted place, smaller ones before and larger
    after: fully sorted here (a valid partition; numpy leaves the rest unordered)."""
    x = _arr(a)
    if axis is None:
        x, axis = fl.reshape(x, (-1,)), -1
    _check_kth(kth, x.shape[axis] if x.ndim else 0, "partition")
    return fl.sort(x, axis=axis)


def argpartition(a: Any, kth: Any, axis: int | None = -1, kind: str = "introselect",
                 order: Any = None) -> Array:
    """Indices that partition ``a`` (see :func:`partition`): a stable argsort here."""
    x = _arr(a)
    if axis is None:
        x, axis = fl.reshape(x, (-1,)), -1
    _check_kth(kth, x.shape[axis] if x.ndim else 0, "argpartition")
    return fl.argsort(x, axis=axis)


def lexsort(keys: Any, axis: int = -1) -> Array:
    """Indices sorting by several keys, the last key primary (``numpy.lexsort``): one
    stable argsort per key, least significant first."""
    if isinstance(keys, Array):
        rows = [keys[i] for i in range(keys.shape[0])] if keys.ndim > 1 else [keys]
    elif isinstance(keys, Sequence) or isinstance(keys, np.ndarray):
        rows = [_arr(k) for k in keys]
    else:
        raise TypeError("lexsort: keys must be a sequence of arrays or a 2-D array")
    if not rows:
        raise TypeError("lexsort: need sequence of keys with len > 0")
    shape = np.broadcast_shapes(*(k.shape for k in rows))
    rows = [fl.broadcast_to(k, shape) for k in rows]
    order = fl.argsort(rows[0], axis=axis, stable=True)
    for k in rows[1:]:
        step = fl.argsort(fl.take_along_axis(k, order, axis=axis), axis=axis, stable=True)
        order = fl.take_along_axis(order, step, axis=axis)
    return order


def sort_complex(a: Any, /) -> Array:
    """``a`` sorted by real part, then imaginary part, as complex (``numpy.sort_complex``)."""
    x = _arr(a)
    if x.dtype.kind != "c":
        dt = np.complex64 if x.dtype.itemsize <= 2 and x.dtype.kind != "f" else (
            np.complex64 if x.dtype == np.float32 else np.complex128)
        return fl.sort(x, axis=-1).astype(dt)
    return fl.sort(x, axis=-1)  # (numpy's complex order, NaNs included)

# }}}


__all__ = ["argpartition", "intersect1d", "lexsort", "partition", "setdiff1d", "setxor1d",
           "sort_complex", "union1d", "unique"]
