"""Masked programs (``Program.mask``, ``fl.compute(..., out=y, where=m)``): the mask is
computed first, into the temporary ``fl_mask``, and every other instruction of the
element's work, the stores included, is predicated on it, so Loopy emits one ``if``
around the computation of the value and its store.  Elements where the mask is false
are neither computed nor written; their memory keeps its values.  Recipes leave
predicated instructions as they are (no hoisted loads, no vector lanes: see
``recipes/elementwise.py`` and ``recipes/cpu_vector.py``), but for the CPU
recipe's math on vectors, which takes a masked kernel through
:func:`vectorise_masked`: blocks of 8 elements computed whole where a lane is
selected, the stores still predicated.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import numpy as np

from .._lazy import lp, prim
from ..expr.ir import ELEMENTWISE_KINDS
from ..expr.program import Program

if TYPE_CHECKING:
    from .kernel import _Lowering

_UINT8 = np.dtype(np.uint8)


def mask_cone(program: Program) -> frozenset[int]:
    """The entries the program's mask (``Program.mask``) is computed from (none
    without a mask)."""
    if program.mask is None:
        return frozenset()
    seen: set[int] = set()
    stack = [program.mask]
    entries = program.entries
    while stack:
        ref = stack.pop()
        if ref in seen:
            continue
        seen.add(ref)
        e: Any = entries[ref]
        kind = e.kind
        if kind in ELEMENTWISE_KINDS:
            stack.extend(e.refs)
        elif kind == "gather":
            stack.extend((e.index, e.child))
        elif kind == "concat":
            stack.extend(e.refs)
        elif kind == "reduce":
            stack.append(e.child)
        for c in getattr(e, "at", None) or ():
            stack.extend(_gathered_refs(c))
    return frozenset(seen)


def _gathered_refs(c: Any) -> list[int]:
    """The entries whose values index component ``c`` gathers by."""
    if not isinstance(c, tuple):
        return []
    if c[0] == "g":
        return [c[1]]
    if c[0] == "k":
        return _gathered_refs(c[1])
    if c[0] == "a":
        return [r for _, sub in c[2] for r in _gathered_refs(sub)]
    return []


def guard_with_mask(low: _Lowering, program: Program) -> None:
    """Predicate every instruction but the mask's own on the mask (``Program.mask``):
    where it is false, nothing of the value is computed and nothing is stored (one
    ``if`` around the element's work; instructions outside the mask's loops, a row's
    reductions, stay as they are)."""
    ref = program.mask
    assert ref is not None
    cone = mask_cone(program)
    names = low.inames[ref] | low.base
    low.temporary("fl_mask", _UINT8)
    calc = lp.Assignment(prim.Variable("fl_mask"), low.exprs[ref], id="calc_fl_mask",
                         within_inames=names, depends_on=low.deps[ref])
    guard = prim.Comparison(prim.Variable("fl_mask"), "!=", 0)
    insns = []
    for insn in low.instructions:
        if not _computes_one_of(insn.id, cone) and names <= insn.within_inames:
            insn = insn.copy(predicates=insn.predicates | {guard},
                             depends_on=insn.depends_on | {"calc_fl_mask"})
        insns.append(insn)
    low.instructions = [calc, *insns]


# the instructions of an entry's value: its temporary ``t<ref>`` and, for a checked
# gather by entry ``ref``, its index's temporary ``gi<ref>...`` and flag writes
# (see ``_Lowering.run`` and ``_Lowering.gather_index``)
_ENTRY_INSN = re.compile(r"(?:calc_|check\d_)(?:t|gi)(\d+)(?:$|[pn])")


def _computes_one_of(insn_id: str, refs: frozenset[int]) -> bool:
    """Whether instruction ``insn_id`` computes (part of) one of the entries ``refs``."""
    m = _ENTRY_INSN.match(insn_id)
    return m is not None and int(m.group(1)) in refs


def vectorise_masked(t_unit: Any, flat: str, vectorise: Callable[[Any], Any],
                     fp64: bool = True) -> Any:
    """``vectorise(t_unit)`` (the CPU recipe's math on vectors of 8 lanes,
    :func:`fuseloop.recipes.cpu_vector.vectorise_math_calls`), for a masked kernel too.

    The vector transform leaves predicated instructions as they are, so a masked
    kernel's math ran one scalar builtin call per element (2-5x ``fl.where``'s time
    where most elements are selected).  Where computing an element's value has no
    effect but the value (no checked gather, no ``fl.check``, no atomic store, no
    user function) and the kernel has math worth vectors, the value is computed for
    all 8 lanes of a block, the stores stay predicated lane by lane, and a block none of whose lanes
    is selected is skipped whole after its mask is computed.  Other kernels get
    ``vectorise`` as they are (``fp64``: whether the device has doubles, as for
    ``vectorise``).
    """
    from ..recipes.cpu_vector import GUARD_SUFFIX, count_vector_calls
    from .callables import UserCallable

    knl = t_unit.default_entrypoint
    guard = prim.Comparison(prim.Variable("fl_mask"), "!=", 0)
    stores = _maskable_stores(knl, flat, guard)
    # (a user function's C may divide integers or read through a pointer argument by
    # an index that is valid only where the mask holds)
    if stores is None or any(isinstance(c, UserCallable)
                             for c in t_unit.callables_table.values()):
        return vectorise(t_unit)
    plain = t_unit.with_kernel(knl.copy(instructions=[
        insn.copy(predicates=frozenset()) for insn in knl.instructions]))
    ids = frozenset(insn.id for insn in knl.instructions)
    if not count_vector_calls(plain, ids, fp64, flat):
        return vectorise(t_unit)  # (arithmetic alone vectorises under the mask as it is)
    done = vectorise(plain).default_entrypoint
    block, lanes = f"{flat}_inner_outer", f"{flat}_inner_inner"
    calc = done.id_to_insn["calc_fl_mask"]
    if block not in calc.within_inames:
        return vectorise(t_unit)  # (not split as expected: the scalar form is right)
    per_lane = bool(done.temporary_variables["fl_mask"].shape)

    def selected(insn: Any) -> Any:
        if not per_lane:
            return guard
        # (a lane loop's one-iteration guard, cpu_vector._guard_lanes, is not a lane)
        lane, = (n for n in insn.within_inames
                 if n.startswith(lanes) and not n.endswith(GUARD_SUFFIX))
        return prim.Comparison(prim.Variable("fl_mask")[prim.Variable(lane)], "!=", 0)

    temps = dict(done.temporary_variables)
    temps["fl_any"] = lp.TemporaryVariable("fl_any", _UINT8, shape=(),
                                           address_space=lp.AddressSpace.PRIVATE)
    outside = frozenset(n for n in calc.within_inames if not n.startswith(lanes))
    init = lp.Assignment(prim.Variable("fl_any"), 0, id="fl_any_init", within_inames=outside)
    found = selected(calc)
    any_of = lp.Assignment(prim.Variable("fl_any"),
                           prim.BitwiseOr((prim.Variable("fl_any"), found.left)),
                           id="fl_any_lanes", within_inames=calc.within_inames,
                           depends_on=frozenset({"calc_fl_mask", "fl_any_init"}))
    some = prim.Comparison(prim.Variable("fl_any"), "!=", 0)
    insns = [init, any_of]
    mask_parts = _ancestors(done, "calc_fl_mask")
    for insn in done.instructions:
        if insn.id not in mask_parts and block in insn.within_inames:
            # (the mask's own lane loop, where fl_any is not complete yet, runs for
            # every lane: loads and arithmetic before the first vector call)
            extra = set() if insn.within_inames == calc.within_inames else {some}
            if insn.id in stores:
                extra.add(selected(insn))
            insn = insn.copy(predicates=insn.predicates | extra,
                             depends_on=insn.depends_on | {"fl_any_lanes"})
        insns.append(insn)
    return t_unit.with_kernel(done.copy(instructions=insns, temporary_variables=temps))


def _ancestors(knl: Any, insn_id: str) -> frozenset[str]:
    """``insn_id`` and the instructions it depends on, directly or not."""
    seen = {insn_id}
    stack = [insn_id]
    while stack:
        for dep in knl.id_to_insn[stack.pop()].depends_on:
            if dep not in seen and dep in knl.id_to_insn:
                seen.add(dep)
                stack.append(dep)
    return frozenset(seen)


def _maskable_stores(knl: Any, flat: str, guard: Any) -> frozenset[str] | None:
    """The ids of the stores of a masked element loop whose other instructions may
    run where the mask is false; None if it is no such kernel."""
    if "calc_fl_mask" not in knl.id_to_insn or "err" in knl.arg_dict:
        return None
    outputs = {a.name for a in knl.args if isinstance(a, lp.ArrayArg) and a.is_output}
    stores = set()
    for insn in knl.instructions:
        if (not isinstance(insn, lp.Assignment) or insn.within_inames != frozenset({flat})
                or insn.atomicity or insn.id.startswith("check")):
            return None
        store = insn.assignee_var_names()[0] in outputs
        if insn.id == "calc_fl_mask" or (not insn.predicates and not store):
            continue  # (the mask and what it is computed from: run everywhere already)
        if insn.predicates != frozenset({guard}):
            return None
        if store:
            stores.add(insn.id)
    return frozenset(stores)
