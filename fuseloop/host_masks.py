"""Boolean-mask selections and writes of small arrays on a CPU device, done by numpy in
host memory (:mod:`fuseloop.host_path`'s evaluation).

``x[x > 0]`` and ``x[x > 0] = v`` with a mask of the array's own shape (NPBench's nbody:
``inv_r3[inv_r3 > 0] = inv_r3[inv_r3 > 0] ** (-1.5)`` on 625 elements, every step)
went through a compaction kernel, a read of its count and a gather or scatter kernel:
a wait on the device and 2-3 launches each.  Where the arrays are small and their
buffers host memory, numpy selects or writes them at once; the values are numpy's
(``x[m]`` is a copy, in C order; ``x[m] = v`` takes ``v`` of the selection's length or
0-d, cast as an assignment casts).  Anything else returns None or False and the
general path does it (and raises its errors).

Selecting and writing move elements without computing them, so arrays of up to
:data:`MASK_MAX_ELEMENTS` elements (complex ones included) are taken once their
elements and mask are in buffers (a lazy array, mask or value is computed first, by a
kernel): mandelbrot's ``Z[I] = Z[I]**2 + C[I]`` on 15625 complex elements
took a compaction scan, a wait and a gather or scatter per selection.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from . import evaluate as _evaluate
from . import flags as _flags
from . import host_path as _host
from .dtypes import scalar_to
from .expr.nodes import Leaf, Scalar, recent_lazy
from .host_path import _DTYPES, _State, _Unsupported, _value, _view
from .runtime.devices import _runtime
from .stats import increment as _count
from .trace_hooks import trace_checks

#: the most elements a mask selection or write of concrete arrays is done by numpy for
#: (moving elements costs numpy ~1 ns each; the kernels' compaction a scan, a wait on
#: the device and a gather or scatter: ~0.4 ms on PoCL at 16k elements)
MASK_MAX_ELEMENTS = 1 << 16
# dtypes moved here (complex ones are only selected and written, never computed)
_MOVED = _DTYPES | frozenset("FD")


def _arrays(ta: type, tb: type) -> bool:
    """Whether ``ta`` and ``tb`` are both fuseloop arrays' classes (``tb`` an array's:
    an Array, or a small view's, fuseloop.host_eager.HostArray)."""
    return ta is tb or issubclass(ta, tb) or issubclass(tb, ta)


def _taken(arr: Any, key: Any) -> Any:
    """The device's runtime when ``arr[key]`` is a small selection by a boolean array
    of ``arr``'s shape that numpy may do here now, else None.  Above
    :data:`HOST_MAX_WORK` elements, or for complex elements, a lazy ``arr`` or ``key``
    is computed first (by a kernel)."""
    shape = arr._shape
    if not _arrays(type(key), type(arr)) or key.dtype.kind != "b" or key._shape != shape \
            or not shape or trace_checks or key.device is not arr.device \
            or arr.dtype.char not in _MOVED:
        return None
    size = _host._size(shape)
    device = arr.device
    if not size or size > MASK_MAX_ELEMENTS or not _host.HOST_MAX_WORK \
            or not _host.host_device(device) \
            or _evaluate.capturing_threads[0] or _evaluate.recording_threads[0]:
        return None
    moved = size > _host.HOST_MAX_WORK or arr.dtype.char not in _DTYPES
    if moved:
        for a in (arr, key):  # (mandelbrot2's ``Xi[I]`` of an mgrid, ``I = abs(Z) > h``)
            if type(a._node) is not Leaf:
                a.eval()  # (one kernel each; kept for the array's next selection)
                if type(a._node) is not Leaf:
                    return None
    elif not _host.small_reads((arr._node, key._node)):
        return None
    rt = _runtime(device)
    if rt.deferred:
        if not moved:
            return None
        rt.flush()  # (launches writing them, deferred: enqueued before the wait; the
        # compaction would wait on them all the same)
    return rt


def _values(node: Any, shape: tuple[int, ...], rt: Any) -> np.ndarray:
    """``node``'s elements (computed here unless a leaf) as an array of ``shape`` (a
    broadcast view only where its own shape is another: numpy's broadcast_to is a
    Python function, a tenth of a small selection's cost)."""
    if type(node) is Leaf and node.dtype.char in _MOVED:  # (complex too: only moved)
        v = _view(node.storage, rt, node.dtype, node.shape, node.strides, node.offset)
    else:
        v = _value(node, _State(rt, None))
    return v if node.shape == shape and type(v) is np.ndarray else np.broadcast_to(v, shape)


def select(arr: Any, key: Any) -> Any:
    """``arr[key]`` for a boolean array ``key`` of ``arr``'s shape (both small, concrete
    or lazy, on the CPU device): a new concrete 1-D array, or None."""
    rt = _taken(arr, key)
    if rt is None:
        return None
    shape, dtype = arr._shape, arr.dtype
    with rt.launch_lock:
        rt.finish()
        token = _host._errors.set(_host._QUIET) if _host._QUIET is not None else None
        try:
            values = _values(arr._node, shape, rt)
            mask = _values(key._node, shape, rt)
        except (_Unsupported, RecursionError, TypeError, ValueError):
            return None
        finally:
            if token is not None:
                _host._errors.reset(token)
        n = int(np.count_nonzero(mask))
        storage = _evaluate.allocate(n * dtype.itemsize, arr.device)
        if n:  # (selected straight into the new buffer: no temporary copied over)
            out = _view(storage, rt, dtype, (n,), None, 0)
            np.compress(mask.reshape(-1), values.reshape(-1), out=out)
    _count("host_evaluations")
    return type(arr)._concrete(storage, dtype, (n,))


def assign(arr: Any, key: Any, value: Any) -> bool:
    """``arr[key] = value`` for an array ``arr`` and a boolean array ``key`` of its shape
    (small, on the CPU device), ``value`` a Python float or int or an array of the
    selection's length or 0-d: written here (lazy arrays reading the elements written
    computed first, as the general path does); False: nothing done."""
    rt = _taken(arr, key)
    if rt is None:
        return False
    if arr._storage is None:
        arr.eval()  # (a lazy target gets its buffer first, as on the general path)
    storage, leaf = arr._storage, arr._node
    if storage is None or type(leaf) is not Leaf:
        return False
    dtype = arr.dtype
    tv = type(value)
    if tv is float or tv is int:
        node: Any = Scalar(scalar_to(value, dtype))
    elif _arrays(tv, type(arr)) and value.device is arr.device and len(value._shape) <= 1:
        node = value._node
        if type(node) is not Leaf and (dtype.char not in _DTYPES
                                       or _host._size(value._shape) > _host.HOST_MAX_WORK):
            if value.dtype != dtype or _host._size(value._shape) > MASK_MAX_ELEMENTS:
                return False
            node = value.eval()._node  # (by a kernel: not computed here)
            if type(node) is not Leaf:
                return False
        node = _evaluate.cast_node(node, dtype)
    else:
        return False
    if type(node) is not Leaf and not _host.small_reads((node,)):
        return False
    readers = storage.live_readers() if recent_lazy or storage.readers else None
    if readers:
        written = (leaf.shape, leaf.view_strides(), leaf.offset)
        pending = [r for r in readers if r._storage is None and not _evaluate.reads_outside(
            r._node, storage, written, dtype.itemsize)]
        if pending:  # (the mask itself, often: computed first, then read from its buffer)
            from .assignment import compute

            compute(*pending)
    _flags.check_pending()
    shape = arr._shape
    if rt.deferred:  # (launches of the values computed above: enqueued before the wait)
        rt.flush()
    with rt.launch_lock:
        rt.finish()
        token = _host._errors.set(_host._QUIET) if _host._QUIET is not None else None
        try:
            mask = _values(key._node, shape, rt)
            tn = type(node)
            v = _values(node, node.shape, rt) if tn is Leaf else node.value \
                if tn is Scalar else _value(node, _State(rt, None))
            n = int(np.count_nonzero(mask))
            if np.shape(v) not in ((), (n,)):
                return False  # (the general path raises numpy's error, or broadcasts)
            target = _view(storage, rt, dtype, shape, leaf.strides, leaf.offset)
        except (_Unsupported, RecursionError, TypeError, ValueError):
            return False
        finally:
            if token is not None:
                _host._errors.reset(token)
        target[mask] = v
    _count("host_evaluations")
    return True
