"""GPU kernels for contractions with a short side (``x @ A``, ``A[:8] @ B``, ``A @ B[:, :4]``).

Such a product is bound by reading its long operand (``B`` of ``8 x K @ K x N``):
``K * N`` elements for ``2 * 8 * K * N`` flops.  The square-tile kernel
(:mod:`fuseloop.recipes.contraction`) pads the short side to its tile and the
long operand is read through local memory for little reuse; what such a product
needs is the long operand read once, coalesced, with enough loads in flight to
cover the memory's latency.

:func:`stream_long` (the long operand contiguous along the long side: ``B`` of
``x @ B`` in C order, or ``A`` of ``A @ B[:, :4]`` stored transposed) gives
every work-item ``per`` columns of the long side, ``group`` apart, so each load
of a warp is one contiguous run of ``B``'s row; it keeps all ``extent`` outputs
of the short side for each of its columns in registers (``extent * per``
accumulators) and walks the reduced range ``unroll`` steps at a time (unrolled:
``per * unroll`` independent loads of ``B`` in flight per work-item).  The short
operand's element ``A[m, k]`` is the same for the whole work-group at each step
(one broadcast load per row and step, shared by the ``per`` columns).  When the
outputs are too few to fill the device, split-K (:mod:`fuseloop.split_k`) runs
pieces of the reduced range as a batch: ``g.1``.

A long operand contiguous along the reduced range (``x @ B.T``, ``A @ B[:, :4]``
in C order) takes :func:`fuseloop.recipes.contraction.split_lanes` instead, with
lanes along the reduced range: neighbouring work-items read neighbouring
addresses of one row.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from .._lazy import lp
from ..lower.contraction import BATCH, COL, RED, ROW, pad_to_tiles

if TYPE_CHECKING:
    pass

#: accumulators (per work-item) the rule aims for: ``extent * per`` at most this
STREAM_ACCUMULATORS = 32


def stream_per(extent: int, most: int, itemsize: int = 4) -> int:
    """Columns of the long side per work-item for ``extent`` outputs of the short side:
    the largest power of two up to ``most`` that keeps ``extent * per`` within
    :data:`STREAM_ACCUMULATORS` (half that for 8-byte types), at least 1."""
    budget = STREAM_ACCUMULATORS // (2 if itemsize > 4 else 1)
    per = 1
    while per * 2 <= most and extent * per * 2 <= budget:
        per *= 2
    return per


def stream_long(t_unit: lp.TranslationUnit, short: str, extent: int, group: int,
                per: int, unroll: int) -> lp.TranslationUnit:
    """The short side ``short`` (``m`` or ``n``, ``extent`` outputs) in registers, the long
    side over ``group`` work-items of ``per`` outputs each, the reduced range walked
    ``unroll`` steps at a time (see the module docstring).

    Long index ``= block * group * per + r * group + l``: the ``r``-th loads of a
    work-group are one contiguous run.  The index ranges are padded to whole
    blocks (:func:`~fuseloop.lower.contraction.pad_to_tiles`: reads clamped, stores
    predicated, padded reduced terms zero).
    """
    knl = t_unit.default_entrypoint
    long = COL if short == ROW else ROW
    t_unit = pad_to_tiles(t_unit, {short: extent, long: group * per, RED: unroll})
    if BATCH in knl.all_inames():
        t_unit = lp.tag_inames(t_unit, {BATCH: "g.1"})
    t_unit = lp.split_iname(t_unit, short, extent, inner_tag="ilp",
                            outer_iname=f"{short}_blk", inner_iname=f"{short}_in")
    t_unit = lp.split_iname(t_unit, long, group * per, outer_tag="g.0",
                            outer_iname=f"{long}_blk", inner_iname=f"{long}_in")
    t_unit = lp.split_iname(t_unit, f"{long}_in", group, outer_tag="ilp", inner_tag="l.0",
                            outer_iname=f"{long}_r", inner_iname=f"{long}_l")
    # (unrolled by Loopy, not the device compiler: the loads of the unrolled steps
    # must be independent instructions for the memory to have them all in flight)
    t_unit = lp.split_iname(t_unit, RED, unroll, inner_tag="unr_hint",
                            outer_iname=f"{RED}_step", inner_iname=f"{RED}_u")
    # (Loopy would otherwise nest the unrolled steps outside the loop over steps)
    return lp.prioritize_loops(t_unit, f"{RED}_step,{RED}_u")


__all__ = ["STREAM_ACCUMULATORS", "stream_long", "stream_per"]
