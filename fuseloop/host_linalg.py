"""Small dense solves on a CPU device: numpy's LAPACK on the buffers' memory.

On PoCL's CPU device a buffer is host memory, and fuseloop's factorisations are
blocked: launches per block and a flag read back per factorisation, whose host cost
dwarfs a small matrix's arithmetic (NPBench's contour_integral solves a 50 x 50
complex system, a 100 x 100 real embedding, 32 times: most of its time).  Here
``fl.linalg.solve`` and ``fl.linalg.inv`` of matrices of at most
:data:`LAPACK_MAX_SIDE` rows on a host device are numpy.linalg's own, computed on
numpy's views of the operands' buffers (a lazy operand computed first, as numpy
computes it), so the results are numpy's, and numpy's ``LinAlgError`` (fuseloop's
class too) for a singular matrix.  The result is a new concrete array, or for at most
``host_eager.EAGER_MAX_WORK`` elements a result held as a small view's (what follows
it is computed at once too).  Off with the host path (``FUSELOOP_HOST_PATH=0``) and
with ``host_products.BLAS_PRODUCTS = False`` (every product and solve fuseloop's
kernels).
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from . import evaluate as _evaluate
from . import host_path as _host
from . import host_products as _products
from .array import Array
from .host_eager import EAGER_MAX_WORK, HostArray, _base, _off, _result, _sync, numpy_value
from .stats import tallies as _tallies

#: the most rows of a matrix solved or inverted here (larger ones: the blocked kernels)
LAPACK_MAX_SIDE = 512
_count_operation = _tallies["host_operations"].__next__  # (stats.tally, bound)


def solve(a: Array, b: Array, dtype: np.dtype) -> Array | None:
    """``numpy.linalg.solve(a, b)`` on ``dtype`` (the caller's result dtype; ``b`` of
    at least two axes, numpy's matrices), or None: the kernels'."""
    return _lapack(np.linalg.solve, (a, b), dtype)


def inv(a: Array) -> Array | None:
    """``numpy.linalg.inv(a)`` (a floating or complex ``a``), or None: the kernels'."""
    return _lapack(np.linalg.inv, (a,), a.dtype)


def _lapack(fn: Any, arrays: tuple[Array, ...], dtype: np.dtype) -> Array | None:
    """``fn`` of the arrays' numpy views, cast to ``dtype``, as a new array, or None."""
    if not _products.BLAS_PRODUCTS or _off() or dtype.char not in "fdFD":
        return None
    device = arrays[0].device
    if not _host.host_device(device) or any(x.device is not device for x in arrays):
        return None
    a = arrays[0]
    if not 0 < a.shape[-1] <= LAPACK_MAX_SIDE or math.prod(a.shape[:-2]) > 64 \
            or not all(x.size for x in arrays):
        return None  # (empty: the kernels' rules; a stack of many: the kernels' too)
    views = []
    for x in arrays:
        if type(x) is HostArray and not x._shape:
            return None
        if type(x) is Array and x._storage is None:
            x.eval()  # (a lazy operand, ``A.astype(float)``: computed first, as numpy's)
        got = _base(x)
        if got is None:
            return None
        views.append(numpy_value(x) if type(x) is HostArray else got[0])
    _sync(device)  # (the kernels writing the operands: done)
    out = fn(*[v.astype(dtype, copy=False) for v in views])  # (numpy's LinAlgError)
    _count_operation()
    if out.dtype != dtype:
        out = out.astype(dtype)
    n = out.size
    if n <= EAGER_MAX_WORK and n <= _host.HOST_MAX_WORK:
        return _result(out, device)
    storage = _evaluate.allocate(n * dtype.itemsize, device)
    rt = _sync(device)  # (a pooled buffer: the kernels that used it last are done)
    with rt.launch_lock:
        _host._typed_bytes(storage, rt, dtype)[:n].reshape(out.shape)[...] = out
    return Array._concrete(storage, dtype, out.shape)
