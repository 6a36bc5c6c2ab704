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
"""

from __future__ import annotations

import math
from typing import Any

from .array import Array, apply_op
from .expr.templates import array_key, composite
from .ufuncs import where

#: the largest ``|2 * e|`` computed by products (``|e| <= 4``)
MAX_HALVES = 8


def _whole_power(base: Any, n: int) -> Any:
    """``base ** n`` for ``n >= 1`` by squarings and products."""
    result: Any = None
    square = base
    while n:
        if n & 1:
            result = square if result is None else apply_op("multiply", result, square)
        n >>= 1
        if n:
            square = apply_op("square", square)
    return result


def by_products(x: Array, e: Any) -> Array | None:
    """``x ** e`` by products when ``e`` is a small whole or half-whole Python number and
    ``x`` a real float array; None otherwise (then ``pow`` computes it)."""
    if (type(e) is not int and type(e) is not float) or x.dtype.kind != "f":
        return None
    if not math.isfinite(e) or e in (0, 1) or (2 * e) % 1 or abs(2 * e) > MAX_HALVES:
        return None
    # (-0.0 and 0.0, 1 and 1.0 are not taken here: equal keys give equal products)
    return composite(array_key("power", x, e), x, lambda: _products(x, e))


def _products(x: Array, e: float) -> Array:
    halves = int(2 * e)
    half = halves % 2 == 1
    base = apply_op("fabs", apply_op("sqrt", x)) if half else x
    if e < 0:  # the reciprocal first: partial products move towards the result's
        base = apply_op("reciprocal", base)  # magnitude, so none overflows before it does
    result = _whole_power(base, abs(halves) if half else abs(halves) // 2)
    if half:  # sqrt(-inf) is nan; pow(-inf, e) is inf for e > 0, 0 for e < 0
        result = where(apply_op("equal", x, -math.inf), math.inf if e > 0 else 0.0, result)
    return result
