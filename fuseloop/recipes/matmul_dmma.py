"""Float64 products on NVIDIA's FP64 tensor cores (``mma.sync``, compute capability >= 8.0).

``gpu-tiled`` hands a float64 contraction to :func:`dmma_tiles` when :func:`use_dmma` says
so: an NVIDIA device of compute capability 8.0 or more (the device's own,
:func:`nvidia_capability`), both operands and the sum float64, neither side of the output
in a short or medium size class.  Elsewhere (and with ``dmma=False``) the FMA tiles stay.

The warp's multiply-accumulate (:data:`SHAPES`: ``m8n8k4`` from sm_80, ``m16n8k4``,
``m16n8k8`` and ``m16n8k16`` from sm_90, an ``m x k`` by ``k x 8`` product added to an ``m
x 8`` accumulator, spread over the 32 lanes of a warp) is a function Loopy calls,
``fl_dmma_<shape>`` (:func:`dmma_source`: inline PTX, which NVIDIA's OpenCL compiler and
NVRTC both accept); everything else is Loopy instructions:

- a work-group computes a ``bm x bn`` block with ``(bm / wm) * (bn / wn)`` warps (``l.1``)
  of 32 lanes (``l.0``), each warp a ``wm x wn`` part of it, as ``wm/m x wn/8`` tiles;
- per step of ``bk`` of the reduced range the work-group fills local tiles
  ``x_tile[bk][bm]`` and ``y_tile[bk][bn]`` (``fill_x``, ``fill_y``: the operand rules, so
  an elementwise producer is applied while filling; neighbouring lanes on the operand's
  contiguous axis), rows padded by :data:`PAD` elements so that the fragment reads below
  hit different banks;
- per ``k`` terms of the step a lane reads its values of each tile of A and B (``frag_x``,
  ``frag_y``, where :attr:`Shape.counts` places them) and the warp issues one product per
  output tile (``contract_update``), a lane's accumulators being the outputs ``(l / 4 + 8
  (i / 2), 2 (l % 4) + i % 2)``;
- the epilogue and the stores run over the same lanes and tiles, each lane on its own
  outputs.

The fill is pipelined as ``gpu-tiled``'s (``prefetch_registers``, ``double_buffer`` of
:mod:`~fuseloop.recipes.contraction_pipeline`): step ``s + 1`` read into registers before
the products of step ``s``, two copies of the tiles, one barrier a step; the registers hold
the arrays' elements, the operand's producer applied as they are stored
(:func:`_loads_first`).  The products are IEEE float64 fused multiply-adds: results match
numpy's to summation order.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, NamedTuple

from .._lazy import lp, prim
from ..lower.contraction import (
    ACC,
    BATCH,
    COL,
    RED,
    REDUCTION_ID,
    ROW,
    X_RULE,
    Y_RULE,
    contraction_layout,
    contraction_sizes,
    extent_range,
    operand_info,
    pad_to_tiles,
)
from . import contraction_pipeline as pipeline
from .core import Param, Space

if TYPE_CHECKING:
    from ..runtime.devices import Device

#: a warp's lanes; an output tile's columns (every shape's n)
WARP, TILE_N = 32, 8
#: elements each local tile row is padded by: a fragment read (rows ``k .. k + 3``,
#: eight neighbouring columns) then touches four different 32-byte runs of banks
PAD = 4
#: the static local memory of a work-group on NVIDIA's devices (every copy of the tiles)
LOCAL_MEMORY = 48 * 1024


class Shape(NamedTuple):
    """A float64 ``mma.sync`` shape: ``m x 8`` outputs, ``k`` terms, from compute
    capability ``least`` (major * 10 + minor) on."""

    m: int
    k: int
    least: int

    @property
    def counts(self) -> tuple[int, int, int]:
        """A lane's values of A, B and C (D): lane ``l`` holds ``A[l / 4 + 8 h][l % 4 + 4
        q]`` as its value ``h + (m / 8) q``, ``B[l % 4 + 4 q][l / 4]`` as value ``q``, and
        ``C[l / 4 + 8 (i / 2)][2 (l % 4) + i % 2]`` as value ``i`` (PTX ISA, the ``mma``
        fragments of ``.f64``)."""
        return (self.m // 8) * (self.k // 4), self.k // 4, self.m // 4


#: the float64 shapes: m8n8k4 on sm_80 and later, the larger ones on sm_90 and later
SHAPES = {"m8n8k4": Shape(8, 4, 80), "m16n8k4": Shape(16, 4, 90),
          "m16n8k8": Shape(16, 8, 90), "m16n8k16": Shape(16, 16, 90)}
#: the shape every device with float64 mma.sync has (where a configuration's is newer)
BASE_SHAPE = "m8n8k4"
#: the least compute capability with float64 ``mma.sync``
MIN_CAPABILITY = SHAPES[BASE_SHAPE].least


def dmma_source(name: str) -> str:
    """The OpenCL C (and CUDA) function ``fl_dmma_<name>``: the warp's multiply-accumulate
    of shape ``name`` by inline PTX, ``d0 = f(a.., b.., c.., &d1, ..)`` (a pointer for
    each further output is how Loopy passes a call's further assignees)."""
    na, nb, nc = SHAPES[name].counts
    ins = [f"a{i}" for i in range(na)] + [f"b{i}" for i in range(nb)] + \
        [f"c{i}" for i in range(nc)]
    params = [f"double {x}" for x in ins] + [f"double *d{i}" for i in range(1, nc)]
    groups, at = [], 0
    for count in (nc, na, nb, nc):
        groups.append("{" + ", ".join(f"%{at + i}" for i in range(count)) + "}")
        at += count
    outs = ["\"=d\"(d0)"] + [f"\"=d\"(*d{i})" for i in range(1, nc)]
    reads = [f"\"d\"({x})" for x in ins]
    return "\n".join([
        f"// FP64 tensor cores: an {name} product of a warp",
        f"inline double fl_dmma_{name}({', '.join(params)})",
        "{",
        "    double d0;",
        f"    asm volatile(\"mma.sync.aligned.{name}.row.col.f64.f64.f64.f64 "
        f"{', '.join(groups)};\"",
        f"                 : {', '.join(outs)}",
        f"                 : {', '.join(reads)});",
        "    return d0;",
        "}", ""])


class DmmaTiles(NamedTuple):
    """A work-group computes ``bm x bn`` outputs in steps of ``bk``; each warp ``wm x
    wn`` of them, in ``mma`` products (:data:`SHAPES`; where the device lacks it,
    :data:`BASE_SHAPE`); ``copies`` of the local tiles (2: the next step stored into the
    other copy, one barrier a step; 1: two barriers, room for a longer step)."""

    bm: int = 128
    bn: int = 128
    bk: int = 8
    wm: int = 32
    wn: int = 32
    copies: int = 2
    mma: str = "m16n8k8"

    @property
    def warps(self) -> int:
        return (self.bm // self.wm) * (self.bn // self.wn)

    def local_bytes(self) -> int:
        """Both tiles (each copy), float64, rows padded."""
        return self.copies * 8 * self.bk * (self.bm + self.bn + 2 * PAD)


#: the default blocks: 16 warps of 32 x 32 in m16n8k8 products (on an H200 the fastest of
#: benchmarks/probes/matmul_dmma_probe.py's candidates at 4096^3 and on NPBench's gemm,
#: 2mm and A.T @ B; 124 registers a lane, no spills)
DMMA_TILES = DmmaTiles(128, 128, 8, 32, 32, 2, "m16n8k8")
#: the probe's candidates (``--configs all``)
DMMA_SEARCH = (DMMA_TILES, DmmaTiles(128, 128, 8, 64, 32, 2, "m8n8k4"),
               DmmaTiles(128, 128, 8, 64, 32), DmmaTiles(128, 128, 8, 64, 32, 2, "m16n8k4"),
               DmmaTiles(128, 128, 8, 32, 64), DmmaTiles(128, 64, 8, 32, 32),
               DmmaTiles(128, 128, 16, 64, 32, 1, "m16n8k16"),
               DmmaTiles(64, 64, 16, 32, 32, 2, "m16n8k16"), DmmaTiles(64, 64, 16, 32, 32))
DMMA_TEXT = ("a DmmaTiles whose warp tiles (multiples of the shape's m and of 8) divide "
             "the block, bk a multiple of the shape's k, at most 1024 lanes, the tiles "
             "within 48 KiB")


def tiles_ok(cfg: object) -> bool:
    """A block the recipe can build."""
    if not isinstance(cfg, DmmaTiles) or cfg.mma not in SHAPES \
            or not all(isinstance(v, int) and v > 0 for v in cfg[:6]):
        return False
    shape = SHAPES[cfg.mma]
    return (cfg.copies in (1, 2) and cfg.wm % shape.m == 0 and cfg.wn % TILE_N == 0
            and cfg.bk % shape.k == 0 and cfg.bm % cfg.wm == 0 and cfg.bn % cfg.wn == 0
            and cfg.warps * WARP <= 1024 and cfg.local_bytes() <= LOCAL_MEMORY
            and (cfg.bm * cfg.bk) % (cfg.warps * WARP) == 0
            and (cfg.bn * cfg.bk) % (cfg.warps * WARP) == 0)


#: gpu-tiled's parameters of this path (fl.tune tries the defaults only: the blocks'
#: candidates, DMMA_SEARCH, would multiply the search of every GPU product)
PARAMS = (Param("dmma", bool, True, "float64 on FP64 tensor cores (NVIDIA, compute "
                "capability >= 8.0: recipes/matmul_dmma.py); False: wide_tiles",
                Space((True,), lambda v: isinstance(v, bool), "True or False")),
          Param("dmma_tiles", DmmaTiles, DMMA_TILES, "the FP64 tensor cores' blocks",
                Space((DMMA_TILES,), tiles_ok, DMMA_TEXT)))


# {{{ the rule

def nvidia_capability(device: Device) -> int:
    """The compute capability (major * 10 + minor) of an NVIDIA device, from its
    backend (CUDA: the architecture it builds for; OpenCL: the
    ``cl_nv_device_attribute_query`` extension); 0 when not NVIDIA or not known."""
    if "nvidia" not in f"{device.vendor} {device.platform}".lower():
        return 0
    handle = device.cl_device
    arch = getattr(handle, "arch", None)
    if isinstance(arch, str) and arch.isdigit():
        return int(arch)
    try:
        return 10 * int(handle.compute_capability_major_nv) + \
            int(handle.compute_capability_minor_nv)
    except Exception:  # (no such query)
        return 0


def use_dmma(knl: lp.LoopKernel, device: Device, medium: int) -> bool:
    """Whether a contraction kernel ``knl`` runs on FP64 tensor cores: float64 operands
    and sum on an NVIDIA device of compute capability >= 8.0, and both sides of the
    output longer than ``medium`` (shorter sides: gpu-tiled's skinny and medium blocks)."""
    info = operand_info(knl)
    acc: Any = knl.temporary_variables[ACC].dtype
    if (info.x_dtype, info.y_dtype) != ("d", "d") or acc.numpy_dtype.char != "d":
        return False
    for axis in (ROW, COL):
        hi = extent_range(knl, axis)[1]
        if hi is not None and hi <= max(medium, TILE_N):
            return False
    return nvidia_capability(device) >= MIN_CAPABILITY

# }}}


# {{{ the kernel

def dmma_tiles(t_unit: lp.TranslationUnit, cfg: DmmaTiles,
               device: Device) -> lp.TranslationUnit:
    """The contraction as warps of DMMA tiles (see the module) for ``device``."""
    name = cfg.mma if SHAPES[cfg.mma].least <= nvidia_capability(device) else BASE_SHAPE
    shape = SHAPES[name]
    na, nb, nc = shape.counts
    t_unit = pad_to_tiles(t_unit, {ROW: cfg.bm, COL: cfg.bn, RED: cfg.bk})
    knl = t_unit.default_entrypoint
    batch = BATCH in knl.all_inames()
    outer = [*([BATCH] if batch else []), f"{ROW}_blk", f"{COL}_blk"]
    step = f"{RED}_blk"
    v = prim.Variable
    warp, lane = v("warp"), v("lane")
    wrow, wcol = warp // (cfg.bn // cfg.wn), warp % (cfg.bn // cfg.wn)
    group, quad = lane // 4, lane % 4
    # the output element of accumulator (ti, tj, c) of a lane
    row = v(f"{ROW}_blk") * cfg.bm + wrow * cfg.wm + v("ti_e") * shape.m + group \
        + 8 * (v("c_e") // 2)
    col = v(f"{COL}_blk") * cfg.bn + wcol * cfg.wn + v("tj_e") * TILE_N + 2 * quad \
        + v("c_e") % 2
    insns = _epilogue(knl, {ROW: row, COL: col}, frozenset(
        [*outer, "warp", "lane", "ti_e", "tj_e", "c_e"]))
    lanes = frozenset([*outer, "warp", "lane"])
    acc: Any = v("acc_reg")
    insns.append(lp.Assignment(acc[v("ti_z"), v("tj_z"), v("c_z")], 0.0,
                               id=f"{REDUCTION_ID}_init",
                               within_inames=lanes | {"ti_z", "tj_z", "c_z"}))
    insns += _fills(knl, cfg, outer, step, batch)
    k0 = v(f"{RED}_q") * shape.k + quad
    halves = shape.m // 8
    a_at = (k0 + 4 * (v("ia") // halves),
            wrow * cfg.wm + v("ti_f") * shape.m + group + 8 * (v("ia") % halves))
    b_at = (k0 + 4 * v("ib"), wcol * cfg.wn + v("tj_f") * TILE_N + group)
    frag = lanes | {step, f"{RED}_q"}
    insns += [
        lp.Assignment(v("a_frag")[v("ti_f"), v("ia")], v("x_tile")[a_at], id="frag_x",
                      within_inames=frag | {"ti_f", "ia"}, depends_on=frozenset({"fill_x"})),
        lp.Assignment(v("b_frag")[v("tj_f"), v("ib")], v("y_tile")[b_at], id="frag_y",
                      within_inames=frag | {"tj_f", "ib"}, depends_on=frozenset({"fill_y"}))]
    from loopy.symbolic import ResolvedFunction

    ti, tj = v("ti"), v("tj")
    outs = tuple(acc[ti, tj, c] for c in range(nc))
    args = [v("a_frag")[ti, i] for i in range(na)] + [v("b_frag")[tj, i] for i in range(nb)]
    insns.append(lp.CallInstruction(
        outs, ResolvedFunction(v(f"fl_dmma_{name}"))(*args, *outs),
        id=f"{REDUCTION_ID}_update", within_inames=frag | {"ti", "tj"},
        # (on the fills too: prefetch_registers then issues the next step's global
        # reads before the products)
        depends_on=frozenset({"frag_x", "frag_y", "fill_x", "fill_y",
                              f"{REDUCTION_ID}_init"})))
    knl = knl.copy(instructions=insns, domains=_domains(knl, cfg, shape, outer, step),
                   temporary_variables=_temporaries(knl, cfg, shape))
    t_unit = t_unit.with_kernel(knl)
    from ..lower.dmma_call import dmma_callable

    t_unit = lp.register_callable(t_unit, f"fl_dmma_{name}",
                                  dmma_callable(f"fl_dmma_{name}", shape.counts,
                                                dmma_source(name)))
    tags = {"warp": "l.1", "lane": "l.0", f"{ROW}_blk": "g.1", f"{COL}_blk": "g.0",
            **({BATCH: "g.2"} if batch else {})}
    for side in ("x", "y"):
        tags |= {f"{side}_fw": "l.1", f"{side}_fl": "l.0", f"{side}_fu": "unr"}
    for iname in ("ti", "tj", "ti_f", "tj_f", "ia", "ib", f"{RED}_q", "ti_z", "tj_z", "c_z",
                  "ti_e", "tj_e", "c_e"):
        tags[iname] = "unr_hint"
    t_unit = lp.tag_inames(t_unit, tags)
    for order in (f"{step},{RED}_q,ti,tj", "ti_f,ia", "tj_f,ib", "ti_e,tj_e,c_e",
                  "ti_z,tj_z,c_z"):
        t_unit = lp.prioritize_loops(t_unit, order)
    t_unit = _loads_first(pipeline.prefetch_registers(t_unit, cfg.bk, [*outer, step]))
    if cfg.copies == 1:
        return t_unit
    return _reads_apart(pipeline.double_buffer(t_unit, step))


def _epilogue(knl: lp.LoopKernel, at: dict[str, Any], within: frozenset) -> list[Any]:
    """The kernel's instructions after the sum (the copy out of the accumulator, the
    epilogue, the stores) over a lane's accumulators: ``m`` and ``n`` replaced by the
    expressions ``at``, their inames by ``within``."""
    from loopy.symbolic import SubstitutionMapper
    from pymbolic.mapper.substitutor import make_subst_func

    mapper = SubstitutionMapper(make_subst_func(at))
    out = []
    for insn in knl.instructions:
        if insn.id == REDUCTION_ID:
            insn = insn.copy(expression=prim.Variable("acc_reg")[
                prim.Variable("ti_e"), prim.Variable("tj_e"), prim.Variable("c_e")],
                depends_on=insn.depends_on | {f"{REDUCTION_ID}_update"})
        else:
            insn = insn.with_transformed_expressions(mapper)
        out.append(insn.copy(within_inames=(insn.within_inames - {ROW, COL}) | within))
    return out


def _fills(knl: lp.LoopKernel, cfg: DmmaTiles, outer: list[str], step: str,
           batch: bool) -> list[Any]:
    """The fills of the local tiles for step ``step``: element ``f`` of a tile is read by
    lane ``f mod (warps * 32)`` of the work-group, the operand's contiguous axis fastest."""
    v = prim.Variable
    layout = contraction_layout(knl)
    threads = cfg.warps * WARP
    out = []
    for name, rule, block, fast in (("x", X_RULE, cfg.bm, layout[0]),
                                    ("y", Y_RULE, cfg.bn, layout[1])):
        f = v(f"{name}_fu") * threads + v(f"{name}_fw") * WARP + v(f"{name}_fl")
        fk, fo = (f % cfg.bk, f // cfg.bk) if fast == RED else (f // block, f % block)
        side = ROW if name == "x" else COL
        o = v(f"{side}_blk") * block + fo
        kk = v(step) * cfg.bk + fk
        args = (o, kk) if name == "x" else (kk, o)
        call = v(rule)(*([v(BATCH)] if batch else []), *args)
        out.append(lp.Assignment(
            v(f"{name}_tile")[fk, fo], call, id=f"fill_{name}",
            within_inames=frozenset([*outer, step, f"{name}_fu", f"{name}_fw", f"{name}_fl"])))
    return out


def _domains(knl: lp.LoopKernel, cfg: DmmaTiles, shape: Shape, outer: list[str],
             step: str) -> list[Any]:
    """One box domain per iname (as :func:`~fuseloop.recipes.contraction_pipeline.
    split_boxes` leaves them)."""
    from .._lazy import isl

    sizes = contraction_sizes(knl)
    params = sizes.params()
    threads = cfg.warps * WARP
    na, nb, nc = shape.counts
    bounds = {f"{ROW}_blk": (ROW, cfg.bm), f"{COL}_blk": (COL, cfg.bn), step: (RED, cfg.bk)}
    lengths = {"warp": cfg.warps, "lane": WARP, f"{RED}_q": cfg.bk // shape.k,
               "x_fw": cfg.warps, "x_fl": WARP, "x_fu": cfg.bm * cfg.bk // threads,
               "y_fw": cfg.warps, "y_fl": WARP, "y_fu": cfg.bn * cfg.bk // threads,
               "ia": na, "ib": nb, "c_z": nc, "c_e": nc}
    for suffix in ("", "_f", "_z", "_e"):
        lengths |= {f"ti{suffix}": cfg.wm // shape.m, f"tj{suffix}": cfg.wn // TILE_N}
    text = {i: f"0 <= {i} and {blk} * {i} < {sizes.of(axis)}"
            for i, (axis, blk) in bounds.items()}
    if BATCH in outer:
        text[BATCH] = f"0 <= {BATCH} < {sizes.of(BATCH)}"
    text |= {i: f"0 <= {i} < {n}" for i, n in lengths.items()}
    head = f"[{', '.join(params)}] -> " if params else ""
    return [isl.BasicSet(f"{head}{{[{i}]: {c}}}") for i, c in text.items()]


def _temporaries(knl: lp.LoopKernel, cfg: DmmaTiles, shape: Shape) -> dict[str, Any]:
    import numpy as np

    na, nb, nc = shape.counts
    temps = dict(knl.temporary_variables)
    f64 = np.float64
    local, private = lp.AddressSpace.LOCAL, lp.AddressSpace.PRIVATE
    temps |= {
        "x_tile": lp.TemporaryVariable("x_tile", f64, (cfg.bk, cfg.bm + PAD),
                                       address_space=local),
        "y_tile": lp.TemporaryVariable("y_tile", f64, (cfg.bk, cfg.bn + PAD),
                                       address_space=local),
        "a_frag": lp.TemporaryVariable("a_frag", f64, (cfg.wm // shape.m, na),
                                       address_space=private),
        "b_frag": lp.TemporaryVariable("b_frag", f64, (cfg.wn // TILE_N, nb),
                                       address_space=private),
        "acc_reg": lp.TemporaryVariable("acc_reg", f64, (cfg.wm // shape.m,
                                                         cfg.wn // TILE_N, nc),
                                        address_space=private)}
    return temps


def _loads_first(t_unit: lp.TranslationUnit) -> lp.TranslationUnit:
    """The next step's prefetch (``load_x``, ``load_y``) as its reads of the operands'
    arrays alone, the rest of the operand rule (an elementwise producer, ``1.5 * A``; the
    zero past the reduced range) applied where the registers are stored into the tiles,
    after the products: a value computed from a read at the read waits for it there, before
    the products.  (Every read is at clamped, in-range indices: unconditional here.)"""
    from loopy.symbolic import SubstitutionMapper
    from pymbolic.mapper.substitutor import make_subst_func

    # (the operand rules written out: their array reads are what is loaded)
    knl = lp.expand_subst(t_unit, within="id:load_x or id:load_y").default_entrypoint
    args = frozenset(knl.arg_dict)
    insns = {i.id: i for i in knl.instructions}
    temps = dict(knl.temporary_variables)
    renamed: dict[str, frozenset[str]] = {}
    for side in ("x", "y"):
        load, store = insns.pop(f"load_{side}"), insns.pop(f"store_{side}")
        at, to = load.assignee.index, store.expression.index
        reads = _Reads(args, side, to)
        # (the reads' registers indexed by the store's iname, the rest renamed to it)
        value = SubstitutionMapper(make_subst_func({at.name: to}))(reads(load.expression))
        regs = temps.pop(f"{side}_reg").shape
        for expr, name in reads.found.items():
            temps[name] = lp.TemporaryVariable(name, knl.arg_dict[expr.aggregate.name].dtype, regs,
                                               address_space=lp.AddressSpace.PRIVATE)
            insns[f"load_{name}"] = load.copy(id=f"load_{name}", assignee=prim.Variable(name)[at],
                                              expression=expr)
        renamed[load.id] = frozenset(f"load_{name}" for name in reads.found.values())
        insns[store.id] = store.copy(expression=value,
                                     depends_on=(store.depends_on - {load.id}) | renamed[load.id])
    for iid, insn in list(insns.items()):
        if insn.depends_on & renamed.keys():
            deps = frozenset().union(*(renamed.get(d, {d}) for d in insn.depends_on))
            insns[iid] = insn.copy(depends_on=deps)
    return t_unit.with_kernel(knl.copy(instructions=list(insns.values()),
                                       temporary_variables=temps))


def _Reads(args: frozenset, side: str, at: Any) -> Any:
    """A mapper replacing each read of an array of ``args`` (outermost: a gather's index
    read stays inside it) by a register ``<side>_in<j>[at]``; ``found``: read -> name."""
    from loopy.symbolic import IdentityMapper

    class Reads(IdentityMapper):
        def __init__(self) -> None:
            super().__init__()
            self.found: dict[Any, str] = {}

        def map_subscript(self, expr: Any, *a: Any) -> Any:
            if getattr(expr.aggregate, "name", None) not in args:
                return super().map_subscript(expr, *a)
            name = self.found.setdefault(expr, f"{side}_in{len(self.found)}")
            return prim.Variable(name)[at]

    return Reads()


def _reads_apart(t_unit: lp.TranslationUnit) -> lp.TranslationUnit:
    """The fragment reads and the stores of the next step touch different copies of the
    tiles (``double_buffer`` told Loopy so for the products, which here read the
    fragments instead)."""
    knl = t_unit.default_entrypoint
    apart = frozenset((f"frag_{n}", "local") for n in ("x", "y"))
    insns = [i.copy(no_sync_with=i.no_sync_with | apart) if i.id in ("store_x", "store_y")
             else i for i in knl.instructions]
    return t_unit.with_kernel(knl.copy(instructions=insns))

# }}}


__all__ = ["DMMA_TILES", "SHAPES", "DmmaTiles", "dmma_source", "dmma_tiles",
           "nvidia_capability", "tiles_ok", "use_dmma"]
