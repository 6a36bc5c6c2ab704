"""Pieces of the GPU contraction recipe (``gpu-tiled``) beyond the tiles themselves:
vector reads of the local tiles (:func:`vector_tile_reads`, ``TileConfig.vec``), the
next step's operands read into registers while this step computes
(:func:`prefetch_registers`, ``TileConfig.prefetch="regs"``) and two copies of the
tiles with one barrier per step (:func:`double_buffer`, ``prefetch="double"``); and
the loop domains of the tiled kernel restated for Loopy's code generation
(:func:`box_domain`, :func:`own_domain`).

They follow the structure of the hand-written trailing update
(:mod:`fuseloop.linalg_gemm`): per step of the reduced range a work-item reads its
rows and columns of the local tiles as 16-byte vectors (float4: four vector loads for
64 products at 8 x 8 outputs per work-item; double2 for 8-byte types), and the global
loads of step ``s + 1`` are issued before the products of step ``s`` so that their
latency is hidden behind the arithmetic rather than behind other work-groups alone.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from .._lazy import isl, lp, prim
from ..lower.contraction import RED, REDUCTION_ID, contraction_sizes, operand_info

#: bytes of one vector read of a local tile (float4, double2: 16-byte shared loads)
VECTOR_BYTES = 16
#: the vector type of a 16-byte read of each element type, by numpy type character
VECTOR_TYPES = {"f": "float4", "d": "double2"}


def vector_width(itemsize: int) -> int:
    """Elements of one 16-byte vector read of elements of ``itemsize`` bytes (types of
    fewer than 4 bytes are counted as 4, as the tiles' layout does), at least 1."""
    return max(1, VECTOR_BYTES // max(4, itemsize))


def _read_helpers(vtype: str, width: int) -> tuple[tuple[str, str], tuple[str, str]]:
    """The names and sources of the two reads of one component of the ``vtype`` at a
    tile element (an address of a vector-aligned element: the tile's storage is an
    array of ``vtype``, see vector_tile_reads): with a literal component
    (``fl_lvec4(x, 2)``), which the device compiler merges with the other components'
    loads of one address into one load; and with the component a loop's index
    (``TileConfig.reg_loops="device"``: a loop the device compiler unrolls, after which
    the selection folds to the literal component's read)."""
    read = f"fl_lvec{width}" + ("" if vtype == "float4" else vtype[0])
    of = f"(*(__local const {vtype} *) &(x))"
    literal = f"#define {read}(x, c) ({of}.s##c)"
    picks = " : ".join(f"(c) == {c} ? {read}_of(x).s{c}" for c in range(width - 1))
    pick = (f"#define {read}_of(x) {of}\n"
            f"#define {read}_at(x, c) ({picks} : {read}_of(x).s{width - 1})")
    return (read, literal), (f"{read}_at", pick)


def row_pad(cfg: Any) -> int:
    """Elements a local tile's rows are padded by where the fill stores down its columns:
    neighbouring work-items on different banks (32 of 4 bytes), and in the blocked
    layout rows that stay 16-byte aligned (a multiple of four elements)."""
    pad = max(1, 32 // cfg.bk) if cfg.bk < 32 else 1
    return -(-pad // 4) * 4 if cfg.layout == "blocked" else pad


def tile_bytes(cfg: Any, itemsize: int) -> int:
    """Local memory of ``cfg``'s tiles of ``itemsize``-byte elements (both tiles' rows
    padded, as the fill pads those it stores down the columns of; two copies for
    ``prefetch="double"``)."""
    copies = 2 if cfg.prefetch in ("double", "layout") else 1
    return copies * cfg.bk * (cfg.bm + cfg.bn + 2 * row_pad(cfg)) * itemsize


def vector_tile_reads(t_unit: lp.TranslationUnit,
                      tiles: list[tuple[str, list[str]]]) -> lp.TranslationUnit:
    """The update's reads of each local tile as components of 16-byte vector reads.

    ``tiles`` are ``(tile, sweep)``: the tile's name (``[..., k, o]``, ``o`` contiguous,
    its rows a multiple of ``V`` elements long, padding included, ``V`` the elements of
    a 16-byte vector: :func:`vector_width`) and the inames of its output side in the
    blocked layout (``[l, r1, r0]``: ``o = V l + V threads r1 + r0``, ``r0 < V``; other
    layouts, and groups of another length, are left as they are).  The tile's storage
    becomes an array of the vector type (float4, double2: aligned to 16 bytes; the
    tile a scalar view of it, Loopy's ``base_storage``), and the update reads
    ``tile[k, o - r0]`` as a vector and takes its component ``r0`` (unrolled: a
    literal), so the device compiler sees one 16-byte load where it saw ``V`` scalar
    loads it had to prove aligned to merge.  Where ``r0`` is a loop the device compiler
    unrolls (``"unr_hint"``), the component is selected by its index
    (``fl_lvec4_at``), a literal once unrolled.

    (Loopy's own vector axis on a view of the storage was declared as a pointer to
    the scalar type: its ``base_storage`` declarations ignore vector axes.)
    """
    from loopy.kernel.array import FixedStrideArrayDimTag, VectorArrayDimTag

    from ..lower.callables import HelperCallable

    knl = t_unit.default_entrypoint
    info = operand_info(knl)
    temps = dict(knl.temporary_variables)
    swaps: dict[str, tuple[list[str], np.dtype]] = {}
    for name, sweep in tiles:
        tv = temps[name]
        dtype = np.dtype(info.x_dtype if name.startswith("x") else info.y_dtype)
        width = vector_width(dtype.itemsize)
        strides, storage = _strides_and_storage(tv)
        if dtype.char not in VECTOR_TYPES or len(sweep) != 3 or strides[-1] != 1 \
                or int(knl.get_constant_iname_length(sweep[2])) != width \
                or any(s % width for s in strides[:-1]):
            continue  # (not the blocked layout by vectors, or rows that break the alignment)
        size = strides[0] * storage[0] // width
        temps[f"{name}_store"] = lp.TemporaryVariable(
            f"{name}_store", dtype, shape=(size, width),
            # (strides count scalars: Loopy divides them by the vector's width)
            dim_tags=(FixedStrideArrayDimTag(width), VectorArrayDimTag()),
            address_space=lp.AddressSpace.LOCAL)
        temps[name] = tv.copy(dtype=lp.types.to_loopy_type(dtype), base_storage=f"{name}_store",
                              _base_storage_access_may_be_aliasing=True)
        swaps[name] = (sweep, dtype)
    if not swaps:
        return t_unit
    # (a literal component where Loopy unrolls r0, the same choice for both tiles)
    literal = all(unrolled(knl, sweep[2]) for sweep, _ in swaps.values())
    reads: dict[str, tuple[list[str], str]] = {}
    helpers: dict[str, tuple[np.dtype, str]] = {}
    for name, (sweep, dtype) in swaps.items():
        pair = _read_helpers(VECTOR_TYPES[dtype.char], vector_width(dtype.itemsize))
        read, source = pair[0] if literal else pair[1]
        reads[name] = (sweep, read)
        helpers[read] = (dtype, source)
    mapper = _tile_reads(reads)
    insns = [i.with_transformed_expressions(mapper) if i.id == f"{REDUCTION_ID}_update" else i
             for i in knl.instructions]
    t_unit = t_unit.with_kernel(knl.copy(instructions=insns, temporary_variables=temps))
    for read, (dtype, source) in sorted(helpers.items()):
        t_unit = lp.register_callable(t_unit, read, HelperCallable(
            read, (dtype, np.dtype(np.int32)), dtype, source))
    return t_unit


def unrolled(knl: Any, iname: str) -> bool:
    """Whether Loopy unrolls ``iname`` (one statement per value)."""
    return any(type(t).__name__ == "UnrollTag" for t in knl.iname_tags(iname))


def _strides_and_storage(tv: Any) -> tuple[list[int], list[int]]:
    """A local tile's strides and storage shape (padding included), in elements."""
    return ([int(tag.stride) for tag in tv.dim_tags],
            [int(n) for n in (tv.storage_shape or tv.shape)])


def _tile_reads(reads: dict[str, tuple[list[str], str]]) -> Any:
    """A mapper replacing reads ``tile[..., k, o]`` by ``read(tile[..., k, o - r0], r0)``
    for the tiles of ``reads`` (tile: its sweep ``[l, r1, r0]`` and its ``read``)."""
    from loopy.symbolic import IdentityMapper

    class TileReads(IdentityMapper):
        def map_subscript(self, expr: Any, *args: Any) -> Any:
            name = getattr(expr.aggregate, "name", None)
            if name not in reads:
                return super().map_subscript(expr, *args)
            sweep, read = reads[name]
            r0 = prim.Variable(sweep[2])
            idx = expr.index if isinstance(expr.index, tuple) else (expr.index,)
            start = expr.aggregate[(*idx[:-1], idx[-1] - r0)]
            return prim.Variable(read)(start, r0)

    return TileReads()


def prefetch_registers(t_unit: lp.TranslationUnit, bk: int,
                       outer: list[str]) -> lp.TranslationUnit:
    """The fill of the local tiles software-pipelined through registers.

    The fill of step ``s`` (``fill_x``, ``fill_y``: global reads stored into the
    tiles, in the loop over the steps ``k_blk``) becomes three statements: the first
    step's fill before the loop (``fill_x0``), and in the loop a read of step
    ``s + 1``'s elements into private registers (``load_x``: issued before the
    products of step ``s``, which do not wait for it) and their store into the tile
    after the products (``store_x``, behind a barrier), so the global reads' latency
    is spent computing.  Loopy places the barriers: before the store (the products
    read the tile) and at the top of the step (the store wrote it).  ``outer``: the
    inames of the work-group and the step loop (not the fill's).
    """
    from loopy.symbolic import SubstitutionMapper
    from pymbolic.mapper.substitutor import make_subst_func

    knl = t_unit.default_entrypoint
    step = outer[-1]
    limit = contraction_sizes(knl).limit(RED)
    more = prim.Comparison(bk * (prim.Variable(step) + 1), "<", limit)
    insns = {i.id: i for i in knl.instructions}
    temps = dict(knl.temporary_variables)
    new_deps: set[str] = set()
    dup: list[tuple[str, str, str, str]] = []
    for name in ("x", "y"):
        fill = insns.pop(f"fill_{name}")
        own = sorted(set(fill.within_inames) - set(outer))
        # (the fill's loop over its elements: unrolled by Loopy or by the device
        # compiler, TileConfig.reg_loops; its registers indexed by it either way)
        looped = [i for i in own if any(type(t).__name__ in ("UnrollTag", "UnrollHintTag")
                                        for t in knl.iname_tags(i))]
        regs = int(knl.get_constant_iname_length(looped[0])) if looped else 1
        reg: Any = prim.Variable(f"{name}_reg")[prim.Variable(looped[0]) if looped else 0]
        temps[f"{name}_reg"] = lp.TemporaryVariable(
            f"{name}_reg", temps[f"{name}_tile"].dtype, shape=(regs,),
            address_space=lp.AddressSpace.PRIVATE)
        first = SubstitutionMapper(make_subst_func({step: 0}))
        following = SubstitutionMapper(make_subst_func({step: prim.Variable(step) + 1}))
        insns[f"fill_{name}0"] = fill.copy(
            id=f"fill_{name}0", assignee=first(fill.assignee),
            expression=first(fill.expression), within_inames=fill.within_inames - {step},
            depends_on=frozenset())
        preds: Any = fill.predicates | {more}
        insns[f"load_{name}"] = lp.Assignment(
            reg, following(fill.expression), id=f"load_{name}",
            within_inames=fill.within_inames, predicates=preds)
        insns[f"store_{name}"] = lp.Assignment(
            fill.assignee, reg, id=f"store_{name}", within_inames=fill.within_inames,
            predicates=preds,
            depends_on=frozenset({f"load_{name}", f"{REDUCTION_ID}_update"}))
        new_deps |= {f"fill_{name}0", f"load_{name}"}
        if looped:
            tag = "unr" if unrolled(knl, looped[0]) else "unr_hint"
            dup += [(looped[0], f"fill_{name}0", f"{looped[0]}_0", tag),
                    (looped[0], f"store_{name}", f"{looped[0]}_s", tag)]
    for iid, insn in list(insns.items()):
        deps = set(insn.depends_on)
        if deps & {"fill_x", "fill_y"}:
            deps -= {"fill_x", "fill_y"}
            # (the products, a reduction still or its update: after the loads, so
            # that the loads are issued first)
            deps |= new_deps if iid in (REDUCTION_ID, f"{REDUCTION_ID}_update") \
                else {"fill_x0", "fill_y0"}
            insns[iid] = insn.copy(depends_on=frozenset(deps))
    t_unit = t_unit.with_kernel(knl.copy(instructions=list(insns.values()),
                                         temporary_variables=temps))
    for iname, within, new, tag in dup:
        t_unit = lp.duplicate_inames(t_unit, [iname], within=f"id:{within}", new_inames=[new],
                                     tags={iname: tag})
    return t_unit


def double_buffer(t_unit: lp.TranslationUnit, step: str) -> lp.TranslationUnit:
    """After :func:`prefetch_registers`: two copies of each tile, the products of step
    ``s`` reading copy ``s mod 2`` while the registers of step ``s + 1`` are stored
    into the other, so that one barrier per step is enough (the hand-written
    update's scheme, :mod:`fuseloop.linalg_gemm`); Loopy finds that the store and the
    products of one step touch different copies and places one barrier, at the top
    of the step."""
    from loopy.kernel.array import FixedStrideArrayDimTag

    knl = t_unit.default_entrypoint
    s = prim.Variable(step)
    temps = dict(knl.temporary_variables)
    for name in ("x_tile", "y_tile"):
        tv = temps[name]
        strides, storage = _strides_and_storage(tv)
        shape: Any = tv.shape
        temps[name] = tv.copy(
            shape=(2, *shape), storage_shape=(2, *storage),
            dim_names=None if tv.dim_names is None else (f"{name}_copy", *tv.dim_names),
            dim_tags=(FixedStrideArrayDimTag(strides[0] * storage[0]),
                      *(FixedStrideArrayDimTag(n) for n in strides)))
    copies = {"fill": 0, "store": (s + 1) % 2}

    def copy_of(iid: str) -> Any:
        for prefix, which in copies.items():
            if iid.startswith(prefix):
                return which
        return s % 2

    from loopy.symbolic import IdentityMapper

    class Copy(IdentityMapper):
        def __init__(self, which: Any) -> None:
            super().__init__()
            self.which = which

        def map_subscript(self, expr: Any, *args: Any) -> Any:
            if getattr(expr.aggregate, "name", None) not in ("x_tile", "y_tile"):
                return super().map_subscript(expr, *args)
            idx = expr.index if isinstance(expr.index, tuple) else (expr.index,)
            return expr.aggregate[(self.which, *(self.rec(i, *args) for i in idx))]

    insns = [i.with_transformed_expressions(Copy(copy_of(i.id))) for i in knl.instructions]
    # Loopy does not see that the store and the products of one step touch different
    # copies (a barrier between them): told so, and given the barrier at the end of
    # the step itself (the store of step s before the products of step s + 1)
    update = f"{REDUCTION_ID}_update"
    stores = [i for i in insns if i.id.startswith("store_") and i.id[6:] in ("x", "y")]
    insns = [i.copy(no_sync_with=i.no_sync_with | {(update, "local")}) if i in stores else i
             for i in insns]
    within = frozenset.intersection(*(frozenset(knl.id_to_insn[update].within_inames)
                                      & frozenset(i.within_inames) for i in stores))
    insns.append(lp.BarrierInstruction(
        id="step_barrier", synchronization_kind="local", mem_kind="local",
        within_inames=within, depends_on=frozenset(i.id for i in stores)))
    return t_unit.with_kernel(knl.copy(instructions=insns, temporary_variables=temps))


# {{{ loop domains

def box_domain(t_unit: lp.TranslationUnit, blocks: dict[str, int]) -> lp.TranslationUnit:
    """The loop domain after the splits by whole ``blocks`` (of ``m``, ``n``, ``k``, each
    padded to its block or a multiple of it) restated as a box: each inner iname
    ``0 <= i < length`` on its own, each block iname ``0 <= blk and block * blk < size``.

    Splitting bounds the sum ``block * blk + ... + r0 < size``; with the size
    class's ``size mod 128 = 0`` (or the padding's ``floor``) isl needed the
    divisibility to see that no unrolled register iname needs a bounds check, for
    every statement Loopy emitted.  The box is the same set under the kernel's
    assumptions (checked: otherwise the domain is kept).
    """
    knl = t_unit.default_entrypoint
    sizes = contraction_sizes(knl)
    dom = knl.domains[0]
    if len(knl.domains) != 1:
        return t_unit
    bounds: dict[str, str] = {}
    for name in map(str, dom.get_var_names(isl.dim_type.set)):
        side = name.split("_")[0]
        if side not in blocks or name == side:
            proj = dom.project_out_except([name], [isl.dim_type.set])
            text = str(proj)
            bounds[name] = text[text.index(":") + 1:text.rindex("}")].strip()
        elif name == f"{side}_blk":
            bounds[name] = f"0 <= {name} and {blocks[side]} * {name} < {sizes.of(side)}"
        else:
            bounds[name] = f"0 <= {name} < {int(knl.get_constant_iname_length(name))}"
    params = [str(p) for p in dom.get_var_names(isl.dim_type.param)]
    box = isl.BasicSet(f"[{', '.join(params)}] -> {{[{', '.join(bounds)}]: "
                       + " and ".join(bounds.values()) + "}")
    assumed = isl.align_spaces(knl.assumptions, dom.params())
    if not box.intersect_params(assumed).is_equal(dom.intersect_params(assumed)):
        return t_unit
    return t_unit.with_kernel(knl.copy(domains=[box]))


def split_boxes(t_unit: lp.TranslationUnit) -> lp.TranslationUnit:
    """Each loop domain that is a box (every constraint bounds one iname, no
    existential variables) restated as one domain per iname.

    Loopy's code generation works, for every statement it emits and every value of
    an unrolled iname, on the domain of the inames involved (bounds checks, the
    implemented domain, the sign tests of ``%`` and ``//``): with one domain for all
    inames, each isl operation carried every iname of the kernel (20 for the 8 x 8
    register tile, its fill and its prefetch).  Split, the domain of a statement's
    inames is the product of the few it uses (a quarter less CPU time for the
    matmul's code generation); the generated source is the same.  Other domains are
    kept as they are.
    """
    knl = t_unit.default_entrypoint
    doms: list[Any] = []
    for dom in knl.domains:
        doms.extend(_box_pieces(dom) or [dom])
    return t_unit.with_kernel(knl.copy(domains=doms))


def _box_pieces(dom: Any) -> list[Any] | None:
    """``dom`` as one set per iname, or None where it is not such a product (an
    existential variable, a constraint on several inames or on parameters alone)."""
    dt = isl.dim_type
    names = [str(n) for n in dom.get_var_names(dt.set)]
    params = [str(n) for n in dom.get_var_names(dt.param)]
    if len(names) < 2 or dom.dim(dt.div):
        return None
    own: list[list[Any]] = [[] for _ in names]
    for cns in dom.get_constraints():
        used = [i for i in range(len(names))
                if not cns.get_coefficient_val(dt.set, i).is_zero()]
        if len(used) != 1:
            return None
        own[used[0]].append(cns)
    pieces = []
    for pos, name in enumerate(names):
        space = isl.Space.create_from_names(dom.get_ctx(), set=[name], params=params)
        piece = isl.BasicSet.universe(space)
        for cns in own[pos]:
            new = (isl.Constraint.equality_alloc(space) if cns.is_equality()
                   else isl.Constraint.inequality_alloc(space))
            new = new.set_constant_val(cns.get_constant_val()).set_coefficient_val(
                dt.set, 0, cns.get_coefficient_val(dt.set, pos))
            for k in range(len(params)):
                new = new.set_coefficient_val(dt.param, k, cns.get_coefficient_val(dt.param, k))
            piece = piece.add_constraint(new)
        pieces.append(piece)
    return pieces


# }}}
