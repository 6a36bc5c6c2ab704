"""Small evaluations on a CPU device, computed by numpy in the buffers' host memory.

On PoCL's CPU device a kernel launch costs the host 25-60 us (binding, enqueueing,
waking the driver's worker threads), where numpy does a statement on a few hundred
elements in 1-5 us; a Python loop of small statements (``A[i, j] -= A[i, :j] @
A[:j, j]``) was 50-200x slower than numpy.  The device's buffers are host memory, so
an evaluation whose work is small (:data:`HOST_MAX_WORK` elements, measured by
``benchmarks/host_path_threshold.py``; or cheap elementwise operations moving at most
:data:`CHEAP_MAX_BYTES` bytes) runs here instead: each buffer is mapped once
(a persistent, zero-copy map kept per OpenCL buffer, see :func:`host_bytes`), leaves
become numpy views of it, and the expression is computed with numpy ufuncs on the
operation's own loop dtypes (numpy's promotion is what fuseloop's loops follow), then
written to the target view or a new pooled buffer.  Nothing is built or enqueued.

What runs here is exactly what the kernels compute, up to float rounding where
numpy and OpenCL's math library legitimately differ (transcendental functions, the
order of a sum).  Complex values take the operations whose numpy loops are the
kernels' helpers' formulas (``+ - *``, squares, ``abs``, parts, conjugates, ``==``,
casts to complex: ``_COMPLEX_FNS``), and an evaluation reading one may have up to
:data:`COMPLEX_MAX_WORK` elements.  Anything else goes to the kernels: float16,
complex division, powers and functions, user functions, sparse products, masks and
scatters, operations whose integer semantics numpy defines differently (integer
``power``), a checked gather with an index out of range (the kernel path reports it),
and every evaluation while ``fl.show_code`` captures or a run plan records.  Before
touching host memory the device's deferred launches are enqueued and its queue
finished (``clFinish`` on an idle queue costs 0.1 us); all values are computed before
anything is written, so a target read through another view sees its old elements, as
with the kernels.

``fl.stats()["host_evaluations"]`` counts the evaluations done here.  The
environment variable ``FUSELOOP_HOST_PATH`` sets :data:`HOST_MAX_WORK` (``0``:
everything runs as kernels, as the test suite does for the kernels' own tests).
"""

from __future__ import annotations

import math
import operator
import os
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from . import caches as _caches
from . import stats as _stats
from .expr.nodes import (
    Apply,
    Concat,
    Gather,
    Iota,
    Leaf,
    Literal,
    Node,
    Reduce,
    Remap,
    Scalar,
    Storage,
)
from .expr.program import Target
from .runtime.devices import Device, _runtime

#: the most elements of work (the sizes of every computed node, a reduction's input
#: included) an evaluation may have to run here; measured on this project's 2-core
#: CI machine (benchmarks/host_path_threshold.py): below ~16k elements numpy's
#: single-threaded loops beat a launch on PoCL for the common statements
HOST_MAX_WORK = 4096
#: a flat 1-D elementwise structure (``(x * 2 + y).eval()``) evaluated here this many
#: times gets its kernel built instead (0-d ones never: see try_run): a cached kernel's
#: launch costs ~2.5x less CPU than the host path (same benchmark), which pays back a
#: disk-cached kernel's load (~20 ms) after about this many evaluations; loops whose
#: statements differ in their offsets (different structures) stay here
FLAT_REPEATS_FOR_KERNEL = 1024
FLAT_COUNTS_MAX = 4096
_env = os.environ.get("FUSELOOP_HOST_PATH", "").strip().lower()
if _env:  # an integer (the limit; 0: off), or a word
    HOST_MAX_WORK = int(_env) if _env.isdigit() else \
        0 if _env in ("off", "no", "false") else HOST_MAX_WORK
#: the most output elements of an evaluation that reads a complex value (and whose
#: reductions, remaps and gathers read at most HOST_MAX_WORK): PoCL's kernels on
#: complex values cost as much CPU as numpy's loops or more at every size (mandelbrot's
#: ``abs(Z) < 2`` on 15625 elements: 600 us against numpy's 26 us; ``Z * Z + C``: on
#: par), and a launch's host cost comes on top
COMPLEX_MAX_WORK = 1 << 16
#: the most bytes (leaves read and results written) of an evaluation beyond
#: HOST_MAX_WORK elements done here where its operations are cheap ones (host_reads.
#: CHEAP_OPS: memory-bound, a single pass): a logical not of 64k booleans costs numpy
#: ~5 us and a kernel's launch more than the host path's whole statement
#: (probes/npbench_cheap_work.py: 108 against 192 us; float sums at 16k on par)
CHEAP_MAX_BYTES = 128 << 10
#: from this many output elements on, an evaluation lets go of each intermediate value
#: once read (and computes into it where it can): kept all at once, a 16-operation
#: stencil's temporaries outgrew the cache and ran 4x slower than numpy's own
TRACK_USES_AT = 1024
#: ... and whose output elements times computed nodes reach this (the temporaries kept
#: all at once, 512 KiB of float64: about half this CPU's L2): below it, counting the
#: readers cost more than it saved (jacobi_1d's 4 operations on 3200 elements; a
#: 64x64 centring and a 6-operation chain on 4096-16384 elements, on the CPU clock)
TRACK_USES_WORK = 64 * 1024
#: bytes of buffers kept mapped; all maps are dropped when reached
MAPPED_MAX_BYTES = 256 << 20

# dtypes computed here: numpy's and the kernels' arithmetic agree on them
_DTYPES = frozenset("?bBhHiIlLqQfd")
_FLOAT = frozenset("fd")
_COMPLEX = frozenset("FD")
_HOST_DTYPES = _DTYPES | _COMPLEX  # (of leaves and scalars read here)
_INT = frozenset("bBhHiIlLqQ")

# operation name -> (numpy ufunc, which loops it may take here: "any" (bool, integer
# or float), "num" (integer or float), "int" (integer or bool), "float")
_UFUNCS: dict[str, tuple[Any, str]] = {}
for _name in ("add", "subtract", "multiply", "minimum", "maximum", "fmin", "fmax",
              "logical_and", "logical_or", "logical_xor", "logical_not", "absolute"):
    _UFUNCS[_name] = (getattr(np, _name), "any")
for _name in ("equal", "not_equal", "less", "less_equal", "greater", "greater_equal"):
    _UFUNCS[_name] = (getattr(np, _name), "cmp")
for _name in ("negative", "square", "sign", "floor_divide", "remainder", "fmod"):
    _UFUNCS[_name] = (getattr(np, _name), "num")
for _name in ("bitwise_and", "bitwise_or", "bitwise_xor", "invert"):
    _UFUNCS[_name] = (getattr(np, _name), "int")
for _name in ("left_shift", "right_shift"):
    _UFUNCS[_name] = (getattr(np, _name), "intonly")
for _name in ("true_divide", "power", "sin", "cos", "tan", "arcsin", "arccos", "arctan",
              "sinh", "cosh", "tanh", "arcsinh", "arccosh", "arctanh", "exp", "exp2",
              "expm1", "log", "log2", "log10", "log1p", "sqrt", "cbrt", "floor", "ceil",
              "trunc", "rint", "copysign", "hypot", "arctan2", "isnan", "isinf", "isfinite",
              "fabs", "reciprocal"):  # (the last two: x ** e by products, fuseloop.powers)
    _UFUNCS[_name] = (getattr(np, _name), "float")
_NUMERIC = _INT | _FLOAT
# complex operations computed here: numpy's loops are the formulas of the kernels'
# helpers (fuseloop.lower.complex_ops) up to rounding (``abs``: a scaled square root
# against hypot); division, powers and functions differ at special values
_COMPLEX_FNS: dict[str, Any] = {
    name: getattr(np, name) for name in (
        "add", "subtract", "multiply", "negative", "square", "absolute", "conjugate",
        "equal", "not_equal", "isnan", "isinf", "isfinite", "logical_not", "where")}
_COMPLEX_FNS["real_part"] = lambda z: z.real.copy() if type(z) is np.ndarray else z.real
_COMPLEX_FNS["imag_part"] = lambda z: z.imag.copy() if type(z) is np.ndarray else z.imag
_SCALAR_OPS: dict[str, Any] = {
    "add": operator.add, "subtract": operator.sub, "multiply": operator.mul,
    "true_divide": operator.truediv, "floor_divide": operator.floordiv,
    "remainder": operator.mod, "bitwise_and": operator.and_, "bitwise_or": operator.or_,
    "bitwise_xor": operator.xor, "left_shift": operator.lshift,
    "right_shift": operator.rshift, "equal": operator.eq, "not_equal": operator.ne,
    "less": operator.lt, "less_equal": operator.le, "greater": operator.gt,
    "greater_equal": operator.ge, "negative": operator.neg, "absolute": operator.abs,
    "invert": operator.invert}
_REDUCERS = {"sum": np.add.reduce, "prod": np.multiply.reduce, "max": np.maximum.reduce,
             "min": np.minimum.reduce, "any": np.logical_or.reduce,
             "all": np.logical_and.reduce}
_EMPTY_OK = frozenset(("sum", "prod", "any", "all"))  # (reductions with an identity)
_count_evaluation = _stats.tallies["host_evaluations"].__next__  # (stats.tally, bound)
# (flat structure's signature, shape) -> evaluations here (see FLAT_REPEATS_FOR_KERNEL)
_flat_counts: dict[tuple, int] = {}
# (op, loop key) -> the function computing it here, or False (see _loop_fn); the
# operator computing it on numpy scalars, or None (see scalar_fn)
_loop_fns: dict[tuple, Any] = {}
_scalar_fns: dict[tuple, Any] = {}

# numpy's error state (floating-point warnings off, as in a kernel) set directly:
# ``np.errstate`` costs 3.5 us per use
_errors: Any = None
_QUIET: Any = None
try:
    from numpy._core import umath as _umath

    _errors = _umath._extobj_contextvar
    _QUIET = _umath._make_extobj(all="ignore")
except (ImportError, AttributeError):  # (another numpy: warnings as numpy gives them)
    pass


class _Unsupported(Exception):
    """The evaluation cannot run here (the kernels do it)."""


def _check_loop(op: str, chars: tuple[str, ...]) -> bool:
    if not all(c in _DTYPES for c in chars):
        return False
    if op in ("cast", "where", "positive"):
        return True
    hit = _UFUNCS.get(op)
    if hit is None:
        return False
    kind = hit[1]
    ins = chars[:-1]
    if kind == "any":
        return True
    if kind == "cmp":  # (mixed signed/unsigned comparisons: numpy's loops differ by version)
        return len({np.dtype(c).kind for c in ins}) == 1
    if kind == "num":
        return all(c != "?" for c in ins)
    if kind == "int":
        return all(c in _INT or c == "?" for c in ins)
    if kind == "intonly":
        return all(c in _INT for c in ins)
    return all(c in _FLOAT for c in ins)  # "float" (integer power: numpy raises on b < 0)


# {{{ which devices, how much work


_host_devices: dict[int, bool] = {}


def host_device(device: Device) -> bool:
    """Whether ``device``'s buffers are host memory that numpy may use directly: PoCL's
    CPU device (its buffers, mapped once, stay coherent with its kernels)."""
    ok = _host_devices.get(device.index)
    if ok is None:
        ok = _host_devices[device.index] = (
            device.type == "cpu" and device.backend == "opencl"
            and "pocl" in (device.runtime + device.platform).lower())
    return ok


#: the number of elements of a shape (math's product: a Python loop cost every
#: statement's checks, which ask it several times, ~0.2 us a call)
_size: Callable[[tuple[int, ...]], int] = math.prod


# }}}


# {{{ host views of buffers

# cl_mem handle -> its bytes, mapped (a pooled block is mapped once and reused by
# every buffer the pool hands out from it; the map holds the block, so its handle
# cannot be reused by another buffer while it is here)
_mapped: dict[int, np.ndarray] = {}
_mapped_bytes = [0]


def host_bytes(storage: Storage, rt: Any) -> np.ndarray:
    """The bytes of ``storage``'s buffer as a writable uint8 array (the device's own
    memory: PoCL maps a CPU buffer without a copy, and the map stays valid while
    kernels use the buffer).  The caller has finished the device's queue."""
    buf = storage.buffer
    key = buf.int_ptr
    got = _mapped.get(key)
    if got is not None and got.nbytes >= storage.nbytes:
        return got
    import pyopencl as cl

    size = buf.get_info(cl.mem_info.SIZE)
    if _mapped_bytes[0] + size > MAPPED_MAX_BYTES:
        clear()
    flags: Any = cl.map_flags.READ | cl.map_flags.WRITE
    mapped: Any = cl.enqueue_map_buffer(rt.queue, buf, flags, 0, (size,),
                                        np.dtype(np.uint8), is_blocking=True)
    got = mapped[0]
    _mapped[key] = got
    _mapped_bytes[0] += size
    _recent.clear()  # (a block mapped again: its typed views are made again)
    return got


def clear() -> None:
    """Drop every kept map (pyopencl unmaps each as it goes)."""
    _mapped.clear()
    _typed.clear()
    _recent.clear()
    _mapped_bytes[0] = 0


# (cl_mem handle, dtype char) -> the mapped bytes seen as that dtype, whole: a view of
# one or a few elements is a slice of it (0.1 us), where numpy's ndarray constructor
# on a buffer costs ~1 us, and a 0-d operand is read as a numpy scalar, whose
# arithmetic costs a tenth of a 0-d array's (a statement reads and writes 2-4 of them)
_typed: dict[tuple[int, str], np.ndarray] = {}


# (Storage, dtype char) -> _typed's array for the few buffers read last: a loop's
# statements read the same 1-3 buffers, and the buffer's handle is a property (~0.3 us)
# and a tuple key of it a second look-up; emptied with every new map (and bounded: it
# holds its buffers, which go back to their pool once dropped from here)
_recent: dict[tuple[Storage, str], np.ndarray] = {}
RECENT_MAX = 8


def _typed_bytes(storage: Storage, rt: Any, dtype: np.dtype) -> np.ndarray:
    typed = _recent.get((storage, dtype.char))
    if typed is not None:
        return typed
    handle = storage.buffer.int_ptr
    got = _mapped.get(handle)
    if got is None or got.nbytes < storage.nbytes:
        got = host_bytes(storage, rt)
    key = (handle, dtype.char)
    typed = _typed.get(key)
    if typed is None or typed.base is not got:  # (new, or its block was mapped again)
        size = dtype.itemsize
        typed = _typed[key] = got[:got.nbytes // size * size].view(dtype)
    if len(_recent) >= RECENT_MAX:
        _recent.clear()
    _recent[(storage, dtype.char)] = typed
    return typed


def _view(storage: Storage, rt: Any, dtype: np.dtype, shape: tuple[int, ...],
          strides: tuple[int, ...] | None, offset: int) -> Any:
    """The elements of a view of ``storage`` in host memory: a writable array, except
    that a 0-d view gives its value (a numpy scalar, read now)."""
    nd = len(shape)
    if nd <= 1:
        typed = _typed_bytes(storage, rt, dtype)
        if not nd:
            return typed[offset]
        n = shape[0]
        step = 1 if strides is None else strides[0]
        if n and step:
            stop: int | None = offset + step * (n - 1) + (1 if step > 0 else -1)
            return typed[offset:None if stop < 0 else stop:step]  # type: ignore[operator]
    size = dtype.itemsize
    return np.ndarray(shape, dtype, host_bytes(storage, rt), offset * size,
                      None if strides is None else tuple([s * size for s in strides]))


def _store(storage: Storage, rt: Any, dtype: np.dtype, shape: tuple[int, ...],
           strides: tuple[int, ...] | None, offset: int, value: Any) -> None:
    """Write ``value`` (broadcasting to ``shape``) into a view of ``storage``; numpy
    copies through a temporary where the value overlaps the elements written."""
    if not shape:
        _typed_bytes(storage, rt, dtype)[offset] = value
    else:
        _view(storage, rt, dtype, shape, strides, offset)[...] = value


# }}}


# {{{ evaluation


class _State:
    """One evaluation's values (of the nodes read more than once) and the device's
    runtime; ``uses``: how many parents read each node, or None (every value is kept:
    small arrays, where counting would cost more than keeping them)."""

    __slots__ = ("memo", "rt", "uses")

    def __init__(self, rt: Any, uses: dict[int, int] | None) -> None:
        self.memo: dict[int, Any] = {}
        self.rt = rt
        self.uses = uses


def _uses(roots: Sequence[Node]) -> dict[int, int]:
    """How many times each node is read by a parent (or is a root)."""
    uses: dict[int, int] = {}
    stack = list(roots)
    while stack:
        node = stack.pop()
        key = id(node)
        seen = key in uses
        uses[key] = uses.get(key, 0) + 1
        if seen:
            continue
        cls = type(node)
        if cls is Apply:
            stack.extend(node.args)  # type: ignore[attr-defined]
        elif cls is Reduce or cls is Remap:
            stack.append(node.child)  # type: ignore[attr-defined]
        elif cls is Gather:
            stack.append(node.child)  # type: ignore[attr-defined]
            stack.append(node.index)  # type: ignore[attr-defined]
        elif cls is Concat:
            stack.extend(node.pieces)  # type: ignore[attr-defined]
    return uses


def _value(node: Node, ev: _State) -> Any:
    """``node``'s value: an array broadcastable to its shape, or a numpy scalar.
    Raises _Unsupported for what is not computed here (checked as it goes: the
    common expression is small, and a second walk to check it first cost more)."""
    cls = type(node)
    if cls is Leaf:
        leaf: Any = node
        dtype = leaf.dtype
        if dtype.char not in _HOST_DTYPES:
            raise _Unsupported
        return _view(leaf.storage, ev.rt, dtype, leaf.shape, leaf.strides, leaf.offset)
    if cls is Scalar or cls is Literal:
        if node.dtype.char not in _HOST_DTYPES:
            raise _Unsupported
        return node.value  # type: ignore[attr-defined]
    key = id(node)
    memo = ev.memo
    got = memo.get(key)
    if got is not None:
        return got
    out: Any
    if cls is Apply:
        out = _apply(node, ev)
    elif cls is Reduce:
        out = _reduce(node, ev)
    elif cls is Iota:
        out = _iota(node)
    elif cls is Remap:
        out = _remap(node, ev)
    elif cls is Gather:
        out = _gather(node, ev)
    elif cls is Concat:
        pieces = [np.broadcast_to(_value(p, ev), p.shape)
                  for p in node.pieces]  # type: ignore[attr-defined]
        out = np.concatenate(pieces, axis=node.axis)  # type: ignore[attr-defined]
    else:  # user functions, sparse products, pointers
        raise _Unsupported
    uses = ev.uses
    if uses is None or uses[key] > 1:  # (values read once are let go as soon as read)
        memo[key] = out
    return out


def _small_child(child: Node) -> None:
    """Raise _Unsupported unless computing ``child`` (read in full) is small work."""
    if type(child) is not Leaf and _size(child.shape) > HOST_MAX_WORK:
        raise _Unsupported


def _apply(node: Any, ev: _State, into: np.ndarray | None = None) -> Any:
    """``node``'s value (an operation of its arguments' values); ``into``: an array of
    its shape and dtype its ufunc writes (then returned), where it is one."""
    op = node.op
    if op == "power" and type(node.args[1]) is Literal:  # (x ** e by products, as kernels)
        from .powers import host_value

        got = host_value(node, _value(node.args[0], ev))
        if got is not None:
            return got
    fn = _loop_fns.get((op, node.loop_key))
    if fn is None:
        fn = _loop_fns[(op, node.loop_key)] = _loop_fn(op, node.loop_key)
        _scalar_fns[(op, node.loop_key)] = scalar_fn(op, node.loop_key)
    if fn is False or type(node) is not Apply:
        raise _Unsupported
    if not node.shape:
        sfn = _scalar_fns.get((op, node.loop_key))
        if sfn is not None:
            fn = sfn  # (0-d operands: numpy scalars' operators, a tenth of a ufunc call)
    loop = node.loop
    args = []
    a: Any
    for a, dt in zip(node.args, loop):
        # (leaves and scalars, the commonest arguments, without a call of _value)
        cls = type(a)
        if cls is Leaf and a.dtype is dt:
            v = _view(a.storage, ev.rt, dt, a.shape, a.strides, a.offset)
        elif cls is Scalar and a.dtype is dt:
            v = a.value
        else:
            v = _value(a, ev)
            vt = v.dtype
            # (numpy's loop: operands cast to its dtypes first; builtin dtypes are
            # singletons, so the identity test is the common answer)
            if vt is not dt and vt != dt:
                v = v.astype(dt)
        args.append(v)
    out_dt = loop[-1]
    if into is not None and type(fn) is np.ufunc and into.dtype is out_dt:
        return fn(*args, out=into)  # (numpy reads overlapping operands before writing)
    if ev.uses is not None and type(fn) is np.ufunc:
        # an argument computed here, read by this node only, of the result's shape and
        # dtype holds the result (numpy's own operators elide such temporaries)
        for k, a in enumerate(node.args):
            v = args[k]
            if type(v) is np.ndarray and ev.uses.get(id(a)) == 1 and v.base is None \
                    and v.dtype is out_dt and v.shape == node.shape and type(a) is not Leaf:
                return fn(*args, out=v)
    out = fn(*args)
    vt = out.dtype
    return out if vt is out_dt or vt == out_dt else out.astype(out_dt)


def scalar_fn(op: str, chars: tuple[str, ...]) -> Any:
    """The Python operator computing ``op`` on numpy scalars of its loop's dtypes as its
    ufunc does (numpy's scalar arithmetic: the same loops and error state, a ufunc
    call on scalars costs ~10x more), or None."""
    if _QUIET is None or not _check_loop(op, chars) or not all(c in _NUMERIC for c in chars[:-1]):
        return None  # (bool operands, and numpy's warnings where they are not set off)
    return _SCALAR_OPS.get(op)


def scalar_apply(fn: Callable[[Any, Any], Any], to_a: Any, to_b: Any, quiet: bool,
                 va: Any, vb: Any) -> Any:
    """``fn(va, vb)`` after each operand's conversion (``None``: none), with numpy's error
    state quiet where ``quiet``; ``None`` where it raises (the caller's general steps then
    compute it, or raise numpy's error)."""
    if to_a is not None:
        va = to_a(va)
    if to_b is not None:
        vb = to_b(vb)
    try:
        if not quiet:
            return fn(va, vb)
        token = _errors.set(_QUIET)
        try:
            return fn(va, vb)
        finally:
            _errors.reset(token)
    except (TypeError, ValueError, ArithmeticError):
        return None


def _loop_fn(op: str, chars: tuple[str, ...]) -> Any:
    """The function computing ``op`` on operands of its loop's dtypes, or False."""
    if not _check_loop(op, chars):
        return _complex_fn(op, chars)
    if op == "cast" or op == "positive":  # (positive: also the broadcast of a view)
        out = np.dtype(chars[-1])
        return lambda a: np.array(a, dtype=out)  # (a copy: never the buffer itself)
    return np.where if op == "where" else _UFUNCS[op][0]


def _complex_fn(op: str, chars: tuple[str, ...]) -> Any:
    """The function computing ``op`` on a loop with a complex dtype, or False."""
    if not any(c in _COMPLEX for c in chars) or not all(c in _HOST_DTYPES for c in chars):
        return False
    if op == "cast" or op == "positive":  # (to complex only: numpy warns dropping parts)
        out = np.dtype(chars[-1])
        return (lambda a: np.array(a, dtype=out)) if chars[-1] in _COMPLEX else False
    return _COMPLEX_FNS.get(op, False)


def _reduce(node: Any, ev: _State) -> Any:
    child = node.child
    n = _size(child.shape)
    if node.dtype.char not in _DTYPES or n > HOST_MAX_WORK or (
            n == 0 and node.op not in _EMPTY_OK):
        raise _Unsupported  # (large, or an empty max or argmax: the kernels' answer)
    v = _value(child, ev)
    op, axes, dtype = node.op, node.axes, node.dtype
    vt = v.dtype
    if vt.kind == "c":
        raise _Unsupported  # (complex orders and sums: the kernels' rules)
    if vt is not dtype and vt != dtype and op not in ("argmax", "argmin"):
        v = v.astype(dtype)  # (the accumulator's dtype: numpy's ``dtype=``)
    if type(v) is not np.ndarray or v.shape != child.shape:
        v = np.broadcast_to(v, child.shape)
    if op in ("argmax", "argmin"):
        out = (np.argmax if op == "argmax" else np.argmin)(v, axis=axes[0])
        out = out.astype(dtype)
    else:
        out = _REDUCERS[op](v, axis=axes)
        if out.dtype is not dtype and out.dtype != dtype:
            out = out.astype(dtype)
    # (a numpy scalar or an array: both reshape, ``np.reshape``'s detour costs ~1 us)
    return out if out.shape == node.shape else out.reshape(node.shape)


def _iota(node: Any) -> np.ndarray:
    if node.dtype.char not in _DTYPES:
        raise _Unsupported
    shape = node.shape
    out = np.full(shape, node.offset, dtype=node.dtype)
    for d, (n, s) in enumerate(zip(shape, node.view_strides())):
        if s and n > 1:
            ix = [1] * len(shape)
            ix[d] = n
            out += (np.arange(n, dtype=node.dtype) * node.dtype.type(s)).reshape(ix)
    return out


def _positions(shape: tuple[int, ...], offsets: Sequence[int],
               coeffs: Sequence[Sequence[int]]) -> tuple[np.ndarray, ...]:
    """Index arrays of the child position each element of ``shape`` reads (a remap)."""
    grids = np.ogrid[tuple(slice(0, n) for n in shape)] if shape else []
    out = []
    for off, row in zip(offsets, coeffs):
        pos: Any = np.intp(off)
        for g, c in zip(grids, row):
            if c:
                pos = pos + g * c
        out.append(np.broadcast_to(pos, shape))
    return tuple(out)


def _remap(node: Any, ev: _State) -> np.ndarray:
    _small_child(node.child)
    child = np.broadcast_to(_value(node.child, ev), node.child.shape)
    return child[_positions(node.shape, node.offsets, node.coeffs)]


def _full(value: Any, shape: tuple[int, ...]) -> np.ndarray:
    """``value`` as an array of ``shape`` (broadcast only where it is not one already:
    ``np.broadcast_to`` costs ~1 us)."""
    if type(value) is np.ndarray and value.shape == shape:
        return value
    return np.broadcast_to(value, shape)


def _gather(node: Any, ev: _State) -> np.ndarray:
    _small_child(node.child)
    _small_child(node.index)
    child = _full(_value(node.child, ev), node.child.shape)
    index = _full(np.asarray(_value(node.index, ev), dtype=np.int64), node.index.shape)
    n = child.shape[node.axis]
    if index.size and index.min() < 0:  # (numpy's negative indices: most have none)
        index = np.where(index < 0, index + n, index)
    if node.checked:
        if index.size and (index.min() < 0 or index.max() >= n):
            raise _Unsupported  # (the kernel path reports the index out of range)
    else:
        index = np.clip(index, 0, max(n - 1, 0))
    return np.take(child, index, axis=node.axis)


# }}}


def eligible(roots: Sequence[Node], out_shape: tuple[int, ...], device: Device,
             targets: Sequence[Target | Storage | None] | None) -> bool:
    """Whether an evaluation passes :func:`try_run`'s first checks (small work on a host
    device, dtypes and targets computed here); it may still go to the kernels (an
    operation not computed here, a flat structure evaluated often)."""
    size = _size(out_shape)
    if not size or not host_device(device) \
            or _evaluate.capturing_threads[0] or _evaluate.recording_threads[0]:
        return False  # (fl.show_code and run plans need the kernels)
    if size > HOST_MAX_WORK and not within_limit(size, roots):
        return False
    if targets is not None:
        for t in targets:
            if type(t) is Target and (t.scatter is not None or t.mask is not None):
                return False
    for r in roots:
        if r.dtype.char not in _HOST_DTYPES:
            return False
    return small_reads(roots)


def within_limit(size: int, roots: Sequence[Node]) -> bool:
    """Whether an evaluation of ``size`` output elements reading ``roots`` is small enough
    for the host path (:func:`eligible`'s limits alone: callers choosing whether to
    try it before a kernel's plan)."""
    if size <= HOST_MAX_WORK:
        return True
    # (the result's own bytes bound what cheap work moves: most larger statements are
    # told without a look-up)
    return HOST_MAX_WORK > 0 and ((size <= COMPLEX_MAX_WORK and reads_complex(roots)) or (
        size * roots[0].dtype.itemsize <= CHEAP_MAX_BYTES and cheap_work(roots)))


def try_run(roots: Sequence[Node], out_shape: tuple[int, ...], device: Device,
            targets: Sequence[Target | Storage | None] | None) -> list[Storage] | None:
    """:func:`fuseloop.evaluate.run` done by numpy in host memory, or None (the caller
    runs kernels) when the work is not small or not something computed here."""
    if not eligible(roots, out_shape, device, targets):
        return None
    size = _size(out_shape)
    if targets is None and len(out_shape) == 1 and len(roots) == 1 and roots[0].sig \
            and not roots[0].fancy and size <= HOST_MAX_WORK:  # (reductions have signatures
        # too; a larger one reads complex values, whose kernels are not cheaper)
        # (a 0-d result is a condition or a scalar about to be read: after a kernel,
        # the read waits on its event, 30-60 us, where the host path's costs ~2 us;
        # NPBench's crc16 tests one bit per evaluation and read each through a wait)
        key = (roots[0].sig, roots[0].offs, out_shape)
        n = _flat_counts.get(key, 0) + 1
        if n > FLAT_REPEATS_FOR_KERNEL:
            return None  # (from now on its cached kernel: evaluate.run_flat)
        if len(_flat_counts) >= FLAT_COUNTS_MAX:
            _flat_counts.clear()
        _flat_counts[key] = n
    rt = _runtime(device)
    if rt.deferred:
        # small launches wait to be enqueued together (a statement here would enqueue
        # and wait for them one by one): this one joins them (a loop mixing complex or
        # user-function statements with others stays on the kernels)
        return None
    with rt.launch_lock:  # (no other thread's launch lands between the wait and the writes)
        if rt.deferred:
            rt.flush()
        rt.finish()
        token = _errors.set(_QUIET) if _QUIET is not None else None
        into = None
        try:
            ev = _State(rt, _uses(roots) if tracks_uses(roots, size) else None)
            if out_shape and len(roots) == 1 and type(roots[0]) is Apply \
                    and roots[0].shape == out_shape:
                # (the operation computed into its output: no temporary copied over)
                into, out_storage = _output(roots[0].dtype, out_shape, device, rt, targets)
                values = [_apply(roots[0], ev, into)]
            else:
                values = [_value(r, ev) for r in roots]
        except (_Unsupported, RecursionError, TypeError, ValueError):
            return None  # (nothing written yet: the kernels compute it, or report it)
        finally:
            if token is not None:
                _errors.reset(token)
        if len(values) > 1 and targets is not None:
            # a root read straight from a buffer that an earlier root's target writes
            # must keep its old elements: take them before any write
            values = [np.array(v) if type(r) is Leaf else v for v, r in zip(values, roots)]
        if into is not None:
            if values[0] is not into:  # (not a ufunc's, or on another dtype)
                into[...] = values[0]
            _count_evaluation()
            return [out_storage]
        outs: list[Storage] = []
        for k, (r, v) in enumerate(zip(roots, values)):
            t = targets[k] if targets is not None else None
            if type(t) is Target and (t.strides is not None or t.offset):
                s = t.storage
                _store(s, rt, r.dtype, out_shape, t.strides, t.offset, v)
            else:  # a new buffer, or all of one (C order)
                s = _evaluate.allocate(size * r.dtype.itemsize, device) if t is None else \
                    t.storage if type(t) is Target else t  # type: ignore[assignment]
                _store(s, rt, r.dtype, out_shape, None, 0, v)
            outs.append(s)
    _count_evaluation()
    return outs


def _output(dtype: np.dtype, out_shape: tuple[int, ...], device: Device, rt: Any,
            targets: Sequence[Target | Storage | None] | None) -> tuple[Any, Storage]:
    """The one (n-d) result's elements in host memory, where :func:`try_run` writes them
    (its target's view, or a new buffer's), and their storage."""
    t = targets[0] if targets is not None else None
    if type(t) is Target and (t.strides is not None or t.offset):
        s = t.storage
        return _view(s, rt, dtype, out_shape, t.strides, t.offset), s
    s = _evaluate.allocate(_size(out_shape) * dtype.itemsize, device) if t is None else \
        t.storage if type(t) is Target else t  # type: ignore[assignment]
    return _view(s, rt, dtype, out_shape, None, 0), s


from . import evaluate as _evaluate  # noqa: E402  (it imports this module first)
from .host_reads import (  # noqa: E402, F401  (its users' names)
    READS_MAX,
    cheap_work,
    reads_complex,
    small_reads,
    tracks_uses,
)
from .host_statements import inplace, read, scalar, write  # noqa: E402, F401  (its users' names)


def _clear_loops() -> None:
    _loop_fns.clear()
    _scalar_fns.clear()


_caches.register("host_path.loops", _clear_loops, lambda: len(_loop_fns),
                 why="one per operation and loop dtypes")
_caches.register("host_path.flat_counts", _flat_counts.clear, lambda: len(_flat_counts),
                 FLAT_COUNTS_MAX)
_caches.register("host_path.mapped", clear, lambda: len(_mapped),
                 why="one map per OpenCL buffer read here; bounded by MAPPED_MAX_BYTES")
