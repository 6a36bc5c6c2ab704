"""Statements of a loop on small concrete arrays on a CPU device, done by numpy in host
memory (:mod:`fuseloop.host_path`'s evaluation, entered from the statement itself).

:func:`write` takes an assignment (``A[i, j] = e``) straight from
:func:`fuseloop.assignment.assign`; :func:`inplace` an in-place operator (``A[i, j]
/= A[j, j]``) before any node is built; :func:`scalar` and :func:`read` give a small
array's value to Python (``bool(a[i] > a[j])``, ``.get()``) without a buffer or a
copy command.  Each returns False or None where the general path must do the work.
"""

from __future__ import annotations

import sys
import weakref
from typing import Any

import numpy as np

from . import caches as _caches
from . import evaluate as _evaluate
from . import flags as _flags
from . import host_ops as _ops
from . import host_path as _host
from .dtypes import scalar_to
from .expr.nodes import (
    _EMPTY,
    _EXACT_REFCOUNTS,
    Apply,
    Leaf,
    Node,
    Scalar,
    forget_recent,
    recent_lazy,
)
from .host_ops import _held0
from .host_ops import binary0 as host_binary0
from .host_path import (
    _DTYPES,
    _QUIET,
    _UFUNCS,
    _check_loop,
    _errors,
    _size,
    _State,
    _store,
    _typed_bytes,
    _Unsupported,
    _uses,
    _value,
    _view,
    host_device,
    scalar_fn,
    small_reads,
    tracks_uses,
)
from .runtime.devices import Device, _runtime
from .stats import increment as _count
from .trace_hooks import trace_checks

_new = object.__new__


def _small_target(target: Any) -> tuple[Any, Any, int] | None:
    """``(storage, leaf, size)`` of a concrete array small enough for the host path on a
    CPU device, while no thread captures or records launches; None otherwise."""
    storage = target._storage
    leaf: Any = target._node
    # (a GPU's statements ask first: host_device needs a CPU device)
    if storage is None or type(leaf) is not Leaf or not _host.HOST_MAX_WORK \
            or target.device.type != "cpu":
        return None
    size = _size(leaf.shape)
    if not size or size > _host.HOST_MAX_WORK or not host_device(target.device) \
            or _evaluate.capturing_threads[0] or _evaluate.recording_threads[0]:
        return None
    return storage, leaf, size


def write(target: Any, node: Node) -> bool:
    """Write ``node`` (of the target's dtype, broadcasting to its shape) into the
    concrete array ``target`` here, as :func:`fuseloop.assignment.assign` would with
    kernels; False (nothing written) leaves it to the general path.

    The statement of a loop (``A[i, j] -= A[i, :j] @ A[:j, j]``) comes here straight
    from the assignment, without its targets, rebuilt values and the run's dispatch
    (about 4 us of the general path's host cost on this project's CPU).  Taken only
    where nothing else needs doing first: a lazy array reading elements written
    here is computed first by the general path, so it is left to it."""
    taken = _small_target(target)
    if taken is None:
        return False
    storage, leaf, size = taken
    shape, device, dtype = leaf.shape, target.device, leaf.dtype
    if dtype.char not in _DTYPES or (node.fancy and not small_reads((node,))):
        return False
    itemsize = dtype.itemsize
    readers = storage.live_readers() if recent_lazy or storage.readers else None
    if readers:
        written = (shape, leaf.view_strides(), leaf.offset)
        for r in readers:
            if r._storage is None and not _evaluate.reads_outside(
                    r._node, storage, written, itemsize):
                return False
    rt = _runtime(device)
    if rt.deferred:  # (small launches waiting to be enqueued: this one joins them)
        return False
    _flags.check_pending()  # (earlier checked gathers' errors before anything is written)
    with rt.launch_lock:
        rt.finish()
        token = _errors.set(_QUIET) if _QUIET is not None else None
        try:
            value = _value(node, _State(rt, _uses([node]) if tracks_uses((node,), size) else None))
        except (_Unsupported, RecursionError, TypeError, ValueError):
            return False
        finally:
            if token is not None:
                _errors.reset(token)
        _store(storage, rt, dtype, shape, leaf.strides, leaf.offset, value)
    _count("host_evaluations")
    return True


# (op, target dtype, operand dtype or Python type) -> (ufunc, the operation's loop
# dtypes, the operator computing it on numpy scalars or None), or False: what an
# in-place operator computes (see inplace)
_inplace_loops: dict[tuple, Any] = {}


def _inplace_loop(op: str, target: Any, other: Any) -> Any:
    """The ufunc and loop dtypes of ``target op= other`` as the kernels compute it
    (the node fuseloop builds for it, once per dtypes), or False."""
    from .array import build_node

    node = build_node(op, (target, other))[0]
    loop = node.loop  # type: ignore[attr-defined]
    if type(node) is not Apply or not _check_loop(op, tuple(d.char for d in loop)) \
            or op in ("cast", "where", "positive") \
            or not np.can_cast(loop[-1], target.dtype, "same_kind"):
        return False  # (the general path computes it, or raises numpy's error)
    chars = tuple(d.char for d in loop)
    return _UFUNCS[op][0], loop, scalar_fn(op, chars)


def assign(target: Any, value: Any, held: bool) -> bool:
    """``arr[key] = value`` for the concrete view ``target`` (``arr[key]``) and a Python
    float or int, or an array of the target's shape or 0-d (concrete, or lazy and not
    kept by the caller: ``held``), written here as :func:`fuseloop.assignment.assign`
    would (numpy's unsafe cast); False (nothing written) leaves it to that general
    path.  ``A[i, j] = e``, the loop's statement, skips its value checks this way."""
    tv = type(value)
    if tv is float or tv is int:
        node: Any = Scalar(scalar_to(value, target.dtype))
    elif (tv is type(target) or issubclass(tv, type(target)) or issubclass(type(target), tv)) \
            and hasattr(value, "_node") and not trace_checks:  # (a fuseloop array: HostArray too)
        node = value._node
        if value.device is not target.device or (held and value._storage is None) or (
                node.shape and node.shape != target._shape):
            return False
        if node.dtype is not target.dtype:
            node = _evaluate.cast_node(node, target.dtype)
    else:
        return False
    return write(target, node)


def _operand_key(target: Any, other: Any) -> Any:
    """What :func:`inplace`'s loop depends on in ``other``: its dtype (an array on the
    target's device, of the target's shape or 0-d), ``float`` or ``int``; None: not
    computed there."""
    to = type(other)
    dtype = target.dtype
    if to is float:
        return float
    if to is int:
        if dtype.kind not in "fiu" or (dtype.kind != "f" and not (
                np.iinfo(dtype).min <= other <= np.iinfo(dtype).max)):
            return None  # (numpy's errors for a Python int out of an integer's range)
        return int
    tt = type(target)  # (a fuseloop array: its class, or HostArray's, as array.py imports this)
    if to is tt or issubclass(to, tt) or issubclass(tt, to):
        onode = other._node
        if other.device is not target.device or onode.dtype.char not in _DTYPES or (
                onode.shape and onode.shape != target.shape):
            return None
        return onode.dtype
    return None


def _probe_inplace(target: Any, op: str, other: Any) -> int:
    return sys.getrefcount(other)


def _temp_refcount() -> int:
    """``sys.getrefcount`` of a temporary operand of ``a += expr`` as :func:`inplace`
    sees it (``Array.__iadd__`` -> ``Array._inplace`` -> ``inplace``, mirrored and
    measured: whatever the interpreter's own references are).  A deeper call chain
    counts more, and reads as held: the safe side."""

    class Probe:
        def __iadd__(self, o: Any) -> Any: return self._inplace("add", o)

        def _inplace(self, op: str, other: Any) -> Any:
            return _probe_inplace(self, op, other)

    p: Any = Probe()
    p += object()
    return int(p)


_TEMP_REFCOUNT = _temp_refcount()


def _temporary(other: Any, count: int) -> bool:
    """Whether the lazy operand ``other`` of :func:`inplace` (``count``: its reference
    count there) is a temporary nothing else holds (``A[:, j] -= Q[:, k] * R[k, j]``),
    taken out of the recent lazy arrays if so: nobody can read its value later, so
    it needs no buffer of its own when it reads elements the statement writes."""
    if not _EXACT_REFCOUNTS or weakref.getweakrefcount(other):
        return False
    tail = recent_lazy[-1:]
    recent = bool(tail) and tail[0] is other
    if count > _TEMP_REFCOUNT + recent:
        return False
    if recent:
        forget_recent(other)
    return True


def _kept_operand(storage: Any, leaf: Any, other: Any, onode: Any, okey: Any,
                  device: Device, count: int) -> Any:
    """For :func:`inplace`: None, a buffer for the lazy operand ``other`` when it reads
    elements written (it is made concrete with the value computed) and is held
    elsewhere (``count``: its reference count in :func:`inplace`), or False when
    another lazy array reads them (the general path computes it first)."""
    temporary = onode is not None and type(onode) is not Leaf \
        and storage in onode.storages and _temporary(other, count)
    readers = storage.live_readers() if recent_lazy or storage.readers else None
    if not readers:
        return None
    kept = None
    written = (leaf.shape, leaf.view_strides(), leaf.offset)
    for r in readers:
        if r._storage is None and not _evaluate.reads_outside(
                r._node, storage, written, leaf.dtype.itemsize):
            if r is not other:
                return False
            if temporary:
                continue
            # a lazy operand reading elements written here (seidel_2d's
            # ``A[i, 1:-1] += A[i, 2:] + ...``) becomes concrete with the value
            # computed here, so whoever keeps it reads the old elements
            kept = _evaluate.allocate(_size(onode.shape) * okey.itemsize, device)
    return kept


def inplace(target: Any, op: str, other: Any) -> bool:
    """``target op= other`` for a concrete ``target`` and an array (concrete, or lazy and
    computed here) or a Python float or int ``other``, computed and written here; False
    (nothing done) leaves it to the general path (node, assignment, :func:`write`).

    A loop's scalar statement (``A[i, j] /= A[j, j]``, ``A[i, j] += A[i, j - 1]``)
    costs about half as much host time this way: no node, lazy array or assignment
    is made, and the operands are read as numpy scalars."""
    if type(target._node) is Scalar:  # (a value held here, crc16's ``cur >>= 1``: first)
        return not trace_checks and _inplace_value(target, op, other)
    taken = None if trace_checks else _small_target(target)
    if taken is None:
        return False
    storage, leaf, _size_of = taken
    dtype = leaf.dtype
    okey = _operand_key(target, other)
    if okey is None:
        return False
    onode: Any = None if okey is float or okey is int else other._node
    if onode is not None and onode.fancy and not small_reads((onode,)):
        return False
    # (counted here, alone on its line: an argument list holding it would count too)
    count = sys.getrefcount(other)
    shape, device = leaf.shape, target.device
    key = (op, dtype, okey)
    hit = _inplace_loops.get(key)
    if hit is None:
        hit = _inplace_loops[key] = _inplace_loop(op, target, other)
    if hit is False:
        return False
    fn, loop, sfn = hit
    kept = _kept_operand(storage, leaf, other, onode, okey, device, count)
    if kept is False:
        return False
    rt = _runtime(device)
    if rt.deferred:
        return False
    _flags.check_pending()
    with rt.launch_lock:
        rt.finish()
        token = _errors.set(_QUIET) if _QUIET is not None else None
        try:
            if shape:
                a = _view(storage, rt, dtype, shape, leaf.strides, leaf.offset)
            else:  # (an element: read and written through one typed view)
                typed = _typed_bytes(storage, rt, dtype)
                a = typed[leaf.offset]
            if dtype is not loop[0]:
                a = a.astype(loop[0])
            if okey is float or okey is int:
                b = loop[1].type(other)
            else:
                b = raw = _view(onode.storage, rt, okey, onode.shape, onode.strides,
                                onode.offset) if type(onode) is Leaf \
                    else _value(onode, _State(rt, None))
                if type(b) is not np.ndarray:  # (a scalar: numpy's, or a node's value)
                    b = loop[1].type(b)
                elif okey is not loop[1]:
                    b = b.astype(loop[1])
            out = fn(a, b) if sfn is None or type(a) is np.ndarray or type(b) is np.ndarray \
                else sfn(a, b)  # (two numpy scalars: their operator)
            if out.dtype is not dtype:
                out = out.astype(dtype)
        except (_Unsupported, RecursionError, TypeError, ValueError):
            return False  # (nothing written: the general path computes it, or reports it)
        finally:
            if token is not None:
                _errors.reset(token)
        if kept is not None:
            _store(kept, rt, okey, onode.shape, None, 0, raw)
            other._become(kept)
        if shape:
            _store(storage, rt, dtype, shape, leaf.strides, leaf.offset, out)
        else:
            typed[leaf.offset] = out
    _count("host_evaluations")
    return True


def _inplace_value(target: Any, op: str, other: Any) -> bool:
    """``target op= other`` for a lazy 0-d ``target`` holding its value (a Scalar node,
    made by :func:`fuseloop.host_ops.binary0`: crc16's ``cur_byte >>= 1``) and a 0-d
    ``other``: the target holds the new value (as the general path, which gives it a
    buffer first: arrays made from its old node keep the old value); False: not taken."""
    if not _host.HOST_MAX_WORK:
        return False
    to = type(other)  # (held values and Python scalars: the value alone, host_ops._held0)
    Array = _ops._Array or _ops._bind()
    got = _held0(op, target, other, Array, to, Array) if to is int or to is float \
        or to is Array else None
    if got is False:
        return False
    if got is None:
        got = host_binary0(op, target, other)
        if got is None:
            return False
        value, out_dtype = got._node.value, got.dtype
    else:
        value, out_dtype = got[0], got[1]
    dtype = target.dtype
    if out_dtype is not dtype:
        if not np.can_cast(out_dtype, dtype, "same_kind"):
            return False  # (the general path raises numpy's error)
        value = value.astype(dtype)
    node = _new(Scalar)  # (a new node: arrays made from the old one keep its value)
    node.value, node.dtype, node.shape, node.storages = value, dtype, (), _EMPTY
    target._node = node
    return True


def scalar(array: Any) -> Any:
    """The value of the size-1 ``array`` (lazy or concrete) as a Python scalar, computed
    or read here without a buffer (the array stays as it was), or None: not on a
    device whose buffers numpy may use, or not computed here.

    ``bool(a[i, j] > a[i, k])`` in a loop (Python's ``max`` of two elements, NPBench's
    nussinov) made a buffer for the comparison, wrote it and read it back."""
    device = array.device
    node: Any = array._node
    if type(node) is Scalar:  # (a value computed at once, fuseloop.host_ops: known here)
        return node.value.item()
    if not _host.HOST_MAX_WORK or node.dtype.char not in _DTYPES or not host_device(device) \
            or _evaluate.capturing_threads[0] or _evaluate.recording_threads[0] \
            or (node.fancy and not small_reads((node,))):
        return None  # (``float(X.sum())`` of a large X: the kernels' work)
    rt = _runtime(device)
    if rt.deferred:  # (kernels to wait for: the general path's polled wait is cheaper)
        return None
    if type(node) is Leaf:  # (an element of a buffer, spmv's ``A_row[i]`` bound: read)
        with rt.launch_lock:
            rt.finish()
            return _typed_bytes(node.storage, rt, node.dtype)[node.offset].item()
    with rt.launch_lock:
        rt.finish()
        token = _errors.set(_QUIET) if _QUIET is not None else None
        try:
            value = _value(node, _State(rt, None))
        except (_Unsupported, RecursionError, TypeError, ValueError):
            return None
        finally:
            if token is not None:
                _errors.reset(token)
    if type(node) is not Leaf:
        _count("host_evaluations")
    return value.item() if isinstance(value, np.ndarray | np.generic) \
        else node.dtype.type(value).item()


def read(leaf: Node, device: Device) -> np.ndarray | None:
    """A new host array holding the elements of the concrete array ``leaf`` (any view),
    copied from host memory once the device's queue is finished; None unless small
    and on a device whose buffers numpy may use (the caller then reads with a copy
    command, which costs a wait on its event: 30-60 us on PoCL)."""
    size = _size(leaf.shape)
    if not size or size > _host.HOST_MAX_WORK or type(leaf) is not Leaf \
            or leaf.dtype.char not in _DTYPES or not host_device(device):
        return None
    rt = _runtime(device)
    if rt.deferred:  # (kernels to wait for: the copy command's polled wait is cheaper)
        return None
    with rt.launch_lock:
        rt.finish()
        return np.array(_value(leaf, _State(rt, None)))


_caches.register("host_path.inplace_loops", _inplace_loops.clear, lambda: len(_inplace_loops),
                 why="one per operation and dtypes")
