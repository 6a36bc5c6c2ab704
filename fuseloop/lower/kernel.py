"""Lower a linearised program to a Loopy kernel over one flat index ``i``.

Every output element is one point ``i`` of ``{[i]: 0 <= i < N}``; inputs that
broadcast are indexed through the collapsed dimension sizes ``n0, n1, ...``
(see :func:`fuseloop.expr.program.collapse_groups`).  Sizes are kernel
arguments, so one compiled kernel serves every size of the same structure.
Recipes later split and tag ``i`` for the device.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass
from typing import Any

import loopy as lp
import numpy as np
import pymbolic.primitives as prim
from constantdict import constantdict
from loopy.kernel.function_interface import ScalarCallable
from loopy.types import NumpyType

from ..expr.program import Program
from .scalar_ops import Helper, is_direct, make_helper

FLAT_INAME = "i"
_MAX_INLINE_DEPTH = 24
_BOOL = np.dtype("bool")
_UINT8 = np.dtype("uint8")


def kernel_dtype(dtype: np.dtype) -> np.dtype:
    """The dtype a value has inside a kernel (bool travels as uchar)."""
    return _UINT8 if dtype == _BOOL else dtype


@dataclass(frozen=True, init=False)
class HelperCallable(ScalarCallable):
    """A fuseloop helper or user function: fixed signature, source in the preamble."""

    param_dtypes: tuple
    result_dtype: Any
    source: str

    def __init__(self, name: str, param_dtypes: tuple, result_dtype: Any, source: str,
                 arg_id_to_dtype: Any = None, arg_id_to_descr: Any = None,
                 name_in_target: str | None = None) -> None:
        super().__init__(name, arg_id_to_dtype=arg_id_to_dtype,
                         arg_id_to_descr=arg_id_to_descr, name_in_target=name_in_target)
        object.__setattr__(self, "param_dtypes", param_dtypes)
        object.__setattr__(self, "result_dtype", result_dtype)
        object.__setattr__(self, "source", source)

    def with_types(self, arg_id_to_dtype, clbl_inf_ctx):  # type: ignore[override]
        types = {i: NumpyType(kernel_dtype(d)) for i, d in enumerate(self.param_dtypes)}
        types[-1] = NumpyType(kernel_dtype(self.result_dtype))
        return (self.copy(name_in_target=self.name, arg_id_to_dtype=constantdict(types)),
                clbl_inf_ctx)

    def generate_preambles(self, target):  # type: ignore[override]
        yield (f"50_{self.name}", self.source)


@dataclass
class LoweredKernel:
    t_unit: lp.TranslationUnit
    arg_names: list[str]  # kernel argument order


def _size_names(n_groups: int) -> list[str]:
    return ["N"] if n_groups <= 1 else [f"n{g}" for g in range(n_groups)]


def _group_indices(n_groups: int) -> list[prim.Expression]:
    """Index along each collapsed group as a function of the flat index."""
    i = prim.Variable(FLAT_INAME)
    if n_groups <= 1:
        return [i]
    sizes = [prim.Variable(f"n{g}") for g in range(n_groups)]
    out = []
    for g in range(n_groups):
        stride = None
        for h in range(g + 1, n_groups):
            stride = sizes[h] if stride is None else stride * sizes[h]
        idx = i if stride is None else prim.FloorDiv(i, stride)
        if g > 0:
            idx = prim.Remainder(idx, sizes[g])
        out.append(idx)
    return out


def _offset(sig_per_group: list[bool], group_idx: list[prim.Expression]) -> prim.Expression:
    n = len(group_idx)
    if n <= 1:
        return group_idx[0] if (not sig_per_group or sig_per_group[0]) else 0
    if all(sig_per_group):
        return prim.Variable(FLAT_INAME)
    expr: prim.Expression = 0
    for g in range(n):
        if not sig_per_group[g]:
            continue
        term = group_idx[g]
        for h in range(g + 1, n):
            if sig_per_group[h]:
                term = term * prim.Variable(f"n{h}")
        expr = term if expr == 0 else expr + term
    return expr


def lower_program(program: Program, groups: tuple[tuple[int, ...], ...],
                  index_dtype: np.dtype, user_functions: dict[str, Any],
                  name: str = "fuseloop_kernel") -> LoweredKernel:
    entries = program.entries
    n_groups = len(groups)
    group_idx = _group_indices(n_groups)
    size_names = _size_names(n_groups)

    uses: Counter[int] = Counter()
    for e in entries:
        if e[0] in ("op", "call"):
            uses.update(e[3])
    uses.update(program.outputs)

    helpers: dict[str, Helper] = {}
    callables: dict[str, HelperCallable] = {}
    exprs: list[Any] = []
    depth: list[int] = []
    dtypes: list[np.dtype] = []
    instructions: list[Any] = []
    temporaries: list[Any] = []
    inputs: dict[int, tuple[np.dtype, list[bool]]] = {}
    scalar_args: dict[int, np.dtype] = {}

    def helper_call(op: str, loop: tuple[np.dtype, ...], args: list[Any]) -> Any:
        h = helpers.get(op + repr(loop))
        if h is None:
            h = helpers[op + repr(loop)] = make_helper(op, loop)
            callables[h.name] = HelperCallable(h.name, loop[:-1], loop[-1], h.source)
        return prim.Variable(h.name)(*args)

    def cast(ref: int, to: np.dtype) -> Any:
        frm = dtypes[ref]
        if frm == to:
            return exprs[ref]
        return helper_call("cast", (frm, to), [exprs[ref]])

    for ref, e in enumerate(entries):
        kind = e[0]
        if kind == "load":
            _, slot, dt_name, sig = e
            dt = np.dtype(dt_name)
            sig_groups = [sig[g[0]] for g in groups]
            inputs[slot] = (dt, sig_groups)
            value = prim.Variable(f"in{slot}")[_offset(sig_groups, group_idx)]
        elif kind == "arg":
            _, slot, dt_name = e
            dt = np.dtype(dt_name)
            scalar_args[slot] = dt
            value = prim.Variable(f"s{slot}")
        elif kind == "lit":
            _, dt_name, py_value = e
            dt = np.dtype(dt_name)
            value = kernel_dtype(dt).type(py_value)
        elif kind == "iota":
            _, dt_name, sig = e
            dt = np.dtype(dt_name)
            off = _offset([sig[g[0]] for g in groups], group_idx)
            value = lp.TypeCast(kernel_dtype(dt), off) if dt != index_dtype else off
        else:
            _, op_name, loop_names, refs = e
            loop = tuple(np.dtype(n) for n in loop_names)
            dt = loop[-1]
            args = [cast(r, loop[j]) for j, r in enumerate(refs)]
            if kind == "call":
                fn = user_functions[op_name]
                if fn.c_name not in callables:
                    callables[fn.c_name] = HelperCallable(fn.c_name, loop[:-1], dt, fn.source)
                value = prim.Variable(fn.c_name)(*args)
            elif is_direct(op_name, loop):
                a = args[0]
                if op_name == "add":
                    value = prim.Sum((a, args[1]))
                elif op_name == "multiply":
                    value = prim.Product((a, args[1]))
                elif op_name == "subtract":
                    value = prim.Sum((a, prim.Product((-1, args[1]))))
                elif op_name == "negative":
                    value = prim.Product((-1, a))
                else:
                    value = prim.Quotient(a, args[1])
            else:
                value = helper_call(op_name, loop, args)
        dtypes.append(dt)
        # deep trees are split into temporaries: pymbolic recurses per level
        depth.append(1 + max((depth[r] for r in e[3]), default=0)
                     if kind in ("op", "call") else 0)
        if (uses[ref] > 1 or depth[ref] > _MAX_INLINE_DEPTH) and kind not in ("arg", "lit"):
            depth[ref] = 0
            tmp = f"t{ref}"
            temporaries.append(lp.TemporaryVariable(tmp, kernel_dtype(dt), shape=(),
                                                    address_space=lp.AddressSpace.PRIVATE))
            instructions.append(lp.Assignment(prim.Variable(tmp), value, id=f"calc_{tmp}",
                                              within_inames=frozenset({FLAT_INAME})))
            value = prim.Variable(tmp)
        exprs.append(value)

    i = prim.Variable(FLAT_INAME)
    kernel_args: list[Any] = []
    arg_names: list[str] = []
    total = prim.Variable("N")
    for k, ref in enumerate(program.outputs):
        instructions.append(lp.Assignment(prim.Variable(f"out{k}")[i], exprs[ref],
                                          id=f"store_out{k}",
                                          within_inames=frozenset({FLAT_INAME})))
        kernel_args.append(lp.GlobalArg(f"out{k}", kernel_dtype(dtypes[ref]), shape=(total,),
                                        is_output=True, is_input=False))
        arg_names.append(f"out{k}")
    for slot in sorted(inputs):
        dt, _sig = inputs[slot]
        kernel_args.append(lp.GlobalArg(f"in{slot}", kernel_dtype(dt), shape=(total,),
                                        is_output=False, is_input=True))
        arg_names.append(f"in{slot}")
    for slot in sorted(scalar_args):
        kernel_args.append(lp.ValueArg(f"s{slot}", kernel_dtype(scalar_args[slot])))
        arg_names.append(f"s{slot}")
    if n_groups > 1:
        for s in size_names:
            kernel_args.append(lp.ValueArg(s, index_dtype))
            arg_names.append(s)
    kernel_args.append(lp.ValueArg("N", index_dtype))
    arg_names.append("N")

    assumptions = " and ".join(f"{s} >= 1" for s in dict.fromkeys([*size_names, "N"]))
    params = ", ".join(dict.fromkeys([*size_names, "N"]))
    knl = lp.make_kernel(
        f"[{params}] -> {{[i]: 0 <= i < N}}",
        instructions,
        [*kernel_args, *temporaries],
        target=lp.OpenCLTarget(),
        assumptions=assumptions,
        index_dtype=index_dtype,
        lang_version=(2018, 2),
        name=name,
        silenced_warnings=["inferred_iname", "no_device_in_pre_codegen_checks"],
    )
    for cname, clbl in callables.items():
        knl = lp.register_callable(knl, cname, clbl)
    return LoweredKernel(knl, arg_names)
