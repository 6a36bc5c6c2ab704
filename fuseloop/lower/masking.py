"""Masked programs (``Program.mask``, ``fl.compute(..., out=y, where=m)``): the mask is
computed first, into the temporary ``fl_mask``, and every other instruction of the
element's work, the stores included, is predicated on it, so Loopy emits one ``if``
around the computation of the value and its store.  Elements where the mask is false
are neither computed nor written; their memory keeps its values.  Recipes leave
predicated instructions as they are (no hoisted loads, no vector lanes): see
``recipes/elementwise.py`` and ``recipes/cpu_vector.py``.
"""

from __future__ import annotations

import re
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
