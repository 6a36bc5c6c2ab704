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
from collections.abc import Sequence
from typing import Any

View = tuple[tuple[int, ...], tuple[int, ...], int]


def one_group_fits(targets: Sequence[Any], out_shape: tuple[int, ...], device: Any) -> bool:
    """Whether a write whose value reads elements of its targets that other elements'
    work-items write runs as one launch of one work-group (every value loaded before
    any store: ``recipes/one_group.py``) rather than into a temporary and a copy: no
    scatter or mask, and fewer elements than the recipe's limit on ``device`` (a power of
    two: a run plan's key classes lengths by bit length, so one class decides alike)."""
    from ..recipe_state import recipe_for
    from ..recipes.one_group import limit

    return all(t is None or (t.scatter is None and t.mask is None) for t in targets) and \
        math.prod(out_shape) < limit(recipe_for(device, "one_group").values, device)


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


def _rows_and_columns(view: View, row: int) -> tuple[View, View] | None:
    """``view`` as rows of length ``row`` times columns: every element offset is
    ``row * r + c`` with ``0 <= c < row``, ``r`` from the axes whose strides are
    multiples of ``row`` and ``c`` from the others; None when a column would leave
    ``[0, row)`` (then the split is not unique)."""
    shape, strides, offset = view
    r_shape: list[int] = []
    r_strides: list[int] = []
    c_shape: list[int] = []
    c_strides: list[int] = []
    for n, s in zip(shape, strides):
        if n == 1:
            continue
        if s % row == 0:
            r_shape.append(n)
            r_strides.append(s // row)
        else:
            c_shape.append(n)
            c_strides.append(s)
    columns: View = (tuple(c_shape), tuple(c_strides), offset % row)
    low, high = _extent(columns)
    if low < 0 or high >= row:
        return None
    return (tuple(r_shape), tuple(r_strides), offset // row), columns


def views_disjoint(a: View, b: View) -> bool:
    """True when views ``a`` and ``b`` of one buffer cannot touch a common element.

    Three tests, each exact in what it proves: the views' offset ranges do not meet;
    their offsets lie on lattices ``offset + step * m`` that never meet (the difference
    of the offsets is not a multiple of the gcd of the two steps); or, seen as rows of
    a length one of their strides gives, both are sets of (row, column) pairs whose
    rows or whose columns do not meet (``A[:, 1]`` and ``A[:, 2:]``), tested the same
    way with fewer axes each.
    """
    if 0 in a[0] or 0 in b[0]:
        return True
    (a_low, a_high), (b_low, b_high) = _extent(a), _extent(b)
    if a_high < b_low or b_high < a_low:
        return True
    step = math.gcd(_lattice_step(a), _lattice_step(b))
    if step == 0:
        return a[2] != b[2]
    if (a[2] - b[2]) % step != 0:
        return True
    rows = {abs(s) for n, s in zip(a[0] + b[0], a[1] + b[1]) if n > 1 and abs(s) > 1}
    for row in sorted(rows, reverse=True):
        split_a, split_b = _rows_and_columns(a, row), _rows_and_columns(b, row)
        if split_a is None or split_b is None:
            continue
        # each view is every (row, column) pair of its row set and its column set
        if (split_a[0][0] != a[0] or split_b[0][0] != b[0]) and (
                views_disjoint(split_a[0], split_b[0])
                or views_disjoint(split_a[1], split_b[1])):
            return True
    return False
