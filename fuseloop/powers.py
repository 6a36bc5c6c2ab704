"""``x ** e`` for a small whole or half-whole constant ``e``, by products instead of ``pow``.

``pow`` with a run-time exponent is the slowest call of the math library on every
device fuseloop runs on (a loop of logarithms and exponentials with the special cases
of C99 Annex F), and Python code writes constant powers: ``r ** 3``, ``d2 ** -1.5``
(gravitation), ``v ** -0.5``.  For a float array and a Python scalar ``e`` with
``2 * e`` a whole number of at most ``MAX_HALVES`` in magnitude, ``x ** e`` is
``|sqrt(x)|`` (half-whole ``e``) or ``x`` (its reciprocal for ``e < 0``) raised to a
whole power by squarings and products; ``-inf`` (whose square root is nan where
``pow`` gives ``inf`` or 0) is selected apart.  The result differs from ``pow``'s by a
few units in the last place (a rounding per product), within numpy's own tolerance
between platforms; nan, infinities, zeros and negative bases give ``pow``'s values.
numpy's operator itself computes 2, 0.5 and -1 this way (``square``, ``sqrt``,
``reciprocal``); those stay with :mod:`fuseloop.array`.

A lazy ``x ** e`` is one node, ``power`` of ``x`` and the exponent as a literal (its
value is structure: part of the key), built as cheaply as ``x * c``; the products are
made where it is computed: the emitter expands it into their entries
(:func:`expansion`), the host path computes them with numpy (:func:`host_value`).  One
definition of the products (:func:`_products`) serves both and the values computed at
once (a 0-d or host-side operand).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import numpy as np

from . import caches as _caches
from .array import Array, _lazy_array, _ufunc_loop, apply_op
from .expr.nodes import Apply, Literal, Node, signature_of

#: the largest ``|2 * e|`` computed by products (``|e| <= 4``)
MAX_HALVES = 8
_BOOL = np.dtype(bool)
_new = object.__new__


def takes(e: Any) -> bool:
    """Whether ``x ** e`` of a real float ``x`` is computed by products."""
    return (type(e) is int or type(e) is float) and math.isfinite(e) and e not in (0, 1) \
        and not (2 * e) % 1 and abs(2 * e) <= MAX_HALVES


def _products(x: Any, e: float, apply: Callable[..., Any], const: Callable[[float], Any]
              ) -> Any:
    """``x ** e`` by products: ``apply(op, *operands)`` applies a ufunc, ``const(v)``
    makes a constant operand of ``x``'s dtype."""
    halves = int(2 * e)
    half = halves % 2 == 1
    base = apply("fabs", apply("sqrt", x)) if half else x
    if e < 0:  # the reciprocal first: partial products move towards the result's
        base = apply("reciprocal", base)  # magnitude, so none overflows before it does
    n = abs(halves) if half else abs(halves) // 2
    result: Any = None
    square = base
    while n:  # base ** n by squarings and products
        if n & 1:
            result = square if result is None else apply("multiply", result, square)
        n >>= 1
        if n:
            square = apply("square", square)
    if half:  # sqrt(-inf) is nan; pow(-inf, e) is inf for e > 0, 0 for e < 0
        result = apply("where", apply("equal", x, const(-math.inf)),
                       const(math.inf if e > 0 else 0.0), result)
    return result


def by_products(x: Array, e: Any) -> Array | None:
    """``x ** e`` by products when ``e`` is a small whole or half-whole Python number and
    ``x`` a real float array; None otherwise (then ``pow`` computes it)."""
    if x.dtype.kind != "f" or not takes(e):
        return None
    if type(x) is Array and x._shape:
        return power_node(x, e)
    # (a value computed at once: each product now, as numpy would)
    from .ufuncs import where

    return _products(x, e, lambda op, *a: where(*a) if op == "where" else apply_op(op, *a),
                     lambda v: v)


# (operand signature, or (dtype, shape) for a node without one; exponent) ->
# (the exponent's literal, loop, loop key, the result's signature)
_hits: dict[tuple, tuple] = {}
HITS_MAX = 4096
_caches.register("powers.hits", _hits.clear, lambda: len(_hits), HITS_MAX)


def _hit(an: Node, sa: int, e: float) -> tuple:
    """``_hits``' entry for ``an ** e`` (a node made the general way once: its fields)."""
    lit = Literal(an.dtype.type(e))
    loop, key = _ufunc_loop("power", an.dtype, an.dtype)
    node = Apply("power", (an, lit), loop, an.shape, key)
    hit = (lit, loop, key, node.sig)
    if len(_hits) >= HITS_MAX:
        _hits.clear()
    _hits[(sa or (an.dtype, an.shape), e)] = hit
    return hit


def power_node(x: Array, e: float) -> Array:
    """The lazy ``x ** e`` (``takes(e)``, ``x`` a real float array of at least one
    axis): one ``power`` node, built as :func:`fuseloop.array._lean_binary` builds one."""
    an = x._node
    sa = an.sig or (0 if type(an) is Apply else signature_of(an))
    hit = _hits.get((sa or (an.dtype, an.shape), e)) or _hit(an, sa, e)
    lit, loop, key, sig = hit
    node = _new(Apply)
    node.op, node._args, node.loop = "power", (an, lit), loop
    node.loop_key, node.dtype, node.shape = key, loop[-1], an.shape
    node.sig, node.operands = sig, an.operands if sig else None
    node.offs = an.offs
    node.storages, node.fancy = an.storages, an.fancy
    return _lazy_array(node, x.device)


def exponent(node: Apply) -> float | None:
    """The exponent of a ``power`` node computed by products, else None."""
    lit = node.args[1]
    if type(lit) is not Literal or node.dtype.kind != "f":
        return None
    e = lit.value.item()
    return e if takes(e) else None


def expansion(node: Apply) -> Node | None:
    """The products of a ``power`` node (see :func:`exponent`) as nodes, for the
    emitter; None for a ``pow`` call."""
    e = exponent(node)
    if e is None:
        return None
    x = node.args[0]
    dt = node.dtype

    def apply(op: str, *args: Node) -> Node:
        if op == "where":
            loop: tuple = (_BOOL, dt, dt, dt)
        else:
            loop = _ufunc_loop(op, *(a.dtype for a in args))[0]
        return Apply(op, args, loop, node.shape)

    return _products(x, e, apply, lambda v: Literal(dt.type(v)))


def host_value(node: Apply, x: Any) -> Any:
    """The products of a ``power`` node (see :func:`exponent`) computed by numpy on
    ``x``, the value of its base; None for a ``pow`` call."""
    e = exponent(node)
    if e is None:
        return None
    dt = node.dtype.type
    with np.errstate(all="ignore"):
        out = _products(np.asarray(x, dtype=node.dtype), e,
                        lambda op, *a: getattr(np, op)(*a), dt)
    return out[()] if out.ndim == 0 else out  # (a 0-d value as a numpy scalar)
