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

import math
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from .._lazy import lp
from ..lower.contraction import BATCH, COL, RED, ROW, bound_last_piece, divides, pad_to_tiles
from .core import Param, int_range, powers_of_two

if TYPE_CHECKING:
    pass

#: accumulators (per work-item) the rule aims for: ``extent * per`` at most this
STREAM_ACCUMULATORS = 32
#: a short side of at most this many outputs is streamed (GPU)
GPU_STREAM = 16

#: the streaming kernel's parameters in the ``gpu-tiled`` recipe; ``fl.tune`` searches the
#: candidates of each (the split into pieces is decided per evaluation:
#: :func:`fuseloop.split_k.stream_items_per_unit` follows these)
PARAMS = (
    Param("stream", int, GPU_STREAM, "a side of at most this many outputs whose long operand "
          "is contiguous along the long side: skinny.stream_long (0: never)",
          int_range(0, 64, (0, 16))),
    Param("stream_group", int, 128, "stream_long: work-items of a group",
          powers_of_two(32, 1024, (64, 128, 256))),
    # (2 rather than 4 by default: more work-items in flight hide the long operand's latency)
    Param("stream_per", int, 2, "stream_long: at most this many outputs of the long side per "
          "work-item", powers_of_two(1, 8, (1, 2, 4))),
    Param("stream_unroll", int, 8, "stream_long: reduced-range steps unrolled (loads in "
          "flight)", powers_of_two(1, 32, (4, 8, 16))),
    Param("stream_accumulators", int, STREAM_ACCUMULATORS, "stream_long: at most this many "
          "accumulators per work-item (half that for 8-byte types)",
          powers_of_two(8, 128, (32, 64))),
    # (split-K is decided per evaluation, so fl.tune, which times kernels, tries one value)
    Param("stream_bytes", int, 64 * 1024, "stream_long's split-K: bytes of the long "
          "operand's loads in flight per compute unit that the pieces aim for "
          "(split_k.stream_items_per_unit)", powers_of_two(1024, 1 << 22, (64 * 1024,))),
    Param("stream_pieces", int, 32, "stream_long's split-K: at most this many pieces",
          int_range(1, 1024, (32,))),
    # (1: a vector's product, x @ A, where the lanes kernel applies ran faster on an H200
    # in its one launch than split-K's two, or as fast; products of 2-4 rows unmeasured)
    Param("stream_lanes", int, 1, "a short side of at most this many outputs (of those "
          "stream_long would take) runs in one launch where the long side alone fills the "
          "device: split_lanes with groups of stream_lanes_group, LANES lanes of the sum "
          "(skinny.lanes_fill; 0: never)", int_range(0, 16, (0, 1))),
    Param("stream_lanes_group", int, 1024, "stream_lanes: work-items of a group",
          powers_of_two(64, 1024, (512, 1024))))

#: lanes of the reduced range in a group of :func:`lanes_fill`'s kernel: a warp's worth of
#: partial sums per output, so a group of 1024 covers 32 outputs of the long side
LANES = 32


#: :func:`lanes_fill` takes the lanes kernel with groups for fewer than half the compute
#: units where the long operand has at most this many bytes: such a product is over on
#: the device within a launch's host cost, so a second launch (and its plan's split)
#: costs more than the idle units
LANES_SMALL_BYTES = 24 << 20


def lanes_fill(values: Mapping[str, Any], short: int, long: int, compute_units: int,
               batched: bool = False, nbytes: int | None = None) -> bool:
    """Whether a product with ``short`` outputs on its short side and ``long`` on its long
    one runs :func:`~fuseloop.recipes.contraction.split_lanes` in one launch rather than
    :func:`stream_long` split into pieces: at most ``stream_lanes`` outputs, not batched,
    and groups for at least half the compute units along the long side alone
    (``stream_lanes_group / LANES`` outputs a group: x @ A at 4096 makes 128 groups of
    1024), or a long operand of at most :data:`LANES_SMALL_BYTES` (``nbytes``, where
    known).  One launch saves the partial products' write and read and the second
    launch's cost; in a group, ``LANES`` lanes sum every ``LANES``-th term of the reduced
    range and combine in local memory."""
    width = max(1, values.get("stream_lanes_group", 1024) // LANES)
    return (not batched and short <= values.get("stream_lanes", 0)
            and (2 * -(-long // width) >= compute_units
                 or (nbytes is not None and nbytes <= LANES_SMALL_BYTES)))


def stream_per(extent: int, most: int, itemsize: int = 4,
               accumulators: int = STREAM_ACCUMULATORS) -> int:
    """Columns of the long side per work-item for ``extent`` outputs of the short side:
    the largest power of two up to ``most`` that keeps ``extent * per`` within
    ``accumulators`` (half that for 8-byte types: registers are 4 bytes), at least 1."""
    budget = accumulators // (2 if itemsize > 4 else 1)
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
    work-group are one contiguous run.  The short and long ranges are padded to
    whole blocks (:func:`~fuseloop.lower.contraction.pad_to_tiles`: reads clamped
    by a work-item's own column, stores predicated).  The reduced range is not
    padded: unless its size class makes it whole steps, Loopy peels it into a bulk
    loop of whole steps, with no test per term, and one final step of the remaining
    terms (``slabs``); a split-K piece ends in
    the loop domain (:func:`~fuseloop.lower.contraction.bound_last_piece`), not in
    a select per operand read.
    """
    knl = t_unit.default_entrypoint
    long = COL if short == ROW else ROW
    # (a range its size class makes whole steps is not peeled: a final step would be
    # a copy of the loop's body and a bulk loop one step shorter, for no test saved)
    peel = 0 if divides(knl, RED, unroll) else 1
    t_unit = bound_last_piece(pad_to_tiles(t_unit, {short: extent, long: group * per}))
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
                            outer_iname=f"{RED}_step", inner_iname=f"{RED}_u", slabs=(0, peel))
    # (Loopy would otherwise nest the unrolled steps outside the loop over steps)
    t_unit = lp.prioritize_loops(t_unit, f"{RED}_step,{RED}_u")
    return lp.add_inames_for_unused_hw_axes(t_unit)


__all__ = ["GPU_STREAM", "LANES", "PARAMS", "STREAM_ACCUMULATORS", "lanes_fill", "stream_long",
           "stream_per"]


def stage_short_operand(t_unit: lp.TranslationUnit, short: str, lane: str, sweep: list[str],
                        outer: list[str], l0: int, l1: int) -> lp.TranslationUnit:
    """Stage the short operand of :func:`~fuseloop.recipes.contraction.split_lanes`'s
    kernel in local memory, one step of lanes (``sweep``: the reduced range's inames
    within a step, ``lane`` among them) at a time.

    Without it each lane reads its own reduced index of the short operand for every
    output of the short side: in ``A @ B[:, :8]`` (B's rows are 32 bytes) a warp's
    load touches 32 rows, eight 128-byte lines, and its eight loads touch the same
    lines again: eight times the L1 traffic of the data.  Here the work-group
    (``l0 x l1`` work-items) fills ``tile[short][k]`` with neighbouring work-items on
    neighbouring addresses of the operand, and the lanes read neighbouring ``k``
    of one row (no bank conflicts; rows padded when the fill stores down them).
    """
    from ..lower.contraction import X_RULE, Y_RULE, contraction_layout

    knl = t_unit.default_entrypoint
    rule = Y_RULE if short == COL else X_RULE
    args = knl.substitutions[rule].arguments
    s_arg, k_arg = (args[-1], args[-2]) if rule == Y_RULE else (args[-2], args[-1])
    x_fast, y_fast = contraction_layout(knl)
    k_fast = (y_fast if rule == Y_RULE else x_fast) == RED
    # (a batch, split-K's pieces among them, is one index of the tile: outer)
    batch = [args[0]] if BATCH in knl.all_inames() else []
    t_unit = lp.precompute(
        t_unit, rule, sweep_inames=[f"{short}_in", *sweep], storage_axes=[*batch, s_arg, k_arg],
        precompute_inames=["s_fb", "s_fo", "s_fk"][1 - len(batch):],
        temporary_address_space=lp.AddressSpace.LOCAL,
        precompute_outer_inames=",".join(outer), temporary_name="s_tile",
        compute_insn_id="fill_s", default_tag=None)
    # the fill: the operand's contiguous axis fastest, spread over the work-group
    order = ["s_fo", "s_fk"] if k_fast else ["s_fk", "s_fo"]
    order = [i for i in order if i in t_unit.default_entrypoint.all_inames()]
    if len(order) > 1:
        t_unit = lp.join_inames(t_unit, order, new_iname="s_f")
    else:
        t_unit = lp.rename_iname(t_unit, order[0], "s_f")
    t_unit = lp.split_iname(t_unit, "s_f", l0 * l1, outer_tag="unr", outer_iname="s_fu",
                            inner_iname="s_ft")
    t_unit = lp.split_iname(t_unit, "s_ft", l0, outer_tag="l.1", inner_tag="l.0")
    if not k_fast:
        # stores go down the tile's columns: pad its rows off the 32 banks' period
        from loopy.kernel.array import FixedStrideArrayDimTag

        knl = t_unit.default_entrypoint
        tv = knl.temporary_variables["s_tile"]
        *outer_dims, rows, cols = tv.shape  # type: ignore[misc]
        storage = (*outer_dims, rows, cols + 1)
        strides = [math.prod(storage[d + 1:]) for d in range(len(storage))]
        tv = tv.copy(storage_shape=storage,
                     dim_tags=tuple(FixedStrideArrayDimTag(st) for st in strides))
        temps = dict(knl.temporary_variables) | {"s_tile": tv}
        t_unit = t_unit.with_kernel(knl.copy(temporary_variables=temps))
    return t_unit
