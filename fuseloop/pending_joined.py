"""A full reduction of one value computed first, with that value's kernel, in one launch.

An evaluation whose one result is a full reduction (``mean(logsumexp(X) - X[r, l])``,
``sum(x.max(axis=1))``) of an operand that must run as a kernel of its own first
(:func:`fuseloop.evaluate._reduces_to_materialise`: a reduction over rows, consumed by
the enclosing one's loop) took two launches: the operand's rows kernel, then a
one-group kernel reducing its small result.  The second is the combining stage of
:mod:`fuseloop.lower.one_launch`: the rows kernel's groups each take a ticket after
their stores, and the last one reduces the operand's buffer; the two stages are joined
as a split full reduction's are (:func:`fuseloop.evaluate._launch_joined`, which
launches them one after the other where a device refuses the join).

Taken only for one pending node that itself runs as one kernel (no reduction of its
own to run first, no two-stage split), into a new buffer, while
``splits.ONE_LAUNCH`` is on, and on a CPU device only for a pending value of at most
:data:`CPU_MAX_VALUES` elements (none); anything else: None, and the caller
materialises.  A changed limit applies to structures evaluated afresh (a run plan
recorded before it keeps its launches).
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from . import evaluate as _ev
from . import sharing as _sharing
from . import splits as _splits
from .expr.nodes import Leaf, Node, SparseProduct, Storage
from .expr.program import Target, linearize
from .runtime.devices import Device

#: the most elements a pending value may have on a CPU device to be joined (on GPUs:
#: any): 0, none.  PoCL enqueues a small second launch with the first (deferred), so
#: the join saved nothing there, and every work-group took a ticket (a fence and an
#: atomic): joined against two launches, CPU clock, medians (a loaded 2-core machine):
#: cross-entropy 2^16 477 / 453 us, 2^20 2126 / 2012; ``sum(max(X, axis=1))`` of
#: 40 x 5000 146 / 135; argmin of 2^22 elements (256 pieces) 2075 / 2067
CPU_MAX_VALUES = 0


def run(pending: Sequence[Node], roots: Sequence[Node], out_shape: tuple[int, ...],
        targets: Sequence[Target | None], device: Device) -> list[Storage] | None:
    """The result storages of ``roots`` after ``pending`` (one node) in one launch
    with them, or None (see the module)."""
    if not _splits.ONE_LAUNCH or len(pending) != 1 or len(roots) != 1 \
            or math.prod(out_shape) != 1 or targets[0] is not None:
        return None
    (p,) = pending
    shared = _sharing.active()
    if isinstance(p, SparseProduct) or not p.shape or (
            device.type == "cpu" and math.prod(p.shape) > CPU_MAX_VALUES) or (
            shared is not None and shared.lookup(p) is not None) \
            or _ev._reduces_to_materialise([p], p.shape) \
            or _splits.two_stage_split([p], p.shape, device) is not None:
        return None
    part = _ev.allocate(math.prod(p.shape) * p.dtype.itemsize, device)
    root = _ev._rebuild(roots[0], {id(p): Leaf(part, p.dtype, p.shape)}, {})
    if root.fancy and (_ev._reduces_to_materialise([root], out_shape)
                       or _splits.two_stage_split([root], out_shape, device) is not None):
        return None  # (the buffer goes back to the pool unused)
    cache = _ev._plan_recorder() is None  # (as run_unplanned: a recording names scalars)
    first = linearize([p], p.shape, [None], cache=cache)
    program, bindings = linearize([root], out_shape, [None], cache=cache)
    out = _ev.allocate(root.dtype.itemsize, device)
    _ev._launch_joined((first[0], first[1], [part]), program, bindings, [out], device)
    return [out]
