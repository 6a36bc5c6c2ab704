"""When a lazy array read through shifted, overlapping windows is computed once first.

A view of a lazy array is its expression over views of the leaves
(:mod:`fuseloop.expr.views`), so each window of a stencil over a lazy value (a stencil of
a stencil: ``box(box(u))``, a Laplacian of a Laplacian) recomputes the inner expression at
the window's positions: ``k`` overlapping windows cost ``k - 1`` recomputations of it per
output element, and the fused kernel's body, Loopy's work and the driver's build grow
with their product (a 27-point box filter of another: 729 operations an element).
Materialising costs one more pass (a write, then reads mostly served by caches) instead.

The decision is taken as the windows are made, before their number is known (the
consumer is still being built), as in renting versus buying: the windows of one lazy
array that overlap its first are counted, and once ``(windows - 1) x`` its
operations exceed :data:`RECOMPUTE_BUDGET` the array is evaluated, so that window and
later ones read its buffer (the earlier ones, already in the consumer, recompute).  A
small inner stencil (hdiff's Laplacian, read at 4 windows; a 5-point Laplacian of
another) stays inside the one fused kernel: its recomputation costs less than the pass.
Disjoint windows (the halves of an array) recompute nothing and are not counted.
"""

from __future__ import annotations

import math
import weakref
from collections.abc import Sequence
from typing import TYPE_CHECKING

from .. import caches as _caches
from ..expr.nodes import Apply, Node, per_signature

if TYPE_CHECKING:
    from ..array import Array

#: recomputed operations per output element (the windows after the first, times the
#: lazy array's operations) beyond which the array is evaluated once instead
RECOMPUTE_BUDGET = 48

#: windows of fewer elements are not counted: small statements are bound by the host,
#: whose time per view this rule would add to, not by recomputation
WINDOW_MIN = 32768

#: where counting a lazy array's operations stops (any more exceed the budget at once)
COUNT_MAX = RECOMPUTE_BUDGET + 1

#: lazy arrays whose windows are being counted (by id; the newest last): a stencil's
#: windows of one array are made together, so a few suffice
TRACKED_MAX = 16


class _Windows:
    """The windows taken of one lazy array: the first one's key and box, the keys of all,
    its operations (counted at the second window) and how many windows overlapped the
    first."""

    __slots__ = ("array", "first", "hi", "keys", "lo", "operations", "overlapping")

    def __init__(self, array: Array, key: tuple) -> None:
        self.array = weakref.ref(array)
        self.first = key
        self.keys = {key}
        self.lo: list[int] | None = None
        self.hi: list[int] = []
        self.operations = 0
        self.overlapping = 0


_tracked: dict[int, _Windows] = {}
_caches.register("passes.shifted_views", lambda: _tracked.clear(), lambda: len(_tracked),
                 TRACKED_MAX)
#: window (shape, offsets, coefficients) -> its box (:func:`_reach`)
_boxes: dict[tuple, tuple[list[int], list[int]]] = {}
BOXES_MAX = 4096
_caches.register("passes.shifted_views.boxes", _boxes.clear, lambda: len(_boxes), BOXES_MAX)
#: structure signature -> operations (:func:`_operations`)
_counted: dict[int, int] = {}
COUNTED_MAX = 4096
_caches.register("passes.shifted_views.counted", _counted.clear, lambda: len(_counted),
                 COUNTED_MAX)


def _box(key: tuple) -> tuple[list[int], list[int]]:
    """:func:`_reach` of the window ``key``, kept (a loop's statements take the same
    windows of new arrays)."""
    box = _boxes.get(key)
    if box is None:
        if len(_boxes) >= BOXES_MAX:
            _boxes.clear()
        box = _boxes[key] = _reach(*key)
    return box


def _reach(shape: Sequence[int], offsets: Sequence[int],
           coeffs: Sequence[Sequence[int]]) -> tuple[list[int], list[int]]:
    """The least and greatest index a window reads along each axis of the viewed array."""
    lo, hi = [], []
    for o, row in zip(offsets, coeffs):
        low = high = o
        for c, n in zip(row, shape):
            if c > 0:
                high += c * (n - 1)
            elif c < 0:
                low += c * (n - 1)
        lo.append(low)
        hi.append(high)
    return lo, hi


def _operations(node: Node) -> int:
    """:func:`_count`, kept per structure signature (a loop's statements make new arrays
    of the same structures)."""
    return per_signature(_counted, node, _count, COUNTED_MAX)


def _count(node: Node) -> int:
    """The operations (``Apply`` nodes: arithmetic, calls, selections) computing one
    element of ``node``, each shared one once; the walk stops at :data:`COUNT_MAX`."""
    seen: set[int] = set()
    stack = [node]
    count = 0
    while stack and count < COUNT_MAX:
        n = stack.pop()
        if id(n) in seen or not isinstance(n, Apply):
            continue
        seen.add(id(n))
        count += 1
        stack.extend(n.args)
    return count


def _meets(entry: _Windows, key: tuple) -> bool:
    """Whether the window ``key`` overlaps ``entry``'s first (of the same coefficients)."""
    lo, hi = _box(key)
    for a, g, b, h in zip(lo, hi, entry.lo, entry.hi):  # type: ignore[arg-type]
        if a > h or b > g:
            return False
    return True


def settle(arr: Array, shape: tuple[int, ...], offsets: Sequence[int],
           coeffs: Sequence[Sequence[int]]) -> None:
    """Count the window (``shape``, ``offsets``, ``coeffs``) about to be taken of the
    lazy ``arr``; evaluate ``arr`` when its overlapping windows' recomputation would
    exceed :data:`RECOMPUTE_BUDGET` (see the module docstring)."""
    if math.prod(shape) < WINDOW_MIN:
        return
    if type(offsets) is not tuple or (coeffs and type(coeffs[0]) is not tuple):
        offsets, coeffs = tuple(offsets), tuple(map(tuple, coeffs))
    key = (shape, offsets, coeffs)
    entry = _tracked.get(id(arr))
    if entry is None or entry.array() is not arr:  # (a first window costs nothing more)
        if len(_tracked) >= TRACKED_MAX:
            del _tracked[next(iter(_tracked))]
        _tracked[id(arr)] = _Windows(arr, key)
        return
    if key in entry.keys or coeffs != entry.first[2]:
        return  # (the same window again is computed once; another map is no stencil)
    entry.keys.add(key)
    if entry.lo is None:  # (the second window: is this array worth counting?)
        entry.operations = _operations(arr._node)
        entry.lo, entry.hi = _box(entry.first)
    if entry.operations > 1 and _meets(entry, key):
        entry.overlapping += 1
        if entry.overlapping * entry.operations > RECOMPUTE_BUDGET:
            del _tracked[id(arr)]
            arr.eval()
