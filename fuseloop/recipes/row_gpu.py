"""The GPU reduction recipe ``gpu-rows``: contiguous rows laid out by the rule of
:mod:`.row_layout` (a work-item, a slice of a group or a group per row, partial
results combined in the group, a row kept in registers across passes by
:mod:`.row_cache`); column-like reductions a work-item per output, few outputs by
slices of the reduced axis.  The kernels' loops: :mod:`.rows`."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from .._lazy import LazyModule, isl, lp
from ..expr.program import Program
from ..lower.kernel import ELEMENT_INAME, FLAT_INAME
from . import row_layout, transforms
from .core import Derived, Param, Recipe, Space, int_range, powers_of_two
from .row_kernels import (
    column_kernel,
    column_params,
    combiners,
    has_contiguous_rows,
    has_row_elements,
    per_row_on_each_item,
    reduction_inames,
    reduction_temporaries,
    reductions_per_element,
    row_length_params,
)
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
GPU_COLUMN_ITEMS = 1024
# The contiguous-rows layout rule (see fuseloop.recipes.row_layout)
GPU_SHORT_MAX = 32
GPU_SHORT_ROWS = 32
GPU_SLICE_MAX = 1024
GPU_SLICE_ROWS = 1024
GPU_ROW_ITEMS = 4
GPU_BLOCK = 256


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
        if column_kernel(program):
            return row_layout.column_size_class(rule, n_rows, n_elem, element_loop)
        return row_layout.row_size_class(rule, cache_items, row_length_params(program),
                                         params, n_rows, n_elem, element_loop)

    return row_size_class


def make_gpu_rows(group: int = GPU_ROW_GROUP, cache_items: int = GPU_ROW_CACHE_ITEMS,
                  lanes: int = GPU_REDUCTION_LANES) -> Recipe:
    """The ``gpu-rows`` recipe with ``group`` work-items per contiguous row
    (``gpu_rows.with_params(group=..., cache_items=..., lanes=...)``)."""
    return gpu_rows.with_params(group=group, cache_items=cache_items, lanes=lanes)


def _gpu_rows(t_unit: lp.TranslationUnit, device: Device, *, group: int, cache_items: int,
              lanes: int, layout: str, short_max: int, short_exact: int,
              short_outputs: int, short_rows: int, slice_max: int,
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
    if not has_contiguous_rows(knl):
        return _gpu_columns(t_unit, column_group, group, column_slices,
                            device.max_work_group_size)
    rule = RowRule(group, short_max, slice_max, slice_rows, row_items, layout,
                   short_exact=short_exact, short_rows=short_rows)
    bounds = [row_cache.row_bound(knl, j) for j in reduction_inames(knl)]
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
    per_element = reductions_per_element(knl)
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
        return per_row_on_each_item(lp.tag_inames(t_unit, {FLAT_INAME: "g.1"}))
    # (a row's own reduction beside its elements': rows by group / w, not slices)
    return per_row_on_each_item(lp.split_iname(t_unit, FLAT_INAME, group // width,
                                                outer_tag="g.1", inner_tag="l.1"))


def _row_reductions(knl: lp.LoopKernel) -> bool:
    """Whether a reduction runs once per row, outside the row's element loop (a
    centred column's own mean beside the products of ``d.T @ d``)."""
    return any(isinstance(insn, lp.Assignment) and isinstance(insn.expression, lp.Reduction)
               and ELEMENT_INAME not in insn.within_inames for insn in knl.instructions)


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
    js = reduction_inames(knl)
    for j in js:
        t_unit = lp.split_iname(t_unit, j, slices, inner_tag="l.1")
        t_unit = lp.split_reduction_outward(t_unit, f"{j}_inner")
    # Loopy's tree leaves each result in one work-item: results go to local memory,
    # a slot per output, behind a barrier for the slices that read them
    results = reduction_temporaries(knl)
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
    for j in reduction_inames(knl):
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
        loops = reduction_inames(knl)
        if has_row_elements(knl) and row_cache.implied(
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

    bounds = {j: row_cache.row_bound(knl, j) for j in reduction_inames(knl)}
    peeled: set[str] = set()
    if rows:
        t_unit, peeled = row_cache.peel(t_unit, rows, group, cache_items,
                                        combiners(t_unit))
    for j in bounds:
        if j in peeled:
            continue
        t_unit = split(t_unit, j)
        # each work-item first reduces its own strided elements, then the group
        t_unit = lp.split_reduction_outward(t_unit, f"{j}_inner")
    if has_row_elements(knl) and ELEMENT_INAME not in peeled:
        t_unit = split(t_unit, ELEMENT_INAME)
    if rows:
        t_unit = row_cache.add_fills(t_unit, rows, group, cache_items)
    t_unit, shared = transforms.combine_in_group(
        t_unit, {f"{j}_inner": p for j, p in bounds.items() if p is not None}, group, lanes)
    # Loopy's tree: a row's reduced value is produced by one work-item and
    # read by all of them
    results = [name for name in reduction_temporaries(knl) if name not in shared]
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
            Param("short_rows", int, GPU_SHORT_ROWS, "the rows the short layout needs "
                  "(fewer: a group each)", int_range(1, 1 << 20, (1, 32, 256))),
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
                   v["row_items"], v["layout"], v["column_group"], v["short_exact"],
                   v["short_rows"])
    return make_row_size_class(v["group"], max(v["cache_items"], 1), rule)


gpu_rows = Recipe(
    "gpu-rows", _gpu_rows, kind="reduction", version="14",
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
            *column_params(GPU_COL_GROUP, 1, GPU_COLUMN_ITEMS),
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
