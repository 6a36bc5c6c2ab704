"""Local-memory tiles for stencils: the ``tile`` parameter of ``gpu-coalesced``.

An elementwise kernel whose reads of one input are a neighbourhood of the output
index (slices ``x[1:-1, 2:] + x[1:-1, :-2] + ...``: several loads of one buffer with
the same strides at the output's own index and different offsets; or ``fl.stencil``'s
gathers, whose shifts and boundary rules are compiled into their index arithmetic)
reads each input element once per neighbour.  Here the output is cut into 2-D or
3-D tiles, one per work-group; each work-group copies its tile of the input plus the
halo the neighbours reach into local memory (Loopy's ``add_prefetch``, the boundary
rule applied to the copy's indices), waits at a barrier, and computes from the copy.

Where the tile goes is decided in two steps:

* the size class (:func:`stencil_size_class`, from the program and the launch's
  parameter values) finds loads that may be a neighbourhood: slices whose offsets,
  split into per-axis shifts with the strides' values, reach at least one element
  along at least two axes (the rule), or unchecked gathers along two axes.  It pins
  the values the tiling depends on (the output's extents, those loads' strides and
  offsets) as Loopy assumptions, so such a kernel is built and kept per shape;
* the transform (:func:`tile_stencils`) reads the pinned values back from the
  kernel's assumptions, replaces the flat loop by one loop per output axis, reads
  each input's neighbourhood off its index expressions
  (:mod:`fuseloop.recipes.stencil_reads`), applies the rule again, and stages the
  chosen inputs through local memory when the tiles fit the device.

The loops cover whole tiles: outputs beyond the array's edges are not computed, and
the fetch of a tile that sticks out reads clamped positions (values never used).
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Sequence
from functools import lru_cache
from typing import TYPE_CHECKING, Any, NamedTuple

import numpy as np

from .._lazy import lp, prim
from .stencil_reads import Neighbourhood, linear, neighbourhoods, rewrite_reads, split_offset

if TYPE_CHECKING:
    from ..expr.program import Program
    from ..runtime.devices import Device

#: the default tile: (planes, rows, columns) of a 3-D tile; a 2-D one is the last two
DEFAULT_TILE = (2, 8, 32)
#: the local memory assumed where the device does not say (OpenCL's minimum is 32 KiB)
DEFAULT_LOCAL_MEMORY = 32 * 1024
TILE_INAME = "i_s"


# {{{ the neighbourhood, from the program and the parameter values

def _value(x: Any, params: Sequence[int]) -> int:
    return params[x[1]] if isinstance(x, tuple) else int(x)


class _Group(NamedTuple):
    """Loads of one input that may be a neighbourhood: slices (``strides`` along the
    output's axes and the ``offsets``) or unchecked gathers along ``gathered`` axes
    (``fl.stencil``'s boundary rules; strides and offsets empty); ``pins``: the
    program's parameters the tiled kernel is built for."""

    slot: int
    strides: tuple
    offsets: tuple
    gathered: int
    pins: tuple


@lru_cache(maxsize=512)
def _stencil_loads(program: Program) -> tuple[_Group, ...]:
    """The program's groups of loads that may be a neighbourhood (see :class:`_Group`)."""
    if (program.row_dims is not None or program.has_reduce or program.contraction is not None
            or program.has_sparse or program.mask is not None):
        return ()
    dims = tuple(d for d, s in enumerate(program.root_sizes) if s != 1)
    if not 2 <= len(dims) <= 3:
        return ()
    slices: dict[tuple, list] = {}
    gathers: dict[int, tuple[set, set]] = {}
    for e in program.entries:
        if e.kind != "load" or e.strides == "c":
            continue
        at = tuple(e.at)
        shift = len(program.root_sizes) - len(at)
        params = {x for x in (*e.strides, e.offset) if isinstance(x, tuple)}
        if all(c == 0 or c == ("r", k + shift) or (c[0] == "g" and c[3] is False)
               for k, c in enumerate(at)) and any(c != 0 and c[0] == "g" for c in at):
            axes, pins = gathers.setdefault(e.slot, (set(), set()))
            axes.update(k for k, c in enumerate(at) if c != 0 and c[0] == "g")
            pins.update(params)
            continue
        if any(c != 0 and c != ("r", k + shift) for k, c in enumerate(at)):
            continue  # a checked gather, a transpose or a broadcast: not a neighbourhood
        used = tuple(e.strides[k - shift] if k >= shift and at[k - shift] != 0 else 0
                     for k in dims)
        if used[-1] != 1 or any(s == 0 for s in used):
            continue
        slices.setdefault((e.slot, used), []).append(e.offset)
    groups = [_Group(slot, strides, tuple(dict.fromkeys(offs)), 0,
                     tuple(x for x in (*strides, *offs) if isinstance(x, tuple)))
              for (slot, strides), offs in slices.items() if len(set(offs)) > 1]
    groups += [_Group(slot, (), (), len(axes), tuple(sorted(pins)))
               for slot, (axes, pins) in gathers.items()]
    return tuple(groups)


def reach(strides: Sequence[int], offsets: Sequence[int]) -> tuple[int, ...] | None:
    """How far the neighbourhood of ``offsets`` spans along each axis (max - min
    shift), or None when an offset is not a neighbour."""
    # (relative to the smallest: offsets of a view straddling half a row split alike)
    shifts = [split_offset(o - min(offsets), strides) for o in offsets]
    if any(s is None for s in shifts):
        return None
    return tuple(max(s[d] for s in shifts) - min(s[d] for s in shifts)  # type: ignore[index]
                 for d in range(len(strides)))


def tiled_by_rule(reaches: Sequence[int]) -> bool:
    """The rule: a tile pays when the neighbours reach at least one element along at
    least two axes (a 1-D or one-axis stencil reuses its loads through the cache)."""
    return sum(r >= 1 for r in reaches) >= 2


def stencil_size_class(program: Program, params: Sequence[int], n_rows: int,
                       n_elem: int) -> str:
    """Pins the extents, strides and offsets of a stencil the rule tiles (see the
    module docstring); '' for every other kernel."""
    loads = _stencil_loads(program)
    if not loads:
        return ""
    pinned: set[str] = set()
    for g in loads:
        if g.gathered:
            # (the shifts are compiled into the gathers' index arithmetic: the transform
            # reads them and applies the rule; here, gathers along two axes suffice)
            if g.gathered < 2:
                continue
        else:
            r = reach([_value(s, params) for s in g.strides],
                      [_value(o, params) for o in g.offsets])
            if r is None or not tiled_by_rule(r):
                continue
        pinned.update(f"p{x[1]} = {params[x[1]]}" for x in g.pins)
    if not pinned:
        return ""
    dims = [s for s in program.root_sizes if s != 1]
    # (the first extent is not a kernel parameter: N, the element count, stands for it)
    pinned.update(f"p{s[1]} = {params[s[1]]}" for s in dims[1:])
    pinned.add(f"N = {n_rows}")
    return " and ".join(sorted(pinned))

# }}}


# {{{ the transform

def _fixed_values(knl: lp.LoopKernel) -> dict[str, int]:
    """The parameters the kernel's assumptions fix to one value."""
    import islpy as isl

    space = knl.assumptions
    out: dict[str, int] = {}
    for k in range(space.dim(isl.dim_type.param)):
        val = space.plain_get_val_if_fixed(isl.dim_type.param, k)
        if not val.is_nan():
            out[str(space.get_dim_name(isl.dim_type.param, k))] = int(val.to_python())
    return out


def _output_shape(knl: lp.LoopKernel, fixed: dict[str, int]) -> tuple[int, ...] | None:
    """The output's extents, from the flat loop's unflattening (see
    :func:`fuseloop.lower.kernel._unflatten`): ``fl_idx_mod(i, n)`` names the last
    extent, ``fl_idx_mod(fl_idx_div(i, s), m)`` a middle one, the element count ``N``
    the first."""
    from loopy.symbolic import WalkMapper

    i = prim.Variable("i")
    last: set[int] = set()
    middle: set[tuple[int, int]] = set()

    def value(e: Any) -> int | None:
        lin = linear(e, fixed)
        return lin[1] if lin is not None and not lin[0] else None

    class Finder(WalkMapper):
        def map_call(self, expr: Any, *args: Any) -> None:
            if getattr(expr.function, "name", "") == "fl_idx_mod":
                inner, n = expr.parameters[0], value(expr.parameters[1])
                if inner == i and n is not None:
                    last.add(n)
                elif (isinstance(inner, prim.Call) and inner.parameters[0] == i
                        and getattr(inner.function, "name", "") == "fl_idx_div"):
                    s = value(inner.parameters[1])
                    if n is not None and s is not None:
                        middle.add((n, s))
            super().map_call(expr, *args)

    for insn in knl.instructions:
        Finder()(insn.expression)
    n = fixed.get("N")
    if n is None or len(last) != 1 or len(middle) > 1:
        return None
    (b,) = last
    inner_shape = [b] if not middle else [next(iter(middle))[0], b]
    if middle and next(iter(middle))[1] != b:
        return None
    rest = math.prod(inner_shape)
    if n % rest:
        return None
    return (n // rest, *inner_shape)


def _flatten(inames: Sequence[str], shape: Sequence[int], upto: int) -> Any:
    """The C-order position of the first ``upto + 1`` indices."""
    expr: Any = 0
    for d in range(upto + 1):
        expr = prim.Variable(inames[d]) if d == 0 else expr * shape[d] + prim.Variable(inames[d])
    return expr


def _unflattener(shape: Sequence[int], inames: Sequence[str], fixed: dict[str, int]) -> Any:
    """A mapper replacing ``i`` and its divisions by the per-axis loop indices."""
    from loopy.symbolic import IdentityMapper

    suffix = [math.prod(shape[d + 1:]) for d in range(len(shape))]

    def value(e: Any) -> int | None:
        lin = linear(e, fixed)
        return lin[1] if lin is not None and not lin[0] else None

    class Unflatten(IdentityMapper):
        def map_variable(self, expr: Any, *args: Any) -> Any:
            if expr.name == "i":
                return _flatten(inames, shape, len(shape) - 1)
            return expr

        def map_call(self, expr: Any, *args: Any) -> Any:
            name = getattr(expr.function, "name", "")
            params = expr.parameters
            if name == "fl_idx_div" and params[0] == prim.Variable("i"):
                s = value(params[1])
                if s in suffix:
                    return _flatten(inames, shape, suffix.index(s))
            if name == "fl_idx_mod":
                n, inner = value(params[1]), params[0]
                if inner == prim.Variable("i") and n == shape[-1]:
                    return prim.Variable(inames[-1])
                if (isinstance(inner, prim.Call)
                        and getattr(inner.function, "name", "") == "fl_idx_div"
                        and inner.parameters[0] == prim.Variable("i")):
                    s = value(inner.parameters[1])
                    if s in suffix and shape[suffix.index(s)] == n:
                        return prim.Variable(inames[suffix.index(s)])
            return super().map_call(expr, *args)

    return Unflatten()


def local_memory(device: Device) -> int:
    """The device's local memory in bytes (:data:`DEFAULT_LOCAL_MEMORY` if unknown)."""
    size = getattr(getattr(device, "cl_device", None), "local_mem_size", None)
    return int(size) if isinstance(size, int) and size > 0 else DEFAULT_LOCAL_MEMORY


def tile_stencils(t_unit: lp.TranslationUnit, device: Device, tile: tuple[int, ...],
                  local: bool = True) -> lp.TranslationUnit | None:
    """The kernel with its stencil reads staged through local-memory tiles of ``tile``
    (``(planes, rows, columns)``; a 2-D output uses the last two), or None when the
    kernel is not a stencil the size class pinned, or its tiles do not fit.  Without
    ``local``, the same work-groups read global memory directly (no index divisions
    either: the grid is the output's own axes)."""
    knl = t_unit.default_entrypoint
    if set(knl.all_inames()) != {"i"}:
        return None
    fixed = _fixed_values(knl)
    shape = _output_shape(knl, fixed) if "N" in fixed else None
    if shape is None:
        return None
    rank = len(shape)
    inames = [f"{TILE_INAME}{d}" for d in range(rank)]
    mapper = _unflattener(shape, inames, fixed)
    insns = [insn.with_transformed_expressions(mapper).copy(within_inames=frozenset(inames))
             for insn in knl.instructions]
    knl = knl.copy(instructions=insns)
    sizes = tuple(tile[-rank:])
    chosen = {name: hood for name, hood in neighbourhoods(knl, inames, fixed, shape).items()
              if tiled_by_rule([b - a for a, b in zip(hood.lo, hood.hi)])}
    staged = 0
    for name, hood in chosen.items():
        dtype = np.dtype(getattr(knl.arg_dict[name].dtype, "numpy_dtype", None))
        staged += dtype.itemsize * math.prod([t + b - a for t, a, b in zip(sizes, hood.lo,
                                                                          hood.hi)])
    if not chosen or (local and staged > local_memory(device)) \
            or math.prod(sizes) > device.max_work_group_size \
            or any(t < b - a for h in chosen.values()
                   for t, a, b in zip(sizes, h.lo, h.hi, strict=True)):
        return None
    try:
        return _stage_tiles(t_unit, knl, shape, sizes, chosen if local else {}, fixed,
                            inames)
    except (lp.LoopyError, NotImplementedError, AssertionError):
        # (Loopy's prefetch refuses footprints it cannot box, with these; the tile is an
        # optimisation: the kernel is then built without it)
        return None


def _source_index(v: Any, mode: Any, lo: int, hi: int) -> Any:
    """Where the tile's element at ``v`` along an axis is read: the boundary rule
    (clamp, wrap) applied, or, for a plain axis, ``v`` kept within ``[lo, hi]`` (a
    padded tile's halo reads inside the buffer; those values are never used)."""
    if mode is not None and mode[0] == "wrap":
        n = mode[1]
        return prim.Remainder(prim.Remainder(v, n) + n, n)
    if mode is not None:
        lo, hi = 0, mode[1] - 1
    return prim.Variable("min")(prim.Variable("max")(v, lo), hi)


def _corners(inames: Sequence[str], sizes: Sequence[int], hood: Neighbourhood) -> list:
    """The subscripts of ``hood``'s box corners, in the split loops' indices."""
    at = [prim.Variable(f"{n}_outer") * t + prim.Variable(f"{n}_inner")
          for n, t in zip(inames, sizes)]
    return [tuple(a + k for a, k in zip(at, corner))
            for corner in itertools.product(*zip(hood.lo, hood.hi))]


def _stage_tiles(t_unit: lp.TranslationUnit, knl: lp.LoopKernel, shape: tuple[int, ...],
                 sizes: tuple[int, ...], chosen: dict[str, Neighbourhood],
                 fixed: dict[str, int], inames: list[str]) -> lp.TranslationUnit:
    """Loops over whole tiles (the domain padded to a multiple of the tile, so that
    Loopy's footprint of a work-group is a box), outputs beyond the edges not
    computed, and each chosen array fetched into local memory with the boundary rule
    applied to the fetch's indices (:func:`_source_index`)."""
    import islpy as isl
    from loopy.kernel.data import Iname

    bounds = {}
    for name, hood in chosen.items():
        bounds[name] = [(a, n - 1 + b) for n, a, b in zip(shape, hood.lo, hood.hi)]
        extents = [o + (m[1] if m is not None else n + max(b, 0) - min(a, 0))
                   for n, a, b, m, o in zip(shape, hood.lo, hood.hi, hood.modes, hood.origin)]
        knl = rewrite_reads(knl, name, hood, inames, fixed, extents)
    padded = [-(-n // t) * t for n, t in zip(shape, sizes)]
    box = " and ".join(f"0 <= {n} < {e}" for n, e in zip(inames, padded))
    domain = isl.BasicSet(f"{{ [{', '.join(inames)}]: {box} }}")
    edges = frozenset(prim.Comparison(prim.Variable(n), "<", e)
                      for n, e, p in zip(inames, shape, padded) if p != e)
    knl = knl.copy(domains=[domain], inames={n: Iname(n, frozenset()) for n in inames},
                   instructions=[insn.copy(predicates=insn.predicates | edges)
                                 for insn in knl.instructions])
    t_unit = t_unit.with_kernel(knl)
    inner, outer = [], []
    for k, d in enumerate(reversed(range(len(shape)))):
        t_unit = lp.split_iname(t_unit, inames[d], sizes[d], outer_tag=f"g.{k}",
                                inner_tag=f"l.{k}")
        inner.append(f"{inames[d]}_inner")
        outer.append(f"{inames[d]}_outer")
    for name, hood in chosen.items():
        # the footprint of the box's corners: a box (the reads' own footprint need not
        # be convex, which Loopy cannot fetch; its bounding box fails Loopy's checks)
        t_unit = lp.add_prefetch(t_unit, name, sweep_inames=inner,
                                 fetch_outer_inames=frozenset(outer),
                                 temporary_address_space=lp.AddressSpace.LOCAL,
                                 temporary_name=f"{name}_tile", default_tag="l.auto",
                                 prefetch_insn_id=f"fetch_{name}",
                                 footprint_subscripts=_corners(inames, sizes, hood))
        fetch = t_unit.default_entrypoint.id_to_insn[f"fetch_{name}"]
        read = fetch.expression
        index = read.index if isinstance(read.index, tuple) else (read.index,)
        fetch = fetch.copy(expression=prim.Subscript(read.aggregate, tuple(
            _source_index(v, m, a, b) + o if o else _source_index(v, m, a, b)
            for v, m, (a, b), o in zip(index, hood.modes, bounds[name], hood.origin))))
        knl = t_unit.default_entrypoint
        t_unit = t_unit.with_kernel(knl.copy(instructions=[
            fetch if insn.id == fetch.id else insn for insn in knl.instructions]))
    return t_unit

# }}}
