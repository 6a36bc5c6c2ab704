"""Values held on the host as light 0-d arrays: a loop's bytes of ``for b in data``.

:mod:`fuseloop.iteration` yields a 1-D array's elements as 0-d arrays holding their
values (no buffer).  As plain arrays, each operator on them (crc16's ``cur & 1``,
``crc ^ (cur & 1)``, ``cur >>= 1``) went through the array's operator, the 0-d
checks of :func:`fuseloop.host_ops.binary0` and made a Scalar node and an array: more
than ten times numpy scalars' cost.  A :class:`Held` is a fuseloop array whose value
is a numpy scalar of its dtype (``_v``); its operators with a Python int or float or
another Held compute the value at once with numpy scalars' operators on the loop
dtypes fuseloop's promotion gives (host_ops' table, ``_held_ops``: the same values as
the plain arrays'), and give a new Held; its truth is its value's.

Everything else sees an ordinary 0-d array: ``_node`` is a Scalar node made when
asked (a kernel takes the value as an argument), and an operator with any other
operand, or while tracing, capturing or recording, is the plain array's (the value
as a Scalar node).  An in-place operator changes the value held (a node made before
keeps the old one, as with the plain arrays); a node other than a Scalar given to it
(the general path's assignment) makes it an ordinary array from then on.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from . import evaluate as _evaluate
from . import host_ops as _ops
from . import host_path as _host
from . import host_writes as _writes
from .array import Array
from .expr.nodes import _EMPTY, Scalar
from .host_eager import _scalar_array
from .host_products import unary as _unary
from .stats import tallies as _tallies
from .trace_hooks import trace_checks

_new = object.__new__
_count_operation = _tallies["host_operations"].__next__  # (stats.tally, bound)
_capturing, _recording = _evaluate.capturing_threads, _evaluate.recording_threads
_ops._bind()  # (host_ops' names of fuseloop.array, which its table's entries use)


class Held(Array):
    """A 0-d array holding its value on the host (see the module)."""

    # _v: the value (a numpy scalar of dtype), or None once the array is an ordinary
    # one (given a node other than a Scalar); _n: its node, once asked
    __slots__ = ("_n", "_v")
    _v: Any
    _n: Any

    @property
    def _node(self) -> Any:
        n = self._n
        if n is None:
            n = self._n = _new(Scalar)  # (Scalar.__init__, its fields set here)
            n.value, n.dtype, n.shape, n.storages = self._v, self.dtype, (), _EMPTY
        return n

    @_node.setter
    def _node(self, node: Any) -> None:
        self._n = node
        self._v = node.value if type(node) is Scalar and not node.shape \
            and node.dtype == self.dtype else None

    def __bool__(self) -> bool:
        v = self._v
        return bool(v) if v is not None and not trace_checks else super().__bool__()

    def _plain(self) -> Array:
        """The same value as a plain array (a Scalar node): the general path's operand."""
        v = self._v
        return self if v is None else _scalar_array(v, self.dtype, self.device)

    def _inplace(self, op: str, other: Any) -> Array:
        """``self op= other`` (the operators' path where _held_inplace's case is not
        met): the value computed here, else the plain array's in-place operator."""
        got = _value_of(op, self, other, False)
        if got is not None:
            value, dtype = got
            if dtype is not self.dtype:
                if not np.can_cast(dtype, self.dtype, "same_kind"):
                    return super()._inplace(op, other)  # (numpy's error)
                value = self.dtype.type(value)
            self._v, self._n = value, None  # (a node made before keeps the old value)
            return self
        return super()._inplace(op, other)


def held(value: Any, dtype: np.dtype, device: Any) -> Array:
    """A Held of ``value`` (a numpy scalar of ``dtype``) on ``device``; a plain array
    holding it (a Scalar node) for a dtype not in native byte order (see ``_table``)."""
    if not dtype.isnative:
        return _scalar_array(value, dtype, device)
    out = _new(Held)
    out._v, out._n, out._storage, out._shape = value, None, None, ()
    out.device, out.dtype = device, dtype
    return out


# (op, type of the left value, type of the right) -> host_ops' entry (its numpy
# scalars' operator, loop dtypes, whether it may set an error flag, whether a Python
# int is taken as it is) or False: keyed by the values' types, whose hash is their
# identity (a dtype's hash costs a third of an operation); a Held's value is always a
# numpy scalar of its (native) dtype's type, so its type names its dtype
_table: dict[tuple, Any] = {}
_COMPARISONS = frozenset(("less", "less_equal", "greater", "greater_equal", "equal",
                          "not_equal"))


def _entry(op: str, ta: type, tb: type) -> Any:
    ka = ta if ta is int or ta is float else np.dtype(ta)
    kb = tb if tb is int or tb is float else np.dtype(tb)
    return _ops._held_ops.get((op, ka, kb)) or _ops._held_entry(op, ka, kb)


def _value_of(op: str, x: Held, other: Any, reflected: bool) -> tuple[Any, Any] | None:
    """``(value, dtype)`` of ``x op other`` (``other op x`` when reflected) for a Held
    ``x`` and a Python int or float or another Held on its device, computed by host_ops'
    numpy scalars' operator (as :func:`fuseloop.host_ops._held0` computes it); None: the plain
    array's path."""
    v = x._v
    to = type(other)
    if to is Held:
        vo = other._v if other.device is x.device else None
        to = type(vo)
    else:
        vo = other if to is int or to is float else None
    if v is None or vo is None or not _host.HOST_MAX_WORK or trace_checks or _capturing[0] \
            or _recording[0]:
        return None
    if reflected:
        v, vo, ta, tb = vo, v, to, type(v)
    else:
        ta, tb = type(v), to
    hit = _table.get((op, ta, tb))
    if hit is None:
        hit = _table[(op, ta, tb)] = _entry(op, ta, tb)
    if hit is False:
        return None
    fn, loop, warns, raw = hit  # (host_ops._held0's steps, by the values' types)
    token = _host._errors.set(_host._QUIET) if warns else None
    try:
        if not raw:  # (numpy's conversions, and their OverflowError: the general path's)
            da, db = loop[0], loop[1]
            if ta is not da.type:
                v = _ops._weak_scalar(v, da) if ta is int or ta is float else da.type(v)
            if tb is not db.type:
                vo = _ops._weak_scalar(vo, db) if tb is int or tb is float else db.type(vo)
        out = fn(v, vo)
    except OverflowError:  # (an int beyond the dtype's range: a comparison's answer is numpy's)
        if op not in _COMPARISONS:
            return None
        out = fn(v, vo)
    except (TypeError, ValueError, ZeroDivisionError):
        return None
    finally:
        if token is not None:
            _host._errors.reset(token)
    dtype = loop[-1]
    if type(out) is not dtype.type:  # (a Python float, or numpy's scalar of another type)
        out = dtype.type(out)
    _count_operation()
    return out, dtype


def _exact(op: str, ta: type, tb: type) -> Any:
    """``(operator, output dtype, its scalar type)`` where numpy scalars' operator takes
    values of the types ``ta`` and ``tb`` as they are and sets no error flag (an
    integer's bit operation or shift with a Python int: crc16's), else False."""
    hit = _table.get((op, ta, tb))
    if hit is None:
        hit = _table[(op, ta, tb)] = _entry(op, ta, tb)
    if hit is False or not hit[3] or hit[2]:
        return False
    dtype = hit[1][-1]
    return hit[0], dtype, dtype.type


def _held_binary(op: str, reflected: bool, general: Any) -> Any:
    """Held's operator ``op``: computed here, else the plain array's (``general``)."""
    exact: dict[tuple, Any] = {}  # (the value's type, a Python scalar's) -> _exact's

    def method(self: Any, other: Any) -> Any:
        v = self._v
        to = type(other)
        if (to is int or to is float) and v is not None and _host.HOST_MAX_WORK \
                and not (trace_checks or _capturing[0] or _recording[0]):
            # (the commonest case, with a Python scalar, its steps written out)
            hit = exact.get((ta := type(v), to))
            if hit is None:
                hit = exact[(ta, to)] = _exact(op, to, ta) if reflected else _exact(op, ta, to)
            if hit is not False:
                try:
                    out = hit[0](other, v) if reflected else hit[0](v, other)
                except (TypeError, ValueError, OverflowError, ZeroDivisionError):
                    out = None  # (the general path raises numpy's error)
                if out is not None:
                    if type(out) is not hit[2]:
                        out = hit[2](out)
                    _count_operation()
                    res = _new(Held)  # (held(), inline)
                    res._v, res._n, res._storage, res._shape = out, None, None, ()
                    res.device, res.dtype = self.device, hit[1]
                    return res
        got = _value_of(op, self, other, reflected)
        if got is None:
            return general(self._plain(), other._plain() if type(other) is Held else other)
        res = _new(Held)
        res._v, res._n, res._storage, res._shape = got[0], None, None, ()
        res.device, res.dtype = self.device, got[1]
        return res
    method.__name__ = method.__qualname__ = general.__name__
    return method


def _held_inplace(op: str) -> Any:
    """Held's in-place operator ``op`` with a Python scalar taken as it is (crc16's
    ``cur >>= 1``), written out in the operator's own frame; else :meth:`Held._inplace`
    (Array's operator calls it through a second frame)."""
    exact: dict[tuple, Any] = {}  # (the value's type, a Python scalar's) -> _exact's

    def method(self: Any, other: Any) -> Any:
        v = self._v
        to = type(other)
        if (to is int or to is float) and v is not None and _host.HOST_MAX_WORK \
                and not (trace_checks or _capturing[0] or _recording[0]):
            hit = exact.get((ta := type(v), to))
            if hit is None:
                hit = exact[(ta, to)] = _exact(op, ta, to)
            if hit is not False and hit[1] is self.dtype:
                try:
                    out = hit[0](v, other)
                except (TypeError, ValueError, OverflowError, ZeroDivisionError):
                    return self._inplace(op, other)  # (numpy's error, from the general path)
                _count_operation()
                self._v, self._n = out if type(out) is hit[2] else hit[2](out), None
                return self
        return self._inplace(op, other)
    method.__name__ = method.__qualname__ = f"i{op}"
    return method


_INPLACE = {"__iadd__": "add", "__isub__": "subtract", "__imul__": "multiply",
            "__itruediv__": "true_divide", "__ifloordiv__": "floor_divide",
            "__imod__": "remainder", "__iand__": "bitwise_and", "__ior__": "bitwise_or",
            "__ixor__": "bitwise_xor", "__ilshift__": "left_shift",
            "__irshift__": "right_shift"}
for _name, _op in _INPLACE.items():
    setattr(Held, _name, _held_inplace(_op))

_writes.held_type[0] = Held  # (``x[i] = b``: host_writes' element write)
_ops._Held = Held  # (a ufunc function's operand: host_ops.binary0)


def _held_unary(op: str, general: Any) -> Any:
    """Held's unary operator ``op`` (contour_integral's ``abs(z)`` of a complex
    element): the value as a plain array's computed at once by
    :func:`fuseloop.host_products.unary`, else the plain array's operator."""
    def method(self: Any) -> Any:
        got = _unary(op, self._plain()) if self._v is not None else None
        return got if got is not None else general(self._plain())
    method.__name__ = method.__qualname__ = general.__name__
    return method


for _name, _op in (("__neg__", "negative"), ("__abs__", "absolute")):
    setattr(Held, _name, _held_unary(_op, getattr(Array, _name)))

# (Array's operators made by fuseloop.array._lean_binary, named by their ufunc: as
# host_eager sets HostArray's; ``__pow__`` rewrites small powers first: the plain one)
for _name, _f in list(vars(Array).items()):
    _op = getattr(_f, "__name__", "")  # (``add``, or ``radd`` reflected)
    if not _name.startswith("__") or _name == "__pow__" or not callable(_f):
        continue
    if _op in _host._UFUNCS:
        setattr(Held, _name, _held_binary(_op, False, _f))
    elif _op[:1] == "r" and _op[1:] in _host._UFUNCS:
        setattr(Held, _name, _held_binary(_op[1:], True, _f))
