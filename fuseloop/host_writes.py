"""Writes of :mod:`fuseloop.host_eager`: assignments and in-place operators whose
target is a small view of a concrete array (or a HostArray) on a CPU device, done by
numpy in the buffer's memory once the lazy arrays reading the elements written are
computed and the device's queue is finished (docs/design.md, "Aliasing and
evaluation order")."""

from __future__ import annotations

from typing import Any

import numpy as np

from . import caches as _caches
from . import evaluate as _evaluate
from . import flags as _flags
from . import host_path as _host
from . import trace_hooks as _trace
from .array import Array, _weak_scalar
from .dtypes import scalar_to
from .expr.nodes import Scalar, recent_lazy
from .host_eager import (
    _F64,
    _VIEW_DTYPES,
    EAGER_MAX_WORK,
    HostArray,
    _as,
    _base,
    _bases,
    _basic,
    _inplace_ops,
    _op_entry,
    _operand,
    _runtimes,
    _sync,
    _view_of,
    compute,
    numpy_value,
)
from .host_views import element_or_view
from .stats import tallies as _tallies

_DTYPES = _host._DTYPES
_count_evaluation = _tallies["host_evaluations"].__next__  # (stats.tally, bound)
_errors, _QUIET = _host._errors, _host._QUIET


def _assigned(value: Any, dtype: np.dtype, device: Any) -> tuple[Any, bool] | None:
    """``(value as numpy's, reads a buffer)`` of an assigned value, or None."""
    tv = type(value)
    if tv is float or tv is int:
        try:
            return scalar_to(value, dtype), False
        except (OverflowError, TypeError, ValueError):
            return None
    if tv is HostArray:
        if value.device is not device:
            return None
        return numpy_value(value), value._buf is not None
    if tv is held_type[0] and value._v is not None:  # (fuseloop.host_held's value)
        return (value._v, False) if value.device is device else None
    if tv is Array:
        got = _operand(value, device)
        return None if got is None or got[0].char not in _DTYPES else (got[1], got[2])
    return None


def _before_write(storage: Any, v: np.ndarray, device: Any) -> Any:
    """Compute the lazy arrays that read the elements of ``storage`` under the numpy
    view ``v`` (the evaluation order of docs/design.md); then the runtime, synced."""
    readers = storage.live_readers() if recent_lazy or storage.readers else None
    if readers:
        itemsize = v.dtype.itemsize
        start = v.__array_interface__["data"][0] - \
            _host.host_bytes(storage, _sync(device)).__array_interface__["data"][0]
        written = (v.shape, tuple([s // itemsize for s in v.strides]), start // itemsize)
        pending = [r for r in readers if r._storage is None and not _evaluate.reads_outside(
            r._node, storage, written, itemsize)]
        if pending:
            from .assignment import compute

            compute(*pending)
    _flags.check_pending()
    return _sync(device)


def setitem(arr: Array, key: Any, value: Any) -> bool:
    """``arr[key] = value`` for a basic key on a concrete array (or HostArray) on a host
    device, a small target and a value that is a Python float or int, a HostArray or a
    small concrete array (of the target's shape, or 0-d), written by numpy now (with
    numpy's unsafe cast, as assignments cast); False: nothing done."""
    if value is _updated[0] and value._of is arr and (value._key is key or value._key == key):
        _updated[0] = _NOTHING  # (``A[k] op= v``: inplace wrote into this very view; an
        return True  # element's kept view holds an equal key; first: a loop's commonest)
    tv = type(value)
    target: Any
    storage: Any
    if tv is HostArray and value._of is arr:  # (written already, whatever the settings)
        if not value._shape and value._key == key:  # (an element's key: ints)
            return True  # (nussinov's ``T[i, j] = max(T[i, j], e)``: itself)
    if not _host.HOST_MAX_WORK or _trace.trace_checks or _evaluate.capturing_threads[0] \
            or _evaluate.recording_threads[0]:
        return False
    tk = type(key)  # (an element's key, ``x[i]`` or ``A[i, j]``: its write written out)
    if (tk is tuple or tk is int) and type(arr) is Array \
            and (done := _element_write(arr, key, value, tk, tv)) is not None:
        return done
    if tv is not float and tv is not int and tv is not HostArray and tv is not held_type[0]:
        if tv is not Array or (value._storage is None and type(value._node) is not Scalar):
            return False  # (a lazy value: the general path; a value made at once: here)
    if type(arr) is Array and (taken := element_or_view(arr, key)) is not None:
        if taken is False:
            return False
        target, element, storage = taken  # type: ignore[misc]
        if element:  # (an element: its kept HostArray's view)
            target = target._np
    else:
        items = _basic(key)
        if items is None:
            return type(arr) is HostArray and type(key) is HostArray \
                and _masked_own(arr, key, value)
        if type(arr) is HostArray and arr._buf is None:
            return _write_own(arr, items, value)
        got = _base(arr)
        if got is None:
            return False
        target, storage = _view_of(got[0], items)[0], got[1]
    if target is None or not 0 < target.size <= EAGER_MAX_WORK \
            or target.size > _host.HOST_MAX_WORK:
        return False
    if tv is HostArray and value._shape and value.device is arr.device:
        v = value._np  # (a row or block made here or viewed: the commonest, inline)
    elif (val := _assigned(value, arr.dtype, arr.device)) is not None:
        v = val[0]
    else:
        return False
    if type(v) is np.ndarray and v.shape != target.shape and (
            v.shape or target.size != 1):
        return False  # (the general path broadcasts, or raises its error)
    if tv is HostArray and value._buf is storage and target.size == 1 \
            and np.shares_memory(target, value._np):
        return True  # (``A[i, 0] = A[i, 0]``: nothing to write)
    if recent_lazy or storage.readers or _flags._local.pending:
        _before_write(storage, target, arr.device)
    elif (rt := _runtimes.get(arr.device)) is None or rt.deferred:
        _sync(arr.device)
    else:
        rt.finish()  # (_sync's commonest case inline: nothing deferred)
    if tv is HostArray and not value._shape and value._buf is not None:
        v = value._np[0]  # (a buffer's element: read now, the kernels writing it done)
    target[...] = v  # (another thread's launch now reading it: a data race, as in numpy)
    if value is _updated[0]:  # (``A[k] op= v``'s write-back of what inplace wrote)
        _updated[0] = _NOTHING
    else:
        _count_evaluation()
    return True


def _element_write(arr: Array, key: Any, value: Any, tk: type, tv: type) -> bool | None:
    """``A[i, j] = v``, ``x[i] = v`` of a concrete array viewed before and a 0-d value
    (a Python float or int, an element, a value held here) written by numpy's scalar
    assignment into the element, without its view (a loop's commonest write, at half
    the cost); None: not such a statement, or one :func:`setitem` does in full (lazy
    readers or checked gathers pending, an index error, a value numpy's cast refuses).
    ``tk``, ``tv``: the types of ``key`` (a tuple or an int) and ``value``."""
    node = arr._node
    got = _bases.get(id(node))
    if got is None or got[0] is not node:
        return None
    base = got[1]
    if tk is tuple:
        if len(key) != 2 or base.ndim != 2 or type(key[0]) is not int \
                or type(key[1]) is not int:
            return None
    elif base.ndim != 1:
        return None
    device = arr.device
    if tv is HostArray:  # (an element or a value held here: the commonest, inline)
        if value._shape or value.device is not device:
            return None
        v = value._np
    elif tv is Array and type(value._node) is Scalar and value.device is device:
        v = value._node.value
    elif tv is held_type[0] and value._v is not None and value.device is device:
        v = value._v  # (an element of ``for b in data``, fuseloop.host_held)
    elif (val := _assigned(value, arr.dtype, device)) is not None \
            and type(val[0]) is not np.ndarray:
        v = val[0]
    else:
        return None
    storage = got[2]
    dtype = v.dtype
    if recent_lazy or storage.readers or _flags._local.pending \
            or (dtype.char not in _DTYPES and dtype != arr.dtype):
        return None  # (a complex value into a real array: setitem's rules)
    rt = _runtimes.get(device)  # (_sync, its commonest case inline: nothing deferred)
    if rt is None or rt.deferred:
        _sync(device)
    else:
        rt.finish()
    if type(v) is np.ndarray:
        v = v[0]  # (a buffer's element: read once the kernels writing it are done)
    try:
        base[key] = v
    except (IndexError, TypeError, ValueError):
        return None  # (nothing written: setitem's view raises the general path's error)
    if value is _updated[0]:
        _updated[0] = _NOTHING
    else:
        _count_evaluation()
    return True


def _masked_own(arr: HostArray, key: HostArray, value: Any) -> bool:
    """``arr[key] = value`` into a buffer-less HostArray (no lazy array reads it: one
    that did would have given it a buffer) by a boolean HostArray of its shape (nbody's
    ``inv_r3[inv_r3 > 0] = ...``), ``value`` a Python scalar or a HostArray of ``arr``'s
    dtype, 0-d or of the selection's length: numpy's write; False: nothing done."""
    if arr._buf is not None or key.dtype.kind != "b" or key._shape != arr._shape \
            or not arr._shape or key.device is not arr.device:
        return False
    dtype = arr.dtype
    tv = type(value)
    if tv is float or tv is int:
        got = _assigned(value, dtype, arr.device)
        if got is None:
            return False
        v = got[0]
    elif tv is HostArray and value.device is arr.device and value.dtype == dtype:
        v = numpy_value(value)
        if value._buf is not None:
            _sync(arr.device)
    else:
        return False
    if key._buf is not None:
        _sync(arr.device)
    mask = key._np
    if np.shape(v) not in ((), (int(np.count_nonzero(mask)),)):
        return False  # (the general path raises numpy's error, or broadcasts)
    arr._np[mask] = v
    _count_evaluation()
    return True


#: the most positions a scatter by index arrays is written by numpy for (as
#: host_masks.MASK_MAX_ELEMENTS: moving elements costs numpy ~1 ns each, the kernels'
#: scatter an index check read back, a plan's walk and a launch)
SCATTER_MAX_ELEMENTS = 1 << 16


def _moved(x: Any, device: Any) -> Any:
    """The numpy value of a concrete operand of :func:`scatter` (an index array, a
    value) on ``device``: a view of its buffer, a HostArray's own array, a value held
    as a Scalar node, a numpy array or scalar; None for anything else (lazy, another
    device or dtype)."""
    tx = type(x)
    if tx is np.ndarray or isinstance(x, np.generic):  # (host data, as numpy's)
        return x if x.dtype.char in _VIEW_DTYPES else None
    if tx is HostArray:  # (a buffer's element as a 0-d view: read when written)
        if x.device is not device:
            return None
        v = x._np
        return v.reshape(()) if not x._shape and type(v) is np.ndarray else v
    if tx is not Array or x.device is not device:
        return None
    node = x._node
    if type(node) is Scalar:
        return node.value
    got = _base(x) if x._storage is not None else None  # (a leaf's view, or None)
    return None if got is None else got[0]


def scatter(arr: Array, key: Any, value: Any) -> bool:
    """``arr[key] = value`` for a key of ints, slices and concrete integer index arrays
    (fuseloop's or numpy's; at least one; at most SCATTER_MAX_ELEMENTS positions) on a
    host device, ``value`` a Python scalar or a concrete array: written by numpy's fancy
    assignment now (its rules: the advanced axes' place, broadcasting, the last of
    repeated positions, negative indices wrapped); False: nothing done (the general
    path's scatter, which raises the errors: an index out of range, shapes that do not
    broadcast).  mandelbrot2's ``N_[Xi[I], Yi[I]] = i + 1`` took an index check read
    back, a plan's walk and a scatter launch per statement."""
    if not _host.HOST_MAX_WORK or _trace.trace_checks or _evaluate.capturing_threads[0] \
            or _evaluate.recording_threads[0] or not _host.host_device(arr.device):
        return False
    device = arr.device
    items = key if type(key) is tuple else (key,)
    index: list[Any] = []
    shapes = []
    for k in items:
        tk = type(k)
        if tk is int or tk is slice:
            index.append(k)
            continue
        if (tk is not Array and tk is not HostArray and tk is not np.ndarray) \
                or k.dtype.kind not in "iu" \
                or (k.dtype.kind == "u" and k.dtype.itemsize == 8):
            return False  # (a mask, a list, uint64 values past int64's: the general path)
        v = _moved(k, device)
        if v is None:
            return False
        index.append(v)
        shapes.append(np.shape(v))
    if not shapes:
        return False
    try:
        n = _host._size(np.broadcast_shapes(*shapes))
    except ValueError:
        return False
    tv = type(value)
    if tv is float or tv is int:
        got = _assigned(value, arr.dtype, device)
        if got is None:
            return False
        v = got[0]
    else:
        v = _moved(value, device)
        if v is None or (v.dtype.kind == "c" and arr.dtype.kind != "c") \
                or np.size(v) > SCATTER_MAX_ELEMENTS:
            return False  # (a complex value into a real array: the general path's rules)
    if not 0 < n <= SCATTER_MAX_ELEMENTS or arr.dtype.char not in _VIEW_DTYPES:
        return False
    if arr._storage is None:
        arr.eval()  # (a lazy target gets its buffer first, as on the general path)
    target = _base(arr)
    if target is None:
        return False
    base, storage = target
    if recent_lazy or storage.readers or _flags._local.pending:
        _before_write(storage, base, device)
    else:
        _sync(device)
    try:
        base[tuple(index)] = v  # (numpy checks every index and shape before a write)
    except (IndexError, TypeError, ValueError):
        return False
    _count_evaluation()
    return True


def _write_own(arr: HostArray, items: tuple, value: Any) -> bool:
    """:func:`setitem` into a buffer-less HostArray (its own numpy array: no reader)."""
    if not arr._shape:
        return False
    val = _assigned(value, arr.dtype, arr.device)
    if val is None:
        return False
    v, reads = val
    target = _view_of(arr._np, items)[0]
    if target is None or not target.size:
        return False
    if type(v) is np.ndarray and v.shape != target.shape and (v.shape or target.size != 1):
        return False
    if reads:
        _sync(arr.device)
    target[...] = v
    return True


#: fuseloop.host_held.Held, set there (it imports this module's users): a value held
#: there is written as its numpy scalar (``x[i] = b``)
held_type: list[Any] = [None]
# the HostArray an in-place operator wrote last (Python assigns it back to its key), or
# _NOTHING (no value assigned is: ``A[k] = None`` is not taken for a write-back)
_NOTHING = object()
_updated: list[Any] = [_NOTHING]


def inplace(target: HostArray, op: str, other: Any) -> bool:
    """``target op= other`` for a HostArray ``target`` and an operand computed here,
    written into its memory now (numpy's ``same_kind`` rule, as fuseloop's in-place
    operators); False: nothing done.  The common steps are written out (a loop's
    ``A[i, j] -= A[i, k]``)."""
    if not _host.HOST_MAX_WORK or _trace.trace_checks or _evaluate.capturing_threads[0] \
            or _evaluate.recording_threads[0]:
        return False
    if not target._shape and target._buf is not None \
            and _element_inplace(target, op, other) is not None:
        return True
    return _inplace_steps(target, op, other)


def _inplace_steps(target: HostArray, op: str, other: Any) -> bool:
    """:func:`inplace` but for an element's scalar loop (:func:`_element_inplace`): its
    views, operands of other kinds, loops met first (the entry kept here)."""
    device = target.device
    to = type(other)
    if to is HostArray and other.device is device:  # (the commonest operands inline)
        kb, vb, reads = other.dtype, other._np, other._buf is not None
    elif to is float or to is int:  # (a Python scalar: its kind is its type)
        kb, vb, reads = to, other, False
    elif (got := _operand(other, device)) is not None:
        kb, vb, reads = got
    else:
        return False
    dtype = target.dtype
    key = (op, dtype, kb)
    hit: Any = _inplace_ops.get(key)
    if hit is None:
        hit = _op_entry(op, (dtype, kb))
        if hit is not False and not np.can_cast(hit[0][-1], dtype, "same_kind"):
            hit = False  # (the general path raises numpy's error)
        _inplace_ops[key] = hit
    if hit is False:
        return False
    loop = hit[0]
    if to is HostArray and not other._shape and type(vb) is np.ndarray:
        if vb.size != 1:
            return False
    elif type(vb) is np.ndarray and vb.shape != target._shape:
        return False
    buf = target._buf
    if buf is not None:
        if recent_lazy or buf.readers or _flags._local.pending:
            _before_write(buf, target._np, device)
        else:
            _sync(device)
    elif reads:
        _sync(device)
    if to is HostArray and not other._shape and type(vb) is np.ndarray:
        vb = vb[0]  # (a buffer's element, read once the kernels writing it are done)
    da, db = loop[0], loop[1]
    if kb is not db and (kb is not float or db is not _F64):  # (host_eager._F64)
        vb = _weak_scalar(vb, db) if kb is float or kb is int else _as(vb, kb, db)
    shape = target._shape
    va = target._np
    if not shape and type(va) is np.ndarray:
        va = va[0]
    if dtype is not da:
        va = va.astype(da) if type(va) is np.ndarray else da.type(va)
    arrays = type(va) is np.ndarray or type(vb) is np.ndarray
    if arrays or hit[2] is None:
        out = compute(op, hit, (va, vb), arrays)
        if out is None:
            return False
    else:  # (two numpy scalars, a loop's commonest: compute's scalar case inline)
        token = _errors.set(_QUIET) if hit[4] else None
        try:
            out = hit[2](va, vb)
        except (TypeError, ValueError, ArithmeticError):
            return False
        finally:
            if token is not None:
                _errors.reset(token)
    _count_evaluation()
    _updated[0] = target
    if shape:
        target._np[...] = out
    elif type(target._np) is np.ndarray:  # (an element of a buffer)
        target._np[0] = out
    else:
        target._np = out if out.dtype is dtype else dtype.type(out)
    return True


# (op, target dtype, operand kind) -> (the scalar loop's function, the conversion of the
# target's element to the loop's dtype or None, the operand's or None, whether numpy's
# error state is switched off around it), or False: an element's in-place operator as
# :func:`_element_inplace` computes it, made from its :data:`_inplace_ops` entry
_element_ops: dict[tuple, Any] = {}


def _element_entry(key: tuple) -> Any:
    """:data:`_element_ops`' entry for ``key``, made from its ``_inplace_ops`` entry; None
    where that is not made yet (inplace's steps make it)."""
    hit = _inplace_ops.get(key)
    if hit is None:
        return None
    entry: Any = False
    if hit is not False and hit[2] is not None:
        _, dtype, kb = key
        da, db = hit[0][0], hit[0][1]
        if kb is db or (kb is float and db is _F64):  # (host_eager._F64's rule)
            to_b = None
        elif kb is float or kb is int:
            def to_b(v: Any, db: Any = db) -> Any:
                return _weak_scalar(v, db)
        else:
            to_b = db.type
        pyfn = hit[5]  # (float64: Python's operator, exactly numpy's; no error state)
        entry = (hit[2] if pyfn is None else pyfn, None if dtype is da else da.type, to_b,
                 bool(hit[4]) and pyfn is None)
    _element_ops[key] = entry
    return entry


def _element_inplace(target: HostArray, op: str, other: Any) -> Any:
    """:func:`inplace` for an element of a buffer and a 0-d operand (an element, a value
    held here, a Python scalar) whose loop has a scalar operator: seidel_2d's ``A[i, j]
    += A[i, j - 1]``, ``A[i, j] /= 9.0``, read, computed and written without a view or
    a switch of numpy's error state where Python's float operator computes it
    (host_eager._PY_FLOAT_OPS), by an entry of :data:`_element_ops` that holds the
    conversions the loop needs; None: :func:`inplace`'s general steps.  The caller has
    checked the host path's settings."""
    to = type(other)
    device = target.device
    if to is HostArray:
        if other._shape or other.device is not device:
            return None
        kb, vb = other.dtype, other._np
    elif to is float or to is int:
        kb, vb = to, other
    elif to is Array and type(node := other._node) is Scalar and other.device is device:
        kb, vb = other.dtype, node.value
    else:
        return None
    key = (op, target.dtype, kb)
    entry = _element_ops.get(key)
    if entry is None:
        entry = _element_entry(key)
    if not entry:
        return None  # (first met, or not a scalar loop: inplace's steps, which keep it)
    if recent_lazy or target._buf.readers or _flags._local.pending:
        return None  # (lazy readers or checked gathers pending: inplace's steps)
    rt = _runtimes.get(device)
    if rt is None or rt.deferred:
        return None
    rt.finish()  # (the elements read once the kernels writing them are done)
    fn, to_a, to_b, quiet = entry
    t = target._np
    va = t[0]
    if type(vb) is np.ndarray:
        vb = vb[0]
    out = _host.scalar_apply(fn, to_a, to_b, quiet, va, vb)
    if out is None:
        return None
    _count_evaluation()
    _updated[0] = target
    t[0] = out
    return True


def _eager_inplace(op: str) -> Any:
    """HostArray's in-place operator ``op`` (``A[i, j] -= v``): here, else Array's."""
    def method(self: Any, other: Any) -> Any:
        # (an element of a buffer, a loop's commonest target: its scalar loop first)
        if not _host.HOST_MAX_WORK or _trace.trace_checks or _evaluate.capturing_threads[0] \
                or _evaluate.recording_threads[0]:
            return Array._inplace(self, op, other)
        if (not self._shape and self._buf is not None
                and _element_inplace(self, op, other) is not None) \
                or _inplace_steps(self, op, other):
            return self
        return Array._inplace(self, op, other)
    method.__name__ = method.__qualname__ = f"__i{op}__"
    return method


# Array's in-place operators, by the ufunc each applies (as fuseloop.array's methods)
_INPLACE_OPS = {"__iadd__": "add", "__isub__": "subtract", "__imul__": "multiply",
                "__itruediv__": "true_divide", "__ifloordiv__": "floor_divide",
                "__imod__": "remainder", "__ipow__": "power", "__iand__": "bitwise_and",
                "__ior__": "bitwise_or", "__ixor__": "bitwise_xor",
                "__ilshift__": "left_shift", "__irshift__": "right_shift"}
for _name, _op in _INPLACE_OPS.items():
    setattr(HostArray, _name, _eager_inplace(_op))

_caches.register("host_writes.element_ops", _element_ops.clear, lambda: len(_element_ops),
                 why="one per operation, target dtype and kind of operand")
