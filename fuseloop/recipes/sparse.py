"""Built-in recipes for sparse matrix products (kind ``"sparse"``).

A kernel holding a sparse product (:class:`fuseloop.expr.nodes.SparseProduct`)
has one flat loop over its output rows (role tag ``fl_flat``) and, inside it, one
sequential loop per product over the row's entries (for CSR a loop whose bounds
are the row's ``indptr`` values; see :mod:`fuseloop.lower.kernel`).  The
recipes only distribute rows: the inner loop is short and data-dependent, so it
stays sequential within its row.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from .._lazy import lp
from . import select
from .core import Param, Recipe, powers_of_two

if TYPE_CHECKING:
    from ..runtime.devices import Device

CPU_ROWS = 1024
CPU_LANES = 8
GPU_GROUP = 128


def _cpu_sparse_rows(t_unit: lp.TranslationUnit, device: Device, *,
                     rows: int, lanes: int) -> lp.TranslationUnit:
    """One work-item per block of ``rows`` consecutive rows (a CPU runtime runs each
    work-item as a loop on one core; neighbouring rows share cache lines of the
    matrix's arrays).

    ELL products (fixed row width, entry ``k`` of neighbouring rows at neighbouring
    addresses) are computed ``lanes`` rows at a time: one accumulator per row, and
    for each entry ``k`` the ``lanes`` rows' values and columns are consecutive
    loads the compiler vectorises (Loopy's ``ilp``: the lanes innermost).  CSR rows
    have bounds of their own, so their entries stay one row at a time.
    """
    flat = select.iname(t_unit, f"tag:{select.FLAT}")
    if lanes == 1 or rows % lanes or _has_row_bounds(t_unit):
        return lp.split_iname(t_unit, flat, rows, outer_tag="g.0")  # type: ignore[arg-type]
    # full chunks (all but the last, a slab) need no bounds checks on their lanes
    t_unit = lp.split_iname(t_unit, flat, rows, outer_tag="g.0",  # type: ignore[arg-type]
                            slabs=(0, 1))
    t_unit = lp.split_iname(t_unit, f"{flat}_inner", lanes, inner_tag="ilp.seq")
    # Loopy schedules ilp loops with its older scheduler and warns: expected (as in
    # row_cpu._accumulators), not shown to users
    knl = t_unit.default_entrypoint
    return t_unit.with_kernel(knl.copy(
        silenced_warnings=[*knl.silenced_warnings, "v1_scheduler_fallback"]))


def _has_row_bounds(t_unit: lp.TranslationUnit) -> bool:
    """Whether a product's entry loop has bounds read per row (CSR's ``sp_lo``)."""
    return any(name.startswith("sp_lo") for name in t_unit.default_entrypoint.temporary_variables)


cpu_sparse_rows = Recipe(
    "cpu-sparse-rows", _cpu_sparse_rows, kind="sparse", version="2",
    params=(Param("rows", int, CPU_ROWS, "rows per work-item",
                  powers_of_two(1, 1 << 20, (256, 1024, 4096, 16384))),
            Param("lanes", int, CPU_LANES, "ELL rows computed side by side (1: one row "
                  "at a time)", powers_of_two(1, 64, (1, 4, 8, 16)))))


def _gpu_sparse_rows(t_unit: lp.TranslationUnit, device: Device, *,
                     group: int) -> lp.TranslationUnit:
    """One work-item per row, ``group`` rows per work-group: a warp's rows are
    neighbours, so their entries share cache lines of ``data`` and ``indices``
    (and, for ELL's column-major storage, each load is coalesced)."""
    flat = select.iname(t_unit, f"tag:{select.FLAT}")
    return lp.split_iname(t_unit, flat, group, outer_tag="g.0",  # type: ignore[arg-type]
                          inner_tag="l.0")


gpu_sparse_rows = Recipe(
    "gpu-sparse-rows", _gpu_sparse_rows, kind="sparse", version="1",
    params=(Param("group", int, GPU_GROUP, "rows (work-items) per work-group",
                  powers_of_two(32, 1024, (64, 128, 256, 512))),),
    valid=lambda v, device: v["group"] <= device.max_work_group_size)
