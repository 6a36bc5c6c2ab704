"""Views of :mod:`fuseloop.host_eager` on a loop's hot path: a matrix's element, row
or column by steps written out, and a lazy array viewed small twice in a row computed
once (its views then taken as a concrete array's)."""

from __future__ import annotations

import weakref
from typing import Any

import numpy as np

from . import evaluate as _evaluate
from . import host_eager as _eager
from . import host_path as _host
from .array import Array
from .host_eager import (
    EAGER_MAX_WORK,
    HostArray,
    _base,
    _bases,
    _materialise,
    _new,
    _new_host,
    _off,
    _sync,
    getitem,
)
from .stats import tallies as _tallies

_count_operation = _tallies["host_operations"].__next__  # (stats.tally, bound)


def element_or_view(arr: Array, key: Any, got: tuple | None = None
                    ) -> tuple[Any, bool, Any] | bool | None:
    """``arr[key]`` of a concrete array viewed before, for a loop's commonest keys,
    ``A[i, j]``, ``A[i, :j]``, ``A[:, k]``, ``A[1:-1, 2:]`` of a matrix and ``x[i]``,
    ``x[a:b]`` of a vector, its steps written out (read by host_eager.getitem, written
    by host_writes.setitem): ``(numpy view, whether a kept HostArray, the storage)``;
    an element (as the HostArray of its 1-element view) or a row's slice ``A[i, a:b]``
    as a HostArray kept from its second read for the next statements (the same view
    each time: it holds no state of its own; a slice may be empty);
    False for a view not taken here (too large, or an index error, which the general
    path raises); None: not such a key or array.  ``got``: ``arr``'s entry of
    host_eager._bases where the caller has found it."""
    if got is None:
        node = arr._node
        got = _bases.get(id(node))
        if got is None or got[0] is not node:
            return None
    base = got[1]
    tk = type(key)
    if tk is tuple:
        if len(key) != 2 or base.ndim != 2:
            return None
        k0, last = key
        t0, t1 = type(k0), type(last)
        element = t0 is int and t1 is int
        if not element and ((t0 is not slice and t0 is not int)
                            or (t1 is not slice and t1 is not int)):
            return None
    elif base.ndim != 1 or (tk is not int and tk is not slice):
        return None
    else:
        element, last = tk is int, key
    if element:  # (ints only: a slice is not hashable before Python 3.12)
        kept: Any = key
    elif tk is tuple and t0 is int:  # (a row, floyd_warshall's ``path[k, :]``: its parts)
        kept = (0, k0, last.start, last.stop, last.step)  # (no element's key is 5 long)
    else:
        kept = None
    if kept is not None:
        # (an element or row read once keeps its numpy view, one read again its
        # HostArray: keys met once, floyd_warshall's ``path[i, k]``, leave no object for
        # the garbage collector to walk)
        elements = got[3]
        try:
            v = elements.get(kept)
        except TypeError:  # (a slice's bound that is no number: not kept)
            return _sliced(base, key, got)
        if v is not None and type(v) is not np.ndarray:
            if v._of is arr:  # (None: reshaped, or replaced)
                v._key = key  # (this statement's: ``A[k] op= v`` assigns it back)
                return v, True, got[2]
            v = None
        if v is None:
            if element:
                at = slice(last, last + 1 if last != -1 else None)
                try:
                    v = base[k0, at] if tk is tuple else base[at]
                except IndexError:
                    return False
                if v.size != 1:
                    return False
            else:
                got_v = _sliced(base, key, got)
                if type(got_v) is not tuple:
                    return got_v
                v = got_v[0]
            if len(elements) >= _eager.ELEMENTS_MAX:  # (read here: a test sets it)
                elements.clear()
            elements[kept] = v
            again = False
        else:
            again = True
        held = _new(HostArray)  # (host_eager.getitem's view, its fields set here)
        held._np, held.dtype, held.device, held._leaf = v, arr.dtype, arr.device, None
        held._buf, held._shape, held._of, held._key = got[2], () if element else v.shape, \
            arr, key
        if again:
            elements[kept] = held
        return held, True, got[2]
    return _sliced(base, key, got)


def _sliced(base: np.ndarray, key: Any, got: tuple) -> tuple[Any, bool, Any] | bool:
    """:func:`element_or_view`'s view of a row, a column or a block (``u[1:-1, 2:]``)."""
    try:  # (a row, a column or a block: ``u[1:-1, 2:]``)
        v = base[key]
    except (IndexError, TypeError, ValueError):
        return False
    n = v.size  # (an empty view too: ``A_col[A_row[i]:A_row[i + 1]]`` of an empty row)
    if n > EAGER_MAX_WORK or n > _host.HOST_MAX_WORK:
        return False
    return v, False, got[2]


#: the lazy array a small view was last taken of (a weak reference), see _viewed_again
_last_lazy: list[Any] = [None]
#: the most elements of a lazy array computed for its small views
VIEWED_LAZY_MAX = 1 << 24


def _viewed_again(arr: Array, items: tuple) -> bool:
    """Whether the lazy ``arr`` (on a host device, at most VIEWED_LAZY_MAX elements) is
    viewed small a second time in a row: then it is computed (once, as numpy computes
    it) and its views taken here.  A loop over a lazy array's windows (resnet's
    ``conv2d(relu(batchnorm(x)), w)``) otherwise pushed each window through the whole
    expression and computed it again (half of resnet's CPU time)."""
    if not _host.host_device(arr.device) or _host._size(arr._shape) > VIEWED_LAZY_MAX \
            or not arr._shape:
        return False
    try:  # (the view's size, on a stand-in of no memory)
        n = np.broadcast_to(np.empty(1, np.int8), arr._shape)[items].size
    except (IndexError, TypeError, ValueError):
        return False
    if not 0 < n <= EAGER_MAX_WORK:
        return False  # (a large view: fused with the expression, as a stencil's)
    last = _last_lazy[0]
    if last is not None and last() is arr:
        _last_lazy[0] = None
        return True
    _last_lazy[0] = weakref.ref(arr)
    return False


def copy_concrete(arr: Array) -> Array | None:
    """``arr.copy()`` of a small concrete array on a host device: a new buffer holding
    numpy's copy of its elements, made now; None: the lazy copy.  channel_flow's ``pn
    = p.copy()`` (61 x 61) was lazy, so the first view of each copy built nodes, was
    evaluated by the host path and gave the results it met buffers of their own."""
    if type(arr) is not Array or arr._storage is None or _off():
        return None
    got = _base(arr)  # (None: not a leaf, not a host device, a dtype not viewed here)
    if got is None:
        return None
    v = got[0]
    n = v.size
    if not 0 < n <= EAGER_MAX_WORK or n > _host.HOST_MAX_WORK:
        return None
    dtype, shape, device = arr.dtype, arr._shape, arr.device
    storage = _evaluate.allocate(n * dtype.itemsize, device)
    rt = _sync(device)  # (a pooled buffer: kernels that used it last are done)
    with rt.launch_lock:
        _host._typed_bytes(storage, rt, dtype)[:n].reshape(shape)[...] = v
    _count_operation()
    return Array._concrete(storage, dtype, shape)


def flip(arr: HostArray, axis: Any) -> HostArray | None:
    """``np.flip(arr, axis)`` of a HostArray: a view of its memory, or None."""
    if _off() or (axis is not None and type(axis) is not int):
        return None
    if arr._buf is None:
        _materialise(arr)
    try:
        v = np.flip(arr._np, axis)
    except (ValueError, TypeError, np.exceptions.AxisError):
        return None
    return _new_host(v, v.shape, arr.dtype, arr.device, arr._buf)


def _copy_by_0d(arr: Array, key: Any) -> Any:
    """``arr[key]`` for a key holding 0-d integer HostArrays (numpy takes each as its
    integer, and the result as an advanced index's: a copy), or None.  Where the view
    is not taken here (a complex ``arr``), the general path gets the key with plain
    arrays in their place, which it reads as their values too."""
    if type(key) is not tuple or not any(type(k) is HostArray for k in key):
        return None
    ints = []
    for k in key:
        if type(k) is HostArray:
            if k._shape or k.dtype.kind not in "iu":
                return None
            k = int(k)
        ints.append(k)
    view = getitem(arr, tuple(ints))
    if view is not None:
        return view.copy()
    from .ops.indexing import getitem as general

    return general(arr, tuple([_plain(k) if type(k) is HostArray else k for k in key]))


def _plain(x: HostArray) -> Array:
    """A plain concrete array of the HostArray ``x``'s elements (its buffer's view)."""
    out = _new(Array)
    out._storage, out._node, out.device = x._storage, x._node, x.device
    out.dtype, out._shape = x.dtype, x._shape
    return out
