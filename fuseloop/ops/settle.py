"""Unevaluated arrays evaluated before they are indexed again, where every index
would otherwise redo work that the array's own evaluation does once.

A view of a lazy array is pushed down to its leaves (:mod:`fuseloop.expr.views`), so
each view computes what it reads afresh.  For an elementwise expression that is what
a fused read should do; for one that holds a node run as a kernel of its own first (a
reduction broadcast back, a gather: ``fancy`` nodes), every view runs those kernels
again over its own part.  A loop that reads many views of one such array (NPBench's
resnet: ``x = relu(batchnorm(y))``, whose means and deviations are reductions, then
a convolution reading ``x[:, i:i + 3, j:j + 3, :]`` for every ``(i, j)``) then launched
three kernels per statement instead of one.

* :func:`settle_viewed`: the second basic view of the same lazy elementwise array with
  such a node below it evaluates it first (the first view alone keeps the pushed-down
  read: a single ``(x - x.mean(0))[:5]`` computes five rows, not all of them; a view of
  a reduction itself is one kernel computing that part, nothing computed twice); one
  without, after its ninth small view (a loop reading windows of it: see
  :data:`PLAIN_VIEWS`);
* :func:`settle_gathered`: an array read through a gather is evaluated before it is
  gathered again (``X = X[mask]`` in a loop would otherwise nest one gather deeper per
  iteration: a new kernel structure each time, every use redoing the chain).

Neither applies while an ``fl.fuse`` trace runs (a traced value has no value yet).
"""

from __future__ import annotations

import math
import weakref
from collections.abc import Callable
from typing import TYPE_CHECKING

from ..trace_hooks import trace_checks

if TYPE_CHECKING:
    from ..array import Array

#: the lazy arrays viewed, by id: (weak reference, views so far); the reference tells a
#: reused id apart.  Emptied when it reaches :data:`VIEWED_MAX` entries (a loop views
#: the same few)
_viewed: dict[int, tuple[weakref.ref, int]] = {}
VIEWED_MAX = 64
#: the view of a lazy array holding a ``fancy`` node that evaluates it: the second
FANCY_VIEWS = 2
#: the small view of a lazy elementwise array that evaluates it (each view pushed down
#: to its leaves costs the host more than a view of a buffer does: a loop's statements
#: reading windows of ``relu(conv + bias)``, NPBench's lenet).  Only views of at most
#: 1 / SMALL_VIEW of the array count: a stencil's shifted windows of one lazy temporary
#: are nearly as large as it, and fuseloop.passes.shifted_views decides about them
PLAIN_VIEWS = 9
SMALL_VIEW = 8


def settled_view(arr: Array, make: Callable[[], Array]) -> Array:
    """``make()``, a basic view of the lazy elementwise ``arr``, with ``arr`` evaluated
    first at its :data:`FANCY_VIEWS`-th view where it holds a ``fancy`` node, or after
    its :data:`PLAIN_VIEWS`-th small one (see the module)."""
    if arr._node.fancy:
        settle_viewed(arr, True)
        return make()
    out = make()
    if math.prod(out._shape) * SMALL_VIEW <= math.prod(arr._shape):
        settle_viewed(arr, False)
    return out


def settle_viewed(arr: Array, fancy: bool) -> None:
    """Evaluate the lazy ``arr`` (an :class:`~fuseloop.array.Array` of an elementwise
    node, holding a ``fancy`` one or not) at its :data:`FANCY_VIEWS`-th or
    :data:`PLAIN_VIEWS`-th view; count this one."""
    if trace_checks:
        return
    key = id(arr)
    entry = _viewed.get(key)
    if entry is not None and entry[0]() is arr:  # (a dead array's id, reused: not this one)
        ref, seen = entry[0], entry[1] + 1
        if seen >= (FANCY_VIEWS if fancy else PLAIN_VIEWS):
            del _viewed[key]
            arr.eval()
            return
    else:
        if len(_viewed) >= VIEWED_MAX:
            _viewed.clear()
        ref, seen = weakref.ref(arr), 1
    _viewed[key] = (ref, seen)


def settle_gathered(arr: Array) -> None:
    """Evaluate ``arr`` when it is unevaluated and reads through a gather (or another
    non-elementwise node) and is about to be gathered again (see the module)."""
    if arr._storage is None and arr._node.fancy and not trace_checks:
        arr.eval()
