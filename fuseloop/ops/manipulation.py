"""The Array API's manipulation functions that numpy spells otherwise or lacks:
``concat``, ``unstack``, numpy's ``hstack``/``vstack``/``dstack``/``column_stack`` and
``atleast_1d/2d/3d``, ``broadcast_arrays``, ``broadcast_shapes``, ``take_along_axis``,
``matrix_transpose``, ``vecdot`` and ``diff``, built from the views and gathers of
:mod:`fuseloop.ops.shape` and :mod:`fuseloop.ops.indexing` (all lazy).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from ..array import Array, _coerce
from ..errors import ShapeError
from ..expr.nodes import Iota
from ..expr.nodes import broadcast_shapes as _broadcast
from .shape import broadcast_to, concatenate, normalize_axis, swapaxes


def concat(arrays: Sequence[Any], /, *, axis: int | None = 0) -> Array:
    """Join arrays along ``axis`` (None: flattened first); dtypes promote as numpy's."""
    if not isinstance(arrays, list | tuple):
        raise TypeError(f"concat takes a tuple or list of arrays, not {type(arrays).__name__}")
    return concatenate(arrays, axis=axis)


def atleast_1d(*arys: Any) -> Any:
    """numpy's ``atleast_1d``: 0-d arrays as shape ``(1,)`` (one array, or a list)."""
    out = [x.reshape((1,)) if x.ndim == 0 else x for x in map(_coerce, arys)]
    return out[0] if len(out) == 1 else out


def atleast_2d(*arys: Any) -> Any:
    """numpy's ``atleast_2d``: 0-d as ``(1, 1)``, 1-D ``(n,)`` as ``(1, n)``."""
    out = [x.reshape((1,) * (2 - x.ndim) + x.shape) if x.ndim < 2 else x
           for x in map(_coerce, arys)]
    return out[0] if len(out) == 1 else out


def atleast_3d(*arys: Any) -> Any:
    """numpy's ``atleast_3d``: 0-d as ``(1, 1, 1)``, ``(n,)`` as ``(1, n, 1)``,
    ``(m, n)`` as ``(m, n, 1)``."""
    def lift(x: Array) -> Array:
        if x.ndim == 0:
            return x.reshape((1, 1, 1))
        if x.ndim == 1:
            return x.reshape((1, x.shape[0], 1))
        return x.reshape((*x.shape, 1)) if x.ndim == 2 else x
    out = [lift(x) for x in map(_coerce, arys)]
    return out[0] if len(out) == 1 else out


def _sequence(arrays: Any, name: str) -> list[Array]:
    if isinstance(arrays, Array) or not isinstance(arrays, Sequence) or not arrays:
        raise TypeError(f"{name} takes a non-empty sequence of arrays, "
                        f"not {type(arrays).__name__}")
    return [_coerce(a) for a in arrays]


def hstack(arrays: Sequence[Any]) -> Array:
    """numpy's ``hstack``: joined along the second axis (the first for 1-D arrays)."""
    parts = [atleast_1d(a) for a in _sequence(arrays, "hstack")]
    return concatenate(parts, axis=0 if parts[0].ndim == 1 else 1)


def vstack(arrays: Sequence[Any]) -> Array:
    """numpy's ``vstack``: 1-D arrays as rows, joined along the first axis."""
    return concatenate([atleast_2d(a) for a in _sequence(arrays, "vstack")], axis=0)


def dstack(arrays: Sequence[Any]) -> Array:
    """numpy's ``dstack``: joined along the third axis (after ``atleast_3d``)."""
    return concatenate([atleast_3d(a) for a in _sequence(arrays, "dstack")], axis=2)


def column_stack(arrays: Sequence[Any]) -> Array:
    """numpy's ``column_stack``: 1-D arrays as columns, joined along the second axis."""
    parts = [a.reshape((a.shape[0], 1)) if a.ndim == 1 else atleast_2d(a)
             for a in _sequence(arrays, "column_stack")]
    return concatenate(parts, axis=1)


def unstack(x: Any, /, *, axis: int = 0) -> tuple[Array, ...]:
    """The slices of ``x`` along ``axis`` (views), as a tuple."""
    x = _coerce(x)
    if x.ndim == 0:
        raise ShapeError("unstack needs an array of at least one dimension, got a 0-d array")
    ax = normalize_axis(axis, x.ndim)
    return tuple(x[(slice(None),) * ax + (k,)] for k in range(x.shape[ax]))


def broadcast_shapes(*shapes: Any) -> tuple[int, ...]:
    """numpy's broadcasting of shapes (ShapeError where they clash)."""
    if not shapes:
        return ()
    return _broadcast(*(tuple(int(n) for n in s) for s in shapes))


def broadcast_arrays(*arrays: Any) -> list[Array]:
    """The arrays broadcast to their common shape (views: no copy)."""
    arrs = [_coerce(a) for a in arrays]
    if not arrs:
        return []
    shape = broadcast_shapes(*(a.shape for a in arrs))
    return [a if a.shape == shape else broadcast_to(a, shape) for a in arrs]


def take_along_axis(x: Any, indices: Any, /, *, axis: int = -1) -> Array:
    """``x`` read at ``indices`` along ``axis`` (``numpy.take_along_axis``): the other
    axes broadcast; indices are checked and may be negative, as for ``x[idx]``."""
    x, indices = _coerce(x), _coerce(indices)
    if x.ndim != indices.ndim:
        raise ShapeError(f"take_along_axis: indices (shape {indices.shape}) must have as "
                         f"many dimensions as x (shape {x.shape})")
    if indices.dtype.kind not in "iu":
        raise TypeError(f"take_along_axis: indices must be integers, not {indices.dtype}")
    ax = normalize_axis(axis, x.ndim)
    others = [n for d, n in enumerate(x.shape) if d != ax]
    other_idx = [n for d, n in enumerate(indices.shape) if d != ax]
    rest = _broadcast(tuple(others), tuple(other_idx))
    shape = (*rest[:ax], indices.shape[ax], *rest[ax:])
    if indices.shape != shape:
        indices = broadcast_to(indices, shape)
    key: list[Any] = []
    for d in range(x.ndim):
        if d == ax:
            key.append(indices)
        else:
            # the position along axis d (0 where x has length 1 there): an index
            # array with nothing in memory
            strides = tuple(1 if k == d and x.shape[d] != 1 else 0 for k in range(x.ndim))
            key.append(Array._lazy(Iota(shape, np.dtype(np.int64), strides, 0), x.device))
    return x[tuple(key)]


def matrix_transpose(x: Any, /) -> Array:
    """``x`` with its last two axes swapped (a view)."""
    x = _coerce(x)
    if x.ndim < 2:
        raise ShapeError(f"matrix_transpose needs at least two dimensions, got shape "
                         f"{x.shape}")
    return swapaxes(x, -1, -2)


def vecdot(x1: Any, x2: Any, /, *, axis: int = -1) -> Array:
    """Dot products of vectors along ``axis`` (after broadcasting); the result has the
    operands' promoted dtype; a complex ``x1`` is conjugated (the standard's rule)."""
    from .reductions import sum as fl_sum

    x1, x2 = _coerce(x1), _coerce(x2)
    shape = _broadcast(x1.shape, x2.shape)
    if not shape:
        raise ShapeError("vecdot needs arrays of at least one dimension")
    ax = normalize_axis(axis, len(shape))
    if axis >= 0 and (x1.ndim != x2.ndim):
        # the standard counts a non-negative axis in each operand's own shape only when
        # they have as many dimensions: refuse what would be ambiguous
        raise ShapeError("vecdot: with operands of different numbers of dimensions, pass "
                         "a negative axis")
    n1 = x1.shape[ax - len(shape)] if ax - len(shape) >= -x1.ndim else 1
    n2 = x2.shape[ax - len(shape)] if ax - len(shape) >= -x2.ndim else 1
    if n1 != n2:
        raise ShapeError(f"vecdot: the operands' lengths along axis {axis} differ: "
                         f"{x1.shape} and {x2.shape}")
    product = (x1.conj() if x1.dtype.kind == "c" else x1) * x2
    return fl_sum(product, axis=ax, dtype=product.dtype)


def diff(x: Any, /, *, axis: int = -1, n: int = 1, prepend: Any = None,
         append: Any = None) -> Array:
    """The ``n``-th discrete difference along ``axis`` (``numpy.diff``; lazy views)."""
    from .. import ufuncs

    x = _coerce(x)
    if x.ndim == 0:
        raise ShapeError("diff needs an array of at least one dimension")
    if n < 0:
        raise ValueError(f"diff: order n must be non-negative, not {n}")
    ax = normalize_axis(axis, x.ndim)
    pieces: list[Array | None] = []
    for extra in (prepend, append):
        if extra is None:
            pieces.append(None)
            continue
        if not isinstance(extra, Array):
            from ..creation import asarray

            extra = asarray(np.asarray(extra), device=x.device)  # (numpy's dtype for it)
        if extra.ndim == 0:
            extra = broadcast_to(extra, (*x.shape[:ax], 1, *x.shape[ax + 1:]))
        pieces.append(extra)
    if pieces[0] is not None or pieces[1] is not None:
        x = concatenate([p for p in (pieces[0], x, pieces[1]) if p is not None], axis=ax)
    before = (slice(None),) * ax
    for _ in range(n):
        hi, lo = x[(*before, slice(1, None))], x[(*before, slice(None, -1))]
        x = ufuncs.FUNCTIONS["not_equal"](hi, lo) if x.dtype == np.bool_ else hi - lo
    return x


def clip(x: Any, /, min: Any = None, max: Any = None, *, a_min: Any = None,
         a_max: Any = None) -> Any:
    """``x`` limited to ``[min, max]`` (either bound may be None): the Array API's names
    for ``numpy.clip``'s ``a_min`` and ``a_max`` (which are accepted too)."""
    from ..ufuncs import clip as _clip

    lo = a_min if min is None else min
    hi = a_max if max is None else max
    return _clip(x, lo, hi)


__all__ = ["broadcast_arrays", "broadcast_shapes", "clip", "concat", "diff", "matrix_transpose",
           "take_along_axis", "unstack", "vecdot"]
