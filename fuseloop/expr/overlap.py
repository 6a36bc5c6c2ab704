"""Whether two strided views of one buffer can share an element.

A view here is ``(shape, strides, offset)`` in elements: element ``idx`` lives at
``offset + sum(strides[k] * idx[k])``.  Assignment uses this to write straight into a
buffer that the expression also reads elsewhere (``A[i, j] += A[i, j - 1]``,
``a[::2] = a[1::2]``): when no element written is ever read, the order of reads and
writes cannot matter and no temporary is needed.  The answer may be a conservative
"can overlap"; it is never a wrong "cannot".
"""

from __future__ import annotations

import math

View = tuple[tuple[int, ...], tuple[int, ...], int]


def _extent(view: View) -> tuple[int, int]:
    """The lowest and highest element offset the view touches (the view is not empty)."""
    shape, strides, offset = view
    low = high = offset
    for n, s in zip(shape, strides):
        reach = (n - 1) * s
        if reach < 0:
            low += reach
        else:
            high += reach
    return low, high


def _lattice_step(view: View) -> int:
    """The gcd of the strides of the axes longer than one: every offset the view
    touches is ``offset + step * m`` for some integer ``m`` (0: a single element)."""
    step = 0
    for n, s in zip(view[0], view[1]):
        if n > 1:
            step = math.gcd(step, abs(s))
    return step


def views_disjoint(a: View, b: View) -> bool:
    """True when views ``a`` and ``b`` of one buffer cannot touch a common element.

    Two tests, each exact in what it proves: the views' offset ranges do not meet, or
    their offsets lie on lattices ``offset + step * m`` that never meet (the difference
    of the offsets is not a multiple of the gcd of the two steps).
    """
    if 0 in a[0] or 0 in b[0]:
        return True
    (a_low, a_high), (b_low, b_high) = _extent(a), _extent(b)
    if a_high < b_low or b_high < a_low:
        return True
    step = math.gcd(_lattice_step(a), _lattice_step(b))
    if step == 0:
        return a[2] != b[2]
    return (a[2] - b[2]) % step != 0
