"""The CPU recipe for contraction kernels (``cpu-blocked``; see
:mod:`fuseloop.recipes.contraction` for the kernel it transforms).

A work-item computes a block of outputs, ``rm`` rows unrolled by ``rn`` columns, for
each ``k`` a loop over the block's columns (which the compiler vectorises) with the
rows unrolled inside, accumulating in a private array whose layout the recipe fixes
(:func:`~fuseloop.lower.contraction.explicit_accumulator`).  Column blocks are whole
and the last one is shifted back into range
(:func:`~fuseloop.lower.contraction.shifted_split`).  With few rows the block is
sized to registers from the operands' itemsize and walks a wide panel of columns in
steps of the reduced range (:func:`~fuseloop.lower.contraction.register_block`): each
row of ``Y`` is then read a wide run at a time, and the accumulators stay in
registers where a block as wide as the panel spilled.  Each output element is written
once (a shifted block skips the columns it shares with the block before it in the
epilogue and stores), which an epilogue reading the output, ``C += A @ B``, relies on;
rows are clamped (loop-invariant in ``k``).  On PoCL, local-memory tiles and fully
unrolled register tiles (scalar code, spilled accumulators) were several times slower
than this form: PoCL does not vectorise across work-items around a ``k`` loop, and
straight-line code was not vectorised either.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, NamedTuple

from .._lazy import lp
from ..lower.contraction import (
    BATCH,
    COL,
    RED,
    REDUCTION_ID,
    ROW,
    explicit_accumulator,
    extent_range,
    operand_itemsize,
    pad_to_tiles,
    register_block,
    shifted_split,
)
from .contraction import make_size_class
from .core import Derived, Param, Recipe, Space, int_range, powers_of_two
from .row_cpu import _wide_addresses

if TYPE_CHECKING:
    from ..runtime.devices import Device


class CpuBlocks(NamedTuple):
    """A work-item computes an ``rm x rn`` block of outputs; ``group`` of them share
    a work-group (stacked along the rows, they share the column panel of ``Y``); with
    ``panel``, a work-item's ``rm`` rows span ``panel`` columns, walked ``rn`` at a
    time for each ``step`` of the reduced range
    (:func:`~fuseloop.lower.contraction.register_block`)."""

    rm: int = 6  # rows of the register block (unrolled)
    rn: int = 16  # columns: a loop inside the k loop that the compiler vectorises
    group: int = 1
    panel: int = 0  # columns of a work-item when wider than rn (0: rn)
    step: int = 32  # the reduced range's step when walking a panel


CPU_BLOCKS = CpuBlocks()
#: at most this many rows are one panel of register blocks (CPU)
CPU_FEW_ROWS = 32
#: at most this many rows are one register block of a panel (cpu_shape)
CPU_BLOCK_ROWS = 8
#: bytes of a register block's accumulators (cpu_shape): 8 x 32 float32, 8 x 16 float64
#: (8 x 2048 @ 2048 x 2048 on a 2-core AVX-512 Xeon: 512 or 2048 bytes were slower)
CPU_REG_BYTES = 1024
#: at most this many rows are one work-group of blocks (CPU; 0: never).  Off by default:
#: it pays when Y outgrows the caches, which a size class cannot tell (64 x N @ N x N
#: float32 on a 2-core PoCL machine: N = 4096 235 -> 122 ms, N = 2048 20 -> 37 ms)
CPU_PANEL_ROWS = 0


#: columns of a work-item's panel when the rows are few (cpu_shape; 0: no panels): each
#: row of Y is read a wide run at a time, so its loads stream (a register block's
#: columns alone read a short run per row of Y, a new page every row)
CPU_SHORT_COLS = 256


def blocked(cfg: CpuBlocks):
    """The CPU recipe with block configuration ``cfg``, as a function (as
    ``cpu_blocked.with_params(blocks=cfg)``, but without its size classes: the
    extents are unknown, so column blocks are padded rather than shifted)."""

    def recipe(t_unit: lp.TranslationUnit, device: Device) -> lp.TranslationUnit:
        return _cpu_blocked(t_unit, device, blocks=cfg, few_rows=CPU_FEW_ROWS)

    recipe.__name__ = f"cpu_blocked_{cfg.rm}x{cfg.rn}_g{cfg.group}"
    return recipe


def _cpu_blocks(t_unit: lp.TranslationUnit, cfg: CpuBlocks,
                shift: bool = True) -> lp.TranslationUnit:
    """``cfg``'s blocks; ``shift``: at least ``cfg.rn`` columns are known, so the last
    column block is shifted back into range (else the columns are padded)."""
    # 64-bit loops (as the rows recipe's): with 32-bit ones an address ``p0 * row + k +
    # p1`` (p1 a view's offset) is an int sum widened at each step, and the k loop of
    # (2048, 2048) @ (2048, 8) took about twice the CPU time
    t_unit = _wide_addresses(t_unit)
    knl = t_unit.default_entrypoint
    width = cfg.panel or cfg.rn
    t_unit = pad_to_tiles(t_unit, {ROW: cfg.rm * cfg.group} | ({} if shift else {COL: width}))
    if shift:
        # whole column blocks, the last one shifted back into range: the loads of
        # a block's columns are contiguous with no clamping, so they vectorise
        t_unit = shifted_split(t_unit, COL, width, f"{COL}_blk", f"{COL}_in")
    else:
        t_unit = lp.split_iname(t_unit, COL, width, outer_iname=f"{COL}_blk",
                                inner_iname=f"{COL}_in")
    if BATCH in knl.all_inames():
        t_unit = lp.tag_inames(t_unit, {BATCH: "g.2"})
    t_unit = lp.split_iname(t_unit, ROW, cfg.rm, outer_tag="g.1" if cfg.group == 1 else None,
                            inner_tag="unr", outer_iname=f"{ROW}_blk", inner_iname=f"{ROW}_in")
    if cfg.group > 1:
        t_unit = lp.split_iname(t_unit, f"{ROW}_blk", cfg.group, outer_tag="g.1",
                                inner_tag="l.0")
    t_unit = lp.tag_inames(t_unit, {f"{COL}_blk": "g.0"})
    t_unit = explicit_accumulator(t_unit, [(f"{ROW}_in", cfg.rm), (f"{COL}_in", width)])
    # zeroing the block and the epilogue get loops of their own, so that the
    # update can nest k outside the block's loops: for k, for column, rows unrolled
    inner = [f"{ROW}_in", f"{COL}_in"]
    t_unit = lp.duplicate_inames(t_unit, inner, within=f"id:{REDUCTION_ID}_init",
                                 new_inames=[f"{ROW}_z", f"{COL}_z"], tags={f"{ROW}_in": "unr"})
    t_unit = lp.duplicate_inames(t_unit, inner, within=f"not id:{REDUCTION_ID}_update",
                                 new_inames=[f"{ROW}_e", f"{COL}_e"], tags={f"{ROW}_in": "unr"})
    if cfg.panel:
        return register_block(t_unit, (f"{ROW}_in", cfg.rm), (f"{COL}_in", width), cfg.rn,
                              cfg.step)
    return lp.prioritize_loops(t_unit, f"{RED},{COL}_in,{ROW}_in")


def cpu_shape(cfg: CpuBlocks, rows: tuple[int, int | None], cols: tuple[int, int | None],
              few_rows: int, panel_rows: int = 0, short_cols: int = 0, itemsize: int = 4,
              reg_bytes: int = CPU_REG_BYTES) -> CpuBlocks:
    """The rule's blocks for the output's extents (``(least, greatest)`` along ``m`` and
    ``n``, see :func:`~fuseloop.lower.contraction.extent_range`) and the operands'
    ``itemsize``.

    At most ``few_rows`` rows are split evenly into register blocks of at most
    :data:`CPU_BLOCK_ROWS` rows (no padded rows: ``x @ A`` has one), each as many
    columns wide as ``reg_bytes`` of accumulators hold (a power of two); with at least
    ``short_cols`` columns, a work-item's block (of :data:`CPU_BLOCK_ROWS` rows where
    the rows are more) walks a panel of ``short_cols`` columns: each row of ``Y`` is
    read a wide run at a time (streamed) and stays cached for the panel's blocks.  At
    most ``panel_rows`` rows are one work-group of blocks, which shares each column
    panel of ``Y``.  Fewer columns than a block's
    get the largest power of two that fits, since the column blocks must be whole
    (:func:`~fuseloop.lower.contraction.shifted_split`).
    """
    rm, rn, group, panel, step = cfg
    few = rows[1] is not None and rows[1] <= few_rows
    if few:
        blocks = -(-rows[1] // CPU_BLOCK_ROWS)  # type: ignore[operator]
        rm, group = -(-rows[1] // blocks), 1  # type: ignore[operator]
    elif rows[1] is not None and rows[1] <= panel_rows:
        group = -(-rows[1] // rm)
    wide = bool(short_cols) and cols[0] >= short_cols and group == 1
    if few or wide:
        rm = rm if few else CPU_BLOCK_ROWS
        rn = 1 << (min(cols[0], max(4, reg_bytes // (rm * itemsize))).bit_length() - 1)
        if wide:
            rn = min(rn, short_cols)
            panel = short_cols if short_cols > rn else 0
    if cols[0] < rn and cols[1] is not None:
        rn = 1 << (cols[0].bit_length() - 1)
    return CpuBlocks(rm, rn, group, panel, step)


def _cpu_blocked(t_unit: lp.TranslationUnit, device: Device, *, blocks: CpuBlocks,
                 few_rows: int, panel_rows: int = 0, short_cols: int = 0) -> lp.TranslationUnit:
    knl = t_unit.default_entrypoint
    cols = extent_range(knl, COL)
    cfg = cpu_shape(blocks, extent_range(knl, ROW), cols, few_rows, panel_rows, short_cols,
                    operand_itemsize(knl))
    if cfg.group > device.max_work_group_size:
        cfg = cfg._replace(group=blocks.group)
    return _cpu_blocks(t_unit, cfg, shift=cols[0] >= (cfg.panel or cfg.rn))


def _blocks_ok(cfg: object) -> bool:
    return isinstance(cfg, CpuBlocks) and all(isinstance(n, int) and n > 0 for n in cfg[:3]) \
        and cfg.panel >= 0 and cfg.step > 0


cpu_blocked = Recipe(
    "cpu-blocked", _cpu_blocked, kind="contraction", version="5",
    params=(Param("blocks", CpuBlocks, CPU_BLOCKS, "the register block of a work-item",
                  Space((CPU_BLOCKS, CpuBlocks(4, 16), CpuBlocks(8, 8), CpuBlocks(4, 32),
                         CpuBlocks(8, 16), CpuBlocks(6, 16, 8), CpuBlocks(4, 8)),
                        _blocks_ok, "a CpuBlocks of positive sizes (panel >= 0)")),
            Param("few_rows", int, CPU_FEW_ROWS, "at most this many rows are one block (cpu_shape)",
                  powers_of_two(1, 64, (8, 16, 32))),
            Param("panel_rows", int, CPU_PANEL_ROWS, "at most this many rows are one "
                  "work-group of blocks sharing Y's column panels (cpu_shape; 0: never)",
                  int_range(0, 256, (0, 32, 64, 128))),
            Param("short_cols", int, CPU_SHORT_COLS, "columns of a block of at most few_rows "
                  "rows, where there are that many (cpu_shape; 0: blocks.rn)",
                  int_range(0, 4096, (0, 64, 256, 1024)))),
    valid=lambda v, device: v["blocks"].group <= device.max_work_group_size,
    size_class=Derived(lambda v: make_size_class(max(v["few_rows"], v["panel_rows"]),
                                                 v["blocks"].rn - 1, wide=v["short_cols"])))
