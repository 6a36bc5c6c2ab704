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


# (op, left operand, right operand) -> (loop dtypes, their key, shape, the result's
# signature), an operand being a signature, a Python scalar type or, for a node
# without a signature (a concatenation), its (dtype, shape): one look-up gives
# all an operator needs (a signature fixes its node's dtype and shape)
_sig_loops: dict[tuple, tuple] = {}
SIG_LOOPS_MAX = 8192
_caches.register("array.sig_loops", _sig_loops.clear, lambda: len(_sig_loops), SIG_LOOPS_MAX)


def _signed_loop(op: str, an: Node, bn: Node | None, sa: int, sb: Any,
                 kind_a: Any, kind_b: Any) -> tuple:
    """``_sig_loops``'s entry for these operands (``bn`` None: a Python scalar)."""
    loop, key = _ufunc_loop(op, kind_a, kind_b)
    if bn is None:  # array with a scalar of type sb
        shape = an.shape
        fields = ("A", op, key, shape, sa, scalar_sig(loop[1].char))
    elif an is None:  # a scalar of type sa with array bn
        shape = bn.shape
        fields = ("A", op, key, shape, scalar_sig(loop[0].char), sb)
    else:
        shape = an.shape
        if shape != bn.shape:
            shape = broadcast_shapes(shape, bn.shape)
        fields = ("A", op, key, shape, sa, sb)
    hit = (loop, key, shape, intern_sig(fields) if sa and sb else 0)
    if len(_sig_loops) >= SIG_LOOPS_MAX:
        _sig_loops.clear()
    # (an is None only for a scalar's type, bn for a scalar's: both truthy)
    _sig_loops[(op, sa or (an.dtype, an.shape), sb or (bn.dtype, bn.shape))] = hit  # type: ignore[union-attr]
    return hit


def _unary_hit(op: str, an: Node, sa: int, dtype: np.dtype) -> tuple:
    """``_sig_loops``' entry for the unary ``op`` of ``an`` (``sa``: its signature, or 0
    for a node without one: then the entry is kept under its dtype)."""
    loop, key = _ufunc_loop(op, dtype)
    entry = (loop, key, intern_sig(("A", op, key, an.shape, sa)) if sa else 0)
    if len(_sig_loops) >= SIG_LOOPS_MAX:
        _sig_loops.clear()
    _sig_loops[(op, sa or dtype)] = entry
    return entry
