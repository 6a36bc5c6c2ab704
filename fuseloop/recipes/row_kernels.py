"""What the reduction recipes (:mod:`.row_cpu`, :mod:`.row_gpu`) read off a lowered
reduction kernel: its loops by role, the reductions and their results, the lengths
its rows are known by, and the parameters of column-like reductions (see
:mod:`.rows` for the kernels' loops and access patterns)."""

from __future__ import annotations

from functools import lru_cache
from typing import Any

from .._lazy import lp
from ..expr.program import Program
from ..lower.kernel import ELEMENT_INAME, contiguous_rows
from . import select
from .core import Param, int_range, powers_of_two


def column_params(group: int, width: int, items: int) -> tuple[Param, ...]:
    """The parameters of column-like reductions (see the module docstring)."""
    return (Param("column_group", int, group, "work-items per group of a column-like "
                  "reduction (GPU)", powers_of_two(1, 1024, (64, 128, 256))),
            Param("column_width", int, width, "outputs per work-item of a column-like "
                  "reduction, walked together along the reduced axis",
                  int_range(1, 4096, (1, 64, 128, 256, 512))),
            Param("column_items", int, items, "work-items per compute unit a column-like "
                  "reduction should have; with fewer, its reduced axis is split (two stages)",
                  int_range(1, 1 << 16, (1, 2, 4, 256, 1024))))


def reduction_inames(knl: lp.LoopKernel) -> list[str]:
    return select.inames(knl, f"tag:{select.REDUCTION}")


def has_contiguous_rows(knl: lp.LoopKernel) -> bool:
    return select.has_iname(knl, f"tag:{select.ROW_CONTIGUOUS}")


def has_row_elements(knl: lp.LoopKernel) -> bool:
    return select.has_iname(knl, f"tag:{select.ROW_ELEMENT}")


def reductions_per_element(knl: lp.LoopKernel) -> bool:
    """Whether reductions sit in the loop over a row's elements: a column-like kernel
    whose rows are outer axes (or a split's pieces) and whose elements are the
    neighbouring outputs.  Otherwise its rows are the columns themselves
    (``x - x.mean(axis=0)``), each reduced once and used by all its elements."""
    return has_row_elements(knl) and any(
        isinstance(insn, lp.Assignment) and isinstance(insn.expression, lp.Reduction)
        and ELEMENT_INAME in insn.within_inames for insn in knl.instructions)


def reduction_temporaries(knl: lp.LoopKernel) -> list[str]:
    """Temporaries that hold a reduction's result."""
    out = []
    for insn in knl.instructions:
        if isinstance(insn, lp.Assignment) and isinstance(insn.expression, lp.Reduction):
            out.extend(insn.assignee_var_names())
    return out


def combiners(t_unit: lp.TranslationUnit) -> dict[str, Any]:
    """For each reduction's result: a function combining two partial values."""
    knl = t_unit.default_entrypoint
    out: dict[str, Any] = {}
    for insn in knl.instructions:
        if not (isinstance(insn, lp.Assignment) and isinstance(insn.expression, lp.Reduction)
                and insn.expression.operation.arg_count == 1):
            continue
        target = insn.assignee_var_names()[0]
        temp = knl.temporary_variables.get(target)
        if temp is None or temp.dtype is None:
            continue

        def combine(a: Any, b: Any, op: Any = insn.expression.operation,
                    dtype: Any = temp.dtype) -> Any:
            return op([dtype], a, b, t_unit.callables_table, t_unit.target)[0]

        out[target] = combine
    return out


@lru_cache(maxsize=1024)
def row_length_params(program: Program) -> tuple[int, ...]:
    """Parameter slots of the lengths of a rows kernel's per-row reductions."""
    if (program.contraction is not None or not program.has_reduce
            or not contiguous_rows(program)):
        return ()
    entries: tuple[Any, ...] = program.entries  # read by kind tag and position
    return tuple(sorted({e[7][1] for e in entries if e[0] == "reduce" and e[8] is None}))


@lru_cache(maxsize=1024)
def column_kernel(program: Program) -> bool:
    """Whether ``program`` is a column-like reductions kernel (``fuseloop_cols``)."""
    return (program.contraction is None and program.has_reduce
            and not contiguous_rows(program))


def per_row_on_each_item(t_unit: lp.TranslationUnit) -> lp.TranslationUnit:
    """Rows on the grid's second axis, their elements on the first: what is computed
    once per row outside the element loop (a row's own reduction beside those of its
    elements: ``d.T @ d`` of a centred ``d``) runs on every work-item of the row, as
    Loopy wants every instruction on all of the grid's axes."""
    return lp.add_inames_for_unused_hw_axes(t_unit)


from ..caches import register_function as _register_cache  # noqa: E402  (fuseloop/caches.py)

_register_cache("recipes.rows.row_length_params", row_length_params)
_register_cache("recipes.rows.column_kernel", column_kernel)
