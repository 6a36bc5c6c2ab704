"""Products, gathers and powers of :mod:`fuseloop.host_eager`'s small views, computed
at once by numpy: ``a @ b`` and ``dot`` of 1-D and 2-D float operands (a small lazy
one, spmv's ``x[cols]``, computed by the host path's evaluation first), ``x[idx]`` by
a small integer view, and ``x ** e`` as fuseloop's operator computes it."""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from . import evaluate as _evaluate
from . import host_path as _host
from .array import Array
from .expr.nodes import _EMPTY, Leaf, Scalar
from .host_eager import (
    _DTYPES,
    _QUIET,
    _VIEW_DTYPES,
    EAGER_MAX_WORK,
    HostArray,
    _as,
    _base,
    _counted,
    _errors,
    _materialise,
    _new,
    _new_host,
    _off,
    _op_entry,
    _operand,
    _ops,
    _result,
    _sync,
    _value,
    apply,
    compute,
    getitem,
)
from .stats import tallies as _tallies

_count_operation = _tallies["host_operations"].__next__  # (stats.tally, bound)


def matmul(a: Any, b: Any) -> Array | None:
    """``a @ b`` (numpy's matmul of 1-D and 2-D operands, and its dot) of HostArrays or
    small concrete arrays on one device, of one real floating dtype, computed now."""
    if type(a) is HostArray and type(b) is HostArray and len(a._shape) == 1 \
            and len(b._shape) == 1:
        return _vector_dot(a, b)
    if _off() or not isinstance(a, Array) or not isinstance(b, Array):
        return None
    device = a.device
    dtype = a.dtype
    if b.device is not device or b.dtype is not dtype or dtype.char not in "fdFD":
        return None
    ga = _operand(a, device) or _lazy_operand(a)
    gb = _operand(b, device) or _lazy_operand(b)
    if ga is None or gb is None:
        return blas_matmul(a, b)  # (a large concrete operand)
    va, vb = ga[1], gb[1]
    sa, sb = va.shape, vb.shape  # (numpy arrays or scalars: np.shape's dispatch, 0.3 us)
    na, nb = len(sa), len(sb)
    if not (0 < na <= 2 and 0 < nb <= 2) or sa[-1] != sb[0]:
        return None
    work = sa[-1] * (sa[0] if na == 2 else 1) * (sb[1] if nb == 2 else 1)
    if work > _host.HOST_MAX_WORK:
        return blas_matmul(a, b)
    if not work and (sa[0] if na == 2 else 1) * (sb[1] if nb == 2 else 1) > EAGER_MAX_WORK:
        return None  # (a large empty sum: the kernels' zeros; a small one: numpy's, equal)
    if ga[2] or gb[2]:
        _sync(device)
    return _quiet_matmul(va, vb, device)


#: the least side of a matrix product computed by numpy's BLAS (a product by a vector
#: of concrete operands is, whatever its sides; measured on NPBench S, CPU clock) ...
BLAS_MIN_SIDE = 64
#: ... unless its m * n * k is at most this: then a launch costs more than the product
#: (8 x 1024 @ 1024 x 1024 float32, 2-core PoCL, CPU clock: the kernel 0.76 ms, numpy
#: 0.53; 8 x 256 @ 256 x 256: 0.14 ms, numpy 0.01)
BLAS_SKINNY_MAX_WORK = 1 << 24
#: False: every product on a CPU device is fuseloop's kernel (``cpu-blocked``), as it is
#: with the host path off (benchmarks comparing fuseloop's CPU kernels with numpy's)
BLAS_PRODUCTS = True


def blas_matmul(a: Any, b: Any) -> Array | None:
    """``a @ b`` of concrete arrays (or HostArrays) of 1 or 2 axes and one real
    floating dtype on a host device, of any size, computed now by numpy's matmul (its
    BLAS) into a new buffer: on PoCL's CPU device a product's kernel took 4-10x
    numpy's CPU time (NPBench's gemm, covariance).  A lazy operand of a product of
    matrices is computed first, as numpy does; a product by a vector with a lazy
    operand is the kernels' (fused with it, it reads the matrix once: gesummv's
    ``alpha * A @ x`` took 8x longer computed first).  Matrices with a side below
    BLAS_MIN_SIDE are the kernels' where their product's work exceeds
    BLAS_SKINNY_MAX_WORK (all of them without BLAS_PRODUCTS)."""
    if not BLAS_PRODUCTS or _off() or not isinstance(a, Array) or not isinstance(b, Array):
        return None
    device, dtype = a.device, a.dtype
    if b.device is not device or b.dtype is not dtype or dtype.char not in "fdFD":
        return None
    if not _host.host_device(device):
        return None
    sa, sb = a._shape, b._shape
    if len(sa) == 2 and len(sb) == 2:
        if min(sa[0], sa[1], sb[-1]) < BLAS_MIN_SIDE \
                and sa[0] * sa[1] * sb[-1] > BLAS_SKINNY_MAX_WORK:
            return None  # (mlp's 8 x 30000 @ 30000 x 2000: the kernel took less CPU)
        for x in (a, b):  # (a lazy operand, ``alpha * A``: computed first, as numpy does)
            if type(x) is Array and x._storage is None:
                x.eval()
    elif (type(a) is Array and a._storage is None) or (type(b) is Array and b._storage is None):
        return None  # (a product by a vector reads its lazy operand once, fused in it)
    ga, gb = _base(a), _base(b)  # (a 0-d operand: None)
    if ga is None or gb is None:
        return None
    va, vb = ga[0], gb[0]
    if not (0 < va.ndim <= 2 and 0 < vb.ndim <= 2) or va.shape[-1] != vb.shape[0] \
            or not va.shape[-1]:
        return None  # (numpy's error, or an empty sum: the kernels')
    shape = va.shape[:-1] + vb.shape[1:]
    n = math.prod(shape)
    if 0 < n <= EAGER_MAX_WORK and n <= _host.HOST_MAX_WORK:
        return _small_product(va, vb, device)
    storage = _evaluate.allocate(max(n, 1) * dtype.itemsize, device)
    rt = _sync(device)  # (kernels writing the operands, or last using the buffer: done)
    token = _errors.set(_QUIET) if _QUIET is not None else None
    try:
        with rt.launch_lock:
            out = _host._typed_bytes(storage, rt, dtype)[:max(n, 1)]
            np.matmul(va, vb, out=out.reshape(shape) if shape else out[:1].reshape(()))
    finally:
        if token is not None:
            _errors.reset(token)
    _count_operation()
    res = _new(Array)
    res._storage, res._node, res.device = storage, Leaf.plain(storage, dtype, shape), device
    res.dtype, res._shape = dtype, shape
    return res


def _small_product(va: np.ndarray, vb: np.ndarray, device: Any) -> Array:
    """:func:`blas_matmul`'s product with a small result (covariance's ``data[:, i] @
    data[:, i:M]``: a vector by a large matrix) as a HostArray of numpy's matmul, so
    that what follows (``/ (float_n - 1.0)``) is computed here too, not built."""
    _sync(device)
    return _quiet_matmul(va, vb, device)


def _vector_dot(a: HostArray, b: HostArray) -> Array | None:
    """:func:`matmul` of two 1-D HostArrays (a loop's ``L[i, :i] @ x[:i]``), its steps
    written out; None where :func:`matmul` gives None (the caller's general path)."""
    device, dtype = a.device, a.dtype
    n = a._shape[0]
    if b.device is not device or b.dtype is not dtype or dtype.char not in "fdFD" \
            or b._shape[0] != n or n > _host.HOST_MAX_WORK or _off():
        return None  # (numpy's error; a large one: the kernels')
    # (an empty one, spmv's empty row: numpy's 0, the kernels' too; taken to the
    # general path, its lazy gather and product cost 6x a row's statement)
    if a._buf is not None or b._buf is not None:
        _sync(device)
    if dtype.kind == "c":
        return _quiet_matmul(a._np, b._np, device)
    token = _errors.set(_QUIET) if _QUIET is not None else None  # (_quiet_matmul's, inline)
    try:
        out = np.dot(a._np, b._np)
    finally:
        if token is not None:
            _errors.reset(token)
    _count_operation()
    node = _new(Scalar)  # (a real value held as host_eager._scalar_array holds it)
    node.value, node.dtype, node.shape, node.storages = out, dtype, (), _EMPTY
    held = _new(Array)
    held._storage, held._node, held._shape, held.device, held.dtype = None, node, (), device, dtype
    return held


def _quiet_matmul(va: np.ndarray, vb: np.ndarray, device: Any) -> Array:
    """numpy's ``va @ vb`` without its floating-point warnings (as the kernels give
    none), counted as an operation, as a HostArray.  Two vectors: numpy's ``dot``,
    whose value is matmul's (the same BLAS dot) at half its call's cost."""
    token = _errors.set(_QUIET) if _QUIET is not None else None
    try:
        out = np.dot(va, vb) if va.ndim == 1 == vb.ndim else np.matmul(va, vb)
    finally:
        if token is not None:
            _errors.reset(token)
    _count_operation()
    return _result(out, device)


_REDUCERS: dict[str, Any] = {"sum": np.add.reduce, "prod": np.multiply.reduce,
                              "max": np.maximum.reduce, "min": np.minimum.reduce}


def reduce(op: str, x: Array, axis: Any, keepdims: bool, dtype: np.dtype) -> Any:
    """A reduction (``op``: sum, prod, max, min, with its result dtype ``dtype``) of
    a HostArray, or of a concrete array on a CPU device (the caller's size limit:
    ``ops.reductions.REDUCE_NOW_MAX``), of at least one axis, computed now by numpy's
    ufunc's reduce on that dtype (the kernels' accumulator; a sum's rounding may differ
    in its order); None: the lazy reduction (an empty one's identity, an axis numpy
    refuses)."""
    fn = _REDUCERS.get(op)
    if fn is None or _off() or not x._shape or dtype.char not in _DTYPES \
            or x.dtype.char not in _DTYPES:
        return None
    if type(axis) is list:
        axis = tuple(axis)
    if type(x) is HostArray:
        if x._buf is not None:
            _sync(x.device)
        v = x._np
    else:  # (a concrete array: the device's queue finished, kernels writing x done)
        got = _base(x)
        if got is None:
            return None
        v = got[0]
    if not v.size:
        return None
    token = _errors.set(_QUIET) if _QUIET is not None else None
    try:
        out = fn(v, axis=axis, dtype=dtype, keepdims=keepdims) if op in ("sum", "prod") \
            else fn(v if v.dtype == dtype else v.astype(dtype), axis=axis, keepdims=keepdims)
    except (TypeError, ValueError, np.exceptions.AxisError):
        return None
    finally:
        if token is not None:
            _errors.reset(token)
    _count_operation()
    return _result(out if type(out) is np.ndarray else np.asarray(out, dtype), x.device)


#: the most elements an argmax or argmin of a concrete array (not a small view) reads
#: when numpy computes it at once (:func:`arg_reduce`): numpy's one pass against the
#: kernels' two and a launch, which on PoCL's CPU device took more CPU at every size up to
#: 2^20 float32 on a 2-core Xeon (the rows of 1024 x 1024: 0.19 against 0.43 ms; all of
#: 2^20: 0.17 against 0.44 ms; benchmarks/probes/host_reduce_threshold.py), and on a
#: 2-core EPYC (AVX2) less than half the kernels' CPU time up to 2^22 (all of 2^22: 1.15-1.36
#: against 3.0-3.5 ms; rows of 2048: 1.15-1.47 against 2.8-4.1), so less wall time too
#: with both cores theirs; at 2^24 about half (probes/reduce_now_crossover.py)
ARG_NOW_MAX = 1 << 22


def arg_reduce(x: Array, axis: Any, keepdims: bool, largest: bool) -> Array | None:
    """argmax (``largest``) or argmin of a HostArray or a concrete array of at most
    :data:`ARG_NOW_MAX` elements on a CPU device, computed now by numpy (its ties and
    NaN rule are fuseloop's); None: the lazy arg-reduction (numpy's errors: its too)."""
    if _off() or x.dtype.char not in _DTYPES or not x._shape:
        return None
    if type(x) is HostArray:
        if x._buf is not None:
            _sync(x.device)
        v = x._np
    elif type(x) is Array and x._storage is not None and 0 < x.size <= ARG_NOW_MAX:
        got = _base(x)  # (the device's queue finished: kernels writing x are done)
        if got is None:
            return None
        v = got[0]
    else:
        return None
    try:
        out = (np.argmax if largest else np.argmin)(v, axis=axis, keepdims=keepdims)
    except (TypeError, ValueError, np.exceptions.AxisError):
        return None
    _count_operation()
    out = np.asarray(out, dtype=np.int64)
    return _result(out, x.device)


_FAST_POWERS = {2: "square", 0.5: "sqrt", -1: "reciprocal"}  # (fuseloop.array's)


def power(x: HostArray, e: Any) -> Array | None:
    """``x ** e`` for a float HostArray and a Python scalar ``e`` as the operator
    computes it (fuseloop.array: ``square``, ``sqrt``, ``reciprocal``; small whole and
    half-whole ``e`` by products, fuseloop.powers), now; None: the operator's path."""
    if (type(e) is not int and type(e) is not float) or x.dtype.kind != "f" or _off():
        return None
    fast = _FAST_POWERS.get(e)
    if fast is not None:  # (unary's steps for one operand, else apply's general ones)
        got = unary(fast, x)
        return got if got is not None else apply(fast, (x,))
    if not math.isfinite(e) or e in (0, 1) or (2 * e) % 1 or abs(2 * e) > 8:
        return None  # (pow: the operator's path, which comes back to apply)
    if x._buf is not None:
        _sync(x.device)
    v = _value(x)
    halves = int(2 * e)
    half = halves % 2 == 1
    token = _errors.set(_QUIET) if _QUIET is not None else None
    try:  # (fuseloop.powers._products, step by step)
        base = np.fabs(np.sqrt(v)) if half else v
        if e < 0:
            base = np.reciprocal(base)
        n = abs(halves) if half else abs(halves) // 2
        result: Any = None
        square = base
        while n:
            if n & 1:
                result = square if result is None else np.multiply(result, square)
            n >>= 1
            if n:
                square = np.square(square)
        if half:
            result = np.where(v == -math.inf, x.dtype.type(math.inf if e > 0 else 0.0), result)
    finally:
        if token is not None:
            _errors.reset(token)
    _count_operation()
    return _result(np.asarray(result, dtype=x.dtype) if np.ndim(result) else
                   x.dtype.type(result), x.device)


def _lazy_operand(x: Array) -> tuple[Any, Any, bool] | None:
    """:func:`_operand` of a small lazy array (spmv's ``x[cols]``): its value computed
    by the host path's evaluation now (what the lazy one would evaluate to: it is
    computed before its inputs are written), or None."""
    node: Any = x._node
    if type(x) is not Array or x._storage is not None or node.dtype.char not in _DTYPES \
            or not 0 < _host._size(node.shape) <= EAGER_MAX_WORK \
            or (node.fancy and not _host.small_reads((node,))):
        return None
    rt = _sync(x.device)
    token = _errors.set(_QUIET) if _QUIET is not None else None
    try:
        v = np.broadcast_to(_host._value(node, _host._State(rt, None)), node.shape)
    except (_host._Unsupported, RecursionError, TypeError, ValueError):
        return None
    finally:
        if token is not None:
            _errors.reset(token)
    return node.dtype, v, False


def gather(arr: Array, index: HostArray) -> Array | None:
    """``arr[index]`` for an integer HostArray of at least one axis on a concrete
    array (or HostArray): numpy's advanced index, a copy; None: the general path
    (an index out of range raises there).  A boolean HostArray of a HostArray's shape
    selects (nbody's ``inv_r3[inv_r3 > 0]``: a copy, in C order, without a buffer)."""
    if _off() or not index._shape or index.device is not arr.device:
        return None
    if index.dtype.kind == "b":
        return _select(arr, index) if type(arr) is HostArray else None
    if index.dtype.kind not in "iu":
        return None
    got = _base(arr)
    if got is None or not got[0].ndim:
        return None
    if index._buf is not None or got[1] is not None:
        _sync(arr.device)
    try:
        out = got[0][index._np]
    except (IndexError, TypeError, ValueError):
        return None
    if out.size > EAGER_MAX_WORK:  # (an empty index too: an empty copy)
        return None
    _count_operation()
    return _result(out, arr.device)


def _select(arr: HostArray, mask: HostArray) -> Array | None:
    if mask._shape != arr._shape:
        return None  # (the general path: a mask of leading axes, or numpy's error)
    if arr._buf is not None or mask._buf is not None:
        _sync(arr.device)  # (kernels writing the buffers viewed: done)
    out = arr._np[mask._np]
    if not out.size:
        return None  # (an empty result: the general path's array)
    _count_operation()
    return _result(out, arr.device)


def concatenate(arrays: list, axis: int, dtype: np.dtype) -> Array | None:
    """``fl.concatenate`` (``hstack``, ``vstack``) of HostArrays of the result's dtype
    (checked by the caller) on one device: numpy's copy, at once (nbody's
    ``np.hstack((ax, ay, az))`` of products made here); None: the lazy Concat."""
    if _off() or dtype.char not in _VIEW_DTYPES:
        return None
    device = arrays[0].device
    n = 0
    wait = False
    for x in arrays:
        if type(x) is not HostArray or x.device is not device or x.dtype != dtype:
            return None
        n += x.size
        wait = wait or x._buf is not None
    if not 0 < n <= EAGER_MAX_WORK:
        return None
    if wait:
        _sync(device)  # (kernels writing the buffers viewed: done)
    out = np.concatenate([x._np for x in arrays], axis=axis)
    _count_operation()
    return _result(out, device)


def triangle(a: HostArray, k: Any, upper: bool) -> Array | None:
    """``fl.triu(a, k)`` (``upper``) or ``fl.tril(a, k)`` of a HostArray of two or more
    axes: numpy's, at once; None: the lazy ``where``."""
    if _off() or type(k) is not int or len(a._shape) < 2 or not a.size:
        return None
    if a._buf is not None:
        _sync(a.device)  # (kernels writing the buffer viewed: done)
    out = np.triu(a._np, k) if upper else np.tril(a._np, k)
    _count_operation()
    return _result(out, a.device)


def transposed(x: Array) -> HostArray | None:
    """``x.T`` of a small concrete array or HostArray of a host device: a HostArray
    viewing the same memory (numpy's reversed strides), as a small view of a concrete
    array is (host_eager.getitem), so the operators on it are computed here (nbody's
    ``x.T - x``, ``mass * mass.T``: a lazy tree per step evaluated by the host path);
    None: the general path (a leaf view, lazy for a lazy ``x``)."""
    on_host = _host._host_devices.get(x.device.index)  # (a GPU's: False, once asked)
    if not (on_host or (on_host is None and _host.host_device(x.device))) or _off():
        return None
    if type(x) is not HostArray:
        if x._storage is None or x._shape == () or type(v := getitem(x, ())) is not HostArray:
            return None
        x = v
    elif x._buf is None:
        _materialise(x)  # (the view must share its base's memory: the buffer's, as _base)
    out = _new_host(x._np.T, x._shape[::-1], x.dtype, x.device, x._buf)
    out._key = None
    return out


def _host_t(self: HostArray) -> Array:
    got = transposed(self)
    return got if got is not None else _array_t(self)


_array_t = Array.T.fget  # type: ignore[attr-defined]
HostArray.T = property(_host_t)  # type: ignore[assignment]


def unary(op: str, x: Any) -> Array | None:
    """``op`` (a unary ufunc's name) of a HostArray or of a value held here (a Scalar
    node: cholesky's ``sqrt(A[i, i] - d)``) now: host_eager.apply's steps for one
    operand written out (durbin's ``-r[0]``, ``-(r[k] + d)``); None: its path."""
    tx = type(x)
    if tx is HostArray:
        v, reads = x._np, x._buf is not None
    elif tx is Array and type(x._node) is Scalar:
        v, reads = x._node.value, False
    else:
        return None
    if _off():
        return None
    kind = x.dtype
    hit = _ops.get((op, kind))
    if hit is None:
        hit = _ops[(op, kind)] = _op_entry(op, (kind,))
    if hit is False:
        return None
    loop = hit[0]
    if reads:
        _sync(x.device)  # (then a buffer's element is read: kernels writing it are done)
        if not x._shape:
            v = v[0]
    if kind is not loop[0]:
        v = _as(v, kind, loop[0])
    out = compute(op, hit, (v,), type(v) is np.ndarray)
    return None if out is None else _counted(out, loop[-1], x.device)


def _eager_unary(op: str, general: Any) -> Any:
    """HostArray's operator ``op``: computed here, else Array's (``general``)."""
    def method(self: Any) -> Any:
        got = unary(op, self)
        return got if got is not None else general(self)
    method.__name__ = method.__qualname__ = general.__name__
    return method


for _name, _op in (("__neg__", "negative"), ("__abs__", "absolute")):
    setattr(HostArray, _name, _eager_unary(_op, getattr(Array, _name)))
