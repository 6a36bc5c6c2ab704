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
GPU_GROUP = 128


def _cpu_sparse_rows(t_unit: lp.TranslationUnit, device: Device, *,
                     rows: int) -> lp.TranslationUnit:
    """One work-item per block of ``rows`` consecutive rows (a CPU runtime runs each
    work-item as a loop on one core; neighbouring rows share cache lines of the
    matrix's arrays)."""
    flat = select.iname(t_unit, f"tag:{select.FLAT}")
    return lp.split_iname(t_unit, flat, rows, outer_tag="g.0")  # type: ignore[arg-type]


cpu_sparse_rows = Recipe(
    "cpu-sparse-rows", _cpu_sparse_rows, kind="sparse", version="1",
    params=(Param("rows", int, CPU_ROWS, "rows per work-item",
                  powers_of_two(1, 1 << 20, (256, 1024, 4096, 16384))),))


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
