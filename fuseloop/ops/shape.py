"""Shape operations as index remapping inside the consuming kernel.

Views (reshape where strides allow, transpose, broadcast, flip, diagonal, unit
axes) copy nothing: the consuming kernel reads through new strides.  ``roll``
is a gather whose indices are computed in the kernel.  ``tile`` and
``repeat`` broadcast and then copy once, as numpy does.  ``concatenate`` and
``stack`` are lazy too: the consuming kernel reads each element from the one
piece it belongs to (:class:`~fuseloop.expr.nodes.Concat`).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np

from .. import caches as _caches
from ..array import Array, _coerce
from ..errors import AxisError, ShapeError
from ..expr.nodes import Apply, Concat, Gather, Iota, Leaf, Node
from ..expr.views import (
    affine_view,
    broadcast_map,
    concat_node,
    reshape_view,
    transpose_map,
)
from ..host_eager import HostArray
from ..host_eager import flip as host_flip
from ..host_products import concatenate as host_concatenate
from ..host_products import triangle as host_triangle
from ..passes.shifted_views import settle


def normalize_axis(axis: int, ndim: int, what: str = "axis") -> int:
    if not isinstance(axis, int | np.integer):
        raise TypeError(f"{what} must be an integer, got {type(axis).__name__}")
    if not -ndim <= axis < ndim:
        raise AxisError(f"{what} {axis} is out of bounds for an array of dimension {ndim}")
    return int(axis) % ndim if ndim else 0


# (axes tuple, ndim) -> normalize_axes' result: a reduction over a tuple of axes
# (``x.sum(axis=(0, 2))``) in a loop checks and sorts them once
_axes_tuples: dict[tuple[tuple, int], tuple[int, ...]] = {}
AXES_TUPLES_MAX = 1024
_INT_TYPE = frozenset({int})
_caches.register("ops.shape.axes_tuples", _axes_tuples.clear, lambda: len(_axes_tuples),
                 AXES_TUPLES_MAX)


def normalize_axes(axis: Any, ndim: int) -> tuple[int, ...]:
    """Sorted non-negative axes; None means all.  Repeats and out-of-range raise."""
    if axis is None:
        return tuple(range(ndim))
    if type(axis) is int and -ndim <= axis < ndim:  # the common case, quickly
        return (axis % ndim,)
    # (Python ints only: 1.0 and True hash as 1 but are not valid, or not the same, axes)
    tupled = type(axis) is tuple and {*map(type, axis)} <= _INT_TYPE  # (no frame)
    if tupled and (hit := _axes_tuples.get((axis, ndim))) is not None:
        return hit
    axes = (axis,) if isinstance(axis, int | np.integer) else tuple(axis)
    out = tuple(normalize_axis(a, ndim) for a in axes)
    if len(set(out)) != len(out):
        raise AxisError(f"repeated axis in {axis!r}")
    out = tuple(sorted(out))
    if tupled:  # (only valid axes get here)
        if len(_axes_tuples) >= AXES_TUPLES_MAX:
            _axes_tuples.clear()
        _axes_tuples[(axis, ndim)] = out
    return out


def _wrap(arr: Array, node: Node) -> Array:
    """An array for ``node``: a concrete view when it only reads ``arr``'s buffer."""
    if type(node) is Leaf and not arr.is_lazy:
        view = object.__new__(Array)
        view._storage = node.storage
        view._node = node
        view.device = arr.device
        view.dtype = node.dtype
        view._shape = node.shape
        return view
    return Array._lazy(node, arr.device)


def view(arr: Array, shape: tuple[int, ...], offsets: Sequence[int],
         coeffs: Sequence[Sequence[int]]) -> Array:
    if arr._storage is None:
        # (a lazy array read through many overlapping windows may be computed first)
        settle(arr, shape, offsets, coeffs)
    return _wrap(arr, affine_view(arr._node, shape, offsets, coeffs))


# {{{ views


def reshape(a: Any, shape: Any, order: str = "C", *, copy: bool | None = None) -> Array:
    """Like ``numpy.reshape``; a view when the strides allow, else one copy.

    ``copy`` (the Array API's): True always copies, False raises ValueError where a view
    is impossible."""
    a = _coerce(a)
    if order != "C":
        raise NotImplementedError("fuseloop arrays are C-ordered: only order='C' is supported")
    shape = resolve_shape(a, shape)
    node = reshape_view(a._node, shape)
    if copy:
        return reshape(a.copy(), shape)
    if node is None and copy is False:
        raise ValueError(f"reshape(copy=False): the strides of this view (shape {a.shape}) "
                         f"cannot show it as shape {shape} without a copy")
    if node is None:
        # numpy copies here too: materialise contiguously, then view
        fresh = a.copy().eval()
        node = reshape_view(fresh._node, shape)
        assert node is not None
        return _wrap(fresh, node)
    return _wrap(a, node)


# (array shape, requested shape) -> the resolved shape (resolve_shape), for a request
# of Python ints (a tuple of them or one)
_resolved: dict[tuple, tuple[int, ...]] = {}
RESOLVED_MAX = 4096
_caches.register("ops.shape.resolved", _resolved.clear, lambda: len(_resolved), RESOLVED_MAX)


def resolve_shape(a: Array, shape: Any) -> tuple[int, ...]:
    """``shape`` for reshaping ``a``: a tuple of ints, its -1 resolved (checked)."""
    plain = type(shape) is int or (type(shape) is tuple and all(type(s) is int for s in shape))
    if plain:
        hit = _resolved.get((a._shape, shape))
        if hit is not None:
            return hit
    out = _resolve_shape(a, shape)
    if plain:
        if len(_resolved) >= RESOLVED_MAX:
            _resolved.clear()
        _resolved[(a._shape, shape)] = out
    return out


def _resolve_shape(a: Array, shape: Any) -> tuple[int, ...]:
    if isinstance(shape, int | np.integer):
        shape = (int(shape),)
    shape = tuple(int(s) for s in shape)
    if shape.count(-1) > 1:
        raise ShapeError(f"can only specify one unknown dimension, got {shape}")
    if -1 in shape:
        known = math.prod(s for s in shape if s != -1)
        if known == 0 or a.size % known:
            raise ShapeError(f"cannot reshape array of size {a.size} (shape {a.shape}) "
                             f"into shape {shape}")
        shape = tuple(a.size // known if s == -1 else s for s in shape)
    if any(s < 0 for s in shape) or math.prod(shape) != a.size:
        raise ShapeError(f"cannot reshape array of size {a.size} (shape {a.shape}) "
                         f"into shape {shape}")
    return shape


def ravel(a: Any) -> Array:
    return reshape(a, (-1,))


def transpose(a: Any, axes: Sequence[int] | None = None) -> Array:
    a = _coerce(a)
    n = a.ndim
    perm = tuple(range(n - 1, -1, -1)) if axes is None else \
        tuple(normalize_axis(x, n) for x in axes)
    if sorted(perm) != list(range(n)):
        raise AxisError(f"axes {axes!r} are not a permutation of the {n} axes")
    off, coeffs = transpose_map(perm)
    return view(a, tuple(a.shape[k] for k in perm), off, coeffs)


permute_dims = transpose


def swapaxes(a: Any, axis1: int, axis2: int) -> Array:
    a = _coerce(a)
    perm = list(range(a.ndim))
    i, j = normalize_axis(axis1, a.ndim), normalize_axis(axis2, a.ndim)
    perm[i], perm[j] = perm[j], perm[i]
    return transpose(a, perm)


def moveaxis(a: Any, source: Any, destination: Any) -> Array:
    a = _coerce(a)
    src: list[Any] = [source] if isinstance(source, int | np.integer) else list(source)
    dst: list[Any] = ([destination] if isinstance(destination, int | np.integer)
                      else list(destination))
    if len(src) != len(dst):
        raise ValueError("source and destination must have the same number of elements")
    src = [normalize_axis(s, a.ndim, "source") for s in src]
    dst = [normalize_axis(d, a.ndim, "destination") for d in dst]
    order = [k for k in range(a.ndim) if k not in src]
    for d, s in sorted(zip(dst, src)):
        order.insert(d, s)
    return transpose(a, order)


def broadcast_to(a: Any, shape: Any) -> Array:
    a = _coerce(a)
    shape = (int(shape),) if isinstance(shape, int | np.integer) else tuple(shape)
    if len(shape) < a.ndim or any(
            s != n and s != 1 for s, n in zip(a.shape, shape[len(shape) - a.ndim:])):
        raise ShapeError(f"cannot broadcast an array of shape {a.shape} to shape {shape}")
    off, coeffs = broadcast_map(a.shape, shape)
    return view(a, shape, off, coeffs)


def expand_dims(a: Any, axis: Any) -> Array:
    a = _coerce(a)
    axes = (axis,) if isinstance(axis, int | np.integer) else tuple(axis)
    n = a.ndim + len(axes)
    where = normalize_axes(axes, n)
    it = iter(a.shape)
    shape = tuple(1 if d in where else next(it) for d in range(n))
    return reshape(a, shape)


def squeeze(a: Any, axis: Any = None) -> Array:
    a = _coerce(a)
    if axis is None:
        drop = {d for d, s in enumerate(a.shape) if s == 1}
    else:
        drop = set(normalize_axes(axis, a.ndim))
        for d in drop:
            if a.shape[d] != 1:
                raise ShapeError(f"cannot select an axis to squeeze out which has size not "
                                 f"equal to one (axis {d} of shape {a.shape})")
    return reshape(a, tuple(s for d, s in enumerate(a.shape) if d not in drop))


def flip(a: Any, axis: Any = None) -> Array:
    if type(a) is HostArray and (got := host_flip(a, axis)) is not None:
        return got  # (a small view on the CPU: numpy's, fuseloop.host_eager)
    a = _coerce(a)
    if a.ndim == 0:  # numpy returns a copy (a scalar), not a view, of a 0-d array
        normalize_axes(axis, 0)
        return a.copy()
    axes = set(normalize_axes(axis, a.ndim))
    n = a.ndim
    if type(a) is Array:  # (numpy's definition, a basic index: indexing's one-pass view)
        return a[tuple(slice(None, None, -1) if k in axes else slice(None) for k in range(n))]
    off = tuple(a.shape[k] - 1 if k in axes else 0 for k in range(n))
    coeffs = tuple(tuple((-1 if k in axes else 1) if d == k else 0 for d in range(n))
                   for k in range(n))
    return view(a, a.shape, off, coeffs)


def diagonal(a: Any, offset: int = 0, axis1: int = 0, axis2: int = 1) -> Array:
    a = _coerce(a)
    if a.ndim < 2:
        raise ShapeError(f"diag requires an array of at least two dimensions, got {a.shape}")
    i, j = normalize_axis(axis1, a.ndim, "axis1"), normalize_axis(axis2, a.ndim, "axis2")
    if i == j:
        raise AxisError("axis1 and axis2 cannot be the same")
    rest = [k for k in range(a.ndim) if k not in (i, j)]
    r0, c0 = max(0, -offset), max(0, offset)
    length = max(0, min(a.shape[i] - r0, a.shape[j] - c0))
    shape = (*tuple(a.shape[k] for k in rest), length)
    m = len(shape)
    off, coeffs = [], []
    for k in range(a.ndim):
        if k == i or k == j:
            off.append(r0 if k == i else c0)
            coeffs.append(tuple(1 if d == m - 1 else 0 for d in range(m)))
        else:
            p = rest.index(k)
            off.append(0)
            coeffs.append(tuple(1 if d == p else 0 for d in range(m)))
    return view(a, shape, off, coeffs)


def _axis_index(shape: tuple[int, ...], axis: int) -> Node:
    """The index along ``axis`` of each element of ``shape`` (no memory)."""
    strides = tuple(1 if d == axis else 0 for d in range(len(shape)))
    return Iota(shape, np.dtype(np.int64), strides, 0)


def _tri(a: Any, k: int, upper: bool) -> Array:
    from ..ufuncs import where

    if type(a) is HostArray and (got := host_triangle(a, k, upper)) is not None:
        return got  # (a small value made at once on the CPU: numpy's, host_products)
    a = _coerce(a)
    if a.ndim < 2:
        raise ShapeError(f"triu/tril need at least two dimensions, got shape {a.shape}")
    rows = Array._lazy(_axis_index(a.shape, a.ndim - 2), a.device)
    cols = Array._lazy(_axis_index(a.shape, a.ndim - 1), a.device)
    keep = (cols - rows >= k) if upper else (cols - rows <= k)
    return where(keep, a, np.zeros((), a.dtype)[()])


def triu(a: Any, k: int = 0) -> Array:
    return _tri(a, k, True)


def tril(a: Any, k: int = 0) -> Array:
    return _tri(a, k, False)

# }}}

# {{{ remaps that copy or gather


def roll(a: Any, shift: Any, axis: Any = None) -> Array:
    a = _coerce(a)
    if axis is None:
        return reshape(roll(ravel(a), shift, 0), a.shape)
    shifts = (shift,) if isinstance(shift, int | np.integer) else tuple(shift)
    axes = (axis,) if isinstance(axis, int | np.integer) else tuple(axis)
    if len(shifts) == 1 and len(axes) > 1:
        shifts = shifts * len(axes)
    if len(shifts) != len(axes):
        raise ValueError("shift and axis must have the same length")
    out = a
    for s, ax in zip(shifts, axes):
        ax = normalize_axis(ax, a.ndim)
        n = a.shape[ax]
        if n == 0 or s % n == 0:
            continue
        pos = Array._lazy(Iota((n,), _position_dtype(2 * n)), a.device)
        index = (pos + (n - s % n)) % n
        out = Array._lazy(Gather(out._node, index._node, ax, checked=False), a.device)
    return a.copy() if out is a else out  # numpy's roll always copies


def _position_dtype(bound: int) -> np.dtype:
    """int32 for computed positions below 2**31: 64-bit division is several times
    slower on CPUs and emulated on GPUs."""
    return np.dtype(np.int32 if bound < 2**31 else np.int64)


def _repeat_axis(a: Array, ax: int, length: int, divisor: int = 1,
                 modulus: int | None = None) -> Array:
    """``a`` read along ``ax`` at ``i // divisor`` (then ``% modulus``) for ``i < length``:
    a gather whose index the consuming kernel computes (no copy, always in range)."""
    index = Array._lazy(Iota((length,), _position_dtype(length)), a.device)
    if divisor != 1:
        index = index // divisor
    if modulus is not None:
        index = index % modulus
    return Array._lazy(Gather(a._node, index._node, ax, checked=False), a.device)


def tile(a: Any, reps: Any) -> Array:
    """Like ``numpy.tile``: a new array, read by its consumer through computed indices."""
    a = _coerce(a)
    reps = (reps,) if isinstance(reps, int | np.integer) else tuple(reps)
    if any(int(r) < 0 for r in reps):
        raise ValueError(f"negative repetitions are not allowed: {reps}")
    n = max(a.ndim, len(reps))
    shape = (1,) * (n - a.ndim) + a.shape
    reps = (1,) * (n - len(reps)) + tuple(int(r) for r in reps)
    out = reshape(a, shape)
    if 0 in shape or 0 in reps:
        return _empty_result(out, tuple(r * s for r, s in zip(reps, shape)))
    for ax, (r, s) in enumerate(zip(reps, shape)):
        if r != 1:
            out = _repeat_axis(out, ax, r * s, modulus=s)
    # without a gather (all reps 1) still a new array, as numpy's
    return _lazy_copy(out) if all(r == 1 for r in reps) else out


def repeat(a: Any, repeats: Any, axis: int | None = None) -> Array:
    """Like ``numpy.repeat``: one count for all elements reads ``a`` through computed
    indices (no copy); a count per element is read to the host (it fixes the result's
    length) and becomes a gather."""
    a = _coerce(a)
    if not isinstance(repeats, int | np.integer):
        return _repeat_each(a, repeats, axis)
    if repeats < 0:
        raise ValueError("negative dimensions are not allowed")
    if axis is None:
        a, axis = ravel(a), 0
    ax = normalize_axis(axis, a.ndim)
    r = int(repeats)
    shape = (*a.shape[:ax], a.shape[ax] * r, *a.shape[ax + 1:])
    if a.shape[ax] * r == 0:
        return _empty_result(a, shape)
    if r == 1:
        return _lazy_copy(a)  # numpy's repeat always copies
    return _repeat_axis(a, ax, a.shape[ax] * r, divisor=r)


def _repeat_each(a: Array, repeats: Any, axis: int | None) -> Array:
    counts = repeats.get() if isinstance(repeats, Array) else np.asarray(repeats)
    if counts.dtype.kind not in "iu":
        raise TypeError(f"repeat counts must be integers, not {counts.dtype}")
    if counts.ndim > 1:
        raise ShapeError(f"repeat counts must be 0-d or 1-D, got shape {counts.shape}")
    if counts.size == 1:
        return repeat(a, int(counts.reshape(())), axis)
    if axis is None:
        a, axis = ravel(a), 0
    ax = normalize_axis(axis, a.ndim)
    if counts.size != a.shape[ax]:
        raise ShapeError(f"repeat: {counts.size} counts for an axis of length {a.shape[ax]} "
                         f"(shape {a.shape}, axis {ax})")
    if (counts < 0).any():
        raise ValueError("repeat counts must not be negative")
    index = np.repeat(np.arange(a.shape[ax], dtype=np.int64), counts)
    if index.size == 0:
        return _empty_result(a, (*a.shape[:ax], 0, *a.shape[ax + 1:]))
    from ..creation import asarray

    where = Array._lazy(Gather(a._node, asarray(index, device=a.device)._node, ax,
                               checked=False), a.device)
    return where


def _lazy_copy(a: Array) -> Array:
    """A new array with ``a``'s values, computed by its consumer (later writes to
    ``a`` evaluate it first, as for any lazy reader)."""
    node = a._node
    return Array._lazy(Apply("positive", (node,), (a.dtype, a.dtype), node.shape), a.device)


def _empty_result(a: Array, shape: tuple[int, ...]) -> Array:
    """An empty result of ``a``'s dtype and device (nothing to read)."""
    from ..creation import empty

    return empty(shape, dtype=a.dtype, device=a.device)


def concatenate(arrays: Sequence[Any], axis: int | None = 0) -> Array:
    """Like ``numpy.concatenate``, lazily: no copy until a consumer reads the result.

    The result is a new value (later writes to the inputs do not show through):
    the inputs' pending readers mechanism evaluates it before such a write.
    """
    from ..dtypes import result_type

    arrs = [_coerce(x) for x in arrays]
    if not arrs:
        raise ValueError("need at least one array to concatenate")
    if axis is None:
        arrs = [ravel(x) for x in arrs]
        axis = 0
    nd = arrs[0].ndim
    if nd == 0:
        raise ShapeError("zero-dimensional arrays cannot be concatenated")
    ax = normalize_axis(axis, nd)
    for x in arrs[1:]:
        if x.ndim != nd or any(p != q for d, (p, q) in enumerate(zip(x.shape, arrs[0].shape))
                               if d != ax):
            raise ShapeError(
                "all the input array dimensions except for the concatenation axis must match "
                f"exactly: {arrs[0].shape} and {x.shape} along axis {ax}")
    dt = result_type(*[x.dtype for x in arrs])
    if type(arrs[0]) is HostArray and (got := host_concatenate(arrs, ax, dt)) is not None:
        return got  # (small values made at once on the CPU: numpy's copy, host_products)
    # pieces of the result dtype: a cast is elementwise, so views still reach the leaves
    pieces = [x._node if x.dtype == dt else x.astype(dt)._node for x in arrs]
    node = concat_node(pieces, ax)
    if type(node) is not Concat:  # one non-empty piece: still a copy, as numpy's
        node = Apply("positive", (node,), (dt, dt), node.shape)
    return Array._lazy(node, arrs[0].device)


def stack(arrays: Sequence[Any], axis: int = 0) -> Array:
    arrs = [_coerce(x) for x in arrays]
    if not arrs:
        raise ValueError("need at least one array to stack")
    if any(x.shape != arrs[0].shape for x in arrs):
        raise ShapeError(f"all input arrays must have the same shape, got "
                         f"{[x.shape for x in arrs]}")
    ax = normalize_axis(axis, arrs[0].ndim + 1)
    return concatenate([expand_dims(x, ax) for x in arrs], axis=ax)

# }}}


__all__ = ["broadcast_to", "concatenate", "diagonal", "expand_dims", "flip", "moveaxis",
           "permute_dims", "ravel", "repeat", "reshape", "roll", "squeeze", "stack",
           "swapaxes", "tile", "transpose", "tril", "triu"]
