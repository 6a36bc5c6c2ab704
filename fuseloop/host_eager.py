"""Eager small arrays on a CPU device: a front end for loops of small statements.

On PoCL's CPU device a buffer is host memory.  :mod:`fuseloop.host_path` already
computes small evaluations with numpy, but every statement still built views, nodes,
keys and a lazy array before it got there (8-60 us of Python per statement against
numpy's 0.2-2 us).  Here a view of a small concrete array (``A[i, :j]``, ``A[i, j]``)
is a :class:`HostArray`: a fuseloop array that also holds the numpy view of its
buffer's mapped memory (``_np``).  Operators, ufuncs, ``@``/``dot``, in-place
operators and assignments whose operands are all such arrays, small concrete arrays
or Python and numpy scalars are computed at once by numpy on fuseloop's loop dtypes
(the kernels' promotion, the host path's loops), and give a :class:`HostArray`
holding a numpy array of its own: no node, key, lazy array or launch.

Coherence with the kernels:

- **Reading** a buffer here first enqueues the device's deferred launches and
  finishes its queue, so what kernels wrote is seen.
- **Writing** a buffer here first computes the live lazy arrays that read the
  elements written (:mod:`fuseloop.evaluate`'s aliasing rule), reports earlier
  checked gathers' errors, and finishes the queue; numpy's writes are in the buffer's
  memory, which later kernels read.
- **A kernel reading a result** made here: anything that asks a buffer-less
  :class:`HostArray` for its node or storage (``_node``, ``_storage``: every lazy
  operation, reduction, ``eval()``) gives it a pooled buffer first, copies its values
  in and from then on its ``_np`` views that buffer.  A view of a buffer-less result
  gives it its buffer first, so views always share their base's memory.

Taken only under the host path's conditions (its limit ``HOST_MAX_WORK`` on every
operand and result, read at each call, so ``FUSELOOP_HOST_PATH=0`` turns this off;
nothing captured or recorded; no traced function) and for the dtypes and loops that
:mod:`fuseloop.host_path` computes.  Anything else returns None and the caller takes
the general path, where a :class:`HostArray` is an ordinary concrete array.
``host_eager.counts["materialised"]`` counts the results given a buffer for the kernels.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from . import caches as _caches
from . import evaluate as _evaluate
from . import host_path as _host
from . import trace_hooks as _trace
from .array import Array, _ufunc_loop, _weak_scalar
from .expr.nodes import _EMPTY, Leaf, Scalar
from .host_ops import _NEVER_WARN0, _PY_FLOAT_OPS
from .runtime.devices import _runtime
from .stats import tallies as _tallies

_errors, _QUIET = _host._errors, _host._QUIET
#: the most elements a view, operand or result taken here may have (and the host
#: path's HOST_MAX_WORK, read at each call): the host path's own default limit.  At
#: 2048, jacobi_1d's 3200-element statement ``B[1:-1] = 0.33333 * (A[:-2] + A[1:-1] +
#: A[2:])`` went through the lazy views, nodes and the host path's evaluation: 47 us
#: of CPU against 15 us here (numpy: 5 us)
EAGER_MAX_WORK = 4096
#: (views of any number of axes: a convolution's windows too, whose products feed
#: reductions, computed here as numpy computes them, host_products.reduce)
#: the most elements of a broadcast result here (operands of at most EAGER_MAX_WORK):
#: a convolution's window times its weights, ``x[:, i:i + 3, j:j + 3, :, None] * w``
#: (4608 elements, summed next), took a kernel at 600-700 us of CPU against numpy's
#: 20 us; here, with its reduction (host_products.reduce), 36 us
BROADCAST_MAX = 16384
#: results made here that were given a buffer (read by a kernel, viewed, ``eval()``)
counts = {"materialised": 0}

_DTYPES = _host._DTYPES
#: the dtypes of the views taken here: the host path's and complex ones, whose adds,
#: products and ``@`` are computed here (_COMPLEX_OPS; the rest: the kernels')
_VIEW_DTYPES = _DTYPES | frozenset("FD")
# numpy's binary ufuncs computed by binary (power: by its products, host_products)
_BINARY_UFUNCS = {getattr(np, n): n for n in _host._UFUNCS
                  if getattr(np, n).nin == 2 and n != "power"}
_COMPLEX_OPS = frozenset(("add", "subtract", "multiply", "negative", "conjugate", "absolute"))
_new = object.__new__
# fl.stats()'s counters, their C calls bound (stats.tally without its frame)
_count_operation = _tallies["host_operations"].__next__
_NUMPY_SCALARS = frozenset(np.dtype(c).type for c in "?bBhHiIlLqQfd")
# a Python float operand of a float64 loop stays as it is (numpy converts it, exactly)
_F64 = np.dtype(np.float64)


def _off() -> bool:
    """Whether the eager front end is off now (no limit, tracing, capturing, recording)."""
    return bool(not _host.HOST_MAX_WORK or _trace.trace_checks
                or _evaluate.capturing_threads[0] or _evaluate.recording_threads[0])


# {{{ the array


class HostArray(Array):
    """A small array on a CPU device whose elements numpy reads and writes at once
    (see the module).  Everything else treats it as a concrete fuseloop array."""

    # _np: a numpy array (a 0-d view of a buffer: a 1-element 1-D one) or scalar;
    # _buf: the buffer viewed, or None (_np is its own); _leaf: its leaf, once asked;
    # _of, _key: the array and key a view was taken of (``A[k] op= v`` assigns it
    # back to them: nothing to do, host_writes.setitem)
    __slots__ = ("_buf", "_key", "_leaf", "_np", "_of")
    _np: Any
    _buf: Any
    _leaf: Any
    _of: Any
    _key: Any

    @property
    def _storage(self) -> Any:
        buf = self._buf
        return buf if buf is not None else _materialise(self)

    @_storage.setter
    def _storage(self, storage: Any) -> None:
        self._buf = storage

    @property
    def _node(self) -> Any:
        leaf = self._leaf
        return leaf if leaf is not None else _leaf_of(self)

    @_node.setter
    def _node(self, node: Any) -> None:
        self._leaf = node
        if type(node) is Leaf:  # (``x.shape = s``, ``x.T``: its numpy view follows the leaf)
            storage = node.storage
            rt = _runtime(storage.device)
            self._buf, self._of, self._key = storage, None, None
            self._np = _host._view(storage, rt, node.dtype, node.shape, node.strides,
                                   node.offset) if node.shape else \
                _host._typed_bytes(storage, rt, node.dtype)[node.offset:node.offset + 1]

    @property
    def is_lazy(self) -> bool:
        return False

    def eval(self) -> Array:
        """Give it a buffer (if it has none) and return ``self``."""
        if self._buf is None:
            _materialise(self)
        return self

    def get(self) -> np.ndarray:
        """A new numpy array of its values."""
        if self._buf is not None:
            _sync(self.device)
        return np.array(_value(self))

    def _scalar(self) -> Any:
        if self._shape and _host._size(self._shape) != 1:
            return super()._scalar()  # (its error)
        if self._buf is not None:
            _sync(self.device)
        v = _value(self)
        return (v.reshape(()) if type(v) is np.ndarray else v).item()

    def __index__(self) -> int:
        v = self._np
        if self._shape or type(v) is not np.ndarray or self.dtype.kind not in "iu":
            return super().__index__()
        _sync(self.device)  # (a buffer's element, spmv's ``A_row[i]``: kernels' writes first)
        return int(v[0])

    def copy(self) -> Array:
        """A new array with the same values (numpy's copy, at once)."""
        if self._buf is not None:
            _sync(self.device)
        v = _value(self)
        return _result(np.array(v) if type(v) is np.ndarray else v, self.device)

    def __getitem__(self, key: Any) -> Array:
        got = getitem(self, key)
        return got if got is not None else super().__getitem__(key)

    def _inplace(self, op: str, other: Any) -> Array:
        if inplace(self, op, other):
            return self
        return super()._inplace(op, other)  # (its operators: _eager_inplace's, below)

    def __array_function__(self, func: Any, types: Any, args: Any, kwargs: Any) -> Any:
        """numpy's functions: ``np.dot``/``np.matmul`` and ``np.flip`` of small operands
        at once (a loop's ``np.dot(A[i, :j], A[j, :j])``), the rest as for any array."""
        if func is np.dot or func is np.matmul:
            if len(args) == 2 and not kwargs and (got := matmul(*args)) is not None:
                return got
        elif func is np.flip and args and args[0] is self and self._shape \
                and len(args) + len(kwargs) <= 2:
            got = flip(self, args[1] if len(args) > 1 else kwargs.get("axis"))
            if got is not None:
                return got
        return super().__array_function__(func, types, args, kwargs)

    def __array_ufunc__(self, ufunc: np.ufunc, method: str, *inputs: Any, **kwargs: Any) -> Any:
        """numpy's ufuncs: two operands (a numpy scalar's operator, ``alpha * A[i, k]``)
        computed here at once, the rest as for any array."""
        if method == "__call__" and len(inputs) == 2 and not kwargs \
                and (op := _BINARY_UFUNCS.get(ufunc)) is not None \
                and (got := binary(op, inputs[0], inputs[1])) is not None:
            return got
        return super().__array_ufunc__(ufunc, method, *inputs, **kwargs)

    def __pow__(self, other: Any) -> Any:
        got = power(self, other)
        return got if got is not None else super().__pow__(other)

    def __matmul__(self, other: Any) -> Any:
        got = matmul(self, other)
        return got if got is not None else super().__matmul__(other)

    def __rmatmul__(self, other: Any) -> Any:
        got = matmul(other, self)
        return got if got is not None else super().__rmatmul__(other)


def _value(x: HostArray) -> Any:
    """``x``'s elements as numpy's (a 0-d array's as a numpy scalar, read now)."""
    v = x._np
    if x._shape or type(v) is not np.ndarray:
        return v
    return v[0]


def _new_host(value: Any, shape: tuple[int, ...], dtype: np.dtype, device: Any,
              buf: Any) -> HostArray:
    out = _new(HostArray)
    out._np, out._shape, out.dtype = value, shape, dtype
    out.device, out._buf, out._leaf, out._of = device, buf, None, None
    return out


def _result(value: Any, device: Any) -> Array:
    """A buffer-less HostArray holding ``value`` (a new numpy array), or for a scalar
    an array holding its value as :mod:`fuseloop.host_ops` makes it (a Scalar node: a
    kernel reading it takes the value as an argument)."""
    if type(value) is np.ndarray:
        shape = value.shape
        if shape:
            return _new_host(value, shape, value.dtype, device, None)
        value = value[()]
    if value.dtype.kind == "c":  # (held here: a kernel reading it gets a buffer)
        return _new_host(value, (), value.dtype, device, None)
    return _scalar_array(value, value.dtype, device)


def _scalar_array(value: Any, dtype: np.dtype, device: Any) -> Array:
    node = _new(Scalar)  # (Scalar.__init__ and the array's, their fields set here)
    node.value, node.dtype, node.shape = value, dtype, ()
    node.storages = _EMPTY
    arr = _new(Array)
    arr._storage, arr._node, arr._shape = None, node, ()
    arr.device, arr.dtype = device, dtype
    return arr


def _materialise(x: HostArray) -> Any:
    """Give the buffer-less ``x`` a pooled buffer holding its values (its ``_np`` then
    views that buffer); returns the buffer's storage."""
    dtype, shape = x.dtype, x._shape
    n = _host._size(shape)
    storage = _evaluate.allocate(max(n, 1) * dtype.itemsize, x.device)
    rt = _sync(x.device)  # (a pooled buffer: kernels that used it last are done)
    with rt.launch_lock:
        typed = _host._typed_bytes(storage, rt, dtype)
        if shape:
            view = typed[:n].reshape(shape)
            view[...] = x._np
        else:
            view = typed[:1]
            view[0] = x._np
    x._np = view
    x._buf = storage
    x._leaf = Leaf.plain(storage, dtype, shape)
    counts["materialised"] += 1
    return storage


# id(mapped bytes) -> (them, their address): see _leaf_of
_addresses: dict[int, tuple] = {}


def _leaf_of(x: HostArray) -> Leaf:
    """The leaf of ``x``, a view of its buffer (made once, from where its numpy view
    lies in the buffer's mapped memory)."""
    storage = x._storage
    leaf = x._leaf
    if leaf is not None:  # (a result just given its buffer)
        return leaf
    dtype = x.dtype
    size = dtype.itemsize
    base = _host.host_bytes(storage, _runtime(x.device))
    got = _addresses.get(id(base))
    if got is None or got[0] is not base:  # (each costs ~1 us: the map's, once)
        if len(_addresses) >= BASES_MAX:
            _addresses.clear()
        got = _addresses[id(base)] = (base, base.__array_interface__["data"][0])
    v = x._np
    start = v.__array_interface__["data"][0] - got[1]
    shape = x._shape
    strides = tuple([s // size for s in v.strides]) if shape else ()
    leaf = x._leaf = Leaf(storage, dtype, shape, strides, start // size)
    return leaf


# }}}


# {{{ operands


# device -> its runtime (opened: a HostArray exists only once it is)
_runtimes: dict[Any, Any] = {}


def _sync(device: Any) -> Any:
    """The device's runtime once kernels writing its buffers have finished (their
    deferred launches enqueued first)."""
    rt = _runtimes.get(device)
    if rt is None:
        rt = _runtimes[device] = _runtime(device)
    if rt.deferred:
        rt.flush()
    rt.finish()
    return rt


def _operand(x: Any, device: Any) -> tuple[Any, Any, bool] | None:
    """``(kind, value, reads a buffer)`` of an operand computed here: a HostArray or a
    small concrete array on ``device`` (kind: its dtype), a Python float, int or bool
    (kind: its type) or a numpy scalar (kind: its dtype); None: not taken."""
    tx = type(x)
    if tx is HostArray:
        if x.device is not device:
            return None
        return x.dtype, numpy_value(x), x._buf is not None
    if tx is float or tx is int or tx is bool:
        return tx, x, False
    if tx in _NUMPY_SCALARS:
        return x.dtype, x, False
    if tx is Array and x.device is device:
        node = x._node
        if type(node) is Scalar:  # (a value computed at once: fuseloop.host_ops)
            return x.dtype, node.value, False
        v = _concrete_view(x)
        return None if v is None else (x.dtype, v, True)
    return None


def _concrete_view(x: Array) -> Any:
    """The numpy view of the small concrete array ``x``'s elements in host memory, or
    None (lazy, large, not on a host device, a dtype not computed here)."""
    node: Any = x._node
    if type(node) is not Leaf or x._storage is None:
        return None
    got = _bases.get(id(node))
    if got is not None and got[0] is node:
        v = got[1]
    else:
        got = _base_of(x)
        if got is None:
            return None
        v = got[1]
    if not 0 < v.size <= EAGER_MAX_WORK or v.size > _host.HOST_MAX_WORK:
        return None
    if not v.ndim:
        v = v[()]
    return v


# (op, kinds...) -> (loop dtypes, function on arrays, function on numpy scalars or
# None, whether the function on arrays needs numpy's errors set off, whether the
# function on numpy scalars does, Python's float operator for a float64 loop or
# None), or False: an operation computed here (finite: operations x kinds^2)
_ops: dict[tuple, Any] = {}

# ufuncs whose loops set no floating-point error flag on any operand (a NaN
# propagated or compared is no error): their arrays' loops run without switching
# numpy's error state (a context variable's set and reset: 0.12 us an operation)
_NEVER_WARN = frozenset((
    "minimum", "maximum", "fmin", "fmax", "equal", "not_equal", "less", "less_equal",
    "greater", "greater_equal", "logical_and", "logical_or", "logical_xor", "logical_not",
    "bitwise_and", "bitwise_or", "bitwise_xor", "invert", "negative", "absolute",
    "isnan", "isinf", "isfinite", "signbit", "copysign"))
# ... and those that set none on integer and bool arrays (they wrap around; their
# division by zero and numpy scalars' overflow do warn)
_NEVER_WARN_INT = frozenset(("add", "subtract", "multiply", "left_shift", "right_shift"))
# ... and numpy scalars' operators that set none (fuseloop.host_ops's: bit operations,
# shifts, comparisons): two elements compared (``max(T[i, j], T[i, k] + T[k, j])``)
# need no switch of numpy's error state either
_QUIET_SCALAR_OPS = _NEVER_WARN0


def _quiet_needed(op: str, loop: tuple) -> bool:
    """Whether ``op``'s loop on arrays of the dtypes ``loop`` may set an error flag."""
    if op in _NEVER_WARN:
        return False
    return not (op in _NEVER_WARN_INT and all(d.kind in "biu" for d in loop))


def _op_entry(op: str, kinds: tuple) -> Any:
    try:
        loop, key = _ufunc_loop(op, *kinds)
    except (TypeError, ValueError):
        return False  # (the general path raises numpy's error)
    if any(c in "FD" for c in key):
        if op not in _COMPLEX_OPS or not all(c in _VIEW_DTYPES for c in key):
            return False
        return loop, getattr(np, op), None, True, True, None  # (numpy's complex loops)
    fn = _host._loop_fn(op, key)
    if fn is False or op in ("cast", "positive", "where"):
        return False if fn is False else (loop, fn, None, True, True, None)
    quiet = _quiet_needed(op, loop)
    sfn = _host.scalar_fn(op, key)
    return loop, fn, sfn, quiet, quiet or op not in _QUIET_SCALAR_OPS, \
        _PY_FLOAT_OPS.get(op) if sfn is not None and key == ("d", "d", "d") else None


def numpy_value(x: HostArray) -> Any:
    """A HostArray's numpy value: its view, or its element as a numpy scalar for 0-d."""
    v = x._np
    return v[0] if not x._shape and type(v) is np.ndarray else v


def _as(value: Any, kind: Any, dtype: np.dtype) -> Any:
    """An operand's value on its loop's dtype (a Python scalar as numpy converts it)."""
    if kind is float or kind is int:
        return _weak_scalar(value, dtype)
    if kind is bool:
        return np.bool_(value).astype(dtype)
    vt = value.dtype
    if vt is dtype or vt == dtype:
        return value
    return value.astype(dtype) if type(value) is np.ndarray else dtype.type(value)


def _fits(values: list) -> bool:
    """Whether the broadcast of ``values`` is small enough for numpy here: at most
    ``BROADCAST_MAX`` elements (and 4 x the host path's limit)."""
    try:  # (numpy's broadcast object: its size, no Python-level shape walk)
        n = np.broadcast(*values).size
    except ValueError:
        return False  # (the general path raises its error)
    return 0 < n <= BROADCAST_MAX and n <= 4 * _host.HOST_MAX_WORK


# }}}


# {{{ operations


def compute(op: str, hit: tuple, values: Any, arrays: bool) -> Any:
    """``op`` (an ``_ops`` entry ``hit``) of ``values``, on its loop's dtypes, by numpy
    with its floating-point warnings off where the operation may set them (as in a
    kernel); numpy scalars' operator where no value is an array; None where numpy
    raises (the general path raises its error)."""
    fn, sfn, quiet, quiet_scalars = hit[1:5]
    token = _errors.set(_QUIET) if _QUIET is not None and (
        quiet if arrays else quiet_scalars) else None  # (numpy scalars' comparisons never warn)
    try:
        return sfn(*values) if sfn is not None and not arrays else fn(*values)
    except (TypeError, ValueError, ArithmeticError):
        return None
    finally:
        if token is not None:
            _errors.reset(token)


def apply(op: str, operands: tuple) -> Array | None:
    """``op`` (a ufunc's name) of one or two operands, at least one a HostArray,
    computed now; None: the caller builds the lazy node (the HostArray gets a buffer)."""
    if len(operands) == 2 and (type(operands[0]) is HostArray or type(operands[1]) is HostArray):
        return binary(op, operands[0], operands[1])
    if len(operands) > 2 or _off():
        return None
    device = None
    for o in operands:
        if type(o) is HostArray or (type(o) is Array and type(o._node) is Scalar):
            device = o.device
            break
    if device is None:
        return None
    got = []
    kinds = [op]
    for o in operands:
        g = _operand(o, device)
        if g is None:
            return None
        got.append(g)
        kinds.append(g[0])
    key = tuple(kinds)
    hit = _ops.get(key)
    if hit is None:
        hit = _ops[key] = _op_entry(op, key[1:])
    if hit is False:
        return None
    loop = hit[0]
    values = []
    arrays = []
    reads = False
    for g, dt in zip(got, loop):
        v = _as(g[1], g[0], dt)
        values.append(v)
        if type(v) is np.ndarray:
            arrays.append(v)
        reads = reads or g[2]
    if len(arrays) > 1 and arrays[0].shape != arrays[1].shape and not _fits(arrays):
        return None
    if reads:
        _sync(device)
    out = compute(op, hit, values, bool(arrays))
    return None if out is None else _counted(out, loop[-1], device)


def binary(op: str, a: Any, b: Any) -> Array | None:
    """:func:`apply` of two operands, the first or second a HostArray (an operator):
    a HostArray with a HostArray, a Python or numpy scalar or a small concrete array."""
    if not _host.HOST_MAX_WORK or _trace.trace_checks or _evaluate.capturing_threads[0] \
            or _evaluate.recording_threads[0]:
        return None
    ta, tb = type(a), type(b)
    if not (a._shape if ta is HostArray else b._shape) \
            and (got := _binary0(op, a, b, ta, tb)) is not None:
        return got  # (two 0-d values, a loop's elements: fuseloop.host_element_ops)
    device = a.device if ta is HostArray else b.device
    # (the commonest operands, a HostArray and a Python float or int, inline; a
    # buffer's element is read once the kernels writing it are done, below)
    if ta is HostArray and a.device is device:
        ka, va, ra = a.dtype, a._np, a._buf is not None
    elif ta is float or ta is int:
        ka, va, ra = ta, a, False
    elif (ga := _operand(a, device)) is not None:
        ka, va, ra = ga
    else:
        return None
    if tb is HostArray and b.device is device:
        kb, vb, rb = b.dtype, b._np, b._buf is not None
    elif tb is float or tb is int:
        kb, vb, rb = tb, b, False
    elif (gb := _operand(b, device)) is not None:
        kb, vb, rb = gb
    else:
        return None
    hit = _ops.get((op, ka, kb))
    if hit is None:
        hit = _ops[(op, ka, kb)] = _op_entry(op, (ka, kb))
    if hit is False:
        return None
    loop = hit[0]
    if ra or rb:  # (_sync, its commonest case inline: nothing deferred)
        rt = _runtimes.get(device)
        if rt is None or rt.deferred:
            _sync(device)
        else:
            rt.finish()
    if ta is HostArray and not a._shape and type(va) is np.ndarray:
        va = va[0]  # (a buffer's element: its value now)
    if tb is HostArray and not b._shape and type(vb) is np.ndarray:
        vb = vb[0]
    da, db = loop[0], loop[1]
    if ka is not da and (ka is not float or da is not _F64):  # (see _F64)
        va = _weak_scalar(va, da) if ka is float or ka is int else _as(va, ka, da)
    if kb is not db and (kb is not float or db is not _F64):
        vb = _weak_scalar(vb, db) if kb is float or kb is int else _as(vb, kb, db)
    if type(va) is np.ndarray or type(vb) is np.ndarray:
        if type(va) is type(vb) and va.shape != vb.shape and not _fits([va, vb]):
            return None
        out = compute(op, hit, (va, vb), True)
        return None if out is None else _counted(out, loop[-1], device)
    out = compute(op, hit, (va, vb), False)  # (0-d values host_element_ops left: bool, ...)
    return None if out is None else _counted(out, loop[-1], device)


def _counted(out: Any, dtype: np.dtype, device: Any) -> Array:
    """An operation's result computed here (counted), on its loop's output ``dtype``:
    a buffer-less HostArray, or a 0-d value held as a Scalar node (_result's)."""
    out_dt = out.dtype
    if out_dt is not dtype and out_dt != dtype:
        out = out.astype(dtype) if type(out) is np.ndarray else dtype.type(out)
    _count_operation()
    if type(out) is np.ndarray:
        if out.shape:
            res = _new(HostArray)
            res._np, res._shape, res.dtype = out, out.shape, dtype
            res.device, res._buf, res._leaf, res._of = device, None, None, None
            return res
        out = out[()]
    if dtype.kind == "c":
        return _new_host(out, (), dtype, device, None)
    node = _new(Scalar)  # (_scalar_array, inline: a call is a tenth of a 0-d operation)
    node.value, node.dtype, node.shape, node.storages = out, dtype, (), _EMPTY
    held: Array = _new(Array)
    held._storage, held._node, held._shape, held.device, held.dtype = None, node, (), device, dtype
    return held


# }}}


# {{{ views

# (op, target dtype, operand kind) -> (ufunc loop dtypes, function, scalar function)
# or False: an in-place operator computed here (fuseloop.host_writes)
_inplace_ops: dict[tuple, Any] = {}


# id(leaf) -> (leaf, numpy view of its elements, its storage, its elements' views by
# key) for the arrays viewed last (a loop's statements view the same 1-3 arrays and
# elements, ``A[i, j] += A[i, j - 1]; A[i, j] /= 9.0``: a view costs more than a look-up)
_bases: dict[int, tuple] = {}
BASES_MAX = 16
ELEMENTS_MAX = 4096  # (the most element views kept per array: then they are dropped)


def _base_of(arr: Array) -> tuple | None:
    """``_bases``' entry for the concrete array ``arr`` on a host device, or None."""
    node: Any = arr._node
    storage = arr._storage
    if storage is None or type(node) is not Leaf or node.dtype.char not in _VIEW_DTYPES \
            or not _host.host_device(arr.device):
        return None
    rt = _sync(arr.device)
    shape = node.shape
    if shape:
        v = _host._view(storage, rt, node.dtype, shape, node.strides, node.offset)
    else:  # (a 0-d array: its element as a 1-element view)
        v = _host._typed_bytes(storage, rt, node.dtype)[node.offset:node.offset + 1]
        v = v.reshape(())
    if len(_bases) >= BASES_MAX:
        _bases.clear()
    got = _bases[id(node)] = (node, v, storage, {})
    return got


def _basic(key: Any) -> tuple | None:
    """``key`` as a tuple of ints, slices and None (numpy's basic indexing, which
    fuseloop's views follow: numpy checks the slices' parts), or None."""
    tk = type(key)
    if tk is tuple:
        for k in key:
            if type(k) is not int and type(k) is not slice and k is not None:
                return None
        return key
    if tk is int or tk is slice or key is None:
        return (key,)
    return None


def _base(arr: Any) -> tuple[Any, Any] | None:
    """``(numpy view of arr's elements, its storage)``, or None."""
    if type(arr) is HostArray:
        if not arr._shape:
            return None  # (a 0-d array's index: the general path)
        if arr._buf is None:
            _materialise(arr)  # (a view must share its base's memory: the buffer's)
        return arr._np, arr._buf
    node = arr._node
    got = _bases.get(id(node))
    if got is None or got[0] is not node:
        got = _base_of(arr)
        if got is None:
            return None
    return got[1], got[2]


def _view_of(base: np.ndarray, items: tuple) -> tuple[Any, bool]:
    """``(base[items] as a view, whether it is one element)``: an element (all ints,
    one per axis) as a 1-element 1-D view; ``(None, False)`` for an error (the
    general path raises it)."""
    try:
        if len(items) == base.ndim:
            last = items[-1]
            if type(last) is int:  # (an element? a loop's commonest key: one index)
                v = base[(*items[:-1], slice(last, last + 1 if last != -1 else None))]
                if v.ndim == 1:
                    return (v, True) if v.size == 1 else (None, False)
        v = base[items]
        if type(v) is np.ndarray:
            return v, False
        last = items[-1]
        return base[(*items[:-1], slice(last, last + 1 if last != -1 else None))], True
    except (IndexError, TypeError, ValueError):
        return None, False


def getitem(arr: Array, key: Any) -> Array | None:
    """``arr[key]`` for a basic key on a concrete array (or HostArray) on a host device,
    when the view is small: a HostArray viewing its memory; None otherwise."""
    if not _host.HOST_MAX_WORK or _trace.trace_checks or _evaluate.capturing_threads[0] \
            or _evaluate.recording_threads[0]:
        return None
    if type(arr) is Array and (got := _bases.get(id(node := arr._node))) is not None \
            and got[0] is node:  # (viewed before: an element read again, a row, ...)
        tk = type(key)  # (an element read again, a loop's commonest view: its kept HostArray)
        if (tk is int or (tk is tuple and len(key) == 2 and type(key[0]) is int
                and type(key[1]) is int)) and type(held := got[3].get(key)) is HostArray \
                and held._of is arr:
            return held
    else:
        got = None
    if got is not None and (taken := element_or_view(arr, key, got)) is not None:
        if taken is False:  # (too large, or an index error, which the general path raises)
            return None
        v, element, storage = taken  # type: ignore[misc]
        if element:  # (a loop's commonest view: the element's, kept)
            return v
        out = _new(HostArray)  # (its fields set here)
        out._np, out.dtype, out.device, out._leaf = v, arr.dtype, arr.device, None
        out._buf, out._shape, out._of, out._key = storage, v.shape, arr, key
        return out
    items = _basic(key)
    if items is None:
        return gather(arr, key) if type(key) is HostArray else _copy_by_0d(arr, key)
    got = _base(arr)
    if got is None:
        if type(arr) is not Array or arr._storage is not None or not _viewed_again(arr, items):
            return None
        arr.eval()
        if (got := _base(arr)) is None:
            return None
    v, element = _view_of(got[0], items)
    if v is None or not 0 < v.size <= EAGER_MAX_WORK or v.size > _host.HOST_MAX_WORK:
        return None
    out = _new(HostArray)
    out._np, out.dtype, out.device, out._buf, out._leaf = v, arr.dtype, arr.device, got[1], None
    out._shape, out._of, out._key = () if element else v.shape, arr, key
    return out


# }}}


def _eager_binary(op: str, reflected: bool, general: Any) -> Any:
    """HostArray's operator ``op``: computed here, else Array's (``general``)."""
    def method(self: Any, other: Any) -> Any:
        got = binary(op, other, self) if reflected else binary(op, self, other)
        return got if got is not None else general(self, other)
    method.__name__ = method.__qualname__ = general.__name__
    return method


# (Array's operators made by fuseloop.array._lean_binary: ``__pow__`` is not among
# them, its small powers being rewritten first: it reaches ``apply`` through them)
for _name, _f in list(vars(Array).items()):
    _op = getattr(_f, "__name__", "")  # (``add``, or ``radd`` reflected)
    if not _name.startswith("__") or _name == "__pow__" or not callable(_f):
        continue
    if _op in _host._UFUNCS:
        setattr(HostArray, _name, _eager_binary(_op, False, _f))
    elif _op[:1] == "r" and _op[1:] in _host._UFUNCS:
        setattr(HostArray, _name, _eager_binary(_op[1:], True, _f))


from .host_element_ops import binary0 as _binary0  # noqa: E402
from .host_products import gather, matmul, power  # noqa: E402  (they read this module's names)
from .host_views import _copy_by_0d, _viewed_again, element_or_view, flip  # noqa: E402
from .host_writes import inplace  # noqa: E402


def inplace_array(target: Array, op: str, other: Any) -> bool:
    """``target op= other`` for a concrete ``target`` (all of it) and a HostArray
    ``other``: computed here through a view of ``target``; False: nothing done."""
    view = getitem(target, ())
    return type(view) is HostArray and inplace(view, op, other)


def _clear() -> None:
    _ops.clear()
    _bases.clear()
    _runtimes.clear()
    _addresses.clear()
    _inplace_ops.clear()


_caches.register("host_eager.ops", _clear, lambda: len(_ops) + len(_inplace_ops),
                 why="one per operation and kinds of operand")
