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

from . import caches as _caches
from . import host_path as _host
from . import stats as _stats
from .expr.nodes import _EMPTY, Leaf, Scalar
from .runtime.devices import _runtime
from .trace_hooks import trace_checks

_FLOATS = frozenset("fd")
_F64 = np.dtype(np.float64)
# float64 loops on two values computed by Python's float operators: IEEE double
# arithmetic as numpy's loops, without switching numpy's error state (its set and
# reset cost three times the operation); dividing by zero raises ZeroDivisionError,
# where the caller leaves the operation to numpy (host_eager and host_writes too)
_PY_FLOAT_OPS = {"add": float.__add__, "subtract": float.__sub__,
                 "multiply": float.__mul__, "true_divide": float.__truediv__}
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


# fuseloop.host_products.matmul, bound at its first use (an import statement in the
# function cost every ``fl.dot`` of a loop ~1 us)
_eager_matmul: list[Any] = [None]


def _bind_eager_matmul() -> Any:
    from .host_products import matmul as eager_matmul

    _eager_matmul[0] = eager_matmul
    return eager_matmul


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
    if type(a) is not (_Array or _bind()) or type(b) is not _Array:  # (HostArrays)
        return (_eager_matmul[0] or _bind_eager_matmul())(a, b)
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
    if _host._evaluate.capturing_threads[0] or _host._evaluate.recording_threads[0]:
        return None
    if work > limit:  # (of concrete operands: numpy's BLAS, host_products)
        from .host_products import blas_matmul

        return blas_matmul(a, b)
    if ((a._node.fancy or b._node.fancy)  # (``X.sum(0) @ v``: the kernels')
            and not _host.small_reads((a._node, b._node))):
        return None
    rt = _runtime(device)
    if rt.deferred:  # (small launches waiting to be enqueued: the kernels join them)
        return None
    with rt.launch_lock:
        rt.finish()
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


_ELEMENTS = (Leaf, Scalar)
# (op, operand kinds) -> (loop dtypes, the numpy scalars' operator) or False: binary0's
# loops (finite: operations x kinds^2)
_loops0: dict[tuple, Any] = {}
# fuseloop.array's names, bound at the first call (array.py imports this module)
_Array: Any = None
_Held: Any = None  # (fuseloop.host_held.Held, set there)
_ufunc_loop: Any = None
_weak_scalar: Any = None
_weak_scalars: Any = None


def _bind() -> Any:
    global _Array, _ufunc_loop, _weak_scalar, _weak_scalars
    from . import array

    _ufunc_loop, _weak_scalar = array._ufunc_loop, array._weak_scalar
    _weak_scalars = array._weak_scalars
    _Array = array.Array
    return _Array


def _kind(x: Any, tx: type, array: type, device: Any) -> Any:
    """What :func:`binary0` reads of an operand: a 0-d array's dtype (a concrete one's
    element, or a value held as a Scalar node), ``float`` or ``int``; None: not taken."""
    if tx is float or tx is int:
        return tx
    if tx is not array or x._shape or x.device is not device \
            or type(x._node) not in _ELEMENTS:
        return None  # (a lazy 0-d expression: the general path; made here, it is a Scalar)
    return x.dtype


def _loop0(op: str, ka: Any, kb: Any) -> Any:
    """``_loops0``'s entry: numpy's loop for these kinds, the operator computing it on
    numpy scalars (:func:`fuseloop.host_path.scalar_fn`) and whether it may set a
    floating-point error flag, or False."""
    try:
        loop, key = _ufunc_loop(op, ka, kb)
    except (TypeError, ValueError):
        return False  # (the general path raises numpy's error)
    fn = _host.scalar_fn(op, key)
    if fn is None and op in _COMPLEX_HELD and key[-1] in _host._COMPLEX \
            and all(c in _host._HOST_DTYPES for c in key):
        return loop, _COMPLEX_HELD[op], True  # (numpy's ufunc on the two scalars)
    return False if fn is None else (loop, fn, op not in _NEVER_WARN0)


# complex values held here (contour_integral's ``np.power(z, e)``, ``zz * w`` of the
# elements ``z`` of a complex array): numpy's ufunc on the two numpy scalars, the loop
# numpy's own arrays and scalars take (numpy scalars' complex operators are that loop too)
_COMPLEX_HELD = {op: getattr(np, op) for op in (
    "add", "subtract", "multiply", "true_divide", "power")}


# numpy scalars' operators that set no floating-point error flag for any operand (a
# shift past the width, a NaN compared: no error), computed without switching numpy's
# error state (a context variable's set and reset: ~0.15 us of a ~1.5 us operation)
_NEVER_WARN0 = frozenset((
    "bitwise_and", "bitwise_or", "bitwise_xor", "left_shift", "right_shift", "equal",
    "not_equal", "less", "less_equal", "greater", "greater_equal"))
_count_operation = _stats.tallies["host_operations"].__next__  # (stats.tally, bound)


def _element(x: Any, tx: type, dtype: np.dtype, rt: Any) -> Any:
    """The operand's value as a numpy scalar of ``dtype`` (its loop's); the caller has
    finished the device's queue where an operand is a buffer's element."""
    if tx is float or tx is int:
        return _weak_scalar(x, dtype)  # (numpy's conversion and its OverflowError)
    node: Any = x._node
    v = node.value if type(node) is Scalar else \
        _host._typed_bytes(node.storage, rt, node.dtype)[node.offset]
    return v if v.dtype is dtype else dtype.type(v)


def binary0(op: str, a: Any, b: Any) -> Any:
    """``a op b`` for 0-d operands (an array's element ``A[i, j]``, a value made here, a
    Python float or int; at least one an array, and a buffer's element only on a host
    device: values held here are folded on any device, a GPU's too) as an array holding
    the value, computed now by numpy scalars' operator on the operation's loop dtypes
    (:func:`fuseloop.host_path.scalar_fn`); None: the caller builds the node.

    Loops of scalar statements (crc16's bit tests, nussinov's ``table[i, k] +
    table[k + 1, j]``, durbin's ``alpha * alpha``) made a node and a lazy array per
    operation, read and evaluated at once by the next statement.  Every operator on
    0-d operands comes here first: its common steps are written out (a call each
    cost the statement ~0.1 us).  Values held here (no buffer's element) involve no
    device queue: neither its lock nor its waiting launches."""
    if not _host.HOST_MAX_WORK or trace_checks:
        return None
    Array = _Array or _bind()
    ta, tb = type(a), type(b)
    if ta is not Array and tb is not Array:
        if ta is _Held or tb is _Held:  # (a ufunc function's Held operand, ``np.power(z,
            # e)`` of an element of ``for z in pts``: its value as a plain array's)
            pa, pb = a._plain() if ta is _Held else a, b._plain() if tb is _Held else b
            if type(pa) is Array or type(pb) is Array:  # (a Held no longer holding one: not)
                return binary0(op, pa, pb)
        return None  # (a subclass's operand: fuseloop.host_eager's, or the general path)
    held = _held0(op, a, b, ta, tb, Array)
    if held is None:  # (an element of a buffer among the operands)
        held = _element0(op, a, b, ta, tb, Array)
    if held is None or held is False:
        return None
    out, dtype, device = held
    node = _new(Scalar)  # (Scalar.__init__, its fields set here)
    node.value, node.dtype, node.shape, node.storages = out, dtype, (), _EMPTY
    arr = _new(Array)
    arr._storage, arr._node, arr._shape, arr.device, arr.dtype = None, node, (), device, dtype
    return arr


def _element0(op: str, a: Any, b: Any, ta: type, tb: type, Array: type) -> Any:
    """``(value, dtype, device)`` of :func:`binary0` where an operand is an element of
    a buffer on a host device (read once the device's queue is finished), or None."""
    device = a.device if ta is Array else b.device
    if not (_host._host_devices.get(device.index) or _host.host_device(device)):
        return None  # (first: a GPU's every 0-d operation asks)
    ka, kb = _kind(a, ta, Array, device), _kind(b, tb, Array, device)
    if ka is None or kb is None:
        return None
    hit = _loops0.get((op, ka, kb))
    if hit is None:
        hit = _loops0[(op, ka, kb)] = _loop0(op, ka, kb)
    if hit is False or _host._evaluate.capturing_threads[0] \
            or _host._evaluate.recording_threads[0]:
        return None
    loop, fn, _ = hit
    out = _read_and_apply(device, a, ta, b, tb, loop, fn)
    if out is None:
        return None
    dtype = loop[-1]
    if out.dtype is not dtype:
        out = dtype.type(out)
    _count_operation()
    return out, dtype, device


# (op, kind, kind) -> (the numpy scalars' operator, loop dtypes, whether it may set a
# floating-point error flag, whether a Python scalar operand is taken as it is) or
# False: _held0's table, one look-up per operation
_held_ops: dict[tuple, Any] = {}


def _held_entry(op: str, ka: Any, kb: Any) -> Any:
    hit = _loops0.get((op, ka, kb))
    if hit is None:
        hit = _loops0[(op, ka, kb)] = _loop0(op, ka, kb)
    if hit is False:
        return False
    loop, fn, warns = hit
    # a Python int with an integer numpy scalar: numpy's operator takes the int as
    # numpy's promotion does (NEP 50, numpy >= 2, which scalar_fn needs), raising
    # OverflowError where the conversion would; a float or a bool operand is converted
    raw = (ka is int and loop[1].kind in "iu" and loop[1] is kb) or \
        (kb is int and loop[0].kind in "iu" and loop[0] is ka)
    if loop[0] is loop[1] is loop[2] is _F64 and op in _PY_FLOAT_OPS:
        return _PY_FLOAT_OPS[op], loop, False, False  # (no error state: host_eager's)
    return fn, loop, warns, raw and loop[-1] is loop[0] and loop[0] is loop[1]


def _held0(op: str, a: Any, b: Any, ta: type, tb: type, Array: type) -> Any:
    """``(value, dtype, device)`` of ``a op b`` for values held here (Scalar nodes) and
    Python scalars (crc16's ``cur & 1``, ``1 ^ (cur & 1)``: no buffer, so no queue),
    computed by numpy scalars' operator; False: the general path; None: not such
    operands (binary0's general case)."""
    ka: Any
    kb: Any
    if ta is Array:
        na = a._node
        if type(na) is not Scalar or a._shape:
            return None
        va, ka, device = na.value, na.dtype, a.device
        if tb is Array:
            nb = b._node
            if type(nb) is not Scalar or b._shape or b.device is not device:
                return None
            vb, kb = nb.value, nb.dtype
        elif tb is int or tb is float:
            vb, kb = b, tb
        else:
            return None
    elif ta is int or ta is float:
        nb = b._node
        if type(nb) is not Scalar or b._shape:
            return None
        va, ka, vb, kb, device = a, ta, nb.value, nb.dtype, b.device
    else:
        return None
    hit = _held_ops.get((op, ka, kb))
    if hit is None:
        hit = _held_ops[(op, ka, kb)] = _held_entry(op, ka, kb)
    if hit is False:
        return False
    fn, loop, warns, raw = hit
    if _host._evaluate.capturing_threads[0] or _host._evaluate.recording_threads[0]:
        return False
    token = _host._errors.set(_host._QUIET) if warns else None
    try:
        if not raw:  # (numpy's conversions, and their OverflowError: the general path's)
            da, db = loop[0], loop[1]
            if ka is not da:
                va = _weak_scalar(va, da) if ka is int or ka is float else da.type(va)
            if kb is not db:
                vb = _weak_scalar(vb, db) if kb is int or kb is float else db.type(vb)
        out = fn(va, vb)
    except (TypeError, ValueError, OverflowError, ZeroDivisionError):
        return False
    finally:
        if token is not None:
            _host._errors.reset(token)
    dtype = loop[-1]
    if type(out) is not dtype.type:  # (a Python float, or numpy's scalar of another type)
        out = dtype.type(out)
    _count_operation()
    return out, dtype, device


def _read_and_apply(device: Any, a: Any, ta: type, b: Any, tb: type, loop: tuple,
                    fn: Any) -> Any:
    """:func:`binary0`'s value where an operand is a buffer's element: read once the
    device's queue is finished (what kernels wrote first), or None."""
    rt = _runtime(device)
    if rt.deferred:
        return None
    with rt.launch_lock:
        rt.finish()
        token = _host._errors.set(_host._QUIET)  # (set: scalar_fn gave an operator)
        try:
            return fn(_element(a, ta, loop[0], rt), _element(b, tb, loop[1], rt))
        except (TypeError, ValueError, OverflowError, ZeroDivisionError):
            return None
        finally:
            _host._errors.reset(token)


def _result(value: Any, dtype: np.dtype, device: Any, rt: Any) -> Any:
    """An array of ``value``: 0-d as a Scalar node (no buffer), else a new buffer."""
    Array = _Array or _bind()
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


def _clear() -> None:
    _loops0.clear()
    _held_ops.clear()


_caches.register("host_ops.loops0", _clear, lambda: len(_loops0) + len(_held_ops),
                 why="one per operation and kinds of operand")
