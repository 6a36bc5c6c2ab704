"""Built-in recipes for kernels with reductions (kind ``"reduction"``).

A reduction kernel loops over output rows with ``i`` (role tag ``fl_row``;
and, when reductions are computed once per row and then used by every element
of it, over the row's elements with ``e``, tag ``fl_row_element``); reduction
``rid`` loops over ``j<rid>`` (tag ``fl_reduction``).  The lowering tags the row
loop with the access pattern it found (and names the kernel after it):

* ``fl_row_contiguous`` (``fuseloop_rows``): each row's reduced elements are contiguous (row sums,
  softmax, the pieces of a two-stage full reduction).  On GPUs one work-group
  takes a row: its work-items stride through the row together (coalesced)
  and combine their partial results in local memory.
* ``fl_row_strided`` (``fuseloop_cols``): the reduced elements are far apart but neighbouring rows
  are neighbours in memory (column sums, middle-axis reductions): neighbouring
  work-items take neighbouring outputs (on GPUs one output each, so their reads
  coalesce; on CPUs a block of ``column_width`` outputs, whose reductions walk
  the reduced axis together, a contiguous block of each row at a time, so the
  loop over the block vectorises).  When there are too few outputs to give
  every compute unit ``column_items`` work-items, evaluation splits the reduced
  axis across work-groups: a first stage of partial results over pieces of the
  rows, then a column reduction over the pieces (``splits.two_stage_split``).

On CPUs a work-item takes whole contiguous rows and loops through them sequentially.
"""

from __future__ import annotations

from collections.abc import Sequence
from functools import lru_cache
from typing import TYPE_CHECKING, Any

from .._lazy import LazyModule, isl, lp, prim
from ..expr.program import Program
from ..lower.kernel import ELEMENT_INAME, FLAT_INAME, contiguous_rows
from . import row_lanes, row_layout, select, transforms
from .core import Derived, Param, Recipe, Space, int_range, powers_of_two
from .cpu_vector import (
    LANES,
    reduction_vector_calls,
    through_double_width,
    vectorise_loop_calls,
    vectorise_reduction_calls,
)
from .elementwise import POCL
from .row_layout import LAYOUTS, Layout, RowRule

if TYPE_CHECKING:
    from ..runtime.devices import Device
    from . import row_cache
    from .core import SizeClassFunction
else:  # (GPU row caching: Loopy's mappers, loaded on a cache miss only)
    row_cache = LazyModule(".row_cache", __package__)

GPU_ROW_GROUP = 512
GPU_ROW_CACHE_ITEMS = 16
GPU_COL_GROUP = 128
GPU_REDUCTION_LANES = 32
CPU_ROWS_PER_ITEM = 8
CPU_ACCUMULATORS = 8
# max/min over contiguous rows (argmax's passes too): 4096 x 4096 float32 row max
# took 1.6-2.0 ms with 32 accumulators, 2.2-3.1 with 16 and 6.7-7.3 with 8 (PoCL
# 3.0, 2 cores; numpy 5 ms)
CPU_SELECT_ACCUMULATORS = 32
# ... but on short rows the accumulators' set-up and combination outweigh the walk:
# 2^20 float32 as rows of 32 / 64 / 128 / 256 elements, argmax took 6.0 / 3.3 / 2.4 /
# 1.2 ms of CPU time with 32, 1.6 / 1.4 / 1.2 / 1.0 with 4 or 8 (1024: a tie).  So rows
# known (a size class) to be at most CPU_SHORT_ROWS[k] long get a max/min accumulator
# per CPU_SELECT_STEPS elements, at least CPU_SELECT_MIN.
CPU_SHORT_ROWS = (64, 128, 256, 512)
CPU_SELECT_STEPS = 32
# a work-item's elements when short rows are grouped (as an elementwise chunk)
CPU_ROW_ITEM_ELEMENTS = 4096
CPU_SELECT_MIN = 4
# Column-like reductions (see the module docstring).  CPU: 256 and 1024 outputs per
# work-item took 0.3-0.5 of the time of 32 or 64 (unrolled) on 4096 x 4096 and
# 1024 x 16384 float32 sums and variances (PoCL 3.0, 2 cores)
CPU_COLUMN_WIDTH = 256
CPU_COLUMN_ITEMS = 2
GPU_COLUMN_ITEMS = 1024
# The contiguous-rows layout rule (see fuseloop.recipes.row_layout)
GPU_SHORT_MAX = 32
GPU_SLICE_MAX = 1024
GPU_SLICE_ROWS = 1024
GPU_ROW_ITEMS = 4
GPU_BLOCK = 256


def _column_params(group: int, width: int, items: int) -> tuple[Param, ...]:
    """The parameters of column-like reductions (see the module docstring)."""
    return (Param("column_group", int, group, "work-items per group of a column-like "
                  "reduction (GPU)", powers_of_two(1, 1024, (64, 128, 256))),
            Param("column_width", int, width, "outputs per work-item of a column-like "
                  "reduction, walked together along the reduced axis",
                  int_range(1, 4096, (1, 64, 128, 256, 512))),
            Param("column_items", int, items, "work-items per compute unit a column-like "
                  "reduction should have; with fewer, its reduced axis is split (two stages)",
                  int_range(1, 1 << 16, (1, 2, 4, 256, 1024))))


def _reduction_inames(knl: lp.LoopKernel) -> list[str]:
    return select.inames(knl, f"tag:{select.REDUCTION}")


def _contiguous_rows(knl: lp.LoopKernel) -> bool:
    return select.has_iname(knl, f"tag:{select.ROW_CONTIGUOUS}")


def _has_row_elements(knl: lp.LoopKernel) -> bool:
    return select.has_iname(knl, f"tag:{select.ROW_ELEMENT}")


def _reductions_per_element(knl: lp.LoopKernel) -> bool:
    """Whether reductions sit in the loop over a row's elements: a column-like kernel
    whose rows are outer axes (or a split's pieces) and whose elements are the
    neighbouring outputs.  Otherwise its rows are the columns themselves
    (``x - x.mean(axis=0)``), each reduced once and used by all its elements."""
    return _has_row_elements(knl) and any(
        isinstance(insn, lp.Assignment) and isinstance(insn.expression, lp.Reduction)
        and ELEMENT_INAME in insn.within_inames for insn in knl.instructions)


def _reduction_temporaries(knl: lp.LoopKernel) -> list[str]:
    """Temporaries that hold a reduction's result."""
    out = []
    for insn in knl.instructions:
        if isinstance(insn, lp.Assignment) and isinstance(insn.expression, lp.Reduction):
            out.extend(insn.assignee_var_names())
    return out


def _combiners(t_unit: lp.TranslationUnit) -> dict[str, Any]:
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
def _row_length_params(program: Program) -> tuple[int, ...]:
    """Parameter slots of the lengths of a rows kernel's per-row reductions."""
    if (program.contraction is not None or not program.has_reduce
            or not contiguous_rows(program)):
        return ()
    entries: tuple[Any, ...] = program.entries  # read by kind tag and position
    return tuple(sorted({e[7][1] for e in entries if e[0] == "reduce" and e[8] is None}))


@lru_cache(maxsize=1024)
def _column_kernel(program: Program) -> bool:
    """Whether ``program`` is a column-like reductions kernel (``fuseloop_cols``)."""
    return (program.contraction is None and program.has_reduce
            and not contiguous_rows(program))


def make_row_size_class(group: int, cache_items: int, rule: RowRule | None = None
                        ) -> SizeClassFunction:
    """Size classes for rows kernels: what the layout rule needs stated, and the
    number of ``group``-wide pieces per row.

    In the ``group`` layout (:mod:`fuseloop.recipes.row_layout`) a row of
    ``p <= group * cache_items`` elements is in class ``c = ceil(p / group)``,
    ``c`` rounded up to a power of two ``b``: ``p = b * group`` (every work-item has
    exactly ``b`` elements: no bounds test at all) and ``b/2 * group < p < b * group``
    (the pieces past ``b/2`` tested).  Longer rows have no class: one kernel serves
    them all.  So a structure has at most ``2 * log2(cache_items) + 2`` kernels
    besides the general one; the ``slice`` layout adds as many per slice width (and
    ``N >= slice_rows``), the ``short`` layout one per length up to ``short_exact``
    and one for the rest up to ``short_max``.
    The element loop ``NE`` is noted as equal to the row when it is, so the
    row cache serves it without a run-time test.
    """
    rule = rule or RowRule(group, 0, 0, 1 << 62, 1)

    def row_size_class(program: Program, params: Sequence[int], n_rows: int,
                       n_elem: int) -> str:
        element_loop = program.row_dims is not None
        if _column_kernel(program):
            return row_layout.column_size_class(rule, n_rows, n_elem, element_loop)
        return row_layout.row_size_class(rule, cache_items, _row_length_params(program),
                                         params, n_rows, n_elem, element_loop)

    return row_size_class


def make_gpu_rows(group: int = GPU_ROW_GROUP, cache_items: int = GPU_ROW_CACHE_ITEMS,
                  lanes: int = GPU_REDUCTION_LANES) -> Recipe:
    """The ``gpu-rows`` recipe with ``group`` work-items per contiguous row
    (``gpu_rows.with_params(group=..., cache_items=..., lanes=...)``)."""
    return gpu_rows.with_params(group=group, cache_items=cache_items, lanes=lanes)


def _gpu_rows(t_unit: lp.TranslationUnit, device: Device, *, group: int, cache_items: int,
              lanes: int, layout: str, short_max: int, short_exact: int,
              short_outputs: int, slice_max: int,
              slice_rows: int, row_items: int, block: int, column_group: int,
              column_width: int, column_items: int, column_slices: int
              ) -> lp.TranslationUnit:
    """Contiguous rows laid out by the rule of :mod:`fuseloop.recipes.row_layout`
    (``short``: a work-item per row; ``slice``: a slice of a group per row;
    ``group``: a group of ``group`` per row); otherwise a work-item per output,
    ``column_group`` to a group, fewer outputs by ``column_slices`` slices of the
    reduced axis (``column_width`` and ``column_items`` are read by evaluation).

    A row read by several passes is kept in registers, ``cache_items``
    elements per work-item (0: never; see :mod:`fuseloop.recipes.row_cache`).
    The work-items' partial results are combined through ``lanes`` values
    (see :func:`transforms.combine_in_group`; 0: Loopy's tree).
    """
    knl = t_unit.default_entrypoint
    if not _contiguous_rows(knl):
        return _gpu_columns(t_unit, column_group, group, column_slices,
                            device.max_work_group_size)
    rule = RowRule(group, short_max, slice_max, slice_rows, row_items, layout,
                   short_exact=short_exact)
    bounds = [row_cache.row_bound(knl, j) for j in _reduction_inames(knl)]
    chosen = row_layout.choose(knl, rule, block, bounds, row_cache.implied)
    if chosen.kind == "short":
        return _gpu_short_rows(t_unit, chosen, short_outputs)
    return _gpu_contiguous_rows(t_unit, chosen.width, cache_items, lanes, chosen.rows)


def _gpu_columns(t_unit: lp.TranslationUnit, group: int, wide: int, slices: int,
                 most: int) -> lp.TranslationUnit:
    """A work-item per output of a column-like reduction, neighbouring work-items on
    neighbouring outputs (coalesced reads), the reduced axis walked.

    Where there are fewer outputs than ``group`` along the group's axis (the size
    class states ``N <= w``, or ``NE <= w`` where the reductions sit in a row's
    element loop: a split's first stage, a middle axis, whose rows are pieces or
    outer axes and whose elements are the outputs), a work-group is ``w`` outputs
    by ``slices`` slices of the reduced axis (:func:`_columns_split_in_group`;
    ``slices`` 0, or no element loop: ``max(group, wide) / w``; at most ``most``), so a narrow
    reduction (batch-norm statistics: 64 outputs) has many work-items on each row's
    range, and a split of it needs fewer pieces (fewer partials to combine); a
    row's own reduction beside its elements' keeps ``w`` by ``group / w`` rows.
    Reductions over the same range that do not read each other's results walk it
    together (:func:`_walk_together`), reading each row once.
    """
    knl = t_unit.default_entrypoint
    t_unit = _walk_together(t_unit)
    per_element = _reductions_per_element(knl)
    outputs, bound = (ELEMENT_INAME, "NE") if per_element else (FLAT_INAME, "N")
    width = next((w for w in (1 << k for k in range(5, 11))
                  if w < group and row_cache.implied(knl, f"{bound} <= {w}")), group)
    if width < group and not (per_element and _row_reductions(knl)):
        # (``slices`` is for rows of outputs; a kernel of few outputs in all, a split's
        # combine among them, takes the rule's)
        across = row_layout.column_slices(width, max(group, wide),
                                          slices if per_element else 0, most)
        return _columns_split_in_group(t_unit, width, across, outputs, bound)
    if not per_element:
        return lp.split_iname(t_unit, FLAT_INAME, group, outer_tag="g.0", inner_tag="l.0")
    t_unit = lp.split_iname(t_unit, ELEMENT_INAME, width, outer_tag="g.0", inner_tag="l.0")
    if width == group:
        return _per_row_on_each_item(lp.tag_inames(t_unit, {FLAT_INAME: "g.1"}))
    # (a row's own reduction beside its elements': rows by group / w, not slices)
    return _per_row_on_each_item(lp.split_iname(t_unit, FLAT_INAME, group // width,
                                                outer_tag="g.1", inner_tag="l.1"))


def _row_reductions(knl: lp.LoopKernel) -> bool:
    """Whether a reduction runs once per row, outside the row's element loop (a
    centred column's own mean beside the products of ``d.T @ d``)."""
    return any(isinstance(insn, lp.Assignment) and isinstance(insn.expression, lp.Reduction)
               and ELEMENT_INAME not in insn.within_inames for insn in knl.instructions)


def _per_row_on_each_item(t_unit: lp.TranslationUnit) -> lp.TranslationUnit:
    """Rows on the grid's second axis, their elements on the first: what is computed
    once per row outside the element loop (a row's own reduction beside those of its
    elements: ``d.T @ d`` of a centred ``d``) runs on every work-item of the row, as
    Loopy wants every instruction on all of the grid's axes."""
    return lp.add_inames_for_unused_hw_axes(t_unit)


def _columns_split_in_group(t_unit: lp.TranslationUnit, width: int, slices: int,
                            outputs: str = FLAT_INAME, bound: str = "N"
                            ) -> lp.TranslationUnit:
    """Few outputs (``bound <= width`` along the loop ``outputs``): a work-group of
    ``width`` outputs by ``slices`` slices of the reduced axis (neighbouring rows on
    neighbouring slices), the slices' partial results combined by Loopy's tree in
    local memory.  With an element loop (``outputs`` is ``e``) each row (a piece of
    a split, an outer axis) is a column of groups of its own."""
    knl = t_unit.default_entrypoint
    # the bound did its job (it chose this layout); Loopy would size the local axis
    # by it, which is not a constant, so the assumptions forget it
    assumptions = knl.assumptions
    n = assumptions.get_var_names(isl.dim_type.param).index(bound)
    knl = knl.copy(assumptions=assumptions.eliminate(isl.dim_type.param, n, 1))
    t_unit = t_unit.with_kernel(knl)
    t_unit = lp.split_iname(t_unit, outputs, width, outer_tag="g.0", inner_tag="l.0")
    if outputs == ELEMENT_INAME:
        t_unit = lp.tag_inames(t_unit, {FLAT_INAME: "g.1"})
    js = _reduction_inames(knl)
    for j in js:
        t_unit = lp.split_iname(t_unit, j, slices, inner_tag="l.1")
        t_unit = lp.split_reduction_outward(t_unit, f"{j}_inner")
    # Loopy's tree leaves each result in one work-item: results go to local memory,
    # a slot per output, behind a barrier for the slices that read them
    results = _reduction_temporaries(knl)
    t_unit = transforms.allow_single_writer(t_unit, [f"calc_{name}" for name in results])
    # the rest runs on every slice (a loop of its own: a slice past a short axis's
    # end still takes part), and only the first slice stores
    t_unit = transforms.on_every_work_item(t_unit, "w_slice", slices, "l.1",
                                           {f"{j}_inner" for j in js})
    for name in results:
        t_unit = lp.set_temporary_address_space(t_unit, name, "local")
    t_unit = t_unit.with_kernel(lp.privatize_temporaries_with_inames(
        t_unit.default_entrypoint, {f"{outputs}_inner"}, only_var_names=set(results)))
    return transforms.publish(t_unit, results)


def _walk_together(t_unit: lp.TranslationUnit) -> lp.TranslationUnit:
    """Reductions over equal ranges ``0 <= j < p`` share one loop when neither reads
    the other's result (a column's sum and sum of squares, the three components of
    n-body accelerations, ``fl.compute(x.min(), x.max())``): Loopy's rename of one
    reduction iname onto the other (equal domains), so each row is read, and the terms
    the reductions share computed, once."""
    knl = t_unit.default_entrypoint
    reductions = {insn.expression.inames[0]: insn for insn in knl.instructions
                  if isinstance(insn, lp.Assignment)
                  and isinstance(insn.expression, lp.Reduction)
                  and len(insn.expression.inames) == 1}
    kept: dict[str, list[str]] = {}  # bound -> the loops kept for it
    for j in _reduction_inames(knl):
        insn, bound = reductions.get(j), row_cache.row_bound(knl, j)
        if insn is None or bound is None:
            continue
        for other in kept.setdefault(bound, []):
            first = reductions[other]
            if (first.within_inames == insn.within_inames
                    and not _reads_result(knl, _walkers(knl, j), _walkers(knl, other))
                    and not _reads_result(knl, _walkers(knl, other), _walkers(knl, j))):
                t_unit = lp.rename_iname(t_unit, j, other, existing_ok=True)
                knl = t_unit.default_entrypoint
                break
        else:
            kept[bound].append(j)
    return t_unit


def _walkers(knl: lp.LoopKernel, j: str) -> list[Any]:
    """The instructions that walk ``j``: its reduction and those in its loop."""
    return [insn for insn in knl.instructions if j in insn.within_inames or (
        isinstance(insn, lp.Assignment) and isinstance(insn.expression, lp.Reduction)
        and j in insn.expression.inames)]


def _reads_result(knl: lp.LoopKernel, readers: list[Any], writers: list[Any]) -> bool:
    """Whether one of ``readers`` reads what one of ``writers`` writes, directly or
    through other values."""
    by_var = knl.writer_map()
    wanted = {v for w in writers for v in w.assignee_var_names()}
    seen: set[str] = set()
    todo = [v for r in readers for v in r.read_dependency_names()]
    while todo:
        name = todo.pop()
        if name in wanted:
            return True
        if name in seen:
            continue
        seen.add(name)
        for w in by_var.get(name, ()):
            todo.extend(knl.id_to_insn[w].read_dependency_names())
    return False


def _gpu_short_rows(t_unit: lp.TranslationUnit, layout: Layout,
                    outputs: int) -> lp.TranslationUnit:
    """A work-item per row (``outputs`` rows each, neighbouring work-items taking
    neighbouring rows), each row walked sequentially: no local memory, no barrier.
    Rows of a constant length are walked by unrolled loops."""
    t_unit = _walk_together(t_unit)
    knl = t_unit.default_entrypoint
    if outputs > 1:
        t_unit = lp.split_iname(t_unit, FLAT_INAME, layout.rows * outputs, outer_tag="g.0")
        t_unit = lp.split_iname(t_unit, f"{FLAT_INAME}_inner", layout.rows, inner_tag="l.0",
                                outer_tag="unr")
    else:
        t_unit = lp.split_iname(t_unit, FLAT_INAME, layout.rows, outer_tag="g.0",
                                inner_tag="l.0")
    if layout.fixed:
        loops = _reduction_inames(knl)
        if _has_row_elements(knl) and row_cache.implied(
                knl, f"NE = {row_cache.row_bound(knl, loops[0])}"):
            loops.append(ELEMENT_INAME)
        t_unit = lp.tag_inames(t_unit, {j: "unr" for j in loops})
    return t_unit


def _gpu_contiguous_rows(t_unit: lp.TranslationUnit, group: int, cache_items: int,
                         lanes: int, rows_per_group: int = 1) -> lp.TranslationUnit:
    """``group`` work-items per row (the ``group`` and ``slice`` layouts of
    :func:`_gpu_rows`), ``rows_per_group`` rows to a work-group (its second axis)."""
    t_unit = _walk_together(t_unit)
    knl = t_unit.default_entrypoint
    if rows_per_group == 1:
        t_unit = lp.tag_inames(t_unit, {FLAT_INAME: "g.0"})
    rows = row_cache.plan(knl) if cache_items else []
    cached: set[str] = set().union(*(r.loops for r in rows))
    if rows:
        t_unit = row_cache.insert_placeholders(t_unit, rows)

    def split(t_unit: lp.TranslationUnit, loop: str) -> lp.TranslationUnit:
        t_unit = lp.split_iname(t_unit, loop, group, inner_tag="l.0")
        if loop in cached:  # the cached part of the row: an unrolled loop
            t_unit = lp.split_iname(t_unit, f"{loop}_outer", cache_items,
                                    inner_tag="unr")
            t_unit = lp.prioritize_loops(t_unit,
                                         f"{loop}_outer_outer,{loop}_outer_inner")
        return t_unit

    bounds = {j: row_cache.row_bound(knl, j) for j in _reduction_inames(knl)}
    peeled: set[str] = set()
    if rows:
        t_unit, peeled = row_cache.peel(t_unit, rows, group, cache_items,
                                        _combiners(t_unit))
    for j in bounds:
        if j in peeled:
            continue
        t_unit = split(t_unit, j)
        # each work-item first reduces its own strided elements, then the group
        t_unit = lp.split_reduction_outward(t_unit, f"{j}_inner")
    if _has_row_elements(knl) and ELEMENT_INAME not in peeled:
        t_unit = split(t_unit, ELEMENT_INAME)
    if rows:
        t_unit = row_cache.add_fills(t_unit, rows, group, cache_items)
    t_unit, shared = transforms.combine_in_group(
        t_unit, {f"{j}_inner": p for j, p in bounds.items() if p is not None}, group, lanes)
    # Loopy's tree: a row's reduced value is produced by one work-item and
    # read by all of them
    results = [name for name in _reduction_temporaries(knl) if name not in shared]
    for name in results:
        t_unit = lp.set_temporary_address_space(t_unit, name, "local")
    t_unit = _spread_row_work(t_unit, group)
    t_unit = transforms.publish(t_unit, results)
    # Loopy's tree writes the result from its last stage (one work-item): not a race
    t_unit = transforms.allow_single_writer(t_unit, [f"calc_{name}" for name in results])
    if rows_per_group > 1:
        t_unit = _rows_per_group(t_unit, rows_per_group)
    return t_unit


def _rows_per_group(t_unit: lp.TranslationUnit, rows: int) -> lp.TranslationUnit:
    """``rows`` rows to a work-group: the row loop split over the groups and their
    second axis, and every local temporary given a slot per row (its writers all
    run in the row loop, so Loopy's privatisation gives each row its own)."""
    t_unit = lp.split_iname(t_unit, FLAT_INAME, rows, outer_tag="g.0", inner_tag="l.1")
    knl = t_unit.default_entrypoint
    local = {name for name, tv in knl.temporary_variables.items()
             if tv.address_space == lp.AddressSpace.LOCAL}
    if not local:
        return t_unit
    t_unit = t_unit.with_kernel(lp.privatize_temporaries_with_inames(
        knl, {f"{FLAT_INAME}_inner"}, only_var_names=local))
    # (the row's slot is the last index: Fortran order keeps a row's partials
    # contiguous, so a warp's stores to them hit distinct banks)
    temps = t_unit.default_entrypoint.temporary_variables
    for name in sorted(local):
        shape = temps[name].shape
        if isinstance(shape, tuple) and len(shape) == 2:
            t_unit = lp.tag_array_axes(t_unit, name, "f,f")
    return t_unit


def _layout_params() -> tuple[Param, ...]:
    """The parameters of the contiguous-rows layout rule (:mod:`.row_layout`)."""
    return (Param("layout", str, "auto", "contiguous rows: 'short' (a work-item per row), "
                  "'slice' (a slice of a group per row), 'group' (a group per row), "
                  "'auto' (the rule)", LAYOUTS),
            Param("short_max", int, GPU_SHORT_MAX, "rows this short are walked by one "
                  "work-item each", int_range(0, 256, (8, 16, 32, 64))),
            Param("short_exact", int, 4, "short rows up to this long are a size class "
                  "each (walk unrolled); longer ones share a class",
                  int_range(0, 256, (0, 4, 8, 32))),
            Param("short_outputs", int, 1, "rows per work-item in the short layout",
                  int_range(1, 64, (1, 2, 4))),
            Param("slice_max", int, GPU_SLICE_MAX, "rows up to this long, when many, get a "
                  "slice of a group each", int_range(0, 1 << 16, (256, 512, 1024, 2048))),
            Param("slice_rows", int, GPU_SLICE_ROWS, "the rows the slice layout needs",
                  int_range(1, 1 << 30, (256, 1024, 4096))),
            Param("row_items", int, GPU_ROW_ITEMS, "elements per work-item the slice's "
                  "width is chosen for", powers_of_two(1, 64, (2, 4, 8, 16))),
            Param("block", int, GPU_BLOCK, "work-items per group in the short and slice "
                  "layouts", powers_of_two(32, 1024, (128, 256, 512))))


def _gpu_size_class(v: Any) -> SizeClassFunction:
    rule = RowRule(v["group"], v["short_max"], v["slice_max"], v["slice_rows"],
                   v["row_items"], v["layout"], v["column_group"], v["short_exact"])
    return make_row_size_class(v["group"], max(v["cache_items"], 1), rule)


gpu_rows = Recipe(
    "gpu-rows", _gpu_rows, kind="reduction", version="13",
    params=(Param("group", int, GPU_ROW_GROUP, "work-items per contiguous row (the group "
                  "layout; the most in the slice layout)",
                  powers_of_two(1, 1024, (64, 128, 256, 512, 1024))),
            Param("cache_items", int, GPU_ROW_CACHE_ITEMS,
                  "elements per work-item of a row kept in registers (0: none)",
                  int_range(0, 256, (0, 8, 16, 32))),
            Param("lanes", int, GPU_REDUCTION_LANES,
                  "values the partial results are combined through (0: Loopy's tree)",
                  Space((0, 16, 32, 64), lambda v: v == 0 or v in powers_of_two(1, 1024),
                        "0 or a power of two up to 1024")),
            *_layout_params(),
            *_column_params(GPU_COL_GROUP, 1, GPU_COLUMN_ITEMS),
            Param("column_slices", int, 0, "work-items along the reduced axis per output "
                  "of a column-like group whose rows (a split's pieces, outer axes) have "
                  "fewer outputs than column_group (0: as many as fill max(group, "
                  "column_group))",
                  int_range(0, 64, (0, 2, 4, 8, 16)))),
    valid=lambda v, device: (max(v["group"], v["block"]) <= device.max_work_group_size
                             and v["lanes"] <= v["group"]),
    size_class=Derived(_gpu_size_class))


def _spread_row_work(t_unit: lp.TranslationUnit, group: int) -> lp.TranslationUnit:
    """Run per-row instructions on the row's work-group.

    Work-items compute per-row private values redundantly; a per-row store to
    global or local memory is done by the first work-item only.
    """
    knl = t_unit.default_entrypoint
    local = {n for n in knl.all_inames()
             if any(isinstance(t, lp.kernel.data.LocalInameTag) for t in knl.iname_tags(n))}
    return transforms.on_every_work_item(t_unit, "w_row", group, "l.0", local)


def _cpu_columns(t_unit: lp.TranslationUnit, width: int) -> lp.TranslationUnit:
    """``width`` neighbouring outputs per work-item, their reductions walked together.

    The block's loop is an ILP loop: Loopy gives each reduction (and each value
    kept per output, like a column's mean) a private array over the block and
    puts the block loop innermost, inside each reduction's loop, so every row is
    read as a contiguous block (vectorised) instead of each output walking its
    own strided column.  The last, partial block is a slab of its own.  Where
    the reductions sit in a row's element loop (a split reduction's first stage,
    rows: pieces of the reduced range; a middle axis, rows: the outer axes) the
    blocks are of a row's elements, and the row is the grid's second axis; where
    the rows are columns (``x - x.mean(axis=0)``) the blocks are of rows, and the
    element loop (down the columns) runs inside each block, contiguous across it.
    """
    knl = t_unit.default_entrypoint
    row = select.iname(knl, f"tag:{select.ROW}")
    assert row is not None
    per_element = _reductions_per_element(knl)
    if per_element:
        t_unit = lp.tag_inames(t_unit, {row: "g.1"})
        row = ELEMENT_INAME
    t_unit = lp.split_iname(t_unit, row, width, outer_tag="g.0", inner_tag="ilp.seq",
                            slabs=(0, 1))
    if per_element:
        t_unit = _per_row_on_each_item(t_unit)
    knl = t_unit.default_entrypoint
    # (expected: the ILP loop needs Loopy's older scheduler, see _accumulators)
    return t_unit.with_kernel(knl.copy(silenced_warnings=[
        *knl.silenced_warnings, "v1_scheduler_fallback"]))


def _cpu_size_class(program: Program, params: Sequence[int], n_rows: int,
                    n_elem: int) -> str:
    """``p <= b`` for each row length ``p`` of a contiguous rows kernel, ``b`` the least
    of ``CPU_SHORT_ROWS`` holding it (no condition for longer rows)."""
    if _column_kernel(program):
        return ""
    conds = []
    for slot in _row_length_params(program):
        bound = next((b for b in CPU_SHORT_ROWS if 0 < params[slot] <= b), None)
        if bound is not None:
            conds.append(f"p{slot} <= {bound}")
    return " and ".join(conds)


def _short_rows_per_item(knl: lp.LoopKernel) -> int:
    """Rows per work-item of a contiguous rows kernel without an element loop: about
    ``CPU_ROW_ITEM_ELEMENTS`` elements where the size class bounds every reduction's
    row, else 1 (the launch of a work-item costs PoCL more than a short row's walk)."""
    bounds = []
    for j in _reduction_inames(knl):
        p = row_cache.row_bound(knl, j)
        bounds.append(next((b for b in CPU_SHORT_ROWS if p is not None
                            and row_cache.implied(knl, f"{p} <= {b}")), None))
    if not bounds or None in bounds:
        return 1
    return max(1, CPU_ROW_ITEM_ELEMENTS // max(b for b in bounds if b is not None))


def _short_row_count(knl: lp.LoopKernel, j: str, count: int) -> int:
    """``count`` max/min accumulators, fewer where the size class bounds the row."""
    bound = row_cache.row_bound(knl, j)
    short = next((b for b in CPU_SHORT_ROWS
                  if bound is not None and row_cache.implied(knl, f"{bound} <= {b}")), None)
    if short is None:
        return count
    return min(count, max(CPU_SELECT_MIN, short // CPU_SELECT_STEPS))


def _cpu_rows(t_unit: lp.TranslationUnit, device: Device, *, rows_per_item: int,
              accumulators: int, select_accumulators: int, vector_math: bool,
              column_group: int, column_width: int,
              column_items: int) -> lp.TranslationUnit:
    """A few whole rows per work-item; rows are looped through sequentially.

    With ``vector_math`` (the PoCL variant), math builtins applied to a row's
    elements run on vectors of :data:`~fuseloop.recipes.cpu_vector.LANES`
    elements (as in the elementwise recipe): in a reduction over a contiguous
    row (``sum(exp(x - m))``), whose lanes then get an accumulator each, and in
    the loop over a row's elements (softmax's ``exp(x - m) / s``).

    A ``max`` or ``min`` (an argmax's two passes among them) whose terms call no
    vector builtin gets ``select_accumulators`` accumulators: each step of one is a
    compare and a select that waits for the last, and the compiler makes vectors
    of the accumulators, so 8 of them are a single chain (see :func:`_plain_count`).
    """
    knl = t_unit.default_entrypoint
    fp64 = device.has_fp64
    row = select.iname(knl, f"tag:{select.ROW}")
    contiguous = _contiguous_rows(knl)
    element = select.iname(knl, f"tag:{select.ROW_ELEMENT}")
    if not contiguous and column_width > 1:
        return _cpu_columns(t_unit, column_width)
    if contiguous:
        t_unit = _wide_addresses(t_unit)
    if contiguous and element is None:
        # long contiguous rows (or pieces): one each, so every core gets some; short
        # ones (a size class bounds them) a few together, as the elementwise chunks
        per_item = _short_rows_per_item(knl)
        t_unit = (lp.tag_inames(t_unit, {str(row): "g.0"}) if per_item == 1
                  else lp.split_iname(t_unit, str(row), per_item, outer_tag="g.0"))
        for j in _reduction_inames(knl):
            calls = vector_math and _reduction_calls(t_unit, j, fp64)
            count = accumulators if calls else _plain_count(knl, j, accumulators,
                                                            select_accumulators)
            t_unit = _accumulators(t_unit, j, count, calls)
            if calls:
                t_unit = _vector_reduction(t_unit, j, fp64)
        return t_unit
    t_unit = lp.split_iname(t_unit, row, rows_per_item, outer_tag="g.0")  # type: ignore[arg-type]
    if not vector_math:
        return t_unit
    if contiguous:
        for j in _reduction_inames(knl):
            calls = _reduction_calls(t_unit, j, fp64)
            count = accumulators if calls else _plain_count(knl, j, accumulators,
                                                            select_accumulators)
            t_unit = _accumulators(t_unit, j, count, calls)
            if calls:
                t_unit = _vector_reduction(t_unit, j, fp64)
    if element is not None:
        t_unit = vectorise_loop_calls(t_unit, element, fp64, through_double_width(device))
    return t_unit


cpu_rows = Recipe(
    "cpu-rows", _cpu_rows, kind="reduction", version="10",
    params=(Param("rows_per_item", int, CPU_ROWS_PER_ITEM,
                  "rows per work-item (short rows; long contiguous rows get one each)",
                  int_range(1, 1 << 16, (1, 2, 4, 8, 16, 32))),
            Param("accumulators", int, CPU_ACCUMULATORS,
                  "interleaved accumulators of a contiguous row's reduction",
                  int_range(1, 64, (1, 2, 4, 8, 16))),
            Param("select_accumulators", int, CPU_SELECT_ACCUMULATORS,
                  "interleaved accumulators of a contiguous row's max or min (no "
                  "vector builtin calls in its terms)", int_range(1, 64, (8, 16, 32, 64))),
            Param("vector_math", bool, False, "math builtins on vectors (PoCL)",
                  (False, True)),
            *_column_params(1, CPU_COLUMN_WIDTH, CPU_COLUMN_ITEMS)),
    variants=((POCL, {"vector_math": True}),),
    # vector math blocks have LANES lanes: more accumulators index past them (fl.tune
    # found 16 giving wrong results, and crashing the process)
    valid=lambda v, device: not v["vector_math"] or v["accumulators"] <= LANES,
    size_class=Derived(lambda v: _cpu_size_class))


def _wide_addresses(t_unit: lp.TranslationUnit) -> lp.TranslationUnit:
    """Loops and group ids in 64-bit integers.

    With 32-bit ones a row's element ``in0[p0 * gid(0) + k + 32 * j]`` is an int sum
    widened to a pointer offset per access, and PoCL's compiler did not see that
    neighbouring accumulators read neighbouring elements: it loaded them one at a
    time.  In 64 bits they became vector loads: a 4096 x 4096 float32 row max took
    2.0 ms instead of 6.3 (PoCL 3.0, 2 cores).
    """
    import numpy as np
    from loopy.types import to_loopy_type

    knl = t_unit.default_entrypoint
    if knl.index_dtype.numpy_dtype.itemsize == 8:
        return t_unit
    return t_unit.with_kernel(knl.copy(index_dtype=to_loopy_type(np.dtype(np.int64))))


def _plain_count(knl: lp.LoopKernel, j: str, accumulators: int, selects: int) -> int:
    """Accumulators for the reduction over ``j`` when its terms call no vector
    builtin: ``selects`` for a ``max`` or ``min`` (a compare and a select per step,
    a longer chain than an add's), else ``accumulators``."""
    from ..lower.reductions import NanMaxReductionOperation, NanMinReductionOperation

    ops = [insn.expression.operation for insn in knl.instructions
           if isinstance(insn, lp.Assignment) and isinstance(insn.expression, lp.Reduction)
           and insn.expression.inames == (j,)]
    if ops and all(isinstance(op, NanMaxReductionOperation | NanMinReductionOperation)
                   for op in ops):
        count = _short_row_count(knl, j, selects)
        # an arg-reduction's index pass (its terms use the index j as a value): the
        # row is in cache from the first pass and each step builds an index too;
        # more than ``accumulators`` of them cost more than the chain they break
        # (4096 float32 rows of 1024 on PoCL, lanes a loop: 32 took 1.26x the CPU
        # time of 8)
        return min(count, accumulators) if row_lanes.index_valued(knl, j) else count
    return accumulators


def _reduction_calls(t_unit: lp.TranslationUnit, j: str, fp64: bool) -> bool:
    """Whether the reduction over ``j`` calls a builtin that pays on vectors."""
    knl = t_unit.default_entrypoint
    return any(isinstance(insn, lp.Assignment) and isinstance(insn.expression, lp.Reduction)
               and insn.expression.inames == (j,)
               and reduction_vector_calls(t_unit, insn.id, fp64)
               for insn in knl.instructions)


def _vector_reduction(t_unit: lp.TranslationUnit, j: str, fp64: bool) -> lp.TranslationUnit:
    # (``_accumulators`` names the reduction over the blocks ``calc_part_<j>``)
    return vectorise_reduction_calls(t_unit, f"calc_part_{j}", f"{j}_outer", f"{j}_inner",
                                     fp64)


def _accumulators(t_unit: lp.TranslationUnit, j: str, count: int,
                  vector_calls: bool = False) -> lp.TranslationUnit:
    """Reduce over ``j`` into ``count`` interleaved accumulators, then combine them
    (``vector_calls``: the terms' builtins will run on vectors, lanes written out).

    One accumulator makes each step wait for the previous one's result; on PoCL
    eight independent ones (element ``8m + k`` goes to accumulator ``k``) doubled
    the speed of a long sum.
    """
    knl = t_unit.default_entrypoint
    bound = row_cache.row_bound(knl, j)
    mine = [insn for insn in knl.instructions
            if isinstance(insn, lp.Assignment) and isinstance(insn.expression, lp.Reduction)
            and insn.expression.inames == (j,) and insn.expression.operation.arg_count == 1]
    if bound is None or len(mine) != 1:
        return t_unit
    lane_tag = "ilp" if vector_calls else row_lanes.lane_tag(knl, mine[0], count)
    t_unit = lp.split_iname(t_unit, j, count, slabs=(0, 1))
    knl = t_unit.default_entrypoint
    outer, lane, combine = f"{j}_outer", f"{j}_inner", f"{j}_combine"
    parts, tree_domains = f"part_{j}", list[Any]()
    insns, temps = [], dict(knl.temporary_variables)
    for insn in knl.instructions:
        red = insn.expression if insn.id == mine[0].id else None
        if red is None:
            insns.append(insn)
            continue
        temps[parts] = lp.TemporaryVariable(
            parts, temps[insn.assignee_var_names()[0]].dtype, shape=(count,),
            address_space=lp.AddressSpace.PRIVATE)
        insns.append(lp.Assignment(
            prim.Variable(parts)[prim.Variable(lane)],
            lp.Reduction(red.operation, (outer,), red.expr), id=f"calc_{parts}",
            within_inames=insn.within_inames | {lane}, depends_on=insn.depends_on))
        dtype = temps[parts].dtype

        def pair(a: Any, b: Any, op: Any = red.operation, dtype: Any = dtype) -> Any:
            return op([dtype], a, b, t_unit.callables_table, t_unit.target)[0]

        tree, tree_domains, last = row_lanes.combine_tree(
            parts, bound, count, pair, insn.within_inames, f"calc_{parts}")
        insns.extend(tree)
        # the tree leaves the row's value in the first accumulator (none on an empty row)
        insns.append(insn.copy(
            expression=lp.Reduction(red.operation, (combine,),
                                    prim.Variable(parts)[prim.Variable(combine)]),
            depends_on=insn.depends_on | {last}))
    domain = isl.BasicSet(f"[{bound}] -> {{ [{combine}] : 0 <= {combine} < 1 "
                          f"and {combine} < {bound} }}")
    # Loopy schedules ilp loops with its older scheduler and warns every time: expected
    # here (design.md, the reduction recipe), so not shown to users
    silenced = [*knl.silenced_warnings, "v1_scheduler_fallback"]
    knl = knl.copy(instructions=insns, temporary_variables=temps,
                   domains=[*knl.domains, *tree_domains, domain], silenced_warnings=silenced)
    steps = {f"{parts}_tree{level}": "unr" for level in range(len(tree_domains))}
    return lp.tag_inames(t_unit.with_kernel(knl), {lane: lane_tag, combine: "unr", **steps})


from ..caches import register_function as _register_cache  # noqa: E402  (fuseloop/caches.py)

_register_cache("recipes.rows.row_length_params", _row_length_params)
_register_cache("recipes.rows.column_kernel", _column_kernel)
