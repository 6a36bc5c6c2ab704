"""Small operations computed at once by numpy on a CPU device, before any lazy tree.

A loop's statement ``A[i, j] -= A[i, :j] @ A[:j, j]`` built a contraction (a product,
its aligned views, a reduction node: ~10 us of host time on this project's CPU) only
for :mod:`fuseloop.host_path` to compute it with numpy a moment later.  Where the
operands are small arrays of a device whose buffers are host memory
(:func:`fuseloop.host_path.host_device`), the product is computed here when it is
asked for: its value is what the lazy tree would evaluate to (a lazy array whose
inputs are written later is computed before the write, so reading the inputs now
gives the same elements).  A 0-d result becomes a lazy array holding the value as a
kernel argument (a :class:`~fuseloop.expr.nodes.Scalar` node: no buffer, no reader,
and a kernel reading it later takes the value as an argument, keyed by its dtype
only); a larger one is written to a new pooled buffer.

Taken only under the host path's own conditions (its limit ``HOST_MAX_WORK``, read
at each call, so ``FUSELOOP_HOST_PATH=0`` turns this off too; nothing captured or
recorded; no traced function; no small launch waiting to be enqueued) and for real
floating dtypes that agree (the product's dtype is then the operands').  Anything
else returns None and the caller builds the lazy tree as before.
``fl.stats()["host_operations"]`` counts the operations computed here.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from . import host_path as _host
from . import stats as _stats
from .expr.nodes import Leaf, Scalar
from .runtime.devices import _runtime
from .trace_hooks import trace_checks

_FLOATS = frozenset("fd")
_new = object.__new__


def _operand(x: Any, rt: Any) -> Any:
    """The elements of the array ``x`` in host memory (a view of its buffer, or the
    value of a small lazy expression computed here); raises host_path._Unsupported."""
    node: Any = x._node
    if type(node) is Leaf:
        return _host._view(node.storage, rt, node.dtype, node.shape, node.strides, node.offset)
    if _host._size(node.shape) > _host.HOST_MAX_WORK:
        raise _host._Unsupported
    return np.broadcast_to(_host._value(node, _host._State(rt, None)), node.shape)


def matmul(a: Any, b: Any) -> Any:
    """``a @ b`` (numpy's ``matmul`` of 1-D and 2-D operands, and ``dot`` of such) as
    an array computed now, or None (the caller builds the lazy contraction).

    The operands are fuseloop arrays on one host device, of one real floating dtype,
    concrete or small lazy expressions (``vals @ x[cols]``'s gather), with at most
    ``HOST_MAX_WORK`` products; their core dimensions must agree (else the caller
    raises numpy's error)."""
    limit = _host.HOST_MAX_WORK
    if not limit or trace_checks:
        return None
    dtype = a.dtype
    if b.dtype is not dtype or dtype.char not in _FLOATS:
        return None
    device = a.device
    if b.device is not device or not _host.host_device(device):
        return None
    sa, sb = a._shape, b._shape
    na, nb = len(sa), len(sb)
    if not (0 < na <= 2 and 0 < nb <= 2) or sa[-1] != sb[0]:
        return None
    work = sa[-1] * (sa[0] if na == 2 else 1) * (sb[1] if nb == 2 else 1)
    if work > limit or _host._evaluate.capturing_threads[0] \
            or _host._evaluate.recording_threads[0]:
        return None
    rt = _runtime(device)
    if rt.deferred:  # (small launches waiting to be enqueued: the kernels join them)
        return None
    with rt.launch_lock:
        rt.finish_queue(rt.queue)
        token = _host._errors.set(_host._QUIET) if _host._QUIET is not None else None
        try:
            value = np.matmul(_operand(a, rt), _operand(b, rt))
        except (_host._Unsupported, RecursionError, TypeError, ValueError):
            return None
        finally:
            if token is not None:
                _host._errors.reset(token)
    _stats.increment("host_operations")
    return _result(value, dtype, device, rt)


def _result(value: Any, dtype: np.dtype, device: Any, rt: Any) -> Any:
    """An array of ``value``: 0-d as a Scalar node (no buffer), else a new buffer."""
    from .array import Array

    shape = np.shape(value)
    if not shape:
        out = _new(Array)
        out._storage, out._node, out._shape = None, Scalar(dtype.type(value)), ()
        out.device, out.dtype = device, dtype
        return out
    storage = _host._evaluate.allocate(_host._size(shape) * dtype.itemsize, device)
    with rt.launch_lock:
        _host._store(storage, rt, dtype, shape, None, 0, value)
    return Array._concrete(storage, dtype, shape)
