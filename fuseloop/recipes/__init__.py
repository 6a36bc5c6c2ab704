"""Transformation recipes: Loopy TranslationUnit -> TranslationUnit, per device type.

A recipe receives the lowered kernel, whose work is one flat loop over the iname
``"i"`` (see :mod:`fuseloop.lower.kernel`), and the :class:`~fuseloop.Device` it
will run on, and returns the transformed kernel.  Recipes are registered by
device type (``"nvidia"``, ``"gpu"``, ``"cpu"``, ``"default"``); the most
specific match wins.  Their name and version are part of the kernel cache key,
so bumping the version invalidates cached kernels built by an older recipe.

A recipe may also name a *size class* for each launch (``size_class``): Loopy
assumptions about the kernel's size parameters, such as ``"p0 = 8192"``.
Kernels are built and cached per class, with the assumptions added to the
kernel before the recipe runs, so that the recipe (and Loopy's code
generation) can drop loops and bounds tests that the class makes unnecessary.
One class per size would compile a kernel per size; a recipe keeps the number
of classes small.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import loopy as lp
import pymbolic.primitives as prim
from loopy.symbolic import IdentityMapper, get_dependencies

from ..errors import RecipeError
from ..lower.pieces import FLAT_INAME, PIECE_INAME_PREFIX
from .cpu_vector import POCL_PLATFORM, through_double_width, vectorise_math_calls

if TYPE_CHECKING:
    from ..runtime.devices import Device

RecipeFunction = Callable[[lp.TranslationUnit, "Device"], lp.TranslationUnit]
#: ``(program, params, n_rows, n_elem) -> assumptions`` ("" for none): ``params``
#: are the values of the kernel's parameters ``p<k>``; ``n_rows`` and ``n_elem``
#: those of ``N`` and ``NE``
SizeClassFunction = Callable[[Any, Sequence[int], int, int], str]


class _CheckedTransform:
    """A recipe's function, checked to return a TranslationUnit (a recipe that forgot its
    ``return`` failed later with an AttributeError that named neither)."""

    __slots__ = ("__wrapped__", "name")

    def __init__(self, func: RecipeFunction, name: str) -> None:
        self.__wrapped__ = getattr(func, "__wrapped__", func)  # (never wrapped twice)
        self.name = name

    def __call__(self, t_unit: lp.TranslationUnit, device: Device) -> lp.TranslationUnit:
        out = self.__wrapped__(t_unit, device)
        if not isinstance(out, lp.TranslationUnit):
            raise RecipeError(
                f"recipe {self.name!r} ({getattr(self.__wrapped__, '__qualname__', '?')}) "
                f"returned {type(out).__name__} for {device.name}; a recipe must return the "
                "transformed loopy TranslationUnit (did it forget 'return t_unit'?)")
        return out

    def __eq__(self, other: object) -> bool:
        if isinstance(other, _CheckedTransform):
            other = other.__wrapped__
        return other == self.__wrapped__

    def __hash__(self) -> int:
        return hash(self.__wrapped__)


@dataclass(frozen=True)
class Recipe:
    name: str
    version: str
    transform: RecipeFunction
    size_class: SizeClassFunction | None = None
    #: see :func:`register_recipe`
    concat_chunk: int | None = None

    def __post_init__(self) -> None:
        object.__setattr__(self, "transform", _CheckedTransform(self.transform, self.name))

    @property
    def cache_id(self) -> tuple:
        # concat_chunk changes the lowered kernel, not only what the recipe does to it
        if self.concat_chunk is None:
            return (self.name, self.version)
        return (self.name, self.version, self.concat_chunk)


_REGISTRY: dict[tuple[str, str], Recipe] = {}
_CHOSEN: dict[tuple[int, str], tuple[Device, Recipe]] = {}  # recipe_for's answers
KINDS = ("elementwise", "reduction", "contraction")


def register_recipe(device_type: str, func: RecipeFunction, *, name: str,
                    version: str = "1", kind: str = "elementwise",
                    size_class: SizeClassFunction | None = None,
                    concat_chunk: int | None = None) -> Recipe:
    """Use ``func`` for kernels of ``kind`` on devices of ``device_type``.

    ``device_type`` is ``"nvidia"`` (NVIDIA GPUs), ``"gpu"``, ``"cpu"``,
    ``"accelerator"`` or ``"default"``; ``kind`` is ``"elementwise"`` (one
    flat loop ``i``), ``"reduction"`` (rows ``i``, reduction loops ``j<n>``
    and maybe row elements ``e``; see :mod:`fuseloop.recipes.rows`) or
    ``"contraction"`` (matmul-like sums of products: output loops ``b``,
    ``m``, ``n``, reduced loop ``k``, operand rules ``fl_x`` and ``fl_y``;
    see :mod:`fuseloop.recipes.contraction`).
    ``size_class`` (default: ``func.size_class`` when ``func`` has one) picks
    the size class of each launch (see the module's docstring).
    ``concat_chunk`` (default: ``func.concat_chunk`` when ``func`` has one;
    elementwise kernels only) asks for concatenations lowered to one loop per
    piece: when a kernel reads a concatenation whose pieces are consecutive
    ranges of the flat loop, ``i`` numbers chunks of ``concat_chunk`` elements
    instead, and each piece ``p`` has an inner loop ``i_k<p>`` over the chunk's
    elements in that piece (see :mod:`fuseloop.lower.pieces`);
    the recipe then maps ``i`` to groups and leaves the ``i_k<p>`` loops be.
    Without it every concatenation is a per-element selection in the ``i`` loop.
    Registering again replaces the entry.
    """
    if kind not in KINDS:
        raise ValueError(f"recipe kind must be one of {KINDS}, got {kind!r}")
    if size_class is None:
        size_class = getattr(func, "size_class", None)
    if concat_chunk is None:
        concat_chunk = getattr(func, "concat_chunk", None)
    recipe = Recipe(name, str(version), func, size_class,
                    concat_chunk if kind == "elementwise" else None)
    _REGISTRY[(device_type, kind)] = recipe
    _CHOSEN.clear()
    return recipe


def recipe_for(device: Device, kind: str = "elementwise") -> Recipe:
    """The recipe that applies to ``device`` (most specific registration first)."""
    hit = _CHOSEN.get((device.index, kind))
    if hit is not None and hit[0] is device:
        return hit[1]
    recipe = _choose(device, kind)
    _CHOSEN[(device.index, kind)] = (device, recipe)
    return recipe


def _choose(device: Device, kind: str) -> Recipe:
    candidates = []
    if device.type == "gpu" and "nvidia" in device.vendor.lower():
        candidates.append("nvidia")
    candidates += [device.type, "default"]
    for c in candidates:
        if (c, kind) in _REGISTRY:
            return _REGISTRY[(c, kind)]
    raise AssertionError("the default recipe is always registered")


def registered_recipes() -> dict[tuple[str, str], Recipe]:
    return dict(_REGISTRY)


# {{{ built-in recipes

CPU_CHUNK = 4096
GPU_GROUP_SIZE = 128
GPU_ITEMS_PER_THREAD = 4


def cpu_chunked(t_unit: lp.TranslationUnit, device: Device) -> lp.TranslationUnit:
    """One work-item per contiguous chunk; the sequential inner loop vectorises.

    On PoCL this is about twice as fast as one element per work-item (see
    docs/design.md for the figures).  On PoCL, math builtins in the loop are
    applied to vectors of 8 elements (:mod:`fuseloop.recipes.cpu_vector`), which
    the compiler does not do by itself; which builtins may be was measured on
    PoCL, so other CPU platforms keep the scalar calls.  A concatenation's pieces
    get a loop each within the chunk (``concat_chunk``): ``i`` already numbers
    chunks.
    """
    if f"{PIECE_INAME_PREFIX}0" in t_unit.default_entrypoint.all_inames():
        return lp.tag_inames(t_unit, {FLAT_INAME: "g.0"})
    if device.platform == POCL_PLATFORM:
        return vectorise_math_calls(t_unit, FLAT_INAME, CPU_CHUNK, device.has_fp64,
                                    through_double_width(device))
    return lp.split_iname(t_unit, FLAT_INAME, CPU_CHUNK, outer_tag="g.0")


cpu_chunked.concat_chunk = CPU_CHUNK  # type: ignore[attr-defined]


_LOAD_PREFIX = "_fl_ld"
GPU_UNROLL_INAME = f"{FLAT_INAME}_inner_outer"
GPU_LOAD_INAME = f"{FLAT_INAME}_load"


class _LoadExtractor(IdentityMapper):
    """Replace reads of global inputs by scalar temporaries (one per array and index).

    Only reads whose index depends on nothing but ``i`` and kernel parameters are
    taken (so the read is valid wherever the instruction runs), and nothing under a
    conditional or a reduction is touched.
    """

    def __init__(self, inputs: frozenset[str], allowed: frozenset[str], loads: dict) -> None:
        super().__init__()
        self.inputs = inputs
        self.allowed = allowed  # variables an index may depend on
        self.loads = loads  # (array, index) -> temporary name
        self.used: set[str] = set()  # temporaries referred to since the last reset

    def map_subscript(self, expr, *args, **kwargs):
        if _hoistable(expr, self.inputs, self.allowed):
            key = (expr.aggregate.name, expr.index)
            if key not in self.loads:
                self.loads[key] = f"{_LOAD_PREFIX}{len(self.loads)}"
            self.used.add(self.loads[key])
            return prim.Variable(self.loads[key])
        return super().map_subscript(expr, *args, **kwargs)

    def map_if(self, expr, *args, **kwargs):
        return expr

    def map_reduction(self, expr, *args, **kwargs):
        return expr


def _hoistable(expr, inputs: frozenset[str], allowed: frozenset[str]) -> bool:
    return (isinstance(expr, prim.Subscript) and isinstance(expr.aggregate, prim.Variable)
            and expr.aggregate.name in inputs
            and get_dependencies(expr.index) <= allowed)


def _separate_loads(knl: lp.LoopKernel) -> tuple[lp.LoopKernel, list[str], list[str]]:
    """Give each global read of the element loop its own instruction and temporary.

    Returns the kernel, the load instructions' ids and their temporaries.  Only
    unconditional instructions of the plain element loop (within ``i`` alone) are
    rewritten.  A temporary that the lowering already assigns straight from an
    input (``t1 = in0[i]``, an input used more than once) is kept as the load.
    """
    inputs = frozenset(a.name for a in knl.args
                       if isinstance(a, lp.ArrayArg) and not a.is_output)
    allowed = frozenset({FLAT_INAME} | {a.name for a in knl.args
                                        if isinstance(a, lp.ValueArg)})
    writers: dict[str, int] = {}
    for insn in knl.instructions:
        for v in insn.assignee_var_names():
            writers[v] = writers.get(v, 0) + 1
    loads: dict = {}
    mapper = _LoadExtractor(inputs, allowed, loads)
    load_ids, load_vars, insns = [], [], []
    for insn in knl.instructions:
        if (not isinstance(insn, lp.Assignment) or insn.predicates
                or insn.within_inames != frozenset({FLAT_INAME})):
            insns.append(insn)
            continue
        expr = insn.expression
        if (_hoistable(expr, inputs, allowed) and isinstance(insn.assignee, prim.Variable)
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


def gpu_coalesced(t_unit: lp.TranslationUnit, device: Device) -> lp.TranslationUnit:
    """Work-groups of 128 work-items, each handling 4 elements 128 apart.

    Neighbouring work-items touch neighbouring elements (coalesced).  Every
    work-group but the last one covers a full tile and runs without bounds
    checks (a Loopy slab), and within a tile all loads of the 4 elements are
    issued before any arithmetic: a data-dependent branch in the arithmetic
    (the slow path of an accurate ``sin``) would otherwise keep the compiler
    from hoisting the next element's loads, leaving too few loads in flight.
    For ``2*x - sin(y) + x*y`` on an H200 the kernel runs at 106% of the
    OpenCL buffer copy's bandwidth, against 87% for version 1 (per-element
    checks, loads interleaved with the arithmetic); see docs/design.md.
    """
    knl = t_unit.default_entrypoint
    knl, load_ids, load_vars = _separate_loads(knl)
    t_unit = t_unit.with_kernel(knl)
    t_unit = lp.split_iname(t_unit, FLAT_INAME, GPU_GROUP_SIZE * GPU_ITEMS_PER_THREAD,
                            outer_tag="g.0", slabs=(0, 1))
    t_unit = lp.split_iname(t_unit, f"{FLAT_INAME}_inner", GPU_GROUP_SIZE,
                            outer_tag="unr", inner_tag="l.0")
    if load_ids:
        t_unit = lp.privatize_temporaries_with_inames(t_unit, GPU_UNROLL_INAME,
                                                      only_var_names=frozenset(load_vars))
        t_unit = lp.duplicate_inames(t_unit, GPU_UNROLL_INAME,
                                     within=" or ".join(f"id:{i}" for i in load_ids),
                                     new_inames=[GPU_LOAD_INAME])
        t_unit = lp.tag_inames(t_unit, {GPU_LOAD_INAME: "unr"})
    return t_unit


register_recipe("default", gpu_coalesced, name="gpu-coalesced", version="2")
register_recipe("gpu", gpu_coalesced, name="gpu-coalesced", version="2")
register_recipe("cpu", cpu_chunked, name="cpu-chunked", version="4")


def _register_reduction_recipes() -> None:
    from .rows import cpu_rows, gpu_rows

    register_recipe("default", gpu_rows, name="gpu-rows", version="9", kind="reduction")
    register_recipe("gpu", gpu_rows, name="gpu-rows", version="9", kind="reduction")
    register_recipe("cpu", cpu_rows, name="cpu-rows", version="4", kind="reduction")


_register_reduction_recipes()


def _register_contraction_recipes() -> None:
    from .contraction import cpu_blocked, gpu_tiled

    register_recipe("default", gpu_tiled, name="gpu-tiled", version="1", kind="contraction")
    register_recipe("gpu", gpu_tiled, name="gpu-tiled", version="1", kind="contraction")
    register_recipe("cpu", cpu_blocked, name="cpu-blocked", version="2", kind="contraction")


_register_contraction_recipes()

# }}}


from ..caches import register as _register_cache  # noqa: E402  (registry: fuseloop/caches.py)

_register_cache("recipes.chosen", _CHOSEN.clear, lambda: len(_CHOSEN), why="one per device and kind")  # noqa: E501
