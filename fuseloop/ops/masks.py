"""Boolean masks: the positions of true elements, and masked assignment.

Reading through a mask has a data-dependent shape, so the positions are computed
when the mask is applied: the mask is evaluated into a contiguous buffer, one
device compaction (:mod:`fuseloop.ops.compaction`) writes the C-order positions
of its true elements and their count, and the count is read back.  Everything
after that is an ordinary lazy gather or scatter.  ``x[mask] = v`` with a value
that does not depend on the selection's length needs no positions at all: it is
``where(mask, v, x)``, written in place in one kernel.

A mask applied again before its buffer is written (``Z[I] = Z[I] ** 2 + C[I]``: three
times) reuses the positions its first application computed (:func:`mask_positions`):
each compaction reads its count back, a wait for the device.  A lazy read of the whole
mask, held with the positions, tells whether the buffer was written since: anything
about to write a buffer evaluates the lazy arrays reading it first
(:mod:`fuseloop.expr.readers`), so a write by any path, through any view, leaves that
read evaluated, and the positions are made afresh.
"""

from __future__ import annotations

import math
import weakref
from typing import Any, NamedTuple

import numpy as np

from ..array import Array, Constant, _coerce
from ..assignment import assign, compute
from ..dtypes import scalar_to
from ..evaluate import allocate
from ..expr.nodes import Apply, Storage
from ..runtime.devices import Device
from ..trace_hooks import trace_checks
from .compaction import compact


def flat_positions(a: Any) -> Array:
    """``numpy.flatnonzero``: the C-order positions of ``a``'s nonzero elements (int64)."""
    a = _coerce(a)
    if not isinstance(a, Array):
        from ..creation import asarray

        a = asarray(a)
    m = a if a.dtype.kind == "b" else (a != 0)
    n, device = m.size, m.device
    if n == 0:
        return Array._concrete(allocate(0, device), np.dtype(np.int64), (0,))
    positions, count = compact(m.data, n, device)  # (m.data: a strided view is copied)
    return Array._concrete(positions, np.dtype(np.int64), (count,))


def _unravel(flat: Array, shape: tuple[int, ...]) -> list[Array]:
    """Per-axis indices of C-order positions ``flat`` in ``shape`` (lazy)."""
    comps = []
    for k in range(len(shape)):
        stride = math.prod(shape[k + 1:])
        c = flat // stride if stride != 1 else flat
        comps.append(c % shape[k] if k else c)
    return comps


class _Held(NamedTuple):
    """The positions of a boolean mask's true elements, kept for its next application."""

    mask: Storage  # (the mask's buffer, filled in C order)
    size: int
    owner: weakref.ref  # (the array applied: once it is gone, so are the positions)
    watch: Array  # a lazy read of the whole buffer: evaluated once anything writes it
    positions: Storage
    found: int  # (how many)


#: the masks applied last, newest last (each keeps its buffer and positions alive while
#: its array lives)
_held: list[_Held] = []
HELD_MAX = 4


def _forget(owner: weakref.ref) -> None:
    """Drop the positions of a mask array that is gone (its weak reference's callback)."""
    _held[:] = [h for h in _held if h.owner is not owner]


def _held_positions(mask: Array) -> Array:
    """:func:`flat_positions` of the boolean ``mask``, found among the held ones where
    its buffer was not written since they were made (see the module)."""
    if trace_checks:  # (a traced mask: flat_positions raises the trace's error)
        return flat_positions(mask)
    mask.eval()
    storage, size = mask._storage, mask.size
    if not size or not mask.is_contiguous:
        return flat_positions(mask)
    _held[:] = [h for h in _held if h.watch._storage is None]  # (written since: dropped)
    for h in _held:
        if h.mask is storage and h.size == size:
            return Array._concrete(h.positions, np.dtype(np.int64), (h.found,))
    positions, count = compact(mask.data, size, mask.device)
    watch = Array._lazy(Apply("positive", (mask._node,), (mask.dtype, mask.dtype),
                              mask.shape), mask.device)
    if len(_held) >= HELD_MAX:
        del _held[0]
    assert storage is not None  # (evaluated above)
    _held.append(_Held(storage, size, weakref.ref(mask, _forget), watch, positions, count))
    return Array._concrete(positions, np.dtype(np.int64), (count,))


def mask_positions(mask: Any, device: Device) -> list[Array]:
    """The integer index arrays equivalent to ``mask`` (lazy per-axis parts of one
    computed position array: they fuse into the gather or scatter using them)."""
    if isinstance(mask, np.ndarray):
        from ..creation import asarray

        mask = asarray(mask, device=device)
    flat = _held_positions(mask) if mask.dtype.kind == "b" else flat_positions(mask)
    return _unravel(flat, mask.shape)


def nonzero(a: Any) -> tuple[Array, ...]:
    """``numpy.nonzero``: one int64 array of indices per axis, for the nonzero elements."""
    a = _coerce(a)
    if not isinstance(a, Array) or a.ndim == 0:
        raise ValueError("calling nonzero on 0d arrays is not allowed (as in numpy); "
                         "reshape it to 1-d first")
    return compute(*_unravel(flat_positions(a), a.shape))


def flatnonzero(a: Any) -> Array:
    """``numpy.flatnonzero``: indices of the nonzero elements of ``a`` flattened."""
    return flat_positions(a)


def argwhere(a: Any) -> Array:
    """``numpy.argwhere``: the indices of nonzero elements, one row per element."""
    from .shape import stack

    a = _coerce(a)
    flat = flat_positions(a)
    if a.ndim == 0:
        from ..creation import zeros

        return zeros((flat.shape[0], 0), np.int64, device=a.device)
    return stack(_unravel(flat, a.shape), axis=1).eval()


def masked_fill(arr: Array, key: Any, value: Any) -> bool:
    """``arr[mask] = value`` as ``arr[...] = where(mask, value, arr)`` in one kernel.

    Applies when the key is one mask over the leading axes (trailing ``:`` or
    ``...`` allowed) and the value, without leading unit axes, broadcasts against
    the axes after the mask (a scalar, a row for a mask over rows): then every
    selected position gets the same value whatever their number.  Returns False
    where it does not apply (the caller scatters to the mask's positions).
    """
    from .indexing import _is_mask

    items = list(key) if isinstance(key, tuple) else [key]
    if not items or not _is_mask(items[0]) or items[0].ndim == 0:
        return False
    rest = items[1:]
    if rest.count(Ellipsis) > 1 or any(k is not Ellipsis and k != slice(None) for k in rest):
        return False
    mask = items[0]
    d = mask.ndim
    if d + sum(k is not Ellipsis for k in rest) > arr.ndim or mask.shape != arr.shape[:d]:
        return False  # the general path raises numpy's error
    if isinstance(value, Constant):
        # as assign converts one: a typed constant is cast, a weak one checked as numpy does
        value = scalar_to(value.value, value.dtype or arr.dtype)
    if isinstance(value, Array):
        vshape = value.shape
    elif isinstance(value, np.ndarray | list | tuple):
        value = np.asarray(value)
        vshape = value.shape
    else:
        vshape = ()
    while vshape and vshape[0] == 1:
        vshape = vshape[1:]
    if len(vshape) > arr.ndim - d:
        return False  # e.g. one value per selected element
    from ..creation import asarray
    from ..ufuncs import where

    if isinstance(value, Array):
        v = value.reshape(vshape).astype(arr.dtype, copy=False)
    else:
        # numpy converts the value to the array's dtype first (OverflowError included)
        v = asarray(np.asarray(value).astype(arr.dtype, casting="unsafe")
                    if isinstance(value, np.ndarray) else np.array(value, dtype=arr.dtype),
                    device=arr.device).reshape(vshape)
    if isinstance(mask, np.ndarray):
        mask = asarray(mask, device=arr.device)
    if arr.is_lazy:
        arr.eval()
    # (no other lazy view of the mask may stay alive: it would be evaluated first)
    full = mask if d == arr.ndim else mask.reshape(mask.shape + (1,) * (arr.ndim - d))
    value = where(full, v, arr)
    del full
    # a lazy mask reading ``arr`` (``x[x > 0] = v``) keeps its value for the caller:
    # it is computed by the same kernel rather than by one of its own first
    assign(arr, value, cast="unsafe", value_is_held=False, also=mask)
    return True


__all__ = ["argwhere", "flatnonzero", "nonzero"]
