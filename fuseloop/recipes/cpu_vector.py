"""Math builtins on vectors in the CPU recipe's element loop.

The CPU recipe gives each work-item a contiguous chunk and loops over it.  The
compiler vectorises that loop when its body is arithmetic, but a call of a math
builtin (``exp``, ``sin``, ``log``, ...) stays one scalar call per element, and
PoCL's scalar builtins are 2 to 17 times slower per element than the same
builtins on a ``float8`` (``benchmarks/cpu_vector_math_probe.py``; the results
are equal or a few representable values apart).  Loopy does not vectorise
function calls, so this transform does it in the kernel:

* the chunk loop is split into blocks of :data:`LANES` elements, each with a
  loop over its lanes; every work-item but the last has a full chunk (a Loopy slab),
  so only the last chunk checks its lanes against the size;
* each builtin call's arguments are stored, lane by lane, into private arrays;
  one :class:`loopy.CInstruction` per block applies the builtin to them as
  vectors (``vstore8(exp(vload8(0, a)), 0, r)``), and the expression reads its
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

from typing import Any, NamedTuple

import loopy as lp
import numpy as np
import pymbolic.primitives as prim
from loopy.symbolic import IdentityMapper, get_dependencies

from ..lower.scalar_ops import FLOAT_BINARY, FLOAT_UNARY, helper_name

#: the OpenCL platform whose vector builtins were measured (see _SCALAR_ONLY)
POCL_PLATFORM = "Portable Computing Language"
#: elements per block, and per vector call on floats (an AVX2 register holds 8
#: floats or 4 doubles: double calls take 4 lanes at a time)
LANES = VECTOR_WIDTH = 8
_TYPES = {np.dtype(np.float32): "float", np.dtype(np.float64): "double"}
# the builtins whose PoCL vector forms pay (the probe's figures, float / double):
# floor, ceil, trunc, rint, sqrt and copysign are compiler intrinsics that the
# loop vectoriser already handles
_VECTOR_OPS = {
    **{op: fn for op, fn in FLOAT_UNARY.items()
       if op not in ("floor", "ceil", "trunc", "rint", "sqrt")},
    **{op: fn for op, fn in FLOAT_BINARY.items() if op != "copysign"},
    "power": "pow",
    "fmod": "fmod",
}
# PoCL's float8 sin, cos and tan are wrong in every lane of a vector in which one
# lane is large (|x| >= about 1e6) or infinite: sin(0.5) came out 1e10 ulps off
# (benchmarks/cpu_vector_math_probe.py --lanes).  Their double8 forms agree with the
# scalar builtins, as do all the other float8 forms, so float32 sin, cos and tan
# go through double8 where the device has doubles (and stay scalar where not)
_THROUGH_DOUBLE = {np.dtype(np.float32): frozenset({"sin", "cos", "tan"})}
_ARG_PREFIX = "_fl_va"
_RESULT_PREFIX = "_fl_vr"


class VectorCall(NamedTuple):
    builtin: str  # the OpenCL builtin
    arity: int
    through_double: bool  # computed on double8 and rounded to float8


def vector_builtins(fp64: bool = True) -> dict[str, VectorCall]:
    """Helper name -> how this transform applies it to vectors, for the float32
    and float64 helpers it applies to (``fp64``: whether the device has doubles)."""
    table = {}
    for op, builtin in _VECTOR_OPS.items():
        arity = 2 if op in FLOAT_BINARY or op in ("power", "fmod") else 1
        for dt in _TYPES:
            through = op in _THROUGH_DOUBLE.get(dt, ())
            if not through or fp64:
                table[helper_name(op, (dt,) * (arity + 1))] = VectorCall(builtin, arity,
                                                                         through)
    return table


_BUILTINS = {True: vector_builtins(True), False: vector_builtins(False)}


class _CallHoister(IdentityMapper):
    """Replace vectorisable calls by reads of their lane in a result array,
    recording for each the instructions that compute it for the whole block."""

    def __init__(self, owner: _Vectoriser, depends_on: frozenset[str]) -> None:
        super().__init__()
        self.owner = owner
        self.depends_on = depends_on
        self.call_ids: set[str] = set()  # the block instructions the expression reads

    def map_call(self, expr: prim.Call, *args: Any, **kwargs: Any) -> Any:
        params = tuple(self.rec(p, *args, **kwargs) for p in expr.parameters)
        name = getattr(expr.function, "name", None)
        call = self.owner.vectorisable(name, params)
        if call is None:
            return type(expr)(expr.function, params)
        return self.owner.hoist(name, call, params, self)

    # calls under a condition keep their place (their arguments may be invalid
    # where the condition is false); so do reductions
    def map_if(self, expr: Any, *args: Any, **kwargs: Any) -> Any:
        return expr

    def map_logical_and(self, expr: Any, *args: Any, **kwargs: Any) -> Any:
        return expr

    def map_logical_or(self, expr: Any, *args: Any, **kwargs: Any) -> Any:
        return expr

    def map_reduction(self, expr: Any, *args: Any, **kwargs: Any) -> Any:
        return expr


class _Vectoriser:
    def __init__(self, knl: lp.LoopKernel, callables: Any, table: dict[str, VectorCall],
                 block_inames: frozenset[str], lane: str) -> None:
        self.knl = knl
        self.callables = callables
        self.table = table
        self.block_inames = block_inames
        self.lane = lane
        # what differs between lanes: the lane, and temporaries (set per element)
        self.varying = frozenset(knl.temporary_variables) | {lane}
        self.temps: dict[str, lp.TemporaryVariable] = {}
        self.insns: list[Any] = []
        self.count = 0

    def vectorisable(self, name: str | None, params: tuple) -> VectorCall | None:
        call = self.table.get(name) if name is not None else None
        if call is None:
            return None
        dtype = getattr(self.callables.get(name), "result_dtype", None)
        if dtype is None or np.dtype(dtype) not in _TYPES or len(params) != call.arity:
            return None
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

    def _array(self, name: str, dtype: np.dtype) -> None:
        self.temps[name] = lp.TemporaryVariable(name, dtype, shape=(LANES,),
                                                address_space=lp.AddressSpace.PRIVATE)

    def hoist(self, name: str, call: VectorCall, params: tuple, mapper: _CallHoister) -> Any:
        dtype = np.dtype(self.callables[name].result_dtype)
        k = self.count
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
            arg = f"{_ARG_PREFIX}{k}_{j}"
            self._array(arg, dtype)
            arg_id = f"_fl_varg{k}_{j}"
            self.insns.append(lp.Assignment(
                prim.Subscript(prim.Variable(arg), lane_var), p, id=arg_id,
                depends_on=frozenset(mapper.depends_on | mapper.call_ids),
                within_inames=self.block_inames | {self.lane}))
            call_deps.add(arg_id)
            vector_args.append(arg)
        result = f"{_RESULT_PREFIX}{k}"
        self._array(result, dtype)
        # doubles 4 at a time: AVX2 registers, and no ABI warnings from the compiler
        width = VECTOR_WIDTH if dtype == np.float32 and not call.through_double else 4
        stores = []
        for part in range(LANES // width):
            loads = [f"vload{width}({part}, {a})" for a in vector_args]
            if call.through_double:
                loads = [f"convert_double{width}({v})" for v in loads]
                value = f"convert_{_TYPES[dtype]}{width}({call.builtin}({', '.join(loads)}))"
            else:
                value = f"{call.builtin}({', '.join(loads)})"
            stores.append(f"vstore{width}({value}, {part}, {result});")
        self.insns.append(lp.CInstruction(
            (), " ".join(stores),
            read_variables=frozenset(vector_args), assignees=(prim.Variable(result),),
            id=call_id, depends_on=frozenset(call_deps), within_inames=self.block_inames))
        mapper.call_ids.add(call_id)
        return prim.Subscript(prim.Variable(result), lane_var)


def _plain_element_loop(knl: lp.LoopKernel, inames: frozenset[str]) -> bool:
    outputs = {a.name for a in knl.args if isinstance(a, lp.ArrayArg) and a.is_output}
    for insn in knl.instructions:
        if (not isinstance(insn, lp.Assignment) or insn.predicates
                or insn.within_inames != inames):
            return False
        target = insn.assignee_var_names()[0]
        if target not in knl.temporary_variables and target not in outputs:
            return False
    return True


def _hoist_calls(knl: lp.LoopKernel, callables: Any, fp64: bool,
                 block_inames: frozenset[str], lane: str) -> tuple[_Vectoriser, list[Any]]:
    vec = _Vectoriser(knl, callables, _BUILTINS[fp64], block_inames, lane)
    insns = []
    for insn in knl.instructions:
        mapper = _CallHoister(vec, insn.depends_on)
        expr = mapper(insn.expression)
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


def vectorise_math_calls(t_unit: lp.TranslationUnit, iname: str, chunk: int,
                         fp64: bool = True) -> lp.TranslationUnit:
    """Split the element loop ``iname`` into one chunk of ``chunk`` elements per
    work-item, and apply its math builtins to vectors of :data:`LANES` elements
    (``fp64``: whether the device has doubles, see :func:`vector_builtins`).

    A kernel with no such call, or that is not a plain element loop, is only split.
    """
    knl = t_unit.default_entrypoint
    callables = t_unit.callables_table
    if (not _plain_element_loop(knl, frozenset({iname}))
            or not _hoist_calls(knl, callables, fp64, frozenset(), iname)[0].count):
        return lp.split_iname(t_unit, iname, chunk, outer_tag="g.0")
    # every work-item but the last one has a full chunk (a slab), whose blocks of
    # lanes then need no bounds checks; in the last chunk, the lanes are checked
    t_unit = lp.split_iname(t_unit, iname, chunk, outer_tag="g.0", slabs=(0, 1))
    outer, inner = f"{iname}_outer", f"{iname}_inner"
    block, lane = f"{inner}_outer", f"{inner}_inner"
    # (the lane loops stay loops of 8: the compiler unrolls them; Loopy's unrolling
    # gave the same speed and a longer compile)
    t_unit = lp.split_iname(t_unit, inner, LANES)
    knl = t_unit.default_entrypoint
    vec, insns = _hoist_calls(knl, t_unit.callables_table, fp64, frozenset({outer, block}),
                              lane)
    temps = dict(knl.temporary_variables)
    privatise = frozenset(name for name, t in temps.items() if not t.shape)
    temps.update(vec.temps)
    t_unit = t_unit.with_kernel(knl.copy(instructions=insns, temporary_variables=temps))
    if privatise:
        # scalars written in one lane loop may be read in a later one
        t_unit = lp.privatize_temporaries_with_inames(t_unit, lane,
                                                      only_var_names=privatise)
    # one lane loop per stage (Loopy enters each loop once per block)
    stages = _stages(insns)
    lane_inames = [lane]
    for s in range(1, max(stages.values()) + 1):
        ids = [i for i, st in stages.items()
               if st == s and not isinstance(t_unit.default_entrypoint.id_to_insn[i],
                                             lp.CInstruction)]
        if ids:
            new = f"{lane}_s{s}"
            t_unit = lp.duplicate_inames(t_unit, lane, " or ".join(f"id:{i}" for i in ids),
                                         new_inames=[new])
            lane_inames.append(new)
    # the lanes of one block, not the blocks of one lane, are the innermost loop
    for name in lane_inames:
        t_unit = lp.prioritize_loops(t_unit, f"{block},{name}")
    return t_unit
