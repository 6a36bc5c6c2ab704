"""The user-facing lazy device array."""

from __future__ import annotations

import math
import sys
import warnings
from collections.abc import Callable
from typing import Any

import numpy as np

from . import caches as _caches
from . import multi_hooks as _multi_hooks
from .array_protocol import ArrayProtocol
from .array_shape import ShapeMethods
from .dtypes import as_dtype, resolve_loop, scalar_kind, scalar_to
from .errors import DeviceError, DTypeError
from .evaluate import RELEASE_RECENT_AT, eval_rest, run, run_flat
from .expr import readers as _readers
from .expr.nodes import (
    _EMPTY,
    MAX_OPERANDS,
    Apply,
    Leaf,
    Literal,
    Node,
    Scalar,
    Storage,
    broadcast_shapes,
    c_strides,
    forget_recent,
    join_shared,
    joined_at,
    joined_at_table,
    note_reader,
    prune_recent,
    recent_lazy,
    signature_of,
    take_last_recent,
    with_offs,
)
from .host_ops import binary0 as host_binary0
from .host_path import inplace as host_inplace
from .host_path import read as host_read
from .operator_loops import (  # noqa: F401  (re-exported: tests read the tables here)
    SIG_LOOPS_MAX,
    WEAK_SCALARS_MAX,
    _loops,
    _sig_loops,
    _signed_loop,
    _ufunc_loop,
    _unary_hit,
    _weak_scalar,
    _weak_scalar_in_range,
    _weak_scalars,
    out_of_range_comparison,
)
from .ops.host_mirror import scalar as host_scalar  # (host_path's, then index copies)
from .runtime.devices import Device
from .runtime.transfer import read
from .trace_hooks import ScalarStandIn, check_traced, trace_checks


class Constant:
    """A scalar baked into kernel source (VexCL's ``VEX_CONSTANT``); see :func:`constant`."""

    __slots__ = ("dtype", "value")

    def __init__(self, value: Any, dtype: Any = None) -> None:
        self.dtype = as_dtype(dtype) if dtype is not None else None
        if self.dtype is None:
            scalar_kind(value)  # validates the type
        self.value = value

    def __repr__(self) -> str:
        return f"fl.constant({self.value!r}" + (f", {self.dtype})" if self.dtype else ")")


def _operand_kind(x: Any) -> Any:
    if isinstance(x, Array):
        return x.dtype
    if isinstance(x, Constant):
        return x.dtype if x.dtype is not None else scalar_kind(x.value)
    if isinstance(x, ScalarStandIn):
        return x.kind
    return scalar_kind(x)


def _operand_node(x: Any, dtype: np.dtype) -> Node:
    if isinstance(x, Array):
        return x._node
    if isinstance(x, Constant):
        return Literal(scalar_to(x.value, dtype))
    if isinstance(x, ScalarStandIn):
        return x.node_for(dtype)
    return Scalar(scalar_to(x, dtype))


def _common_device(arrays: list[Array]) -> Device:
    dev = arrays[0].device
    for a in arrays[1:]:
        if a.device is not dev:
            raise DeviceError(
                f"arrays on different devices in one expression: {dev} and {a.device}; "
                "copy one over with fl.asarray(x, device=...)")
    return dev


def _coerce(x: Any) -> Any:
    """Host arrays and lists in an expression are copied to the device."""
    if isinstance(x, np.ndarray | list | tuple):
        from .creation import asarray
        return asarray(x)
    return x


def build_node(op: str, operands: tuple[Any, ...],
               loop: tuple[np.dtype, ...] | None = None) -> tuple[Node, Device | None]:
    """The node applying ``op`` to ``operands`` (Arrays or scalars) with numpy's dtypes."""
    operands = tuple(_coerce(o) for o in operands)
    if loop is None:
        loop = resolve_loop(op, tuple(_operand_kind(o) for o in operands))
    arrays = [o for o in operands if isinstance(o, Array)]
    if not arrays:
        return None, None  # type: ignore[return-value]
    device = arrays[0].device if len(arrays) == 1 else _common_device(arrays)
    shape = broadcast_shapes(*(a.shape for a in arrays))
    args = tuple(_operand_node(o, loop[k]) for k, o in enumerate(operands))
    return Apply(op, args, loop, shape), device


_new_array = _new_node = object.__new__
# Methods of tables imported from other modules, bound once: Python 3.11 compiles
# ``imported_name.method(...)`` as an attribute load (it takes the name for a module),
# which makes a bound method on every call.  (The tables are cleared, never replaced.)
_sig_loops_get, _weak_scalars_get = _sig_loops.get, _weak_scalars.get
_joined_at_get, _note_recent = joined_at_table.get, recent_lazy.append
_plain_leaf = Leaf.plain  # (bound once: every result array makes one)
def _lazy_array(node: Node, device: Device) -> Array:
    self = _new_array(Array)
    self._storage = None
    self._node = node
    self.device = device
    self.dtype = node.dtype
    self._shape = node.shape
    if node.storages:  # expr.nodes.note_reader, inline
        _note_recent(self)
        if len(recent_lazy) >= _readers.recent_limit:
            prune_recent()
    return self


# An operator's common cases (array with array, with a Python scalar) are lean: the scalar
# node, the operation node and the array built in place, in the method's own frame (a
# helper would cost every operator a call).  One look-up by the operands' signatures
# (expr.nodes) gives the loop dtypes, shape and signature; 0-d operands on a CPU device
# are computed at once (host_ops.binary0).  Three attributes set a line at most.  A
# Python scalar's conversion is _weak_scalar's, its hit inline (0, -0.0 and NaN are never
# remembered; 0 is false); an int out of the dtype's range takes the general path (numpy's
# OverflowError, or a comparison's answer).  Buffers: the union only when neither operand's
# set holds the other's (most operands share buffers).
def _lean_binary(op: str, reflected: bool = False) -> Callable[[Any, Any], Any]:
    """The operator method of numpy ufunc ``op`` (other operands: :func:`_apply_general`)."""
    def binary(a: Any, b: Any) -> Any:
        if reflected:
            a, b = b, a
        ta, tb = type(a), type(b)
        if (ta is not Array or not a._shape) and (tb is not Array or not b._shape) \
                and (got := host_binary0(op, a, b)) is not None:
            return got
        if ta is Array:
            device, an = a.device, a._node  # (an's key: its signature, else dtype char, shape)
            ka = an.sig or (type(an) is not Apply and signature_of(an)) or (an.dtype.char, an.shape)
            if tb is Array and b.device is device:
                bn = b._node
                kb = bn.sig or (type(bn) is not Apply and signature_of(bn)) or (
                    bn.dtype.char, bn.shape)
                loop, key, dtype, shape, sig = _sig_loops_get((op, ka, kb)) or _signed_loop(
                    op, an, bn, ka, kb, a.dtype, b.dtype)
                if sig:  # (operands read by both once; views' offsets: nodes.with_offs)
                    sig, offs = with_offs(sig, an.offs, bn.offs) if bn.offs else (sig, an.offs)
                    bo, ao = bn.operands, an.operands  # (bo begins as ao, or is one buffer)
                    if len(bo) == 1 and bo[0] in an.storages:  # (join_shared's first case)
                        at = (sig, ao.index(bo[0]))  # (r * c + y: y's place among r's)
                        sig, bo = _joined_at_get(at) or joined_at(*at), ()
                    elif len(bo) > 1 and ao and ao[0] is bo[0] and (  # (shared_prefix's
                            len(bo) == 2 or (len(ao) > 1 and ao[1] is bo[1])):  # first test)
                        sig, bo = join_shared(sig, ao, an.storages, bo)
                    operands = ao + bo
                sa, sb = an.storages, bn.storages  # (two targets: no tuple built)
                storages = sa if sb is sa or not sb else sb if not sa or sa < sb \
                    else sa if sb <= sa else sa | sb
                fancy = an.fancy or bn.fancy  # (reductions have signatures too)
            elif tb is float or tb is int:
                loop, key, dtype, shape, sig = _sig_loops_get((op, ka, tb)) or _signed_loop(
                    op, an, None, ka, tb, a.dtype, tb)
                if (v := _weak_scalars_get((b, key[1])) if b and b == b else None) is None \
                        and (v := _weak_scalar_in_range(b, loop[1])) is None:  # (not ``or``:
                    return _apply_general(op, (a, b))  # a numpy scalar's truth costs)
                bn = _new_node(Scalar)  # (at most three targets a line: no tuple built)
                bn.value, bn.dtype, bn.shape = v, loop[1], ()  # (v's: a numpy getter costs)
                bn.storages = _EMPTY
                if sig:
                    operands, offs = an.operands + (bn,), an.offs  # noqa: RUF005  (a list)
                storages, fancy = an.storages, an.fancy  # (a scalar's: none, False)
            else:
                return _apply_general(op, (a, b))
        elif tb is Array and (ta is float or ta is int):
            device, bn = b.device, b._node
            kb = bn.sig or (type(bn) is not Apply and signature_of(bn)) or (bn.dtype.char, bn.shape)
            loop, key, dtype, shape, sig = _sig_loops_get((op, ta, kb)) or _signed_loop(
                op, None, bn, ta, kb, ta, b.dtype)
            if (v := _weak_scalars_get((a, key[0])) if a and a == a else None) is None \
                    and (v := _weak_scalar_in_range(a, loop[0])) is None:  # (as above)
                return _apply_general(op, (a, b))
            an = _new_node(Scalar)
            an.value, an.dtype, an.shape = v, loop[0], ()
            an.storages = _EMPTY
            if sig:
                operands, offs = (an,) + bn.operands, bn.offs  # noqa: RUF005  (as above)
            storages, fancy = bn.storages, bn.fancy
        else:
            return _apply_general(op, (a, b))
        node = _new_node(Apply)
        node.op, node._args, node.loop = op, (an, bn), loop
        node.loop_key, node.dtype, node.shape = key, dtype, shape
        if not sig or len(operands) > MAX_OPERANDS:
            sig, operands, offs = 0, None, ()
        node.sig, node.operands, node.offs = sig, operands, offs
        node.storages, node.fancy = storages, fancy
        self = _new_node(Array)
        self._storage, self._node, self.device = None, node, device
        self.dtype, self._shape = dtype, shape
        if storages:
            _note_recent(self)
            if len(recent_lazy) >= _readers.recent_limit:
                prune_recent()
        return self
    binary.__name__ = binary.__qualname__ = f"{'r' if reflected else ''}{op}"
    return binary


_FAST_POWERS = {2: "square", 0.5: "sqrt", -1: "reciprocal"}


def _with_numpy_fast_powers(lean: Callable[[Any, Any], Any]) -> Callable[[Any, Any], Any]:
    """``x ** e`` as numpy's operator computes it: for a float or complex ``x`` and a Python
    scalar e of 2, 0.5 or -1, ``square``, ``sqrt`` or ``reciprocal`` (no ``pow`` call);
    other small whole and half-whole ``e`` by products (:mod:`fuseloop.powers`)."""
    def power(a: Any, b: Any) -> Any:
        if (type(b) is int or type(b) is float) and a.dtype.kind in "fc":
            if b in _FAST_POWERS:
                return apply_op(_FAST_POWERS[b], a)
            products = _powers.by_products(a, b)
            if products is not None:
                return products
        return lean(a, b)
    power.__name__ = power.__qualname__ = "power"
    return power


def _lean_unary(op: str) -> Callable[[Any], Any]:
    """The function of the unary numpy ufunc ``op`` (``fl.sqrt(x)``, ``-x``).

    An Array operand takes the lean path of :func:`_lean_binary`: the node built
    in place, the loop dtypes and the result's signature found by one look-up of
    (``op``, operand signature).  Anything else goes to
    :func:`_apply_general`.
    """
    def unary(x: Any, /) -> Any:
        if type(x) is not Array:
            if type(x) is _HostArray and (got := _eager_unary(op, x)) is not None:
                return got  # (a small view on the CPU: numpy's now, host_eager)
            return _apply_general(op, (x,))
        an = x._node
        if type(an) is Scalar and (got := _eager_unary(op, x)) is not None:
            return got  # (a value computed at once: so is this, host_eager)
        ka = an.sig or (type(an) is not Apply and signature_of(an)) or x.dtype.char
        hit = _sig_loops_get((op, ka))
        if hit is None:
            hit = _unary_hit(op, an, ka, x.dtype)
        loop, key, dtype, sig = hit
        node = _new_node(Apply)
        node.op = op
        node._args = (an,)
        node.loop = loop
        node.loop_key = key
        node.dtype = dtype
        node.shape = shape = an.shape
        node.sig = sig
        node.operands, node.offs = an.operands if sig else None, an.offs
        node.storages = storages = an.storages or _EMPTY
        node.fancy = an.fancy
        # (_lazy_array, inline)
        self = _new_node(Array)
        self._storage = None
        self._node = node
        self.device = x.device
        self.dtype = dtype
        self._shape = shape
        if storages:
            _note_recent(self)
            if len(recent_lazy) >= _readers.recent_limit:
                prune_recent()
        return self

    unary.__name__ = unary.__qualname__ = op
    return unary


# op -> its lean binary (unary) function, for apply_op (ufuncs called by name)
_lean_binaries: dict[str, Callable[[Any, Any], Any]] = {}
_lean_unaries: dict[str, Callable[[Any], Any]] = {}


def _clear_lean_ops() -> None:
    _lean_binaries.clear()
    _lean_unaries.clear()


_caches.register("array.lean_ops", _clear_lean_ops,
                 lambda: len(_lean_binaries) + len(_lean_unaries), why="one per operation")


def apply_op(op: str, *operands: Any) -> Any:
    """Apply a numpy ufunc by name lazily; with no array operand, numpy computes it."""
    if len(operands) == 2:
        lean = _lean_binaries.get(op)
        if lean is None:
            lean = _lean_binaries[op] = _lean_binary(op)
        return lean(operands[0], operands[1])
    if len(operands) == 1:
        lean1 = _lean_unaries.get(op)
        if lean1 is None:
            lean1 = _lean_unaries[op] = _lean_unary(op)
        return lean1(operands[0])
    return _apply_general(op, operands)


def _apply_general(op: str, operands: tuple) -> Any:
    """:func:`apply_op` by :func:`build_node`: every case the lean path does not take."""
    try:
        return _apply_built(op, operands)
    except OverflowError:  # (a Python int that the loop's integer dtype cannot hold)
        if len(operands) != 2 or (got := out_of_range_comparison(op, *operands)) is None:
            raise
        return got


def _apply_built(op: str, operands: tuple) -> Any:
    """:func:`_apply_general`'s work: numpy's now for small CPU work, else a lazy node."""
    if (got := _eager_apply(op, operands)) is not None:  # (small, on the CPU: numpy's now)
        return got
    if _multi_hooks.TYPES and _multi_hooks.any_split(operands):  # (split arrays: per part)
        return _multi_hooks.dispatch("ufunc", lambda *a: apply_op(op, *a), operands, {})
    node, device = build_node(op, operands)
    if node is None:
        plain = [(o.value if o.dtype is None else o.dtype.type(o.value))
                 if isinstance(o, Constant) else o for o in operands]
        result = getattr(np, op)(*plain)
        if not any(isinstance(o, Constant) for o in operands):
            return result
        # constant folding keeps the literal a (weak, if all parts were) constant
        weak = all(o.dtype is None if isinstance(o, Constant) else type(o) in (int, float)
                   for o in operands)
        return Constant(result.item(), None if weak else result.dtype)
    return Array._lazy(node, device)  # type: ignore[arg-type]


def _inplace_probe_baseline() -> int:
    class Probe:
        def __setitem__(self, key: Any, value: Any) -> None:
            self.count = sys.getrefcount(value)

    p = Probe()
    p[...] = object()
    return p.count


# sys.getrefcount of a temporary passed to __setitem__: above it, the caller
# still holds the value, which then has to be materialised as well.
_TEMP_REFCOUNT = _inplace_probe_baseline()


class Array(ArrayProtocol, ShapeMethods):
    """A device array; lazy until a value is needed.

    Operators and fuseloop functions build an expression; ``get()``,
    ``np.asarray``, ``float()``, printing, ``eval()`` and ``fl.compute`` run it as
    one fused kernel.  Shape methods (``.T``, ``reshape``, ``@``):
    :mod:`fuseloop.array_shape`.
    """

    # (``shape`` is ArrayProtocol's property over ``_shape``: assigning it reshapes)
    __slots__ = ("__weakref__", "_node", "_shape", "_storage", "device", "dtype")
    __array_priority__ = 1000  # numpy defers binary operators to us
    __hash__ = None  # type: ignore[assignment]  # == is elementwise, as in numpy

    _node: Node
    _storage: Storage | None
    _shape: tuple[int, ...]
    device: Device
    dtype: np.dtype

    # {{{ construction

    @classmethod
    def _concrete(cls, storage: Storage, dtype: np.dtype, shape: tuple[int, ...]) -> Array:
        self = object.__new__(cls)
        self._storage, self.device = storage, storage.device
        self._node, self.dtype, self._shape = _plain_leaf(storage, dtype, shape), dtype, shape
        return self

    @classmethod
    def _lazy(cls, node: Node, device: Device) -> Array:
        return _lazy_array(node, device)

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        raise TypeError("create arrays with fl.asarray, fl.empty, fl.zeros, ... ")

    def _become(self, storage: Storage) -> None:
        old = self._node.storages
        self._storage = storage
        self._node = _plain_leaf(storage, self.dtype, self._shape)
        key = id(self)
        for s in old:
            readers = s.readers  # usually None or without this array (expr.nodes.note_reader)
            if readers:
                # an entry under this id is often a dead array's (ids are reused): look first
                ref = readers.get(key)
                if ref is not None and ref() is self:
                    s.discard_reader(self)

    # }}}

    # {{{ properties

    @property
    def ndim(self) -> int:
        return len(self.shape)

    @property
    def size(self) -> int:
        return math.prod(self.shape)

    @property
    def nbytes(self) -> int:
        return self.size * self.dtype.itemsize

    @property
    def itemsize(self) -> int:
        return self.dtype.itemsize

    @property
    def is_lazy(self) -> bool:
        """True while the array is an unevaluated expression."""
        return self._storage is None

    @property
    def data(self) -> Any:
        """The pyopencl buffer holding the array in C order (evaluates it first).

        For a strided view this is a new contiguous copy, not the viewed buffer.
        """
        if trace_checks:
            check_traced(self, ".data (a boolean mask, nonzero)")
        self.eval()
        if not self.is_contiguous:
            return run([self._node], self.shape, self.device)[0].buffer
        return self._storage.buffer  # type: ignore[union-attr]

    def __len__(self) -> int:
        if not self.shape:
            raise TypeError("len() of unsized object")
        return self.shape[0]

    # }}}

    # {{{ evaluation and host transfer

    def eval(self) -> Array:
        """Evaluate (if lazy) into a device buffer and return ``self``."""
        if self._storage is None:
            # (a large result's allocation lets go of the recent lazy arrays: this one,
            # about to be concrete, need not be a reader; a slice: threads share the list)
            last = recent_lazy[-1:]
            taken = bool(last) and last[0] is self and math.prod(
                self._shape) * self.dtype.itemsize >= RELEASE_RECENT_AT and \
                take_last_recent(self)
            node, shape, device = self._node, self._shape, self.device
            try:
                if node.fancy or len(shape) > 1:
                    # (a reduction or an n-d result: its plan by signature, replayed in
                    # one frame; run_flat takes neither)
                    storage = _replay_one(node, shape, device)
                    if storage is None:
                        storage = eval_rest(node, shape, device, True)
                else:  # (a large result's launch made now: looked up once, not twice)
                    storage = run_flat(node, shape, device, None, True)
                    if storage is None:
                        storage = eval_rest(node, shape, device, True)
            except BaseException:
                if taken:  # (still lazy: a reader of its buffers after all)
                    note_reader(self)
                raise
            self._become(storage)
        return self

    @property
    def is_contiguous(self) -> bool:
        """True for a concrete array that fills its own buffer in C order."""
        node = self._node
        return type(node) is Leaf and node.strides is None and node.offset == 0

    def get(self) -> np.ndarray:
        """Evaluate and copy to a new numpy array (waits for the device)."""
        if trace_checks:
            check_traced(self, ".get()")
        if type(self._node) is Scalar:  # (a value the host holds: a split sum's, host_ops')
            return np.array(self._node.value)
        self.eval()
        small = host_read(self._node, self.device)  # (a small array on the CPU: no copy
        if small is not None:                       # command, no wait on an event)
            return small
        host = np.empty(self.shape, self.dtype)
        if host.size:  # (read enqueues the deferred launches first)
            storage = self._storage
            node = self._node
            offset = 0
            if type(node) is Leaf and (host.size == 1 or node.strides is None or
                                       node.strides == c_strides(self._shape)):
                # one block of the buffer (an element, a row): read in place, no
                # gathering kernel (``float(A[i, j])`` on a GPU: a launch saved per read)
                offset = node.offset * self.dtype.itemsize
            elif not self.is_contiguous:
                # a strided view: gather it into a contiguous buffer first
                storage = run([self._node], self.shape, self.device)[0]
            read(host, storage.buffer, self.device, offset)  # type: ignore[union-attr]
        return host

    def _scalar(self) -> Any:
        if trace_checks:
            check_traced(self, "a Python scalar")
        if self.size != 1:
            raise TypeError(f"only size-1 arrays convert to Python scalars (shape {self.shape})")
        got = host_scalar(self)  # (small work on the CPU: numpy; an index array's copy)
        return got if got is not None else self.get().reshape(()).item()

    def __float__(self) -> float:
        return float(self._scalar())

    def __int__(self) -> int:
        return int(self._scalar())

    def __index__(self) -> int:
        if self.dtype.kind not in "iub":
            raise TypeError(f"only integer arrays can be used as an index, not {self.dtype}")
        return int(self._scalar())

    def __bool__(self) -> bool:
        if trace_checks:
            check_traced(self, "bool()")
        node = self._node
        if type(node) is Scalar and not self._shape:  # (a value held: fuseloop.host_ops)
            return bool(node.value)
        if self.size != 1:
            raise ValueError(
                f"the truth value of an array with shape {self.shape} is ambiguous; "
                "use .get().any() or .get().all(), or compare elements explicitly")
        return bool(self._scalar())

    def item(self) -> Any:
        return self._scalar()

    def tolist(self) -> Any:
        return self.get().tolist()

    def __repr__(self) -> str:
        body = np.array2string(self.get(), separator=", ", prefix="fl.Array(")
        return f"fl.Array({body}, dtype={self.dtype}, device={self.device.name!r})"

    def __str__(self) -> str:
        return str(self.get())

    # }}}
    # {{{ conversion

    def astype(self, dtype: Any, copy: bool = True) -> Array:
        """Elementwise conversion (C casts; bool means "nonzero")."""
        dt = as_dtype(dtype)
        if dt == self.dtype and not copy:
            return self
        if self.dtype.kind == "c" and dt.kind != "c":
            warnings.warn("Casting complex values to real discards the imaginary part",
                          np.exceptions.ComplexWarning, stacklevel=2)
        return Array._lazy(Apply("cast", (self._node,), (self.dtype, dt), self.shape),
                           self.device)

    @property
    def real(self) -> Array:
        """The real part (the array itself for real dtypes), as ``numpy``'s ``.real``."""
        from .mathfuncs import real

        return real(self)

    @property
    def imag(self) -> Array:
        """The imaginary part (zeros for real dtypes), as ``numpy``'s ``.imag``."""
        from .mathfuncs import imag

        return imag(self)

    def conj(self) -> Array:
        """The complex conjugate (the values themselves for real dtypes)."""
        return apply_op("conjugate", self)

    def copy(self) -> Array:
        """A new array with the same values: a copy of a concrete array is made now
        (numpy's snapshot), of a lazy one lazily (it fuses with what follows)."""
        got = _eager_copy(self)  # (small and concrete on the CPU: numpy's copy, host_views)
        if got is not None:
            return got
        out = Array._lazy(Apply("positive", (self._node,), (self.dtype, self.dtype),
                                self.shape), self.device)
        if self._storage is not None and type(self) is Array and not trace_checks:
            # (the statements after a copy of concrete data mostly write the original:
            # ``pn = p.copy(); p[1:-1] = f(pn)``; a lazy copy would be computed there
            # and every read of it in ``f`` re-pointed at its buffer. Under fl.fuse
            # it stays lazy, so that it fuses.)
            out.eval()
        return out

    # }}}

    # {{{ assignment

    def __getitem__(self, key: Any) -> Array:
        """Basic slicing gives a view (no copy); an integer-array index gathers."""
        if self.device.type != "cpu":  # (no host path: host_eager's tests cost half a view)
            return _getitem(self, key)
        got = _eager_getitem(self, key)  # (a small view on the CPU: numpy's, host_eager)
        return got if got is not None else _getitem(self, key)

    def __setitem__(self, key: Any, value: Any) -> None:
        """Write through a view (``a[1:-1] = e``) or scatter (``a[idx] = v``)."""
        if type(value) is Array and _written_in_place(self, key, value):
            return  # (``a[k] += v``'s write back: the operator wrote that view already)
        if self.device.type == "cpu" and _eager_setitem(self, key, value):
            return  # (small, on the CPU: numpy, at once; elsewhere its tests find nothing)
        held = False
        if isinstance(value, Array):
            count = sys.getrefcount(value)
            # the registry of recent lazy arrays holds a new value too (expr.nodes):
            # most often the last one made; anywhere else it is taken as held
            tail = recent_lazy[-1:]
            recent = bool(tail) and tail[0] is value
            held = count > _TEMP_REFCOUNT + recent
            if recent and not held:
                forget_recent(value)
        _setitem(self, key, value, held)

    def _inplace(self, op: str, other: Any) -> Array:
        # (small, on a CPU device: numpy, in place; a value made here, nbody's
        # ``vel += acc * dt``, by numpy first: host_inplace reads operands' buffers)
        made = type(other) is _HostArray and other._buf is None
        if (made and _eager_inplace(self, op, other)) or host_inplace(self, op, other) or (
                type(other) is _HostArray and not made and _eager_inplace(self, op, other)):
            return self
        if self._storage is None and _inplace_lazy(self, op, other):
            return self  # (no buffer to write: the expression takes the array's place)
        # the lean path: its temporary is let go at once (a held one is a lazy reader)
        node = apply_op(op, self, other)._node if type(other) in _LEAN_OTHER and \
            not _multi_hooks.TYPES else build_node(op, (self, other))[0]
        if node.dtype is not self.dtype and not np.can_cast(node.dtype, self.dtype, "same_kind"):
            raise DTypeError(
                f"cannot cast ufunc {op!r} output from {node.dtype} to {self.dtype} "
                "with casting rule 'same_kind' (numpy's rule for in-place operators)")
        assign(self, NodeValue(node, other), cast="same_kind", value_is_held=False)
        return self

    def __iadd__(self, o: Any) -> Array: return self._inplace("add", o)
    def __isub__(self, o: Any) -> Array: return self._inplace("subtract", o)
    def __imul__(self, o: Any) -> Array: return self._inplace("multiply", o)
    def __itruediv__(self, o: Any) -> Array: return self._inplace("true_divide", o)
    def __ifloordiv__(self, o: Any) -> Array: return self._inplace("floor_divide", o)
    def __imod__(self, o: Any) -> Array: return self._inplace("remainder", o)
    def __ipow__(self, o: Any) -> Array: return self._inplace("power", o)
    def __iand__(self, o: Any) -> Array: return self._inplace("bitwise_and", o)
    def __ior__(self, o: Any) -> Array: return self._inplace("bitwise_or", o)
    def __ixor__(self, o: Any) -> Array: return self._inplace("bitwise_xor", o)
    def __ilshift__(self, o: Any) -> Array: return self._inplace("left_shift", o)
    def __irshift__(self, o: Any) -> Array: return self._inplace("right_shift", o)

    # }}}

    # {{{ operators

    __add__ = _lean_binary("add")
    __radd__ = _lean_binary("add", reflected=True)
    __sub__ = _lean_binary("subtract")
    __rsub__ = _lean_binary("subtract", reflected=True)
    __mul__ = _lean_binary("multiply")
    __rmul__ = _lean_binary("multiply", reflected=True)
    __truediv__ = _lean_binary("true_divide")
    __rtruediv__ = _lean_binary("true_divide", reflected=True)
    __floordiv__ = _lean_binary("floor_divide")
    __rfloordiv__ = _lean_binary("floor_divide", reflected=True)
    __mod__ = _lean_binary("remainder")
    __rmod__ = _lean_binary("remainder", reflected=True)
    __pow__ = _with_numpy_fast_powers(_lean_binary("power"))
    __rpow__ = _lean_binary("power", reflected=True)
    __and__ = _lean_binary("bitwise_and")
    __rand__ = _lean_binary("bitwise_and", reflected=True)
    __or__ = _lean_binary("bitwise_or")
    __ror__ = _lean_binary("bitwise_or", reflected=True)
    __xor__ = _lean_binary("bitwise_xor")
    __rxor__ = _lean_binary("bitwise_xor", reflected=True)
    __lshift__ = _lean_binary("left_shift")
    __rlshift__ = _lean_binary("left_shift", reflected=True)
    __rshift__ = _lean_binary("right_shift")
    __rrshift__ = _lean_binary("right_shift", reflected=True)
    __eq__ = _lean_binary("equal")
    __ne__ = _lean_binary("not_equal")
    __lt__ = _lean_binary("less")
    __le__ = _lean_binary("less_equal")
    __gt__ = _lean_binary("greater")
    __ge__ = _lean_binary("greater_equal")
    def __neg__(self) -> Array: return apply_op("negative", self)
    def __pos__(self) -> Array: return apply_op("positive", self)
    def __abs__(self) -> Array: return apply_op("absolute", self)
    def __invert__(self) -> Array: return apply_op("invert", self)
    # }}}


# in-place operands taken by the lean operator path (anything else: build_node)
_LEAN_OTHER = frozenset((Array, int, float))

# (at the end: the assignment module reads this one's names at import)
from . import powers as _powers  # noqa: E402
from ._lazy import first_call  # noqa: E402  (ops.indexing loads at the first index)
from .assignment import NodeValue, assign  # noqa: E402
from .assignment import inplace_lazy as _inplace_lazy  # noqa: E402
from .host_eager import HostArray as _HostArray  # noqa: E402
from .host_eager import apply as _eager_apply  # noqa: E402
from .host_eager import getitem as _eager_getitem  # noqa: E402
from .host_eager import inplace_array as _eager_inplace  # noqa: E402
from .host_products import unary as _eager_unary  # noqa: E402
from .host_views import copy_concrete as _eager_copy  # noqa: E402
from .host_writes import setitem as _eager_setitem  # noqa: E402
from .run_plans import replay_one as _replay_one  # noqa: E402

_getitem = first_call(globals(), "_getitem", ".ops.indexing", "getitem")
_setitem = first_call(globals(), "_setitem", ".ops.indexing", "setitem")
_written_in_place = first_call(globals(), "_written_in_place", ".ops.indexing", "written_in_place")
