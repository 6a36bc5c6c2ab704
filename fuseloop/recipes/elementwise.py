"""Built-in recipes for elementwise kernels (kind ``"elementwise"``): one flat loop.

The lowered kernel's work is one flat loop over all elements (role tag
``fl_flat``, the iname ``i``; see :mod:`fuseloop.lower.kernel`).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from .._lazy import lp, prim
from ..lower.pieces import FLAT_INAME
from . import select
from .core import Derived, Param, Recipe, SizeClassFunction, Space, int_range, powers_of_two
from .cpu_vector import (
    POCL_PLATFORM,
    through_double_width,
    vectorise_loop_calls,
    vectorise_math_calls,
)
from .registry import DevicePredicate

if TYPE_CHECKING:
    from ..runtime.devices import Device

#: the PoCL CPU runtime, whose vector builtins were measured (cpu_vector's _SCALAR_ONLY)
POCL = DevicePredicate(type="cpu", platform=POCL_PLATFORM)

CPU_CHUNK = 4096
#: row lengths of an elementwise kernel in rows with a size class each (``NE <= b``)
CPU_ROW_CLASSES = (16, 64, 256, 1024, 4096)
GPU_GROUP_SIZE = 128
GPU_ITEMS_PER_THREAD = 4
#: the most operations (items x the loop body's weighted operations, see
#: :data:`CHEAP_OPERATION`) one work-item's unrolled body holds
GPU_UNROLLED_OPERATIONS = 64


def _cpu_chunked(t_unit: lp.TranslationUnit, device: Device, *, chunk: int,
                 vector_math: bool) -> lp.TranslationUnit:
    """One work-item per contiguous chunk; the sequential inner loop vectorises.

    On PoCL this is about twice as fast as one element per work-item (see
    docs/design.md for the figures).  With ``vector_math`` (the PoCL variant),
    math builtins in the loop are applied to vectors of 8 elements
    (:mod:`fuseloop.recipes.cpu_vector`), which the compiler does not do by
    itself; which builtins may be was measured on PoCL, so other CPU platforms
    keep the scalar calls.  A concatenation's pieces get a loop each within the
    chunk (``concat_chunk``): ``i`` already numbers chunks.
    """
    if select.has_iname(t_unit, f"tag:{select.ROW_ELEMENT}"):
        return _cpu_rows_chunked(t_unit, device, chunk, vector_math)
    flat = select.iname(t_unit, f"tag:{select.FLAT}")
    if select.has_iname(t_unit, f"tag:{select.PIECE}"):
        return lp.tag_inames(t_unit, {flat: "g.0"})  # type: ignore[dict-item]
    if vector_math:
        from ..lower.masking import vectorise_masked

        loop = str(flat)  # (an elementwise kernel has its flat loop)
        width = through_double_width(device)
        return vectorise_masked(t_unit, loop, lambda t: vectorise_math_calls(
            t, loop, chunk, device.has_fp64, width), device.has_fp64)
    return lp.split_iname(t_unit, flat, chunk, outer_tag="g.0")  # type: ignore[arg-type]


def _cpu_rows_chunked(t_unit: lp.TranslationUnit, device: Device, chunk: int,
                      vector_math: bool) -> lp.TranslationUnit:
    """An output of several axes lowered in rows (``row_loops``): whole rows of at most
    ``b`` elements (``b``, the size class's bound, ``CPU_ROW_CLASSES``), ``chunk // b``
    of them per work-item, each walked along its contiguous last axis; longer rows in
    chunks of ``chunk``, rows on the grid's second axis.  Per-row work (a gathered
    row's index, a row's address) runs once per row."""
    from .row_cache import implied

    row = str(select.iname(t_unit, f"tag:{select.ROW}"))
    element = str(select.iname(t_unit, f"tag:{select.ROW_ELEMENT}"))
    knl = t_unit.default_entrypoint
    bound = next((b for b in CPU_ROW_CLASSES if implied(knl, f"NE <= {b}")), None)
    if bound is None:
        t_unit = lp.split_iname(t_unit, element, chunk, outer_tag="g.0")
        t_unit = lp.tag_inames(t_unit, {row: "g.1"})
        # (per-row work, a stencil's clamped neighbour rows: each chunk's group does its
        # own; Loopy refuses a statement outside a group axis of the kernel)
        t_unit = lp.add_inames_for_unused_hw_axes(t_unit)
        inner, rows = f"{element}_inner", f"{element}_outer"
    else:
        t_unit = lp.split_iname(t_unit, row, max(1, chunk // bound), outer_tag="g.0")
        inner, rows = element, f"{row}_inner"
        # (rows outside, so each row is walked contiguously)
        t_unit = lp.prioritize_loops(t_unit, f"{rows},{inner}")
    if vector_math:
        t_unit = vectorise_loop_calls(t_unit, inner, device.has_fp64,
                                      through_double_width(device))
    return t_unit


def _cpu_row_class(program: Any, params: Any, n_rows: int, n_elem: int) -> str:
    """``NE <= b``, ``b`` the least of ``CPU_ROW_CLASSES`` holding an output row of a
    kernel in rows (no condition for a flat loop, ``n_elem`` 1, or longer rows)."""
    if n_elem <= 1:
        return ""
    return next((f"NE <= {b}" for b in CPU_ROW_CLASSES if n_elem <= b), "")


cpu_chunked = Recipe(
    "cpu-chunked", _cpu_chunked, version="5",
    params=(Param("chunk", int, CPU_CHUNK, "elements per work-item",
                  int_range(8, 1 << 24, (1024, 2048, 4096, 8192, 16384, 32768))),
            Param("vector_math", bool, False, "math builtins on vectors of 8 (PoCL)",
                  (False, True))),
    variants=((POCL, {"vector_math": True}),),
    # (defaults, as Derived values are: a value given here would be explicit, and
    # explicit recipes take no tuned parameters)
    concat_chunk=Derived(lambda values: values["chunk"]),
    row_loops=Derived(lambda values: True), size_class=Derived(lambda values: _cpu_row_class))


GPU_UNROLL_INAME = f"{FLAT_INAME}_inner_outer"
GPU_LOAD_INAME = f"{FLAT_INAME}_load"


def _separate_loads(knl: lp.LoopKernel) -> tuple[lp.LoopKernel, list[str], list[str]]:
    """Give each global read of the element loop its own instruction and temporary.

    Returns the kernel, the load instructions' ids and their temporaries.  Only
    unconditional instructions of the plain element loop (within ``i`` alone) are
    rewritten.  A temporary that the lowering already assigns straight from an
    input (``t1 = in0[i]``, an input used more than once) is kept as the load.
    """
    from .mappers import LoadExtractor, hoistable

    inputs = frozenset(a.name for a in knl.args
                       if isinstance(a, lp.ArrayArg) and not a.is_output)
    allowed = frozenset({FLAT_INAME} | {a.name for a in knl.args
                                        if isinstance(a, lp.ValueArg)})
    writers: dict[str, int] = {}
    for insn in knl.instructions:
        for v in insn.assignee_var_names():
            writers[v] = writers.get(v, 0) + 1
    loads: dict = {}
    mapper = LoadExtractor(inputs, allowed, loads)
    load_ids, load_vars, insns = [], [], []
    for insn in knl.instructions:
        if (not isinstance(insn, lp.Assignment) or insn.predicates
                or insn.within_inames != frozenset({FLAT_INAME})):
            insns.append(insn)
            continue
        expr = insn.expression
        if (hoistable(expr, inputs, allowed) and isinstance(insn.assignee, prim.Variable)
                and insn.assignee.name in knl.temporary_variables
                and writers[insn.assignee.name] == 1):
            load_ids.append(insn.id)
            load_vars.append(insn.assignee.name)
            insns.append(insn)
            continue
        mapper.used = set()
        new_expr = mapper(expr)
        deps = frozenset(f"load{name}" for name in mapper.used)
        insns.append(insn.copy(expression=new_expr, depends_on=insn.depends_on | deps))
    temps = dict(knl.temporary_variables)
    new_insns = []
    for (array, index), name in loads.items():
        temps[name] = lp.TemporaryVariable(name, knl.arg_dict[array].dtype, shape=(),
                                           address_space=lp.AddressSpace.PRIVATE)
        new_insns.append(lp.Assignment(prim.Variable(name),
                                       prim.Subscript(prim.Variable(array), index),
                                       id=f"load{name}",
                                       within_inames=frozenset({FLAT_INAME})))
        load_ids.append(f"load{name}")
        load_vars.append(name)
    knl = knl.copy(instructions=new_insns + insns, temporary_variables=temps)
    return knl, load_ids, load_vars


def _hoist_invariants(knl: lp.LoopKernel) -> lp.LoopKernel:
    """Compute once per work-item, before its elements, what no element index changes: a
    0-d operand's value and the operations on it alone (``z ** 1.5`` of ``z ** 1.5 * a``
    with ``z`` 0-d), which the unrolled elements and both slabs would each compute again
    (the source, Loopy's code generation and the driver's build grow with every copy).
    Only unconditional instructions of the plain element loop are read."""
    from .mappers import InvariantExtractor

    if any(not isinstance(insn, lp.Assignment) or insn.predicates
           or insn.within_inames != frozenset({FLAT_INAME}) for insn in knl.instructions):
        return knl
    variant = frozenset(knl.all_inames()) | frozenset(knl.temporary_variables) | frozenset(
        a.name for a in knl.args if isinstance(a, lp.ArrayArg) and a.is_output)
    found: dict = {}
    mapper = InvariantExtractor(variant, found)
    insns = []
    for insn in knl.instructions:
        mapper.used = set()
        expr = mapper(insn.expression)
        insns.append(insn.copy(expression=expr, depends_on=insn.depends_on | frozenset(
            f"inv{name}" for name in mapper.used)))
    if not found:
        return knl
    temps = dict(knl.temporary_variables)
    hoisted = []
    for expr, name in found.items():
        temps[name] = lp.TemporaryVariable(name, None, shape=(),
                                           address_space=lp.AddressSpace.PRIVATE)
        hoisted.append(lp.Assignment(prim.Variable(name), expr, id=f"inv{name}",
                                     within_inames=frozenset()))
    return knl.copy(instructions=hoisted + insns, temporary_variables=temps)


#: what one arithmetic node (sum, product, comparison, selection, cast, bit operation)
#: counts toward :data:`GPU_UNROLLED_OPERATIONS`, against 1 for a call (``sin``, ``exp``,
#: ``sqrt``, ...), a division, a remainder or a power: one instruction (an FMA fuses two)
#: beside tens, so a polynomial of 16 steps is not compute-bound as 16 ``sin`` steps are
CHEAP_OPERATION = 0.25


def _costly() -> tuple[type, ...]:
    """The node types that count a whole operation (a function: ``prim`` is imported at
    the first lowering, not when a disk-warm process loads the recipes)."""
    return (prim.Call, prim.Quotient, prim.FloorDiv, prim.Remainder, prim.Power)


def _operations(expr: object) -> float:
    """The weighted operations in ``expr`` (see :data:`CHEAP_OPERATION`): every node but
    variables, constants and subscripts (whose index arithmetic counts)."""
    if isinstance(expr, tuple):
        return sum(_operations(e) for e in expr)
    if not isinstance(expr, prim.Expression):
        return 0
    own = 0.0 if isinstance(expr, prim.Variable | prim.Subscript | prim.Lookup) else \
        1.0 if isinstance(expr, _costly()) else CHEAP_OPERATION
    return own + sum(_operations(getattr(expr, name)) for name in expr.init_arg_names)


def body_operations(knl: lp.LoopKernel) -> float:
    """Weighted operations (:func:`_operations`) in the kernel's instructions."""
    return sum(_operations(insn.expression) for insn in knl.instructions
               if isinstance(insn, lp.Assignment))


def items_by_rule(operations: float) -> int:
    """Elements per work-item: the most of 4, 2, 1 whose unrolled body stays within
    :data:`GPU_UNROLLED_OPERATIONS` (weighted: :data:`CHEAP_OPERATION`).  Several
    elements keep several loads in flight per work-item: with one 4-byte load each, the
    work-items an SM holds keep too few bytes in flight for the memory's bandwidth (a
    degree-16 polynomial of one float32 array, 34 arithmetic nodes, ran at a third of
    it with one element).  Bodies of many calls are compute-bound, run as fast or faster
    with one element, and the driver's build time grows with the unrolled body (a chain
    of 200 ``sin`` steps)."""
    for items in (GPU_ITEMS_PER_THREAD, 2):
        if items * operations <= GPU_UNROLLED_OPERATIONS:
            return items
    return 1


def _gpu_coalesced(t_unit: lp.TranslationUnit, device: Device, *, group: int,
                   items: int | None, tile: tuple[int, ...] | bool | None = None,
                   tile_local: bool = True) -> lp.TranslationUnit:
    """Work-groups of ``group`` (128) work-items, each handling ``items`` elements
    ``group`` apart (None: :func:`items_by_rule` of the kernel's operation count).

    Neighbouring work-items touch neighbouring elements (coalesced).  Every
    work-group but the last one covers a full tile and runs without bounds
    checks (a Loopy slab), and within a tile all loads of the 4 elements are
    issued before any arithmetic: a data-dependent branch in the arithmetic
    (the slow path of an accurate ``sin``) would otherwise keep the compiler
    from hoisting the next element's loads, leaving too few loads in flight.
    For ``2*x - sin(y) + x*y`` on an H200 the kernel runs at 106% of the
    OpenCL buffer copy's bandwidth, against 87% for version 1 (per-element
    checks, loads interleaved with the arithmetic); see docs/design.md.

    A stencil (``tile``, ``tile_local``: see :mod:`fuseloop.recipes.stencil_tiles`) is
    computed in 2-D or 3-D work-groups from a local-memory copy of its neighbourhood
    instead.
    """
    if tile is not False:
        from .stencil_tiles import DEFAULT_TILE, tile_stencils

        tiled = tile_stencils(t_unit, device, DEFAULT_TILE if tile is None
                              else tile, tile_local)  # type: ignore[arg-type]
        if tiled is not None:
            return tiled
    knl = _hoist_invariants(t_unit.default_entrypoint)
    if items is None:
        items = items_by_rule(body_operations(knl))
    knl, load_ids, load_vars = _separate_loads(knl)
    t_unit = t_unit.with_kernel(knl)
    # (one element per work-item: its bounds test is one comparison, not worth a second body)
    t_unit = lp.split_iname(t_unit, FLAT_INAME, group * items, outer_tag="g.0",
                            slabs=(0, 1) if items > 1 else (0, 0))
    t_unit = lp.split_iname(t_unit, f"{FLAT_INAME}_inner", group,
                            outer_tag="unr", inner_tag="l.0")
    if load_ids:
        t_unit = lp.privatize_temporaries_with_inames(t_unit, GPU_UNROLL_INAME,
                                                      only_var_names=frozenset(load_vars))
        t_unit = lp.duplicate_inames(t_unit, GPU_UNROLL_INAME,
                                     within=" or ".join(f"id:{i}" for i in load_ids),
                                     new_inames=[GPU_LOAD_INAME])
        t_unit = lp.tag_inames(t_unit, {GPU_LOAD_INAME: "unr"})
    from .mappers import INVARIANT_PREFIX

    if any(n.startswith(INVARIANT_PREFIX) for n in knl.temporary_variables):
        # (each work-item computes them, in the work-group axes the element loop has)
        t_unit = lp.add_inames_for_unused_hw_axes(t_unit, within=f"id:inv{INVARIANT_PREFIX}*")
    return t_unit


def _tile_rule(value: object) -> bool:
    return value is None or value is False or (
        isinstance(value, tuple) and len(value) == 3
        and all(isinstance(n, int) and 1 <= n <= 1024 for n in value))


def _tile_size_class(values: Mapping[str, Any]) -> SizeClassFunction | None:
    if values["tile"] is False:
        return None  # (no tile: the kernel serves every shape)
    from .stencil_tiles import stencil_size_class

    return stencil_size_class


def _valid_gpu_coalesced(values: Mapping[str, Any], device: Device) -> bool:
    tile = values["tile"]
    # (a 2-D stencil's work-group is the tile's last two sizes: within the 3-D product)
    return values["group"] <= device.max_work_group_size and (
        not isinstance(tile, tuple) or math.prod(tile) <= device.max_work_group_size)


gpu_coalesced = Recipe(
    "gpu-coalesced", _gpu_coalesced, version="7",
    params=(Param("group", int, GPU_GROUP_SIZE, "work-items per work-group",
                  powers_of_two(1, 1024, (32, 64, 128, 256, 512))),
            Param("items", int, None, "elements per work-item, group apart (None: by "
                  "rule from the kernel's operation count)",
                  Space((1, 2, 4, 8), lambda v: v is None or (isinstance(v, int) and 1 <= v <= 64),
                        "None (by rule) or an integer from 1 to 64")),
            # (False by default: on an H100 the tiled kernels took twice the flat ones'
            # time, whose neighbours the caches serve; fl.tune tries the tiles)
            Param("tile", (tuple, bool, type(None)), False,
                  "stencils: (planes, rows, columns) of the local-memory tile of a "
                  "work-group (a 2-D stencil uses the last two); None: the default tile "
                  "where the rule picks one, False: never tile (the default)",
                  Space((None, False, (1, 16, 32), (4, 4, 32)),
                        _tile_rule, "None, False or a tuple of three sizes from 1 to 1024")),
            Param("tile_local", bool, True, "stencil tiles: their neighbourhood staged in "
                  "local memory (False: the tiles' work-groups read global memory)",
                  (True, False))),
    valid=_valid_gpu_coalesced,
    size_class=Derived(_tile_size_class))
