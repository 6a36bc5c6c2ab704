"""Reductions over fewer, longer axes: neighbouring axes of one role merged before lowering.

A reduction's kernel is laid out by its axes: the kept ones (its output) and the reduced
ones.  Two neighbouring axes of one role whose elements lie one after the other in
memory (every array the reduction reads strides through them as through one axis) are
one axis to the kernel: ``(a, b, c)`` summed over axis 0 is a sum over the rows of an
``(a, b*c)`` array.  Left apart, the layout rules see a different shape: the columns of
``(a, b, c)`` summed over ``a`` were lowered as ``b`` rows of ``c`` outputs each (on
PoCL, rows of 64 outputs where one walk over ``b*c`` columns vectorises in wide blocks);
a sum over axes ``(0, 2)``, ``keepdims`` or not, and the reductions a view or a two-step
split builds meet the same rule wherever they come from.

:func:`merged_reductions` rewrites the roots of one evaluation (every root a reduction
of the evaluation's shape, written into new or whole buffers): the output's memory in C
order is the same for the merged shape, so only the kernel changes.  Unit axes drop out.

CPU devices only.  On an H200 (NVIDIA OpenCL, 2^24 float32) the GPU column recipe's two
layouts each won one shape: ``(64, n/4096, 64)`` over axis 0 took 0.050 ms merged
against 0.072, ``(n/4096, 64, 64)`` 0.074 against 0.063 (``c`` outputs per row of a
(64, 8) group, the rows' reduction split over 8 items, beat one flat loop over the
columns there); a GPU merge waits for a rule of the column recipe's that picks the
better.  Neighbouring reduced axes are merged for every device when the reduction is
built (``fuseloop.ops.reductions._merged``); this pass adds the kept ones, and reduced
ones of reductions built elsewhere (a view's, a two-step split's).
The ``op`` of arg-reductions (one reduced axis numbered by position) keeps its reduced
axis; its kept axes merge as any other's.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

from ..expr.nodes import Node, Reduce
from ..expr.views import reshape_view

#: reductions whose reduced axes may merge: the order of the elements reduced does not
#: matter to their result (as for any of these kernels' own splits)
_ORDERLESS = frozenset({"sum", "prod", "max", "min", "any", "all"})


def _roles(node: Reduce) -> list[tuple[bool, int, int]]:
    """(reduced, child axis, length) of each axis of ``node``'s operand longer than 1."""
    return [(d in node.axes, d, n) for d, n in enumerate(node.child.shape) if n != 1]


def _cuts(node: Reduce) -> set[int]:
    """Where ``node``'s kept axes (counted without unit ones) must stay apart: between
    two kept axes with a reduced one between them in its operand."""
    cuts: set[int] = set()
    kept = 0
    after_reduced = False
    for reduced, _, _ in _roles(node):
        if reduced:
            after_reduced = True
            continue
        if after_reduced and kept:
            cuts.add(kept)
        after_reduced = False
        kept += 1
    return cuts


def _merged_one(node: Reduce, cuts: set[int]) -> Reduce | None:
    """``node`` over merged axes, its kept axes apart at ``cuts``; None where its
    operand cannot be viewed so without a copy."""
    groups: list[list[tuple[bool, int, int]]] = []
    kept = 0
    orderless = node.op in _ORDERLESS
    for role in _roles(node):
        reduced = role[0]
        last = groups[-1][-1] if groups else None
        joins = last is not None and last[0] == reduced and (
            orderless if reduced else kept not in cuts)
        if joins:
            groups[-1].append(role)
        else:
            groups.append([role])
        kept += not reduced
    shape = tuple(math.prod(n for _, _, n in g) for g in groups)
    child = reshape_view(node.child, shape)
    if child is None:
        return None
    axes = tuple(k for k, g in enumerate(groups) if g[0][0])
    return Reduce(node.op, child, axes, node.dtype)


def merged_reductions(roots: Sequence[Node], out_shape: tuple[int, ...],
                      targets: Sequence[Any], device: Any) -> tuple[list[Node], tuple[int, ...],
                                                                    list[Any]] | None:
    """``roots`` (reductions of ``out_shape``) over merged axes, with the evaluation's
    new shape and targets (unchanged: each is a whole buffer or none), or None where
    nothing merges or something cannot (not a CPU ``device``, another kind of root, a
    strided, scattered or masked target, an operand that is no view of the merged
    shape)."""
    if getattr(device, "type", None) != "cpu" or not roots \
            or any(type(r) is not Reduce or r.shape != out_shape for r in roots):
        return None
    if any(t is not None and (t.strides is not None or t.offset or t.scatter is not None
                              or t.mask is not None) for t in targets):
        return None
    reduces = [r for r in roots if isinstance(r, Reduce)]  # (all of them: checked above)
    cuts: set[int] = set()
    for r in reduces:
        cuts |= _cuts(r)
    new: list[Reduce] = []
    for r in reduces:
        m = _merged_one(r, cuts)
        if m is None or (new and m.shape != new[0].shape):
            return None
        new.append(m)
    if all(len(m.child.shape) == len(_roles(r)) for m, r in zip(new, reduces)):
        return None  # (nothing merged: unit axes alone are not worth another kernel)
    return list(new), new[0].shape, list(targets)
