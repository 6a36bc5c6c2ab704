"""The CPU reduction recipe ``cpu-rows``: whole contiguous rows per work-item, walked
sequentially into interleaved accumulators (:mod:`.row_lanes`), math builtins on
vectors on PoCL (:mod:`.cpu_vector`); column-like reductions a block of neighbouring
outputs per work-item, walked together along the reduced axis.  The kernels'
loops: :mod:`.rows`."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from .._lazy import LazyModule, isl, lp, prim
from ..expr.program import Program
from ..lower.kernel import ELEMENT_INAME
from . import row_lanes, select
from .core import Derived, Param, Recipe, int_range
from .cpu_vector import (
    LANES,
    reduction_vector_calls,
    through_double_width,
    vectorise_loop_calls,
    vectorise_reduction_calls,
)
from .elementwise import POCL
from .row_kernels import (
    column_kernel,
    column_params,
    has_contiguous_rows,
    per_row_on_each_item,
    reduction_inames,
    reductions_per_element,
    row_length_params,
)

if TYPE_CHECKING:
    from ..runtime.devices import Device
    from . import row_cache
    from .core import SizeClassFunction
else:  # (row bounds read through Loopy's mappers, loaded on a cache miss only)
    row_cache = LazyModule(".row_cache", __package__)

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
# ... and where the reduced axis is long, a split's first stage takes this many: each
# work-item's step down the rows then reads a longer contiguous run (fewer pages and
# prefetch streams a row), the rows split into pieces of at least CPU_COLUMN_WIDE_ROWS
# for enough work-items (splits._column_pieces); shorter reductions keep one stage
# (probes/cpu_column_width.py).  4096 float32 accumulators fill half a 32 KiB L1 cache
CPU_COLUMN_WIDE = 4096
CPU_COLUMN_WIDE_ROWS = 512
# ... and an unsplit one as wide as its outputs allow while every compute unit keeps
# ``column_items`` blocks: rows read in runs of 1 KiB (256 float32 outputs a block) took
# 1.3-1.6x the CPU time of 4-16 KiB ones (a column sum of (256, 16384) float32 2.3 ms
# against 1.4, of (64, 65536) 2.0 against 1.4; numpy 1.1; 2-core EPYC, PoCL 3.0:
# probes/cpu_column_blocks.py).  The size class states the largest of these its outputs
# reach (a kernel per class crossed, so few)
CPU_COLUMN_PLENTY = (4096, 8192, 16384, 32768, 65536)
# A launch of fewer rows states no facts about them (see _cpu_size_class): each fact
# saves a fixed cost per row, which so few rows do not notice
CPU_CLASS_ROWS = 8
# the reductions whose accumulators are the select_accumulators (lower/reductions.py)
SELECT_OPS = ("max", "min", "any", "all")


def _cpu_columns(t_unit: lp.TranslationUnit, width: int, wide: int,
                 wide_rows: int, blocks: int) -> lp.TranslationUnit:
    """``width`` neighbouring outputs per work-item (more where the size class says so:
    :func:`_column_block`, ``blocks`` the work-items wanted), their reductions walked
    together.

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
    # (each block's loads vectorise only with 64-bit indices, as a row's: _wide_addresses)
    t_unit = _wide_addresses(t_unit)
    knl = t_unit.default_entrypoint
    row = select.iname(knl, f"tag:{select.ROW}")
    assert row is not None
    per_element = reductions_per_element(knl)
    width = _column_block(knl, per_element, width, wide, wide_rows, blocks)
    if per_element:
        t_unit = lp.tag_inames(t_unit, {row: "g.1"})
        row = ELEMENT_INAME
    t_unit = lp.split_iname(t_unit, row, width, outer_tag="g.0", inner_tag="ilp.seq",
                            slabs=(0, 1))
    if per_element:
        t_unit = per_row_on_each_item(t_unit)
    knl = t_unit.default_entrypoint
    # (expected: the ILP loop needs Loopy's older scheduler, see _accumulators)
    return t_unit.with_kernel(knl.copy(silenced_warnings=[
        *knl.silenced_warnings, "v1_scheduler_fallback"]))


def _cpu_size_class(accumulators: int, selects: int, width: int, wide: int,
                    wide_rows: int) -> SizeClassFunction:
    """Size classes of contiguous rows kernels: the facts about each row length ``p``
    that the recipe's choices read, and no others (a loop over growing rows builds a
    kernel per class it crosses).  Column-like kernels: :func:`_wide_columns_class`.

    * ``p >= f``: ``f`` the largest accumulator count the row's reductions use that is
      at most ``p`` (``accumulators``; ``selects`` too where a ``max`` or ``min``
      reduces over it): rows shorter than the accumulators leave some unset, so
      without a lower bound every accumulator's set-up, copy and combining step is
      tested against the row's length, and the tests keep the compiler from making
      vectors of them (on rows of 64 float32 they took longer than the walk).  (An
      upper bound below the accumulators, ``p < f``, would leave the split's bulk slab
      empty, which Loopy refuses.)
    * ``p <= b``, ``b`` the least of ``CPU_SHORT_ROWS`` holding it: the rows a
      work-item takes (without an element loop) and a ``max`` or ``min``'s count.

    Both save a fixed cost per row: a launch of fewer than ``CPU_CLASS_ROWS`` rows (a
    dot product: one) states neither, and one kernel serves all its lengths.
    """

    def cpu_row_size_class(program: Program, params: Sequence[int], n_rows: int,
                           n_elem: int) -> str:
        if column_kernel(program):
            return _wide_columns_class(program, params, n_rows, n_elem, width, wide,
                                       wide_rows)
        if n_rows < CPU_CLASS_ROWS:
            return ""
        conds = []
        element_loop = program.row_dims is not None
        for slot, picks in _row_reductions(program):
            p = params[slot]
            counts = (accumulators, selects) if picks else (accumulators,)
            floor = max((f for f in counts if f <= p), default=None)
            if floor is not None:
                conds.append(f"p{slot} >= {floor}")
            bound = next((b for b in CPU_SHORT_ROWS if 0 < p <= b), None)
            if bound is not None and (picks or not element_loop):
                conds.append(f"p{slot} <= {bound}")
        return " and ".join(conds)

    return cpu_row_size_class


def _wide_columns_class(program: Program, params: Sequence[int], n_rows: int, n_elem: int,
                        width: int, wide: int, wide_rows: int) -> str:
    """The size class of a column-like kernel: the facts that make its blocks wider
    than ``width`` (:func:`_column_block`), stated where they hold.  A split's first
    stage (``program.chunked``) whose rows fill at least a quarter of a ``wide`` block
    (``NE`` outputs, more than ``width``) and whose pieces are at least ``wide_rows``
    rows (``p``, each reduction's piece length): ``wide`` blocks.  Any other: the
    largest of ``CPU_COLUMN_PLENTY`` that its outputs reach (``N``, or a row's ``NE``
    where it has an element loop), from which the recipe sizes blocks for the device.
    Else none: one kernel for other sizes."""
    if wide <= width:
        return ""
    least = max(width + 1, wide // 4)
    if not program.chunked or n_elem < least:
        name, outputs = ("N", n_rows) if program.row_dims is None else ("NE", n_elem)
        plenty = max((t for t in CPU_COLUMN_PLENTY if t <= outputs), default=0)
        return f"{name} >= {plenty}" if plenty and not program.chunked else ""
    entries: tuple[Any, ...] = program.entries  # read by kind tag and position
    chunks = [e[8][0][1] for e in entries if e[0] == "reduce" and e[8] is not None]
    if not chunks or any(params[slot] < wide_rows for slot in chunks):
        return ""
    return " and ".join([f"NE >= {least}",
                         *(f"p{slot} >= {wide_rows}" for slot in sorted(set(chunks)))])


def _column_block(knl: lp.LoopKernel, per_element: bool, width: int, wide: int,
                  wide_rows: int, blocks: int) -> int:
    """Outputs per work-item of a column-like kernel: ``wide`` where the size class
    states a split's facts (:func:`_wide_columns_class`: the rule
    ``splits._column_pieces`` splits by), else the widest power of two up to ``wide``
    that leaves the outputs the size class states (:func:`_plenty`) ``blocks`` blocks,
    at least ``width``."""
    least = max(width + 1, wide // 4)
    if wide <= width:
        return width
    if not per_element or not row_cache.implied(knl, f"NE >= {least}"):
        return _plenty(knl, "NE" if per_element else "N", width, wide, blocks)
    # (the pieces' reductions: others beside them, a folded nested reduction's combine
    # over its pieces, are short)
    bounds = [row_cache.row_bound(knl, j) for j in reduction_inames(knl)]
    if not any(b is not None and row_cache.implied(knl, f"{b} >= {wide_rows}")
               for b in bounds):
        return _plenty(knl, "NE", width, wide, blocks)
    return wide


def _plenty(knl: lp.LoopKernel, outputs: str, width: int, wide: int, blocks: int) -> int:
    """The widest block, a power of two from ``width`` to ``wide``, of which the
    outputs the size class states (the parameter ``outputs``) make ``blocks``."""
    stated = max((t for t in CPU_COLUMN_PLENTY
                  if row_cache.implied(knl, f"{outputs} >= {t}")), default=0)
    return plenty_block(stated, width, wide, blocks)


def plenty_block(outputs: int, width: int, wide: int, blocks: int) -> int:
    """The widest power of two from ``width`` to ``wide`` of which ``outputs`` make
    ``blocks`` blocks (``width`` where none does)."""
    block = width
    while 2 * block <= wide and outputs // (2 * block) >= blocks:
        block *= 2
    return block


def _row_reductions(program: Program) -> list[tuple[int, bool]]:
    """Each row length's parameter slot (:func:`row_length_params`) and whether a
    ``max`` or ``min`` (``any``, ``all``: the select accumulators) reduces over it."""
    entries: tuple[Any, ...] = program.entries  # read by kind tag and position
    selects = {e[7][1] for e in entries
               if e[0] == "reduce" and e[8] is None and e[1] in SELECT_OPS}
    return [(slot, slot in selects) for slot in row_length_params(program)]


def _short_rows_per_item(knl: lp.LoopKernel) -> int:
    """Rows per work-item of a contiguous rows kernel without an element loop: about
    ``CPU_ROW_ITEM_ELEMENTS`` elements where the size class bounds every reduction's
    row, else 1 (the launch of a work-item costs PoCL more than a short row's walk)."""
    bounds = []
    for j in reduction_inames(knl):
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
              column_group: int, column_width: int, column_items: int,
              column_wide: int, column_wide_rows: int) -> lp.TranslationUnit:
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
    contiguous = has_contiguous_rows(knl)
    element = select.iname(knl, f"tag:{select.ROW_ELEMENT}")
    if not contiguous and column_width > 1:
        return _cpu_columns(t_unit, column_width, column_wide, column_wide_rows,
                            column_items * max(1, device.compute_units))
    if contiguous:
        t_unit = _wide_addresses(t_unit)
    if contiguous and element is None:
        # long contiguous rows (or pieces): one each, so every core gets some; short
        # ones (a size class bounds them) a few together, as the elementwise chunks
        per_item = _short_rows_per_item(knl)
        t_unit = (lp.tag_inames(t_unit, {str(row): "g.0"}) if per_item == 1
                  else lp.split_iname(t_unit, str(row), per_item, outer_tag="g.0"))
        for j in reduction_inames(knl):
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
        for j in reduction_inames(knl):
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
    "cpu-rows", _cpu_rows, kind="reduction", version="18",
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
            *column_params(1, CPU_COLUMN_WIDTH, CPU_COLUMN_ITEMS),
            Param("column_wide", int, CPU_COLUMN_WIDE, "outputs per work-item of a split "
                  "column-like reduction's first stage with long pieces (at most "
                  "column_width: never)", int_range(1, 4096, (256, 1024, 4096))),
            Param("column_wide_rows", int, CPU_COLUMN_WIDE_ROWS, "the least rows a piece "
                  "of a column_wide first stage reduces",
                  int_range(1, 1 << 20, (256, 512, 1024)))),
    variants=((POCL, {"vector_math": True}),),
    # vector math blocks have LANES lanes: more accumulators index past them (fl.tune
    # found 16 giving wrong results, and crashing the process)
    valid=lambda v, device: not v["vector_math"] or v["accumulators"] <= LANES,
    size_class=Derived(lambda v: _cpu_size_class(
        v["accumulators"], v["select_accumulators"], v["column_width"], v["column_wide"],
        v["column_wide_rows"])))


def _wide_addresses(t_unit: lp.TranslationUnit) -> lp.TranslationUnit:
    """Loops and group ids in 64-bit integers.

    With 32-bit ones a row's element ``in0[p0 * gid(0) + k + 32 * j]`` is an int sum
    widened to a pointer offset per access, and PoCL's compiler did not see that
    neighbouring accumulators read neighbouring elements: it loaded them one at a
    time.  In 64 bits they became vector loads: a 4096 x 4096 float32 row max took
    2.0 ms instead of 6.3 (PoCL 3.0, 2 cores).  Column blocks too: a 512 x 2048
    float64 column min took about half the CPU time, a 1024 x 1024 int32 column
    max's kernel 0.25 ms instead of 0.28 (its least of 150 runs).
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
