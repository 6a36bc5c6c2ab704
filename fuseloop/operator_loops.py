"""What the lean operators (:mod:`fuseloop.array`) look up instead of working out.

Per operation and kinds of operand: numpy's loop dtypes; per operation and operands'
signatures (:mod:`fuseloop.expr.nodes`): the loop, the result's shape and signature; per
Python scalar and dtype: its conversion.  (Split from :mod:`fuseloop.array`, which uses
these names as its own.)
"""

from __future__ import annotations

from typing import Any

import numpy as np

from . import caches as _caches
from .dtypes import resolve_loop, scalar_to
from .expr.nodes import Node, _loop_key, broadcast_shapes, intern_sig, scalar_sig

# (op, operand kinds...) -> (loop dtypes, their key); finite: ops x kinds^2
_loops: dict[tuple, tuple[tuple[np.dtype, ...], tuple[str, ...]]] = {}
# (Python int or float, dtype char) -> the numpy scalar it converts to
_weak_scalars: dict[tuple[Any, str], np.generic] = {}
WEAK_SCALARS_MAX = 4096
_caches.register("array.loops", _loops.clear, lambda: len(_loops),
                 why="one per operation and kinds of operand (dtypes, Python scalar types)")
_caches.register("array.weak_scalars", _weak_scalars.clear, lambda: len(_weak_scalars),
                 WEAK_SCALARS_MAX)


def _ufunc_loop(op: str, *kinds: Any) -> tuple[tuple[np.dtype, ...], tuple[str, ...]]:
    """numpy's loop dtypes of ``op`` for operands of ``kinds``, and their key (remembered)."""
    hit = _loops.get((op, *kinds))
    if hit is None:
        loop = resolve_loop(op, kinds)  # (raises numpy's error for kinds without a loop)
        hit = _loops[(op, *kinds)] = (loop, _loop_key(loop))
    return hit


# a comparison of integers with a Python int outside their dtype's range: numpy compares the
# numbers, so every element gives one answer: per operation, the answer for an int below the
# range and for one above it; and each comparison with its operands swapped
_OUT_OF_RANGE = {"less": (False, True), "less_equal": (False, True),
                 "greater": (True, False), "greater_equal": (True, False),
                 "equal": (False, False), "not_equal": (True, True)}
_SWAPPED = {"less": "greater", "less_equal": "greater_equal", "greater": "less",
            "greater_equal": "less_equal", "equal": "equal", "not_equal": "not_equal"}


def out_of_range_comparison(op: str, a: Any, b: Any) -> Any:
    """numpy's result of comparison ``op`` between an integer array and a Python int that
    its dtype cannot hold (``uint8_array < -1``: all False), a boolean array of the array's
    shape; None for another operation (whose conversion error stands)."""
    if op not in _OUT_OF_RANGE:
        return None
    if type(a) is int:  # (the int on the left: the mirrored comparison)
        a, b, op = b, a, _SWAPPED[op]
    if type(b) is not int or not hasattr(a, "device"):  # (an array and an int only)
        return None
    answer = _OUT_OF_RANGE[op][0 if b < 0 else 1]  # (out of range and negative: below it)
    from .creation import full  # (creation imports the array module)
    return full(a.shape, answer, dtype=np.bool_, device=a.device)


def _weak_scalar_in_range(value: Any, dtype: np.dtype) -> np.generic | None:
    """``_weak_scalar``, or None for an int that ``dtype`` cannot hold."""
    try:
        return _weak_scalar(value, dtype)
    except OverflowError:
        return None


def _weak_scalar(value: Any, dtype: np.dtype) -> np.generic:
    """``scalar_to`` for a Python int or float, remembering recent conversions."""
    if value == 0 or value != value:  # -0.0 == 0.0 and NaN != NaN: not dictionary keys
        return scalar_to(value, dtype)
    key = (value, dtype.char)
    hit = _weak_scalars.get(key)
    if hit is None:
        hit = scalar_to(value, dtype)  # equal keys: equal numbers, so equal conversions
        if len(_weak_scalars) >= WEAK_SCALARS_MAX:
            _weak_scalars.clear()
        _weak_scalars[key] = hit
    return hit


# (op, left operand, right operand) -> (loop dtypes, their key, result dtype, shape, the
# result's signature), an operand being a signature, a Python scalar type or, for a node
# without a signature (a concatenation, a long chain), its (dtype char, shape): one look-up
# gives all an operator needs (a signature fixes its node's dtype and shape).  A dtype is
# named by its char, as in signatures and loop keys (dtypes.as_dtype's canonical dtypes
# have distinct chars): hashing a numpy dtype builds a tuple each time
_sig_loops: dict[tuple, tuple] = {}
SIG_LOOPS_MAX = 8192
_caches.register("array.sig_loops", _sig_loops.clear, lambda: len(_sig_loops), SIG_LOOPS_MAX)


def _signed_loop(op: str, an: Node | None, bn: Node | None, ka: Any, kb: Any,
                 kind_a: Any, kind_b: Any) -> tuple:
    """``_sig_loops``'s entry for operands keyed ``ka`` and ``kb`` (a signature, a Python
    scalar's type, or an unsigned node's dtype char and shape) of kinds ``kind_a`` and
    ``kind_b``, kept under ``(op, ka, kb)`` (``an`` or ``bn`` None: a Python scalar)."""
    loop, key = _ufunc_loop(op, kind_a, kind_b)
    if bn is None:  # array with a scalar of type kb
        shape = an.shape  # type: ignore[union-attr]
        fields = ("A", op, key, shape, ka, scalar_sig(loop[1].char))
        signed = type(ka) is int
    elif an is None:  # a scalar of type ka with array bn
        shape = bn.shape
        fields = ("A", op, key, shape, scalar_sig(loop[0].char), kb)
        signed = type(kb) is int
    else:
        shape = an.shape
        if shape != bn.shape:
            shape = broadcast_shapes(shape, bn.shape)
        fields = ("A", op, key, shape, ka, kb)
        signed = type(ka) is int and type(kb) is int
    hit = (loop, key, loop[-1], shape, intern_sig(fields) if signed else 0)
    if len(_sig_loops) >= SIG_LOOPS_MAX:
        _sig_loops.clear()
    _sig_loops[(op, ka, kb)] = hit
    return hit


def _unary_hit(op: str, an: Node, ka: Any, dtype: np.dtype) -> tuple:
    """``_sig_loops``' entry for the unary ``op`` of ``an`` of ``dtype``, kept under
    ``(op, ka)``: ``ka`` is its signature or, for a node without one, its dtype's char."""
    loop, key = _ufunc_loop(op, dtype)
    signed = type(ka) is int
    entry = (loop, key, loop[-1], intern_sig(("A", op, key, an.shape, ka)) if signed else 0)
    if len(_sig_loops) >= SIG_LOOPS_MAX:
        _sig_loops.clear()
    _sig_loops[(op, ka)] = entry
    return entry
