"""Math builtins on vectors in the CPU recipe's element loop.

The CPU recipe gives each work-item a contiguous chunk and loops over it.  The
compiler vectorises that loop when its body is arithmetic, but a call of a math
builtin (``exp``, ``sin``, ``log``, ...) stays one scalar call per element, and
PoCL's scalar builtins are 2 to 17 times slower per element than the same
builtins on a ``float8`` (``benchmarks/probes/cpu_vector_math_probe.py``; the results
are equal or a few representable values apart).  Loopy does not vectorise
function calls, so this transform does it in the kernel:

* the chunk loop is split into blocks of :data:`LANES` elements, each with a
  loop over its lanes; every lane loop runs all 8 lanes (see ``_whole_blocks``),
  and checks its lanes against the size only where they read or write memory or
  call a function.  One body serves every chunk: a slab of full chunks without
  those checks ran no faster and doubled the code that Loopy generates and the
  OpenCL compiler compiles;
* each builtin call's arguments are stored, lane by lane, into private arrays;
  one :class:`loopy.CInstruction` per block applies the builtin to them as
  vectors (``r = exp(a)``, lane by lane: see :func:`_lanes_vector`), and the expression reads its
  lane of the result where the call was.  A chain of calls gets one lane loop
  per link, as Loopy enters each loop once per block.

Only kernels of plain element loops are rewritten: every instruction an
unconditional assignment within the chunk loop, writing temporaries or outputs.
A call under a conditional (``if``, ``&&``, ``||``) stays where it is, as its
arguments may be valid only where the condition holds.  In a chunk's last
partial block the unused lanes of the private arrays are not written; the
vector builtin computes them and nobody reads them.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, NamedTuple

import numpy as np

from .._lazy import isl, lp, prim
from ..errors import RecipeError
from ..lower.scalar_ops import FLOAT_BINARY, FLOAT_UNARY, helper_name

if TYPE_CHECKING:
    from .mappers import CallHoister

#: the OpenCL platform whose vector builtins were measured (see _SCALAR_ONLY)
POCL_PLATFORM = "Portable Computing Language"
#: elements per block, and per vector call on floats (an AVX2 register holds 8
#: floats or 4 doubles: double calls take 4 lanes at a time)
LANES = VECTOR_WIDTH = 8
_TYPES: dict[np.dtype, str] = {np.dtype(np.float32): "float", np.dtype(np.float64): "double"}
# the builtins whose PoCL vector forms pay (the probe's figures, float / double).
# The builtins of lower/math_ops.py (erf, lgamma, fma, frexp, ...) stay scalar calls:
# the probe never measured their vector forms (speed nor the lane errors that float8
# sin showed), and frexp/modf/ldexp take pointer or int-vector arguments.
#
# sqrt, floor, ceil, trunc, rint, copysign, fabs, fmin and fmax are exact, but pip's
# PoCL 3.0 calls its library for them too, one call per element, and a loop with a call
# in it is not vectorised: its arithmetic runs one element at a time as well
# (cpu_vector_math_probe.py times sqrt and floor both ways)
_BINARY_OPS = frozenset({*FLOAT_BINARY, "power", "fmod", "fmin", "fmax"})
_VECTOR_OPS = {**FLOAT_UNARY, **FLOAT_BINARY, "absolute": "fabs", "power": "pow",
               "fmod": "fmod", "fmin": "fmin", "fmax": "fmax"}
# PoCL's float8 sin, cos and tan are wrong in every lane of a vector in which one
# lane is large (|x| >= about 1e6) or infinite: sin(0.5) came out 1e10 ulps off
# (benchmarks/probes/cpu_vector_math_probe.py --lanes).  Their double8 forms agree with the
# scalar builtins, as do all the other float8 forms, so float32 sin, cos and tan
# go through double8 where the device has doubles (and stay scalar where not)
_THROUGH_DOUBLE: dict[np.dtype, frozenset[str]] = {
    np.dtype(np.float32): frozenset({"sin", "cos", "tan"})}
#: the end of the name of a lane loop's one-iteration guard (see _guard_lanes)
GUARD_SUFFIX = "_in"
_ARG_PREFIX = "_fl_va"
_RESULT_PREFIX = "_fl_vr"


# LLVM's names of x86-64 CPUs with AVX-512 (a register holds 8 doubles)
_AVX512_CPUS = frozenset({
    "skylake-avx512", "cascadelake", "cooperlake", "cannonlake", "icelake-client",
    "icelake-server", "tigerlake", "rocketlake", "sapphirerapids", "emeraldrapids",
    "graniterapids", "graniterapids-d", "diamondrapids", "knl", "knm", "znver4", "znver5",
    "x86-64-v4"})


def pocl_target_cpu(device: Any) -> str | None:
    """The CPU PoCL's LLVM generates code for, from the end of its device version
    (``... HSTR: pthread-x86_64-unknown-linux-gnu-znver3``), or None if not named."""
    try:
        version = str(device.cl_device.version)
    except (AttributeError, TypeError, ValueError):
        return None
    _, found, host = version.partition("HSTR:")
    parts = host.strip().split("-")  # driver, then the four parts of the triple
    return "-".join(parts[5:]) if found and len(parts) > 5 else None


def through_double_width(device: Any) -> int:
    """Doubles per call for the float32 builtins computed on doubles (sin, cos,
    tan): a whole block of :data:`LANES` where the compiler targets AVX-512 (a
    register holds 8 doubles), else half a block.

    AVX-512 is read from the CPU PoCL names as its target, where it names one:
    the preferred vector width alone misleads, as pip's PoCL 3.0 (LLVM 14) on AMD
    Zen 4 prefers 16 floats while targeting ``znver3`` (AVX2), and its LLVM aborts
    on ``double8`` calls there.  An unknown target name gets half a block.

    Measured on PoCL 3.1 on AMD Zen 5 (AVX-512), in one process, kernels
    interleaved: float32 sin and cos took 0.58 of the time with one double8 call per
    block that they took with two double4 calls.  Float64 builtins stay at 4 per
    call: double8 was no faster there (``exp`` took twice the time).
    """
    target = pocl_target_cpu(device)
    if target is not None:
        return LANES if target in _AVX512_CPUS else LANES // 2
    try:
        preferred = int(device.cl_device.preferred_vector_width_float)
    except (AttributeError, TypeError, ValueError):
        return LANES // 2
    return LANES if preferred >= 2 * LANES else LANES // 2


class VectorCall(NamedTuple):
    builtin: str  # the OpenCL builtin
    arity: int
    through_double: bool  # computed on doubles and rounded to floats

    def width(self, dtype: np.dtype, through_width: int = LANES // 2) -> int:
        """Elements per builtin call: 8 floats, 4 doubles, or ``through_width``
        for a float32 call computed on doubles (see :func:`through_double_width`)."""
        if self.through_double:
            return through_width
        return VECTOR_WIDTH if dtype == np.float32 else LANES // 2


def vector_builtins(fp64: bool = True) -> dict[str, VectorCall]:
    """Helper name -> how this transform applies it to vectors, for the float32
    and float64 helpers it applies to (``fp64``: whether the device has doubles)."""
    table = {}
    for op, builtin in _VECTOR_OPS.items():
        arity = 2 if op in _BINARY_OPS else 1
        for dt in _TYPES:
            through = op in _THROUGH_DOUBLE.get(dt, ())
            if not through or fp64:
                table[helper_name(op, (dt,) * (arity + 1))] = VectorCall(builtin, arity,
                                                                         through)
    return table


_BUILTINS = {True: vector_builtins(True), False: vector_builtins(False)}


class _Vectoriser:
    def __init__(self, knl: lp.LoopKernel, callables: Any, table: dict[str, VectorCall],
                 block_inames: frozenset[str], lane: str,
                 through_width: int = LANES // 2,
                 lane_temps: frozenset[str] = frozenset()) -> None:
        self.knl = knl
        # scalar temporaries set in the lane loop: privatised into arrays of the lanes
        # (see _vectorise_block), so a call reading one reads that array as a vector
        self.lane_temps = lane_temps
        self.through_width = through_width
        self.callables = callables
        self.table = table
        self.block_inames = block_inames
        self.lane = lane
        # what differs between lanes: the lane, and temporaries (set per element)
        self.varying = frozenset(knl.temporary_variables) | {lane}
        self.temps: dict[str, lp.TemporaryVariable] = {}
        self.insns: list[Any] = []
        self.count = 0  # calls hoisted
        # names already taken by an earlier application to another loop
        self.first = sum(1 for insn in knl.instructions
                         if insn.id.startswith("_fl_vcall"))

    def vectorisable(self, name: str | None, params: tuple) -> VectorCall | None:
        call = self.table.get(name) if name is not None else None
        if call is None:
            return None
        dtype = getattr(self.callables.get(name), "result_dtype", None)
        if dtype is None or np.dtype(dtype) not in _TYPES or len(params) != call.arity:
            return None
        from loopy.symbolic import get_dependencies

        if not any(get_dependencies(p) & self.varying for p in params):
            return None  # the same for every lane: one scalar call is cheaper
        return call

    def _lane_of(self, expr: Any) -> str | None:
        """The result array that ``expr`` reads at this lane, if it is one."""
        if (isinstance(expr, prim.Subscript) and isinstance(expr.aggregate, prim.Variable)
                and expr.aggregate.name.startswith(_RESULT_PREFIX)
                and expr.index == prim.Variable(self.lane)):
            return expr.aggregate.name
        return None

    def _lane_array(self, expr: Any, dtype: np.dtype) -> bool:
        """Whether ``expr`` is a temporary of ``dtype`` that becomes an array of the lanes."""
        if not isinstance(expr, prim.Variable) or expr.name not in self.lane_temps:
            return False
        found: Any = self.knl.temporary_variables[expr.name].dtype
        return found is not None and np.dtype(found.numpy_dtype) == dtype

    def _array(self, name: str, dtype: np.dtype) -> None:
        self.temps[name] = lp.TemporaryVariable(name, dtype, shape=(LANES,),
                                                address_space=lp.AddressSpace.PRIVATE)

    def hoist(self, name: str, call: VectorCall, params: tuple, mapper: CallHoister) -> Any:
        dtype = np.dtype(self.callables[name].result_dtype)
        k = self.first + self.count
        self.count += 1
        lane_var = prim.Variable(self.lane)
        call_id = f"_fl_vcall{k}"
        call_deps = set(mapper.depends_on)
        vector_args = []
        for j, p in enumerate(params):
            source = self._lane_of(p)
            if source is not None:  # a result array already: read it as a vector
                vector_args.append(source)
                call_deps.add(f"_fl_vcall{source[len(_RESULT_PREFIX):]}")
                continue
            if self._lane_array(p, dtype):
                # a temporary of the lanes already (its writer is among the instruction's
                # dependencies): no copy into an argument array, one instruction less
                vector_args.append(p.name)
                continue
            arg = f"{_ARG_PREFIX}{k}_{j}"
            self._array(arg, dtype)
            arg_id = f"_fl_varg{k}_{j}"
            # after the calls whose results it reads, not every call hoisted before it:
            # an argument that reads none joins the earliest lane loop (in a chain of
            # sin(r) and cos(r * k) per level, both calls follow one lane loop, not two)
            from loopy.symbolic import get_dependencies

            after = {f"_fl_vcall{name[len(_RESULT_PREFIX):]}" for name in get_dependencies(p)
                     if name.startswith(_RESULT_PREFIX)}
            self.insns.append(lp.Assignment(
                prim.Subscript(prim.Variable(arg), lane_var), p, id=arg_id,
                depends_on=frozenset(mapper.depends_on | after),
                within_inames=self.block_inames | {self.lane}))
            call_deps.add(arg_id)
            vector_args.append(arg)
        result = f"{_RESULT_PREFIX}{k}"
        self._array(result, dtype)
        # doubles 4 at a time: AVX2 registers, and no ABI warnings from the compiler
        width = call.width(dtype, self.through_width)
        stores = []
        for part in range(LANES // width):
            loads = [_lanes_vector(a, _TYPES[dtype], width, part) for a in vector_args]
            if call.through_double:
                loads = [f"convert_double{width}({v})" for v in loads]
                value = f"convert_{_TYPES[dtype]}{width}({call.builtin}({', '.join(loads)}))"
            else:
                value = f"{call.builtin}({', '.join(loads)})"
            stores.append(_vector_lanes(value, result, _TYPES[dtype], width, part))
        self.insns.append(lp.CInstruction(
            (), " ".join(stores),
            read_variables=frozenset(vector_args), assignees=(prim.Variable(result),),
            id=call_id, depends_on=frozenset(call_deps), within_inames=self.block_inames))
        mapper.call_ids.add(call_id)
        return prim.Subscript(prim.Variable(result), lane_var)


def _lanes_vector(array: str, ctype: str, width: int, part: int) -> str:
    """OpenCL C of lanes ``part * width ...`` of private ``array`` as one vector.

    Not ``vload``: PoCL's ``vload``/``vstore`` of private memory are calls into its
    library that LLVM did not inline, so the lanes went through memory and the
    builtin between them stayed a call (float32 softmax over rows of 128: the vector
    form built from lanes took 0.9 of the CPU time)."""
    return f"({ctype}{width})(" + ", ".join(
        f"{array}[{part * width + k}]" for k in range(width)) + ")"


def _vector_lanes(value: str, array: str, ctype: str, width: int, part: int) -> str:
    """OpenCL C storing vector ``value`` into lanes ``part * width ...`` of ``array``
    (see :func:`_lanes_vector`)."""
    return f"{{ {ctype}{width} _fl_v = {value}; " + " ".join(
        f"{array}[{part * width + k}] = _fl_v.s{k:x};" for k in range(width)) + " }"


def _plain_element_loop(knl: lp.LoopKernel, insns: Sequence[Any], inames: frozenset[str],
                        readers: frozenset[str] = frozenset()) -> bool:
    """Whether ``insns`` are unconditional assignments within exactly ``inames``,
    writing outputs or temporaries that no other instruction (but ``readers``) reads."""
    outputs = {a.name for a in knl.args if isinstance(a, lp.ArrayArg) and a.is_output}
    ids = {insn.id for insn in insns} | readers
    written: set[str] = set()
    for insn in insns:
        if (not isinstance(insn, lp.Assignment) or insn.predicates
                or insn.within_inames != inames or _has_reduction(insn.expression)):
            return False
        target = insn.assignee_var_names()[0]
        if target not in knl.temporary_variables and target not in outputs:
            return False
        if target in knl.temporary_variables:
            written.add(target)
    # a temporary set in the loop and used elsewhere would see only one lane's value
    return not any(insn.id not in ids and insn.dependency_names() & written
                   for insn in knl.instructions)


def _has_reduction(expr: Any) -> bool:
    from .mappers import ReductionFinder

    finder = ReductionFinder()
    finder(expr)
    return finder.found


def _hoist_calls(knl: lp.LoopKernel, callables: Any, fp64: bool, ids: frozenset[str],
                 block_inames: frozenset[str], lane: str, through_width: int = LANES // 2
                 ) -> tuple[_Vectoriser, list[Any]]:
    """Hoist the calls of the instructions ``ids`` (of a reduction, its inner
    expression); return the vectoriser and the kernel's new instruction list."""
    from .mappers import CallHoister

    temps = knl.temporary_variables
    lane_temps = frozenset(name for insn in knl.instructions if insn.id in ids
                           for name in insn.assignee_var_names()
                           if name in temps and not temps[name].shape)
    vec = _Vectoriser(knl, callables, _BUILTINS[fp64], block_inames, lane, through_width,
                      lane_temps)
    insns = []
    for insn in knl.instructions:
        if insn.id not in ids:
            insns.append(insn)
            continue
        mapper = CallHoister(vec, insn.depends_on)
        red = insn.expression
        if isinstance(red, lp.Reduction):
            expr = lp.Reduction(red.operation, red.inames, mapper(red.expr),  # type: ignore[arg-type]
                                allow_simultaneous=red.allow_simultaneous)
        else:
            expr = mapper(red)  # type: ignore[assignment]
        insns.append(insn.copy(expression=expr,
                               depends_on=insn.depends_on | frozenset(mapper.call_ids)))
    return vec, vec.insns + insns


def _stages(insns: list[Any]) -> dict[str, int]:
    """Which lane loop of the block each instruction runs in: a vector call runs
    after the lane loop of its arguments' stage, its readers in the next one."""
    by_id = {insn.id: insn for insn in insns}
    stage: dict[str, int] = {}

    def of(insn_id: str) -> int:
        if insn_id not in stage:
            insn = by_id[insn_id]
            is_call = isinstance(insn, lp.CInstruction)
            s = 0
            for dep in insn.depends_on:
                if dep not in by_id:
                    continue
                after_call = isinstance(by_id[dep], lp.CInstruction) and not is_call
                s = max(s, of(dep) + after_call)
            stage[insn_id] = s
        return stage[insn_id]

    for insn in insns:
        of(insn.id)
    return stage


def _lane_domain(knl: lp.LoopKernel, lane: str, enclosing: frozenset[str]
                 ) -> tuple[int, isl.BasicSet] | None:
    """The domain of ``lane`` and its index, when its other loops are all among
    ``enclosing`` (else None: the copies of ``lane`` stay in that domain)."""
    from islpy import dim_type

    found = [(n, d) for n, d in enumerate(knl.domains)
             if lane in d.get_var_names_not_none(dim_type.set)]
    if len(found) != 1:
        return None
    index, dom = found[0]
    if not set(dom.get_var_names_not_none(dim_type.set)) - {lane} <= enclosing:
        return None
    return index, dom


def _plainly_copied(knl: lp.LoopKernel, copies: dict[str, list[str]]) -> bool:
    """Whether :func:`_copy_lane_loops` can copy the lane loop for ``copies``: plain
    assignments, no substitution rules, the copies' names free."""
    names = knl.all_variable_names()
    return (not knl.substitutions and not any(new in names for new in copies)
            and all(isinstance(knl.id_to_insn[i], lp.Assignment)
                    for moved in copies.values() for i in moved))


def _copy_lane_loops(t_unit: lp.TranslationUnit, base: tuple[int, isl.BasicSet], lane: str,
                     copies: dict[str, list[str]]) -> lp.TranslationUnit:
    """The instructions of each of ``copies`` (new iname -> instruction ids) moved from
    the lane loop ``lane`` to a copy of it, each copy in a domain of its own.

    ``base`` is the lane loop's domain and its index.  ``loopy.duplicate_inames``
    adds each copy to that one domain, whose dimensions then grow with the chain
    of calls, and rewrites the whole kernel once per copy: Loopy's checks and code
    generation on that domain grew much faster than linearly (a chain of 40 sines
    and cosines did not finish generating in 11 minutes).  Here each copy gets a
    domain nested in the lane loop's, with the loops around the lanes as
    parameters (every instruction's domain keeps a handful of dimensions, however
    long the chain), and the instructions are rewritten in one pass.
    """
    from islpy import dim_type
    from loopy.kernel.data import Iname
    from loopy.symbolic import SubstitutionMapper
    from pymbolic.mapper.substitutor import make_subst_func

    knl = t_unit.default_entrypoint
    index, dom = base
    leaf = dom
    for name in dom.get_var_names_not_none(dim_type.set):
        if name != lane:
            pos = leaf.find_dim_by_name(dim_type.set, name)
            leaf = leaf.move_dims(dim_type.param, leaf.dim(dim_type.param),
                                  dim_type.set, pos, 1)
    leaves = [leaf.set_dim_name(dim_type.set, 0, new) for new in copies]
    copy_of = {i: new for new, moved in copies.items() for i in moved}
    mappers = {new: SubstitutionMapper(make_subst_func({lane: prim.Variable(new)}))
               for new in copies}
    insns = []
    for insn in knl.instructions:
        new = copy_of.get(insn.id)
        if new is not None:
            insn = insn.with_transformed_expressions(mappers[new]).copy(
                within_inames=insn.within_inames - {lane} | {new})
        insns.append(insn)
    knl = knl.copy(domains=[*knl.domains[:index + 1], *leaves, *knl.domains[index + 1:]],
                   instructions=insns,
                   inames={**knl.inames, **{new: Iname(new, frozenset()) for new in copies}})
    return t_unit.with_kernel(knl)


def _vectorise_block(t_unit: lp.TranslationUnit, ids: frozenset[str], block: str,
                     lane: str, fp64: bool, keep: frozenset[str] = frozenset(),
                     through_width: int = LANES // 2) -> lp.TranslationUnit:
    """Apply the math builtins of instructions ``ids`` (within ``block`` and
    ``lane``, the loop over a block's lanes) to vectors of a block's lanes.

    Each stage of a chain of calls gets its own copy of the lane loop; the
    instructions in ``keep`` stay in ``lane`` (a reduction whose lanes are
    accumulators), and then the stores of the first stage get a copy too.
    """
    knl = t_unit.default_entrypoint
    block_inames = knl.id_to_insn[next(iter(ids))].within_inames - {lane} | {block}
    vec, insns = _hoist_calls(knl, t_unit.callables_table, fp64, ids,
                              frozenset(block_inames), lane,
                              _checked_through_width(through_width))
    temps = dict(knl.temporary_variables)
    # scalars written in one lane loop may be read in a later one
    privatise = frozenset(name for insn in insns if insn.id in ids
                          for name in insn.assignee_var_names()
                          if name in temps and not temps[name].shape)
    temps.update(vec.temps)
    t_unit = t_unit.with_kernel(knl.copy(instructions=insns, temporary_variables=temps))
    if privatise:
        t_unit = lp.privatize_temporaries_with_inames(t_unit, lane,
                                                      only_var_names=privatise)
    # one lane loop per stage (Loopy enters each loop once per block)
    hoisted = {insn.id for insn in vec.insns}
    stages = _stages([insn for insn in insns if insn.id in ids or insn.id in hoisted])
    base = _lane_domain(t_unit.default_entrypoint, lane, block_inames)
    copies: dict[str, list[str]] = {}  # lane loop copy -> the instructions it runs
    for s in range(0 if keep else 1, max(stages.values()) + 1):
        moved = [i for i, st in stages.items()
                 if st == s and i not in keep
                 and not isinstance(t_unit.default_entrypoint.id_to_insn[i], lp.CInstruction)]
        if moved:
            copies[f"{lane}_s{s}"] = moved
    if base is not None and _plainly_copied(t_unit.default_entrypoint, copies):
        t_unit = _copy_lane_loops(t_unit, base, lane, copies)
    else:
        for new, moved in copies.items():
            t_unit = lp.duplicate_inames(t_unit, lane, " or ".join(f"id:{i}" for i in moved),
                                         new_inames=[new])
    lane_inames = [lane, *copies]
    # the lanes of one block, not the blocks of one lane, are the innermost loop
    for name in lane_inames[1 if keep else 0:]:
        t_unit = lp.prioritize_loops(t_unit, f"{block},{name}")
    return t_unit


def count_vector_calls(t_unit: lp.TranslationUnit, ids: frozenset[str], fp64: bool,
                 lane: str) -> int:
    """How many calls of instructions ``ids`` would be applied to vectors."""
    knl = t_unit.default_entrypoint
    return _hoist_calls(knl, t_unit.callables_table, fp64, ids, frozenset(), lane)[0].count


def vectorise_math_calls(t_unit: lp.TranslationUnit, iname: str, chunk: int,
                         fp64: bool = True, through_width: int = LANES // 2
                         ) -> lp.TranslationUnit:
    """Split the element loop ``iname`` into one chunk of ``chunk`` elements per
    work-item, and apply its math builtins to vectors of :data:`LANES` elements
    (``fp64``: whether the device has doubles, see :func:`vector_builtins`;
    ``through_width``: see :func:`through_double_width`).

    A kernel with no such call, or that is not a plain element loop, is only split.
    """
    knl = t_unit.default_entrypoint
    ids = frozenset(insn.id for insn in knl.instructions)
    if (not _plain_element_loop(knl, knl.instructions, frozenset({iname}))
            or not count_vector_calls(t_unit, ids, fp64, iname)):
        return lp.split_iname(t_unit, iname, chunk, outer_tag="g.0")
    inner = f"{iname}_inner"
    block, lane = f"{inner}_outer", f"{inner}_inner"
    # the lanes that touch memory are tested against the size (_whole_blocks), in
    # every chunk: no slab of full chunks, whose copy of the body doubled the build
    t_unit = lp.split_iname(t_unit, iname, chunk, outer_tag="g.0")
    # (the lane loops stay loops of 8: the compiler unrolls them; Loopy's unrolling
    # gave the same speed and a longer compile)
    t_unit = lp.split_iname(t_unit, inner, LANES)
    whole = _whole_blocks(t_unit, lane) if chunk % LANES == 0 else None
    if whole is not None:
        t_unit = _vectorise_block(whole[0], ids, block, lane, fp64,
                                  through_width=through_width)
        return _guard_lanes(t_unit, lane, whole[1])
    return _vectorise_block(t_unit, ids, block, lane, fp64, through_width=through_width)


def _whole_blocks(t_unit: lp.TranslationUnit, lane: str
                  ) -> tuple[lp.TranslationUnit, isl.BasicSet | None] | None:
    """Every block of the lane loop ``lane`` whole (its 8 lanes), the last one included;
    returns the kernel and the condition that a lane is in the element range (an isl
    set over the loops and parameters; None: every lane is), or None where the
    lanes' domain is not the plain one this expects.

    Where the lanes of the last chunk were bounded by the size, every lane loop of
    that chunk's code had a trip count of its own, and PoCL's LLVM vectorised and
    unrolled each with a remainder: a 40-level chain of ``sin``/``cos`` took 3x as
    long to build (6 of its 7.5 s in PoCL).  Now the block loop alone stops at the
    size, and :func:`_guard_lanes` tests the lanes where they touch memory.
    """
    knl = t_unit.default_entrypoint
    found = [k for k, d in enumerate(knl.domains)
             if lane in d.get_var_names_not_none(isl.dim_type.set)]
    if len(found) != 1:
        return None
    dom = knl.domains[found[0]]
    at = dom.get_var_names_not_none(isl.dim_type.set).index(lane)
    # a block is in the domain where its first lane is (lanes count up from 0)
    blocks = dom.project_out(isl.dim_type.set, at, 1)
    lanes = blocks.insert_dims(isl.dim_type.set, at, 1).set_dim_name(isl.dim_type.set, at, lane)
    space = lanes.get_space()
    lanes = lanes.add_constraint(isl.Constraint.ineq_from_names(space, {lane: 1}))
    lanes = lanes.add_constraint(isl.Constraint.ineq_from_names(space, {1: LANES - 1,
                                                                        lane: -1}))
    if not dom.is_subset(lanes) or dom.dim(isl.dim_type.div) or lanes.dim(isl.dim_type.div):
        return None
    extra = dom.gist(lanes)
    if extra.is_universe():
        return t_unit, None  # (every block was whole already)
    domains = list(knl.domains)
    domains[found[0]] = lanes
    return t_unit.with_kernel(knl.copy(domains=domains)), dom


def _guard_lanes(t_unit: lp.TranslationUnit, lane: str, in_range: isl.BasicSet | None
                 ) -> lp.TranslationUnit:
    """Test against ``in_range`` (the lanes of ``lane`` within the element range) the
    instructions in ``lane`` or its copies that read or write an argument or call a
    function; the others compute on lanes past the end, which nothing stores.

    The test is a domain, not a predicate: each lane loop ``L`` that has such
    instructions gets a loop ``L_in`` of one iteration in a domain of its own,
    nested in ``L``'s, that holds only where the lane is in range, and those
    instructions run in it.  Loopy tests it only where it does not know it holds
    already (not in a slab of full blocks, see :func:`vectorise_loop_calls`).
    """
    if in_range is None:
        return t_unit
    from loopy.kernel.data import Iname

    knl = t_unit.default_entrypoint
    args = {a.name for a in knl.args if isinstance(a, lp.ArrayArg)}
    lane_of: dict[str, str] = {}  # instruction id -> its lane loop (or copy)
    tested: set[str] = set()
    for insn in knl.instructions:
        mine = [n for n in insn.within_inames if n == lane or n.startswith(f"{lane}_s")]
        if mine:
            lane_of[insn.id] = mine[0]
            if isinstance(insn, lp.Assignment) and (
                    (insn.read_dependency_names() | set(insn.assignee_var_names())) & args
                    or _calls(insn.expression)):
                tested.add(insn.id)
    tested |= _between(knl, tested, lane_of)
    guard_of: dict[str, str] = {}
    insns = []
    for insn in knl.instructions:
        if insn.id in tested:
            guard = guard_of.setdefault(lane_of[insn.id], f"{lane_of[insn.id]}{GUARD_SUFFIX}")
            insn = insn.copy(within_inames=insn.within_inames | {guard})
        insns.append(insn)
    if not guard_of:
        return t_unit
    names = set(knl.all_variable_names())
    if any(g in names for g in guard_of.values()):
        return t_unit  # (not expected: a name taken)
    dt = isl.dim_type
    guards: dict[str, isl.BasicSet] = {}
    for lane_copy, guard in guard_of.items():
        cond = in_range.set_dim_name(dt.set, in_range.find_dim_by_name(dt.set, lane), lane_copy)
        # every dimension a parameter, then the guard's own: 0 <= guard <= 0
        while cond.dim(dt.set):
            cond = cond.move_dims(dt.param, cond.dim(dt.param), dt.set, 0, 1)
        cond = cond.insert_dims(dt.set, 0, 1).set_dim_name(dt.set, 0, guard)
        space = cond.get_space()
        cond = cond.add_constraint(isl.Constraint.ineq_from_names(space, {guard: 1}))
        cond = cond.add_constraint(isl.Constraint.ineq_from_names(space, {guard: -1}))
        guards[lane_copy] = cond
    # (each right after the domain of its lane loop: Loopy's domains form a tree in
    # list order, a domain nested in the nearest one before it that it refers to)
    domains = []
    for dom in knl.domains:
        domains.append(dom)
        domains += [guards[n] for n in dom.get_var_names_not_none(dt.set) if n in guards]
    knl = knl.copy(domains=domains, instructions=insns,
                   inames={**knl.inames, **{g: Iname(g, frozenset()) for g in guard_of.values()}})
    return lp.tag_inames(t_unit.with_kernel(knl), {g: "unr" for g in guard_of.values()})


def _between(knl: lp.LoopKernel, tested: set[str], lane_of: dict[str, str]) -> set[str]:
    """The untested instructions of a lane loop that depend on a tested one of that
    loop and that a tested one of it depends on (through any chain): they go into the
    guard too, as Loopy enters the guard loop once per lane and could not leave it
    for them and come back (a ``CycleError`` in its scheduler)."""
    down = {insn.id: insn.depends_on for insn in knl.instructions}
    up: dict[str, set[str]] = {}
    for insn_id, deps in down.items():
        for dep in deps:
            up.setdefault(dep, set()).add(insn_id)

    def reach(start: set[str], edges: Any) -> set[str]:
        seen: set[str] = set()
        todo = list(start)
        while todo:
            for nxt in edges.get(todo.pop(), ()):
                if nxt not in seen:
                    seen.add(nxt)
                    todo.append(nxt)
        return seen

    extra: set[str] = set()
    for loop in set(lane_of.values()):
        mine = {i for i in tested if lane_of[i] == loop}
        inside = {i for i, n in lane_of.items() if n == loop} - mine
        extra |= inside & reach(mine, down) & reach(mine, up)
    return extra


def _calls(expr: Any) -> bool:
    from loopy.symbolic import CombineMapper

    class Calls(CombineMapper):
        def combine(self, values: Any) -> bool:
            return any(values)

        def map_call(self, expr: Any) -> bool:
            return True

        def map_constant(self, expr: Any) -> bool:
            return False

        map_variable = map_constant
        map_tagged_variable = map_constant

    return bool(Calls()(expr))


def _checked_through_width(through_width: int) -> int:
    if through_width not in (LANES // 2, LANES):
        raise RecipeError(f"float32 through doubles {through_width} at a time: expected "
                          f"{LANES // 2} or {LANES} (see through_double_width)")
    return through_width


def vectorise_loop_calls(t_unit: lp.TranslationUnit, iname: str,
                         fp64: bool = True, through_width: int = LANES // 2
                         ) -> lp.TranslationUnit:
    """Apply the math builtins of the sequential loop ``iname`` (a row's elements,
    say) to vectors of :data:`LANES` elements; the kernel is unchanged where the
    loop's instructions are not plain element assignments or call no builtin that
    pays as a vector."""
    from loopy.kernel.data import InameImplementationTag

    knl = t_unit.default_entrypoint
    mine = [insn for insn in knl.instructions if iname in insn.within_inames]
    ids = frozenset(insn.id for insn in mine)
    # (role tags, fuseloop.lower.roles, are no implementation: the loop is still sequential)
    if (not mine or knl.iname_tags_of_type(iname, InameImplementationTag)
            or not _plain_element_loop(knl, mine, mine[0].within_inames)
            or not count_vector_calls(t_unit, ids, fp64, iname)):
        return t_unit
    # full blocks (all but the last, a slab) need no bounds checks; the last block's
    # lanes that touch memory are tested (_whole_blocks)
    t_unit = lp.split_iname(t_unit, iname, LANES, slabs=(0, 1))
    block, lane = f"{iname}_outer", f"{iname}_inner"
    whole = _whole_blocks(t_unit, lane)
    if whole is not None:
        t_unit = _vectorise_block(whole[0], ids, block, lane, fp64,
                                  through_width=through_width)
        return _guard_lanes(t_unit, lane, whole[1])
    return _vectorise_block(t_unit, ids, block, lane, fp64, through_width=through_width)


def _reduction_parts(knl: lp.LoopKernel, insn_id: str) -> frozenset[str] | None:
    """The reduction ``insn_id`` and the instructions inside its loop that compute
    its terms (a load or subexpression used twice), when all are plain: None if not."""
    insn = knl.id_to_insn.get(insn_id)
    red = getattr(insn, "expression", None)
    if (not isinstance(red, lp.Reduction) or insn.predicates or _has_reduction(red.expr)
            or red.operation.arg_count != 1):
        return None
    loop = frozenset(red.inames)
    terms = [other for other in knl.instructions
             if other.id != insn_id and loop <= other.within_inames]
    if terms and not _plain_element_loop(knl, terms, terms[0].within_inames,
                                         frozenset({insn_id})):
        return None
    if any(knl.temporary_variables[name].shape for t in terms
           for name in t.assignee_var_names()):
        return None
    return frozenset({insn_id, *(t.id for t in terms)})


def reduction_vector_calls(t_unit: lp.TranslationUnit, insn_id: str, fp64: bool = True
                           ) -> int:
    """How many calls of reduction ``insn_id`` (over one loop, its lanes) and of the
    instructions that compute its terms would be applied to vectors."""
    knl = t_unit.default_entrypoint
    ids = _reduction_parts(knl, insn_id)
    if ids is None:
        return 0
    lane, = knl.id_to_insn[insn_id].expression.inames
    return count_vector_calls(t_unit, ids, fp64, lane)


def vectorise_reduction_calls(t_unit: lp.TranslationUnit, insn_id: str, block: str,
                              lane: str, fp64: bool = True) -> lp.TranslationUnit:
    """Apply the math builtins inside reduction ``insn_id`` to vectors.

    The instruction must reduce over ``block`` within ``lane``, one accumulator
    per lane, element ``LANES * block + lane`` (see ``row_cpu._accumulators``): the
    calls' arguments for a block are stored lane by lane before the update reads
    its lane of the result.  Instructions inside the loop that compute the terms
    (a load used twice) get one value per lane.
    """
    knl = t_unit.default_entrypoint
    ids = _reduction_parts(knl, insn_id)
    if (ids is None or knl.id_to_insn[insn_id].expression.inames != (block,)
            or lane not in knl.id_to_insn[insn_id].within_inames
            or any(lane not in knl.id_to_insn[i].within_inames for i in ids)
            or not count_vector_calls(t_unit, ids, fp64, lane)):
        return t_unit
    insn = knl.id_to_insn[insn_id]
    dtype = knl.temporary_variables[insn.assignee_var_names()[0]].dtype
    callables = t_unit.callables_table
    neutral, after_neutral = insn.expression.operation.neutral_element(
        dtype, callables_table=callables, target=t_unit.target)
    if after_neutral is not callables or insn.expression.operation(
            [dtype], insn.assignee, insn.expression.expr, callables,
            t_unit.target)[1] is not callables:
        return t_unit  # an operation that needs functions of its own
    t_unit = _vectorise_block(t_unit, ids, block, lane, fp64, keep=frozenset({insn_id}))
    # The reduction is written out as an initial value and an update per block,
    # everything in the block loop after the initial value: Loopy's own would let
    # the scheduler close the block loop after the vector calls and open it again
    # for the updates, once their initial values are set.
    knl = t_unit.default_entrypoint
    insn = knl.id_to_insn[insn_id]
    red = insn.expression
    combined, _ = red.operation([dtype], insn.assignee, red.expr, callables, t_unit.target)
    init = lp.Assignment(insn.assignee, neutral, id=f"{insn_id}_init",
                         within_inames=insn.within_inames)
    insns = []
    for other in knl.instructions:
        if other.id == insn_id:
            insns.append(init)
            insns.append(insn.copy(expression=combined,
                                   within_inames=insn.within_inames | {block},
                                   depends_on=insn.depends_on | {init.id}))
        elif block in other.within_inames:
            insns.append(other.copy(depends_on=other.depends_on | {init.id}))  # type: ignore[arg-type]
        else:
            insns.append(other)  # type: ignore[arg-type]
    return t_unit.with_kernel(knl.copy(instructions=insns))
