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
  a reduction itself is one kernel computing that part, nothing computed twice);
* :func:`settle_gathered`: an array read through a gather is evaluated before it is
  gathered again (``X = X[mask]`` in a loop would otherwise nest one gather deeper per
  iteration: a new kernel structure each time, every use redoing the chain).

Neither applies while an ``fl.fuse`` trace runs (a traced value has no value yet).
"""

from __future__ import annotations

import weakref
from typing import TYPE_CHECKING

from ..trace_hooks import trace_checks

if TYPE_CHECKING:
    from ..array import Array

#: the lazy arrays viewed once, by id (their weak references tell a reused id apart);
#: emptied when it reaches :data:`VIEWED_MAX` entries (a loop views the same few)
_viewed: dict[int, weakref.ref] = {}
VIEWED_MAX = 64


def settle_viewed(arr: Array) -> None:
    """Evaluate the lazy ``arr`` (an :class:`~fuseloop.array.Array` whose elementwise
    node holds a ``fancy`` one) if it was viewed before; otherwise remember that it was."""
    if trace_checks:
        return
    key = id(arr)
    ref = _viewed.get(key)
    if ref is not None and ref() is arr:  # (a dead array's id, reused: not this one)
        del _viewed[key]
        arr.eval()
        return
    if len(_viewed) >= VIEWED_MAX:
        _viewed.clear()
    _viewed[key] = weakref.ref(arr)


def settle_gathered(arr: Array) -> None:
    """Evaluate ``arr`` when it is unevaluated and reads through a gather (or another
    non-elementwise node) and is about to be gathered again (see the module)."""
    if arr._storage is None and arr._node.fancy and not trace_checks:
        arr.eval()
