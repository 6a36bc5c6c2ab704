"""The CPU recipe for contraction kernels (``cpu-blocked``), described in
:mod:`fuseloop.recipes.contraction` (re-exported there)."""

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
    pad_to_tiles,
    shifted_split,
)
from .contraction import make_size_class
from .core import Derived, Param, Recipe, Space, int_range, powers_of_two

if TYPE_CHECKING:
    from ..runtime.devices import Device


class CpuBlocks(NamedTuple):
    """A work-item computes an ``rm x rn`` block of outputs; ``group`` of them share
    a work-group (stacked along the rows, they share the column panel of ``Y``)."""

    rm: int = 6  # rows of the register block (unrolled)
    rn: int = 16  # columns: a loop inside the k loop that the compiler vectorises
    group: int = 1


CPU_BLOCKS = CpuBlocks()
#: at most this many rows are one block (CPU)
CPU_FEW_ROWS = 8
#: at most this many rows are one work-group of blocks (CPU; 0: never).  Off by default:
#: it pays when Y outgrows the caches, which a size class cannot tell (64 x N @ N x N
#: float32 on a 2-core PoCL machine: N = 4096 235 -> 122 ms, N = 2048 20 -> 37 ms)
CPU_PANEL_ROWS = 0


#: columns of a block when the rows are few (cpu_shape; 0: cfg.rn): a wide panel of
#: each row of Y per work-item, so its loads stream (x @ A float32, 4096, 2-core PoCL:
#: 16 columns 65-69 ms, 256 37-44 ms, 1024 32 ms; numpy 28-36 ms)
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
    knl = t_unit.default_entrypoint
    t_unit = pad_to_tiles(t_unit, {ROW: cfg.rm * cfg.group} | ({} if shift else {COL: cfg.rn}))
    if shift:
        # whole column blocks, the last one shifted back into range: the loads of
        # a block's columns are contiguous with no clamping, so they vectorise
        t_unit = shifted_split(t_unit, COL, cfg.rn, f"{COL}_blk", f"{COL}_in")
    else:
        t_unit = lp.split_iname(t_unit, COL, cfg.rn, outer_iname=f"{COL}_blk",
                                inner_iname=f"{COL}_in")
    if BATCH in knl.all_inames():
        t_unit = lp.tag_inames(t_unit, {BATCH: "g.2"})
    t_unit = lp.split_iname(t_unit, ROW, cfg.rm, outer_tag="g.1" if cfg.group == 1 else None,
                            inner_tag="unr", outer_iname=f"{ROW}_blk", inner_iname=f"{ROW}_in")
    if cfg.group > 1:
        t_unit = lp.split_iname(t_unit, f"{ROW}_blk", cfg.group, outer_tag="g.1",
                                inner_tag="l.0")
    t_unit = lp.tag_inames(t_unit, {f"{COL}_blk": "g.0"})
    t_unit = explicit_accumulator(t_unit, [(f"{ROW}_in", cfg.rm), (f"{COL}_in", cfg.rn)])
    # zeroing the block and the epilogue get loops of their own, so that the
    # update can nest k outside the block's loops: for k, for column, rows unrolled
    inner = [f"{ROW}_in", f"{COL}_in"]
    t_unit = lp.duplicate_inames(t_unit, inner, within=f"id:{REDUCTION_ID}_init",
                                 new_inames=[f"{ROW}_z", f"{COL}_z"], tags={f"{ROW}_in": "unr"})
    t_unit = lp.duplicate_inames(t_unit, inner, within=f"not id:{REDUCTION_ID}_update",
                                 new_inames=[f"{ROW}_e", f"{COL}_e"], tags={f"{ROW}_in": "unr"})
    return lp.prioritize_loops(t_unit, f"{RED},{COL}_in,{ROW}_in")


def cpu_shape(cfg: CpuBlocks, rows: tuple[int, int | None], cols: tuple[int, int | None],
              few_rows: int, panel_rows: int = 0, short_cols: int = 0) -> CpuBlocks:
    """The rule's blocks for the output's extents (``(least, greatest)`` along ``m`` and
    ``n``, see :func:`~fuseloop.lower.contraction.extent_range`).

    At most ``few_rows`` rows are one block (no padded rows: ``x @ A`` has one); at
    most ``panel_rows`` rows are one work-group of blocks, which shares each column
    panel of ``Y`` (read once from memory, not once per block of rows); fewer
    columns than ``cfg.rn`` get the largest power of two that fits, since the
    column blocks must be whole (:func:`~fuseloop.lower.contraction.shifted_split`).
    One block of few rows spans ``short_cols`` columns when there are that many:
    such a product reads each row of ``Y`` once, and a row's wide run streams
    where ``cfg.rn`` columns make one short read per row (a new page every row).
    """
    rm, rn, group = cfg
    if rows[1] is not None and rows[1] <= few_rows:
        rm, group = rows[1], 1
        if short_cols and cols[0] >= short_cols:
            rn = short_cols
    elif rows[1] is not None and rows[1] <= panel_rows:
        group = -(-rows[1] // rm)
    if cols[0] < rn and cols[1] is not None:
        rn = 1 << (cols[0].bit_length() - 1)
    return CpuBlocks(rm, rn, group)


def _cpu_blocked(t_unit: lp.TranslationUnit, device: Device, *, blocks: CpuBlocks,
                 few_rows: int, panel_rows: int = 0, short_cols: int = 0) -> lp.TranslationUnit:
    knl = t_unit.default_entrypoint
    cols = extent_range(knl, COL)
    cfg = cpu_shape(blocks, extent_range(knl, ROW), cols, few_rows, panel_rows, short_cols)
    if cfg.group > device.max_work_group_size:
        cfg = cfg._replace(group=blocks.group)
    return _cpu_blocks(t_unit, cfg, shift=cols[0] >= cfg.rn)


def _blocks_ok(cfg: object) -> bool:
    return isinstance(cfg, CpuBlocks) and all(isinstance(n, int) and n > 0 for n in cfg)


cpu_blocked = Recipe(
    "cpu-blocked", _cpu_blocked, kind="contraction", version="4",
    params=(Param("blocks", CpuBlocks, CPU_BLOCKS, "the register block of a work-item",
                  Space((CPU_BLOCKS, CpuBlocks(4, 16), CpuBlocks(8, 8), CpuBlocks(4, 32),
                         CpuBlocks(8, 16), CpuBlocks(6, 16, 8), CpuBlocks(4, 8)),
                        _blocks_ok, "a CpuBlocks of positive sizes")),
            Param("few_rows", int, CPU_FEW_ROWS, "at most this many rows are one block (cpu_shape)",
                  powers_of_two(1, 16, (4, 8, 16))),
            Param("panel_rows", int, CPU_PANEL_ROWS, "at most this many rows are one "
                  "work-group of blocks sharing Y's column panels (cpu_shape; 0: never)",
                  int_range(0, 256, (0, 32, 64, 128))),
            Param("short_cols", int, CPU_SHORT_COLS, "columns of a block of at most few_rows "
                  "rows, where there are that many (cpu_shape; 0: blocks.rn)",
                  int_range(0, 4096, (0, 64, 256, 1024)))),
    valid=lambda v, device: v["blocks"].group <= device.max_work_group_size,
    size_class=Derived(lambda v: make_size_class(max(v["few_rows"], v["panel_rows"]),
                                                 v["blocks"].rn - 1, wide=v["short_cols"])))
