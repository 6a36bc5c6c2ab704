"""Unbuffered scatters with atomics: ``fl.add.at`` (numpy's ``ufunc.at``), ``bincount``,
``histogram``.

``fl.add.at(a, idx, v)`` is ``a[idx] = v`` (the scatter of :mod:`fuseloop.ops.indexing`,
same index rules and checks) whose store is an atomic update of the element
(``Target.atomic``, lowered by ``lower.stores.atomic_store`` to a compare-and-swap
loop): repeated indices each count, as in numpy, and the values' expression is
computed in the scatter's kernel.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from ..array import Array
from ..errors import DTypeError, ShapeError
from ..expr.nodes import Gather, Node

# the binary operations that have an ``.at`` (numpy's names)
AT_OPS = ("add", "subtract", "maximum", "minimum")
# what an atomic update can hold: a compare-and-swap on 4 or 8 bytes (Loopy generates
# it for these; not for unsigned integers)
ATOMIC_DTYPES = frozenset(np.dtype(t) for t in (np.int32, np.int64, np.float32, np.float64))


def ufunc_at(op: str, a: Array, indices: Any, values: Any) -> None:
    """``numpy.<op>.at(a, indices, values)``: ``a[indices] = op(a[indices], values)``,
    unbuffered (each repeated index applies again), in place, in one kernel."""
    if not isinstance(a, Array):
        raise TypeError(f"fl.{op}.at writes into a fuseloop array, got {type(a).__name__}")
    if a.dtype not in ATOMIC_DTYPES:
        raise DTypeError(
            f"fl.{op}.at: atomic updates are available for int32, int64, float32 and "
            f"float64 arrays, not {a.dtype}; convert with .astype() first")
    vdtype = values.dtype if isinstance(values, Array) else np.result_type(
        a.dtype, values) if isinstance(values, bool | int | float) else np.asarray(values).dtype
    if not np.can_cast(vdtype, a.dtype, "same_kind"):
        raise DTypeError(f"fl.{op}.at: cannot cast values of dtype {vdtype} into an array of "
                         f"dtype {a.dtype} with casting rule 'same_kind' (numpy's rule)")
    if a.is_lazy:
        a.eval()
    from . import scatter_add_cpu
    from .indexing import setitem  # (not at import: fl.add.at is made with the ufuncs)

    if scatter_add_cpu.takes(op, a, indices, values):
        indices, values = scatter_add_cpu.computed(indices, values)
        if indices.is_contiguous and values.is_contiguous:  # (computed: a buffer of its own)
            _readers_first(a)
            scatter_add_cpu.scatter_add(op, a, indices, values)
            return
    from . import scatter_kernel

    if scatter_kernel.takes(a, indices, values, op):  # (what setitem would find, sooner)
        scatter_kernel.scatter(a, indices, values, op)
        return
    setitem(a, indices, values, held=False, atomic=op)


def _readers_first(a: Array) -> None:
    """Evaluate the lazy arrays still reading ``a`` before it is written in place."""
    from ..assignment import compute
    from ..expr.nodes import register_readers

    register_readers()
    assert a._storage is not None
    pending = [r for r in a._storage.live_readers() if r._storage is None]
    if pending:
        compute(*pending)


class _At:
    """``fl.<op>.at``: attached to the ufunc functions of :data:`AT_OPS`."""

    def __init__(self, op: str) -> None:
        self.op = op
        self.__doc__ = f"numpy's ``{op}.at``: unbuffered in-place ``{op}`` at indices."

    def __call__(self, a: Array, indices: Any, values: Any = None) -> None:
        if values is None:
            raise TypeError(f"fl.{self.op}.at takes values (the second operand)")
        ufunc_at(self.op, a, indices, values)


def attach(functions: dict[str, Any]) -> None:
    """Give ``fl.add`` (and the others of :data:`AT_OPS`) their ``.at``."""
    for op in AT_OPS:
        functions[op].at = _At(op)


def _as_array(x: Any) -> Array:
    from ..creation import asarray

    return x if isinstance(x, Array) else asarray(x)


def bincount(x: Any, weights: Any = None, minlength: int = 0) -> Array:
    """numpy's ``bincount``: the count (or the sum of ``weights``) of each value of the
    non-negative integer array ``x``.  One reduction finds ``max(x)`` (read back: it
    sets the result's length), then one scatter-add kernel counts."""
    from ..creation import zeros
    from ..ops.reductions import max as _max
    from ..ops.reductions import min as _min

    x = _as_array(x)
    if x.ndim != 1:
        raise ShapeError(f"fl.bincount takes a 1-D array, got shape {x.shape}")
    if x.dtype.kind not in "iub":
        raise DTypeError(f"fl.bincount takes non-negative integers, got dtype {x.dtype}")
    if minlength < 0:
        raise ValueError("fl.bincount: minlength must be non-negative")
    w = None if weights is None else _as_array(weights)
    if w is not None and w.shape != x.shape:
        raise ShapeError(f"fl.bincount: weights of shape {w.shape} do not match x of shape "
                         f"{x.shape}")
    if x.size:
        lo, hi = int(_min(x)), int(_max(x))  # (two small reductions; read back)
        if lo < 0:
            raise ValueError(f"fl.bincount: x must be non-negative, found {lo}")
        n = max(hi + 1, minlength)
    else:
        n = minlength
    dtype = np.dtype(np.int64) if w is None else np.dtype(np.float64)  # (numpy's)
    out = zeros(n, dtype=dtype, device=x.device)
    if not x.size:
        return out
    if w is None:
        from ..creation import asarray
        from . import bincount_kernel

        xc = x.eval() if x.is_contiguous or x.is_lazy else asarray(x, copy=True)
        if bincount_kernel.supported(xc.eval(), n):
            bincount_kernel.count(xc, out)
            return out
    # (weights already float64 are passed as they are: a computed array may take the
    # CPU's path without atomics, see scatter_add_cpu)
    ufunc_at("add", out, x, 1 if w is None else w if w.dtype == dtype else w.astype(dtype))
    return out


def histogram(a: Any, bins: Any = 10, range: tuple[float, float] | None = None,
              weights: Any = None, density: bool = False) -> tuple[Array, np.ndarray]:
    """numpy's ``histogram`` of the flattened ``a``: ``(hist, bin_edges)``.

    ``bins``: a count (edges evenly spaced over ``range``, by default ``a``'s minimum
    and maximum: one reduction, read back) or the increasing edges themselves.  The
    edges are numpy's own (``np.histogram_bin_edges``); each value's bin is found by a
    binary search over them in the counting kernel, the last bin including its right
    edge; values outside the edges (and NaN) are not counted.  ``hist`` is a device
    array: int64 counts, or sums of ``weights`` in their dtype; with ``density`` float64
    densities.  ``bin_edges`` is a numpy array.
    """
    from .. import ufuncs
    from ..creation import asarray, zeros
    from ..ops.reductions import max as _max
    from ..ops.reductions import min as _min
    from ..ops.shape import ravel

    a = ravel(_as_array(a))
    w = None if weights is None else ravel(_as_array(weights))
    if w is not None and w.shape != a.shape:
        raise ShapeError(f"fl.histogram: weights of shape {w.shape} do not match a of "
                         f"shape {a.shape}")
    if a.dtype.kind not in "iubf":
        raise DTypeError(f"fl.histogram takes real numbers, got dtype {a.dtype}")
    if isinstance(bins, int | np.integer) and range is None and a.size:
        # numpy's autodetected range: the data's minimum and maximum, in its dtype
        from ..assignment import compute

        # (numpy scalars of a's dtype: numpy's edges are computed in that precision)
        lo, hi = (r.get()[()] for r in compute(_min(a), _max(a)))  # one kernel
        if not (math.isfinite(lo) and math.isfinite(hi)):
            raise ValueError(f"autodetected range of [{lo}, {hi}] is not finite")
        limits: Any = (lo, hi)
    else:
        limits = range
    edges = np.histogram_bin_edges(np.empty(0, a.dtype), bins, range=limits)
    nb = len(edges) - 1
    hdtype = np.dtype(np.int64) if w is None else w.dtype
    hist = zeros(nb, dtype=hdtype, device=a.device)
    if a.size:
        x = a.astype(edges.dtype)
        e = asarray(edges, device=a.device)
        k = _equal_bin(e._node, edges, x) if isinstance(bins, int | np.integer) else \
            _count_at_most(e._node, len(edges), x) - 1
        inside = (x >= edges[0]) & (x <= edges[-1])
        # the last bin is closed; values outside (and NaN) add 0 to bin 0
        k = ufuncs.where(inside, ufuncs.FUNCTIONS["minimum"](k, nb - 1), 0)
        ones: Any = 1 if w is None else w
        ufunc_at("add", hist, k, ufuncs.where(inside, ones, 0).astype(hdtype))
    if density:
        widths = asarray(np.diff(edges), device=a.device)
        return hist.astype(np.float64) / widths / hist.sum().astype(np.float64), edges
    return hist, edges


def _count_at_most(edges: Node, m: int, x: Array) -> Array:
    """How many of the ``m`` increasing ``edges`` are <= each ``x``
    (``np.searchsorted(edges, x, side="right")``): a branch-free binary search, one
    unchecked gather (its position clamped into range) per halving, in the consumer's
    kernel."""
    from .. import ufuncs

    found: Any = ufuncs.astype(x < x, np.int64)  # zeros of x's shape (NaN too)
    step = 1 << (m.bit_length() - 1)
    while step:
        pos = ufuncs.FUNCTIONS["minimum"](found + (step - 1), m - 1)
        edge = Array._lazy(Gather(edges, pos._node, 0, checked=False), x.device)
        found = ufuncs.where((found + step <= m) & (edge <= x), found + step, found)
        step >>= 1
    return found


def _equal_bin(edges: Node, values: np.ndarray, x: Array) -> Array:
    """The bin of each ``x`` among equal-width ``edges`` (``values``: theirs, increasing)
    whose last is closed, for ``x`` between the first and last edge: the bin its
    distance from the first edge gives, moved by one where the edges themselves say
    the rounding put it in a neighbour (numpy's rule for equal bins).  Two gathers
    where the binary search of :func:`_count_at_most` takes one per halving."""
    from .. import ufuncs

    nb = len(values) - 1
    lo, hi = float(values[0]), float(values[-1])
    guess = ufuncs.astype((ufuncs.astype(x, np.float64) - lo) * (nb / (hi - lo)), np.int64)
    k = ufuncs.FUNCTIONS["minimum"](ufuncs.FUNCTIONS["maximum"](guess, 0), nb - 1)
    left = Array._lazy(Gather(edges, k._node, 0, checked=False), x.device)
    right = Array._lazy(Gather(edges, (k + 1)._node, 0, checked=False), x.device)
    down = ufuncs.astype(x < left, np.int64)
    up = ufuncs.astype((x >= right) & (k < nb - 1), np.int64)
    return k - down + up
