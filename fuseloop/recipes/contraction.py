"""Built-in recipes for contraction kernels (kind ``"contraction"``).

The lowered kernel (:mod:`fuseloop.lower.contraction`) computes
``acc = sum(k, fl_x(b, m, k) * fl_y(b, k, n))`` for every output ``(b, m, n)``
and then the epilogue; the operands are substitution rules.

**GPU (``gpu-tiled``).**  A work-group of ``tm x tn`` work-items computes a
``bm x bn`` block of the output (128 x 128 with 16 x 16 work-items for
float32); each work-item holds ``bm/tm x bn/tn`` accumulators in private
memory (a register tile: inames unrolled by Loopy, or by the device compiler,
``TileConfig.reg_loops``).  The reduced range
is walked in steps of ``bk`` (8): the work-group first fills local-memory tiles
``x_tile[bk][bm]`` and ``y_tile[bk][bn]`` (Loopy ``precompute`` of the operand
rules, so an elementwise producer such as ``A * 2`` is applied while filling,
once per element loaded), then every work-item accumulates the outer products
of its rows and columns for each ``k`` of the step.  In the ``"blocked"``
layout (the default) a work-item owns groups of four consecutive rows and
columns (``4*l .. 4*l+3`` and the same ``4*tm`` further on), so it reads a tile
row four values at a time (vector loads from local memory); in the
``"strided"`` layout it owns rows ``l, l+tm, ...``.  The fill is spread over the
work-group with neighbouring work-items on neighbouring addresses of the
operand's contiguous axis; a tile stored across that order gets its rows
padded.  By default (``TileConfig.vec``, ``prefetch="double"``; see
:mod:`~fuseloop.recipes.contraction_pipeline`) the tiles are float4 arrays read
four values at a time, the next step is read into registers before the products,
and stored after them into a second copy of the tiles: one barrier per step.  The
index ranges are padded to whole tiles
(:func:`~fuseloop.lower.contraction.pad_to_tiles`): no bounds checks in the loops,
only clamped reads in the fill and predicated stores.  8-byte types use
128 x 64 blocks (``GPU_TILES_WIDE``): a register tile of float32's bytes, in runs of
two (a double2) where float32's are runs of four.

Loopy's ``add_prefetch`` is ``precompute`` of a rule that reads one array; it
is not used directly because an operand is an expression over flat addresses
(``A * 2`` read through strides that are kernel parameters: not affine in
isl), not one array with affine indices.  The operand rules carry affine
arguments, which is all the footprint analysis needs, and precomputing them
also fuses the producer into the fill.

**CPU (``cpu-blocked``).**  A work-item computes a 6 x 16 block of outputs:
for each ``k`` it loops over the block's 16 columns (a plain loop, which the
compiler vectorises) with the 6 rows unrolled inside, accumulating in a
private array whose layout the recipe fixes
(:func:`~fuseloop.lower.contraction.explicit_accumulator`).  Column blocks are
whole and the last one is shifted back into range
(:func:`~fuseloop.lower.contraction.shifted_split`), so column loads are
contiguous with no clamping; it skips the columns it shares with the block
before it in the epilogue and stores (each output element is written once,
which an epilogue reading the output, ``C += A @ B``, relies on); rows are
clamped (loop-invariant in ``k``).  On
PoCL, local-memory tiles (3.4 GFLOP/s at 1024^3) and fully unrolled register
tiles (4 to 8.5 GFLOP/s: scalar code, spilled accumulators) were several times
slower than this form (20 to 50 GFLOP/s on a busy 2-core machine): PoCL does not
vectorise across work-items around a ``k`` loop, and straight-line code was not
vectorised either.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, NamedTuple

from .._lazy import lp, prim
from ..lower.contraction import (
    BATCH,
    COL,
    RED,
    REDUCTION_ID,
    ROW,
    X_RULE,
    Y_RULE,
    contraction_layout,
    explicit_accumulator,
    extent_range,
    pad_to_tiles,
)
from . import contraction_pipeline as pipeline
from . import matmul_dmma as dmma_mod
from . import skinny as skinny_mod
from .core import Derived, Param, Recipe, SizeClassFunction, Space, int_range, powers_of_two

if TYPE_CHECKING:
    from ..expr.program import Program
    from ..runtime.devices import Device


# {{{ the shape rule: size classes

def make_size_class(rows: int, cols: int, align: int = 0, wide: int = 0,
                    medium: int = 0, step: int = 0, k_most: int = 0) -> SizeClassFunction:
    """Size classes for contraction kernels: a side of the output (``m``: rows, ``n``:
    columns) of at most ``rows`` (``cols``) elements is a class of its own, its exact
    extent; a longer side is the class "longer than that", and with ``align``, a
    long side or the reduced range that is a multiple of ``align`` says so, and with
    ``wide``, a long side of at least ``wide`` elements says so; with ``medium``, a
    long side of at most ``medium`` elements.  The reduced range states the largest of
    ``step`` (the tiles' step along it), ``align`` and ``k_most`` that it is a multiple
    of: whole tiles' steps (``einsum('bqd,bkd->bqk')`` with d = 64) and whole steps of
    a kernel splitting the sum over lanes (x @ A: 32 lanes of 8 terms, K = 4096), with
    no clamped or tested reads.

    So a recipe reads from the kernel's assumptions
    (:func:`~fuseloop.lower.contraction.extent_range`) whether a side is short and how
    short, and sizes its blocks to it, and ranges that tiles divide are not padded
    (:func:`~fuseloop.lower.contraction.divides`: no clamped reads, no tests).  A
    structure has at most ``2 * (rows + cols + 2)`` classes of its sides, times four of
    the reduced range.
    """

    def contraction_size_class(program: Program, params: Any, n_rows: int,
                               n_elem: int) -> str:
        c = program.contraction
        if c is None:
            return ""
        conds: set[str] = set()
        for size, limit in ((c.m_size, rows), (c.n_size, cols)):
            if not isinstance(size, tuple):
                continue  # an empty side: the kernel has the literal extent 1
            slot, value = size[1], params[size[1]]
            # (m and n may be one parameter, a square product's: both conditions hold)
            conds.add(f"p{slot} = {value}" if value <= limit else f"p{slot} >= {limit + 1}")
            if align and value > limit and value % align == 0:
                conds.add(f"p{slot} mod {align} = 0")
            if wide and value > limit and value >= wide:
                conds.add(f"p{slot} >= {wide}")
            if medium and limit < value <= medium:
                conds.add(f"p{slot} <= {medium}")
        k = c.k_size
        fits = [f for f in sorted({step, align, k_most} - {0})
                if isinstance(k, tuple) and params[k[1]] % f == 0]
        if fits:
            conds.add(f"p{k[1]} mod {fits[-1]} = 0")
        return " and ".join(sorted(conds))

    return contraction_size_class

# }}}


class TileConfig(NamedTuple):
    """A work-group computes ``bm x bn`` outputs with ``tm x tn`` work-items."""

    bm: int = 128
    bn: int = 128
    bk: int = 8
    tm: int = 16
    tn: int = 16
    # "strided": work-item (i, j) takes rows i, i+tm, ...; "blocked": rows
    # 4i..4i+3, then 4i+4*tm.. (four consecutive values: vector loads)
    layout: str = "strided"
    pad: bool = True  # pad local tiles stored across their read order
    # "blocked" only: the update reads the local tiles as float4 (contraction_pipeline)
    vec: bool = False
    # "regs": step s + 1's operands read into registers while step s computes;
    # "double": and stored into a second copy of the tiles (contraction_pipeline);
    # "layout": "double" where both operands are read along the sum, else "regs"
    prefetch: str = "none"
    # the step's loop unrolled by the device compiler this many at a time (0: whole;
    # linalg_gemm's update unrolls 4 of its 8: whole took ptxas 143 registers)
    unroll: int = 0
    # NVIDIA's OpenCL: registers per work-item the compiler may use (0: its choice;
    # 128 lets two groups of 256 share an SM); ignored on other platforms
    max_registers: int = 0
    # who unrolls the register tile's loops (REG_LOOPS): "loopy" (a statement per
    # register), "vector" (Loopy a float4's components, the device compiler the rest),
    # "lanes" ("vector", the fill's copies as loops), "device" (all as loops)
    reg_loops: str = "loopy"


#: float32 (and smaller) on GPUs: 128x128 blocks, 8x8 outputs per work-item, steps of
#: 8, float4 reads of the local tiles and two copies of them (the structure of the
#: hand-written trailing update, fuseloop.linalg_gemm) where both operands are read along
#: the sum, else one copy and two barriers a step (_prefetch_for_layout); fl_lvec4 is
#: OpenCL C, so the rule drops ``vec`` on other backends
GPU_TILES = TileConfig(layout="blocked", vec=True, prefetch="layout", reg_loops="lanes")
#: the blocks before the pipeline (one copy of the tiles, scalar reads): a probe variant
GPU_TILES_PLAIN = TileConfig(layout="blocked")
#: TileConfig.prefetch's values
PREFETCH = ("none", "regs", "double", "layout")
#: TileConfig.reg_loops' values.  Through clang 15's NVPTX back end (-O3; matmul_unroll.py
#: --clang), "loopy" and "vector" gave the same 512 FMAs and 32 float4 shared loads per
#: step (vector 4% fewer integer instructions); "device" stayed a loop (128 FMAs: the
#: step's loop past LLVM's unroll threshold), so the device compiler may not unroll it.
#: On an H100 "vector" gave "loopy"'s PTX and speed at half the code generation; on an
#: H200 "lanes" "vector"'s PTX, no slower, a quarter less again: GPU_TILES takes it
REG_LOOPS = ("loopy", "vector", "lanes", "device")
#: 8-byte types: GPU_TILES' structure with a register tile of the same bytes, 8 x 4
#: doubles (64 registers of accumulators, as float32's 8 x 8), read as double2 pairs,
#: and local tiles of 25 KiB (two copies); the columns halved, not the rows: a warp's
#: 32 work-items read 16 different columns of the tile but 2 different rows
#: (broadcasts), so the column reads are the ones that cost local memory bandwidth
GPU_TILES_WIDE = TileConfig(128, 64, 8, 16, 16, "blocked", vec=True, prefetch="double",
                            reg_loops="vector")
#: 8-byte types before recipe version 5 (4 x 4 strided outputs per work-item, scalar
#: reads, one copy of the tiles): ``gpu_tiled.with_params(wide_tiles=GPU_TILES_WIDE_V4)``
#: is the former rule (benchmarks/probes/matmul_dtype_probe.py times both)
GPU_TILES_WIDE_V4 = TileConfig(bm=64, bn=64, bk=8, tm=16, tn=16)


#: TileConfig.reg_loops: the Loopy tags of the register tile's inames and of the blocked
#: layout's float4 components ("unr": copies of the statement in Loopy; "unr_hint": a
#: loop under ``#pragma unroll``, which the device compiler unrolls)
_REG_TAGS = {"loopy": ("unr", "unr"), "vector": ("unr_hint", "unr"),
             "lanes": ("unr_hint", "unr"), "device": ("unr_hint", "unr_hint")}


def _split_output(t_unit: lp.TranslationUnit, axis: str, block: int, threads: int,
                  layout: str, group_tag: str, local_tag: str, reg_tag: str = "ilp",
                  lane_tag: str | None = None, lanes: int = 4
                  ) -> tuple[lp.TranslationUnit, list[str]]:
    """Split output axis ``axis``; returns the inames a fill sweeps (local and register).
    ``lanes``: the blocked layout's consecutive outputs of a work-item (a 16-byte
    vector's elements), ``lane_tag`` (default ``reg_tag``) their iname's tag."""
    t_unit = lp.split_iname(t_unit, axis, block, outer_tag=group_tag,
                            inner_iname=f"{axis}_in", outer_iname=f"{axis}_blk")
    per = block // threads
    if layout == "strided" or lanes < 2 or per < lanes or per % lanes:
        # axis = blk*block + r*threads + l
        t_unit = lp.split_iname(t_unit, f"{axis}_in", threads, outer_tag=reg_tag,
                                inner_tag=local_tag, outer_iname=f"{axis}_r",
                                inner_iname=f"{axis}_l")
        return t_unit, [f"{axis}_l", f"{axis}_r"]
    # axis = blk*block + r1*(lanes*threads) + l*lanes + r0
    t_unit = lp.split_iname(t_unit, f"{axis}_in", lanes * threads, outer_tag=reg_tag,
                            outer_iname=f"{axis}_r1", inner_iname=f"{axis}_c")
    t_unit = lp.split_iname(t_unit, f"{axis}_c", lanes, outer_tag=local_tag,
                            inner_tag=lane_tag or reg_tag,
                            outer_iname=f"{axis}_l", inner_iname=f"{axis}_r0")
    return t_unit, [f"{axis}_l", f"{axis}_r1", f"{axis}_r0"]


def _fill_tiles(t_unit: lp.TranslationUnit, cfg: TileConfig, sweep_x: list[str],
                sweep_y: list[str], k_inner: str, outer: str) -> lp.TranslationUnit:
    """Precompute both operand rules into ``bk x bm`` and ``bk x bn`` tiles."""
    knl = t_unit.default_entrypoint
    layout = contraction_layout(knl)
    batch = BATCH in knl.all_inames()
    threads = cfg.tm * cfg.tn
    for rule, sweep, block, name in ((X_RULE, sweep_x, cfg.bm, "x"),
                                     (Y_RULE, sweep_y, cfg.bn, "y")):
        args = knl.substitutions[rule].arguments
        # storage [k][row or column]: the compute loop reads along the second axis
        k_arg = args[-1] if rule == X_RULE else args[-2]
        o_arg = args[-2] if rule == X_RULE else args[-1]
        storage = [*([args[0]] if batch else []), k_arg, o_arg]
        t_unit = lp.precompute(
            t_unit, rule, sweep_inames=[*sweep, k_inner], storage_axes=storage,
            precompute_inames=[f"{name}_fb", f"{name}_fk", f"{name}_fo"] if batch else
            [f"{name}_fk", f"{name}_fo"],
            temporary_address_space=lp.AddressSpace.LOCAL, precompute_outer_inames=outer,
            temporary_name=f"{name}_tile", compute_insn_id=f"fill_{name}",
            default_tag=None)
        # spread the fill over the work-group, the operand's contiguous axis fastest
        k_fast = (layout[0] if rule == X_RULE else layout[1]) == RED
        order = [f"{name}_fo", f"{name}_fk"] if k_fast else [f"{name}_fk", f"{name}_fo"]
        # (a footprint one element wide, a vector operand's, has no loop of its own)
        order = [i for i in order if i in t_unit.default_entrypoint.all_inames()]
        if len(order) > 1:
            t_unit = lp.join_inames(t_unit, order, new_iname=f"{name}_f")
        else:
            t_unit = lp.rename_iname(t_unit, order[0], f"{name}_f")
        size = block * cfg.bk
        if size > threads:
            # ("vector" keeps the fill's copies: as loops, their registers' addresses
            # took clang's NVPTX back end 228 more integer instructions, see REG_LOOPS)
            copies = "unr" if cfg.reg_loops in ("loopy", "vector") else "unr_hint"
            t_unit = lp.split_iname(t_unit, f"{name}_f", threads, outer_tag=copies,
                                    outer_iname=f"{name}_fu", inner_iname=f"{name}_ft")
            fill = f"{name}_ft"
        else:
            fill = f"{name}_f"
        t_unit = lp.split_iname(t_unit, fill, cfg.tn, outer_tag="l.1", inner_tag="l.0")
        if cfg.pad and k_fast:
            # stores go down the columns of the tile: pad its rows so that
            # neighbouring work-items hit different banks (32 banks of 4 bytes)
            from loopy.kernel.array import FixedStrideArrayDimTag

            knl2 = t_unit.default_entrypoint
            tv = knl2.temporary_variables[f"{name}_tile"]
            pad = pipeline.row_pad(cfg)
            shape = tuple(tv.shape)  # type: ignore[arg-type]
            storage = (*shape[:-1], shape[-1] + pad)  # type: ignore[assignment]
            strides = [math.prod(storage[d + 1:]) for d in range(len(storage))]
            tv = tv.copy(storage_shape=storage,
                         dim_tags=tuple(FixedStrideArrayDimTag(s) for s in strides))
            temps = dict(knl2.temporary_variables)
            temps[tv.name] = tv
            t_unit = t_unit.with_kernel(knl2.copy(temporary_variables=temps))
        knl = t_unit.default_entrypoint
    return t_unit


def tiled(cfg: TileConfig):
    """The GPU recipe with tile configuration ``cfg`` for every type, as a function
    (``gpu_tiled.with_params(tiles=cfg)`` keeps 8-byte types apart)."""

    def recipe(t_unit: lp.TranslationUnit, device: Device) -> lp.TranslationUnit:
        return _tile(t_unit, _for_backend(cfg, device))

    recipe.__name__ = f"gpu_tiled_{cfg.bm}x{cfg.bn}x{cfg.bk}_{cfg.tm}x{cfg.tn}_{cfg.layout}"
    return recipe


def _prefetch_for_layout(cfg: TileConfig, knl: lp.LoopKernel) -> TileConfig:
    """``prefetch="layout"``: two copies of the tiles (one barrier a step) where both
    operands are contiguous along the sum (``A @ B.T``: both fills store down the
    tiles' columns), else one copy (two barriers a step).  On an H200 (float32, 4096,
    probes/matmul_family.py) one copy ran faster for ``A @ B``, a batch of them and 64
    rows in split-K pieces, as fast for ``A.T @ B``, and slower for ``A @ B.T`` and
    attention scores, in both mid-session runs."""
    if cfg.prefetch != "layout":
        return cfg
    both = contraction_layout(knl) == (RED, RED)
    return cfg._replace(prefetch="double" if both else "regs")


def _tile(t_unit: lp.TranslationUnit, cfg: TileConfig) -> lp.TranslationUnit:
    from ..lower.contraction import operand_itemsize

    knl = t_unit.default_entrypoint
    cfg = _prefetch_for_layout(cfg, knl)
    t_unit = pad_to_tiles(t_unit, {ROW: cfg.bm, COL: cfg.bn, RED: cfg.bk})
    batch = BATCH in knl.all_inames()
    if batch:
        t_unit = lp.tag_inames(t_unit, {BATCH: "g.2"})
    reg_tag, lane_tag = _REG_TAGS[cfg.reg_loops]
    # (a work-item's consecutive outputs: one 16-byte vector read of the tiles)
    lanes = pipeline.vector_width(operand_itemsize(knl))
    t_unit, sweep_x = _split_output(t_unit, ROW, cfg.bm, cfg.tm, cfg.layout, "g.1", "l.1",
                                    reg_tag, lane_tag, lanes)
    t_unit, sweep_y = _split_output(t_unit, COL, cfg.bn, cfg.tn, cfg.layout, "g.0", "l.0",
                                    reg_tag, lane_tag, lanes)
    # (the step's loop is left for the device compiler to unroll: Loopy unrolling
    # it generated bk copies of the bm/tm x bn/tn updates, and its code generation
    # time grew with them, 4x for 8 x 8 outputs per work-item)
    hint = f"unr_hint.{cfg.unroll}" if 0 < cfg.unroll < cfg.bk else "unr_hint"
    t_unit = lp.split_iname(t_unit, RED, cfg.bk, inner_tag=hint,
                            inner_iname=f"{RED}_in", outer_iname=f"{RED}_blk")
    t_unit = pipeline.box_domain(t_unit, {ROW: cfg.bm, COL: cfg.bn, RED: cfg.bk})
    outer = ",".join(([BATCH] if batch else []) + [f"{ROW}_blk", f"{COL}_blk", f"{RED}_blk"])
    t_unit = _fill_tiles(t_unit, cfg, sweep_x, sweep_y, f"{RED}_in", outer)
    if cfg.prefetch in ("regs", "double"):
        t_unit = pipeline.prefetch_registers(t_unit, cfg.bk, outer.split(","))
    t_unit = _register_tile(t_unit, sweep_x[1:], sweep_y[1:])
    if cfg.prefetch == "double":
        t_unit = pipeline.double_buffer(t_unit, f"{RED}_blk")
    if cfg.vec:
        t_unit = pipeline.vector_tile_reads(t_unit, [("x_tile", sweep_x), ("y_tile", sweep_y)])
    if cfg.max_registers:
        t_unit = lp.set_options(t_unit, build_options=[
            f"-cl-nv-maxrregcount={cfg.max_registers}"])
    return pipeline.split_boxes(t_unit)


def _register_tile(t_unit: lp.TranslationUnit, rows: list[str],
                   cols: list[str]) -> lp.TranslationUnit:
    """The work-item's accumulators as an explicit private array over its register
    inames ``rows`` and ``cols`` (outer to inner), updated in straight-line code (or in
    loops the device compiler unrolls, as ``TileConfig.reg_loops`` tags the inames), and
    zeroed and read out (epilogue, stores) in loops the device compiler unrolls.

    Loopy's ILP privatisation needs the same unrolled inames on every instruction
    that touches the accumulator, so it generated one statement per register for
    the zeroing, the copy out and each epilogue statement too: three quarters of
    the statements of an 8 x 8 tile, and of Loopy's code generation time.  The
    update's loops are pinned (``k`` outside, then ``axes``): Loopy's own order of
    ILP loops followed Python's string hashing and changed between processes.
    """
    knl = t_unit.default_entrypoint
    ext = {i: int(knl.get_constant_iname_length(i)) for i in (*rows, *cols)}
    axes = [*reversed(cols), *rows]
    t_unit = explicit_accumulator(t_unit, [(i, ext[i]) for i in axes], name="acc_reg")
    for suffix, within in (("z", f"id:{REDUCTION_ID}_init"),
                           ("e", f"not id:{REDUCTION_ID}_update")):
        t_unit = lp.duplicate_inames(t_unit, axes, within=within,
                                     new_inames=[f"{i}_{suffix}" for i in axes],
                                     tags={i: "unr_hint" for i in axes})
        # (row by row, a work-item's consecutive columns innermost)
        t_unit = lp.prioritize_loops(t_unit, ",".join(f"{i}_{suffix}" for i in (*rows, *cols)))
    # (inames Loopy unrolls innermost: one nest of the device compiler's loops around
    # their copies, TileConfig.reg_loops="vector")
    loops = sorted(axes, key=lambda i: pipeline.unrolled(knl, i))
    return lp.prioritize_loops(t_unit, ",".join([f"{RED}_blk", f"{RED}_in", *loops]))


def skinny_tiles(cfg: TileConfig, rows: int | None, cols: int | None, group: int,
                 bk: int, itemsize: int) -> TileConfig:
    """The rule's tiles for a short side: ``rows`` (``cols``) is the output's extent
    along ``m`` (``n``) when it is short, else None (``cfg`` is then kept).

    A short side is one block, rounded up to a power of two, of work-items that own
    four consecutive outputs each (one work-item for up to four), so no work-item
    computes padding beyond that rounding; the long side gets the rest of ``group``
    work-items, again four outputs each.  Until both local tiles (at ``itemsize``
    bytes an element, padding included) fit the minimum local memory, ``bk`` is
    lowered (to 4), then the long side's outputs per work-item (to 1).
    """
    if rows is None and cols is None:
        return cfg

    def short(n: int) -> tuple[int, int]:
        block = 1 << (n - 1).bit_length()
        return block, max(1, block // 4)

    bm, tm = short(rows) if rows is not None else (0, 0)
    bn, tn = short(cols) if cols is not None else (0, 0)
    per = 4  # outputs of the long side per work-item

    def fits() -> bool:
        return (bk + 8) * (bm + bn) * itemsize <= MIN_LOCAL_MEMORY

    while True:
        if rows is None:
            tm = max(1, group // tn)
            bm = per * tm
        if cols is None:
            tn = max(1, group // tm)
            bn = per * tn
        # shorter steps first, then fewer outputs per work-item, until the tiles fit
        while bk > 4 and not fits():
            bk //= 2
        if fits() or per == 1:
            break
        per //= 2
    # (who unrolls the register tile: the configuration's choice, a matter of build time)
    return TileConfig(bm, bn, bk, tm, tn, "blocked", reg_loops=cfg.reg_loops)


def long_k_fast(knl: lp.LoopKernel, short: str) -> bool:
    """Whether the operand along the long side (``Y`` when ``short`` is ``m``) is
    contiguous along the reduced range."""
    x_fast, y_fast = contraction_layout(knl)
    return (y_fast if short == ROW else x_fast) == RED


def split_lanes(t_unit: lp.TranslationUnit, short: str, extent: int, group: int,
                lanes: int, unroll: int = 1, stage: bool = False) -> lp.TranslationUnit:
    """A short side in registers, the reduced range split over lanes of a work-group.

    Every work-item holds all ``extent`` outputs of the short side ``short`` (``m``
    or ``n``: unrolled accumulators) for one output of the long side, and sums
    every ``lanes``-th term of the reduced range; the lanes' partial sums are
    combined in local memory (Loopy's tree) and the first lane runs the epilogue
    and the stores (so an epilogue reading the output, ``C += x @ A``, runs once).
    Work-groups tile the long side only, so a product with few outputs still has
    ``group`` work-items per ``group / lanes`` of them.  The work-group's fast axis
    follows the long operand's contiguous axis: along the long side, ``lanes``
    lanes; along the reduced range (``A @ B`` with few columns), lanes as wide as
    a warp (32), so neighbouring work-items read neighbouring addresses.  Each
    lane walks its terms ``unroll`` at a time (a loop the device compiler unrolls:
    that many independent loads of the long operand in flight), ``lanes`` apart.
    """
    knl = t_unit.default_entrypoint
    long = COL if short == ROW else ROW
    k_fast = long_k_fast(knl, short)
    if k_fast:
        lanes = min(32, group)
    width = max(1, group // lanes)
    t_unit = pad_to_tiles(t_unit, {short: extent, long: width, RED: lanes * unroll})
    if BATCH in knl.all_inames():
        t_unit = lp.tag_inames(t_unit, {BATCH: "g.1"})
    t_unit = lp.split_iname(t_unit, short, extent, inner_tag="ilp",
                            outer_iname=f"{short}_blk", inner_iname=f"{short}_in")
    t_unit = lp.split_iname(t_unit, long, width, outer_tag="g.0",
                            inner_tag="l.1" if k_fast else "l.0")
    lane = f"{RED}_lane"
    t_unit = lp.split_iname(t_unit, RED, lanes, outer_iname=f"{RED}_step", inner_iname=lane,
                            inner_tag="l.0" if k_fast else "l.1")
    # sum(lane, sum(step, ...)): each lane's own sum, then the tree across lanes
    t_unit = lp.split_reduction_outward(t_unit, lane)
    if unroll > 1:
        # k = (step * unroll + u) * lanes + lane
        t_unit = lp.split_iname(t_unit, f"{RED}_step", unroll, inner_tag="unr_hint",
                                outer_iname=f"{RED}_step_o", inner_iname=f"{RED}_su")
        t_unit = lp.prioritize_loops(t_unit, f"{RED}_step_o,{RED}_su")
    t_unit = lp.add_inames_for_unused_hw_axes(t_unit, within=f"not id:{REDUCTION_ID}")
    knl = t_unit.default_entrypoint
    first = prim.Comparison(prim.Variable(lane), "==", 0)
    insns = [i if i.id == REDUCTION_ID else i.copy(predicates=i.predicates | {first})
             for i in knl.instructions]
    t_unit = t_unit.with_kernel(knl.copy(instructions=insns))
    if not stage:
        return t_unit
    step = [f"{RED}_su"] if unroll > 1 else []
    outer = [i for i in t_unit.default_entrypoint.all_inames()
             if i in (BATCH, f"{long}_outer", f"{short}_blk")] + \
        [f"{RED}_step_o" if unroll > 1 else f"{RED}_step"]
    l0, l1 = (lanes, width) if k_fast else (width, lanes)
    return skinny_mod.stage_short_operand(t_unit, short, lane, [lane, *step], outer, l0, l1)


def _gpu_tiled(t_unit: lp.TranslationUnit, device: Device, *, tiles: TileConfig,
               wide_tiles: TileConfig, few: int, skinny: str, skinny_group: int,
               skinny_lanes: int, skinny_bk: int, skinny_unroll: int, skinny_stage: bool,
               stream: int, stream_group: int, stream_per: int, stream_unroll: int,
               stream_accumulators: int, stream_bytes: int, stream_pieces: int,
               stream_lanes: int, stream_lanes_group: int, medium: int, split_k: int,
               dmma: bool, dmma_tiles: Any) -> lp.TranslationUnit:
    """Local-memory tiles and register tiles; ``wide_tiles`` for 8-byte types (float64 on
    NVIDIA: FP64 tensor cores, ``dmma``).  A side of at most ``stream`` outputs whose long
    operand is contiguous along the long side: :func:`~fuseloop.recipes.skinny.stream_long`;
    else a side of at most ``few`` outputs: :func:`split_lanes` (``skinny="lanes"``) or
    :func:`skinny_tiles` (``"tiles"``); up to ``stream_lanes`` outputs unsplit (no batch:
    :func:`~fuseloop.recipes.skinny.lanes_fill`), ``split_lanes`` in one launch.
    ``split_k``, ``stream_bytes`` and ``stream_pieces`` are read before lowering
    (:func:`fuseloop.split_k.contraction_pieces`): a split's pieces are a batch here."""
    from ..lower.contraction import operand_itemsize

    knl = t_unit.default_entrypoint
    itemsize = operand_itemsize(knl)
    cfg = wide_tiles if itemsize > 4 else tiles
    short = [hi if hi is not None and hi <= few else None
             for _, hi in (extent_range(knl, ROW), extent_range(knl, COL))]
    if short[0] or short[1]:
        axis = ROW if short[0] and (not short[1] or short[0] <= short[1]) else COL
        extent = short[0] if axis == ROW else short[1]
        assert extent is not None
        k_fast = long_k_fast(knl, axis)
        if extent <= stream and not k_fast:
            if extent <= stream_lanes and BATCH not in knl.all_inames():  # (lanes_fill)
                group, _ = _lanes_group(extent, stream_lanes_group, skinny_mod.LANES,
                                        stream_unroll, False, False, max(itemsize, 4))
                return split_lanes(t_unit, axis, extent, group, skinny_mod.LANES, stream_unroll)
            per = skinny_mod.stream_per(extent, stream_per, itemsize, stream_accumulators)
            return skinny_mod.stream_long(t_unit, axis, extent, stream_group, per,
                                          stream_unroll)
        if skinny == "lanes":
            group, stage = _lanes_group(extent, skinny_group, skinny_lanes, skinny_unroll,
                                        skinny_stage, k_fast, max(itemsize, 4))
            return split_lanes(t_unit, axis, extent, group, skinny_lanes, skinny_unroll,
                               stage)
    if dmma and dmma_mod.use_dmma(knl, device, medium):
        return dmma_mod.dmma_tiles(t_unit, dmma_tiles, device)
    cfg = _medium_tiles(cfg, knl, medium, pipeline.vector_width(itemsize))
    cfg = skinny_tiles(cfg, short[0], short[1], skinny_group, skinny_bk, max(itemsize, 4))
    return _tile(t_unit, _for_backend(cfg, device))


def _for_backend(cfg: TileConfig, device: Device) -> TileConfig:
    """``cfg`` without the float4 reads off OpenCL (``fl_lvec4`` is OpenCL C), and without
    a register limit off NVIDIA's OpenCL (its build option)."""
    if device.backend != "opencl":
        cfg = cfg._replace(vec=False)
    if device.backend != "opencl" or "nvidia" not in device.platform.lower():
        cfg = cfg._replace(max_registers=0)
    return cfg


def _medium_tiles(cfg: TileConfig, knl: lp.LoopKernel, medium: int,
                  lanes: int = 4) -> TileConfig:
    """A side of at most ``medium`` outputs (``64 x K @ K x N``) gets blocks of
    ``medium`` along it rather than padding to a larger tile (half of 128 x 128
    computed for nothing), when the work-items still own whole groups of ``lanes``
    (the blocked layout's consecutive outputs)."""
    def fits(axis: str, size: int, threads: int) -> bool:
        hi = extent_range(knl, axis)[1]
        return hi is not None and hi <= medium < size and medium % (lanes * threads) == 0

    if medium and fits(ROW, cfg.bm, cfg.tm):
        cfg = cfg._replace(bm=medium)
    if medium and fits(COL, cfg.bn, cfg.tn):
        cfg = cfg._replace(bn=medium)
    return cfg


def _lanes_group(extent: int, group: int, lanes: int, unroll: int, stage: bool, k_fast: bool,
                 itemsize: int) -> tuple[int, bool]:
    """:func:`split_lanes`' work-group size and whether it stages the short operand: the
    lanes' partial sums (``group x extent`` values) and the staged tile (``extent`` rows
    of a step of lanes, padded) must fit the minimum local memory; the group shrinks
    down to ``lanes``, then the staging is dropped."""
    def need(group: int, stage: bool) -> int:
        step = (min(32, group) if k_fast else lanes) * unroll
        return (group * extent + (extent * (step + 1) if stage else 0)) * itemsize

    while group > lanes and need(group, stage) > MIN_LOCAL_MEMORY:
        group //= 2
    if stage and need(group, stage) > MIN_LOCAL_MEMORY:
        return _lanes_group(extent, group, lanes, unroll, False, k_fast, itemsize)
    return group, stage


def _tiles_ok(cfg: object) -> bool:
    """A tile configuration the recipe can apply: positive sizes, work-items that divide
    their block, a known layout."""
    return (isinstance(cfg, TileConfig)
            and all(isinstance(n, int) and n > 0 for n in cfg[:5])
            and cfg.bm % cfg.tm == 0 and cfg.bn % cfg.tn == 0
            and cfg.layout in ("blocked", "strided") and isinstance(cfg.vec, bool)
            and cfg.prefetch in PREFETCH and isinstance(cfg.unroll, int) and cfg.unroll >= 0
            and isinstance(cfg.max_registers, int) and cfg.max_registers >= 0
            and cfg.reg_loops in REG_LOOPS)


#: local memory every OpenCL device has (the standard's minimum for non-custom devices)
MIN_LOCAL_MEMORY = 32 * 1024


def _tiles_fit(values: Mapping[str, Any], device: Device) -> bool:
    """Whether both tile configurations fit the device's work-group size and (at 4 and
    8 bytes an element, padding included: ``contraction_pipeline.tile_bytes``) the
    minimum local memory."""
    groups = (values["skinny_group"], values["stream_group"], values["stream_lanes_group"])
    if max(groups) > device.max_work_group_size \
            or values["skinny_lanes"] > values["skinny_group"]:
        return False
    for cfg, itemsize in ((values["tiles"], 4), (values["wide_tiles"], 8)):
        if cfg.tm * cfg.tn > device.max_work_group_size:
            return False
        if pipeline.tile_bytes(cfg, itemsize) > MIN_LOCAL_MEMORY:
            return False
    return True


_TILE_SEARCH = (GPU_TILES, GPU_TILES_PLAIN, GPU_TILES._replace(prefetch="regs"),
                GPU_TILES._replace(unroll=4), GPU_TILES._replace(reg_loops="loopy"),
                GPU_TILES._replace(reg_loops="lanes"), GPU_TILES._replace(reg_loops="device"),
                GPU_TILES._replace(vec=False), TileConfig(64, 64, 8, 16, 16, "blocked"),
                TileConfig(128, 64, 8, 16, 16, "blocked"), TileConfig(128, 128, 8, 16, 16),
                TileConfig(64, 64, 8, 8, 8, "blocked"))
_WIDE_SEARCH = (GPU_TILES_WIDE, GPU_TILES_WIDE_V4, GPU_TILES_WIDE._replace(bm=64),
                GPU_TILES_WIDE._replace(bn=128, bk=4), TileConfig(64, 64, 8, 16, 16, "blocked"),
                TileConfig(32, 32, 8, 8, 8))
_TILES_TEXT = ("a TileConfig with positive sizes, tm dividing bm, tn dividing bn, prefetch "
               "one of 'none', 'regs', 'double', 'layout', unroll and max_registers >= 0, "
               "reg_loops one of 'loopy', 'vector', 'lanes', 'device'")

#: a side of the output with at most this many elements is short (GPU)
GPU_FEW = 32
#: a side of at most this many outputs gets blocks this long (GPU; _medium_tiles)
GPU_MEDIUM = 64
#: long sides and reduced ranges that are multiples of this are a size class (GPU):
#: the tiles of every built-in configuration divide them, so nothing is padded
GPU_ALIGN = 128
#: reduced ranges that are multiples of this are a size class (GPU): the lanes kernels'
#: steps (skinny.LANES lanes times stream_unroll, 32 x 8) divide it
GPU_K_MOST = 512

gpu_tiled = Recipe(
    "gpu-tiled", _gpu_tiled, kind="contraction", version="9",
    params=(Param("tiles", TileConfig, GPU_TILES, "blocks for 4-byte (and smaller) types",
                  Space(_TILE_SEARCH, _tiles_ok, _TILES_TEXT)),
            Param("wide_tiles", TileConfig, GPU_TILES_WIDE, "blocks for 8-byte types",
                  Space(_WIDE_SEARCH, _tiles_ok, _TILES_TEXT)),
            Param("few", int, GPU_FEW, "a side of at most this many outputs is short: "
                  "in registers, the long side tiled", powers_of_two(1, 128, (8, 16, 32, 64))),
            Param("skinny", str, "lanes", "a short side's kernel: 'lanes' (split_lanes: the "
                  "reduced range split in a work-group) or 'tiles' (skinny_tiles)",
                  ("lanes", "tiles")),
            Param("skinny_group", int, 256, "work-items of a group when a side is short",
                  powers_of_two(16, 1024, (64, 128, 256))),
            Param("skinny_lanes", int, 8, "split_lanes: lanes of the reduced range (when "
                  "the long operand is contiguous along the long side)",
                  powers_of_two(1, 64, (4, 8, 16, 32))),
            Param("skinny_bk", int, 16, "skinny_tiles: reduced-range step",
                  powers_of_two(4, 64, (8, 16, 32))),
            # (8: a warp's lanes along a sum contiguous in memory, 8 x 4096 columns on an
            # H200, kept too few loads in flight with 4; probes/matmul_family.py)
            Param("skinny_unroll", int, 8, "split_lanes: a lane's terms unrolled (loads "
                  "in flight)", powers_of_two(1, 16, (4, 8, 16))),
            Param("skinny_stage", bool, True, "split_lanes: the short operand staged in "
                  "local memory a step of lanes at a time (skinny.stage_short_operand)",
                  Space((True,), lambda v: isinstance(v, bool), "True or False")),
            *skinny_mod.PARAMS,
            Param("medium", int, GPU_MEDIUM, "a side of more than few and at most this many "
                  "outputs: blocks of this many along it (0: the tiles as they are)",
                  Space((64,), lambda v: isinstance(v, int) and v >= 0
                        and (v == 0 or v & (v - 1) == 0), "0 or a power of two")),
            Param("split_k", int, 0, "pieces of the reduced range run by separate "
                  "work-groups, then summed (fuseloop.split_k; 0: by rule from the "
                  "device's compute units, 1: never; decided per evaluation, so "
                  "fl.tune, which times kernels, does not search it)",
                  int_range(0, 64, (0,))), *dmma_mod.PARAMS),
    valid=_tiles_fit,
    size_class=Derived(lambda v: make_size_class(
        v["few"], v["few"], GPU_ALIGN, medium=v["medium"],
        step=math.lcm(v["tiles"].bk, v["wide_tiles"].bk), k_most=GPU_K_MOST)))




# (the CPU recipe: its own module, names kept here)
from .contraction_cpu import (  # noqa: E402
    CPU_BLOCKS,
    CPU_FEW_ROWS,
    CPU_PANEL_ROWS,
    CPU_SHORT_COLS,
    CpuBlocks,
    blocked,
    cpu_blocked,
    cpu_shape,
)


def untiled(t_unit: lp.TranslationUnit, device: Device) -> lp.TranslationUnit:
    """One work-item per output, 16x16 work-groups, no tiles (a reference point)."""
    knl = t_unit.default_entrypoint
    if BATCH in knl.all_inames():
        t_unit = lp.tag_inames(t_unit, {BATCH: "g.2"})
    t_unit = lp.split_iname(t_unit, ROW, 16, outer_tag="g.1", inner_tag="l.1")
    return lp.split_iname(t_unit, COL, 16, outer_tag="g.0", inner_tag="l.0")


__all__ = ["CPU_BLOCKS", "CPU_FEW_ROWS", "CPU_PANEL_ROWS", "CPU_SHORT_COLS", "GPU_TILES",
           "GPU_TILES_PLAIN", "GPU_TILES_WIDE", "GPU_TILES_WIDE_V4", "CpuBlocks", "TileConfig",
           "blocked", "cpu_blocked", "cpu_shape", "gpu_tiled", "tiled", "untiled"]
