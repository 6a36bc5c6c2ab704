"""A checked gather's error flag written once per work-item, after its loops.

The lowering (``_Lowering.gather_index``) checks each gathered index where it is
computed: three stores to the flag ``err`` (code, offending value, axis length)
under ``index out of range``.  A conditional store to one address in every
iteration keeps LLVM from vectorising the loop that holds it, so on PoCL's CPU
device a random gather's kernel ran 30-50% longer than the same kernel unchecked.

After the recipe (when it is known which loops a work-item runs itself and which
are its work-group's or grid's axes) :func:`fold_index_checks` replaces those
stores: the work-item keeps the least and the greatest raw index it read (two
private values, updated with selects, which vectorise), and after its loops writes
the flag once where either lies outside ``[-n, n)``.  The flag names an offending
value, code and axis length as before (the least or the greatest: any offender was
already what racing writers left), so :mod:`fuseloop.flags` reads it unchanged.

Not folded (the stores kept as they were) where the check sits in an ILP or vector
loop (Loopy gives each lane of those its own copy of a private value, which a value
kept across the lanes cannot be), or where the work-item's axes are bounded by a
loop around the check (the store after the loops would have no bounds).  (Imports
Loopy: the code generator only.)
"""

from __future__ import annotations

import re
from typing import Any

import islpy as isl
import loopy as lp
import numpy as np
import pymbolic.primitives as prim
from loopy.kernel.data import GroupInameTag, IlpBaseTag, LocalInameTag, VectorizeTag
from loopy.symbolic import get_dependencies

_CHECK = re.compile(r"^check0_(.+)$")
_INT64 = np.dtype(np.int64)


def fold_index_checks(t_unit: Any) -> Any:
    """``t_unit`` with each gather check's three flag stores per index replaced by a
    least and greatest index kept per work-item and one flag store after its loops."""
    knl = t_unit.default_entrypoint
    if "err" not in knl.arg_dict:
        return t_unit
    names = [m.group(1) for insn in knl.instructions if (m := _CHECK.match(insn.id))]
    folded = [name for name in names if _foldable(knl, name)]
    if not folded:
        return t_unit
    dropped = {f"check{k}_{name}" for name in folded for k in range(3)}
    insns = [i for i in knl.instructions if i.id not in dropped]
    temps = dict(knl.temporary_variables)
    for name in folded:
        added, new_temps = _fold(knl, name)
        insns.extend(added)
        temps.update(new_temps)
    insns = [i.copy(depends_on=i.depends_on - dropped) if i.depends_on & dropped else i
             for i in insns]
    # (the flag stores need no order among themselves; Loopy resolved the lowering's
    # pattern for these to the ids it knew then)
    stores = frozenset(i.id for i in insns if i.id.startswith("check") and
                       i.assignee_var_names() == ("err",))
    insns = [i.copy(no_sync_with=frozenset((s, "any") for s in stores - {i.id}))
             if i.id in stores else i for i in insns]
    return t_unit.with_kernel(knl.copy(instructions=insns, temporary_variables=temps))


def _foldable(knl: Any, name: str) -> bool:
    checks = [knl.id_to_insn.get(f"check{k}_{name}") for k in range(3)]
    if any(c is None for c in checks):
        return False
    within = checks[0].within_inames
    if any(knl.iname_tags_of_type(i, (IlpBaseTag, VectorizeTag)) for i in within):
        return False
    # the flag is stored outside the loops: the work-item's axes must not be bounded by
    # them, nor by a value computed in them
    hw = _axes(knl, within)
    if not hw:
        return True
    bounds = set(knl.get_inames_domain(hw).get_var_names(isl.dim_type.param))
    writers = knl.writer_map()
    return not any(b in within - hw or any(not knl.id_to_insn[w].within_inames <= hw
                                           for w in writers.get(b, ()))
                   for b in bounds)


def _axes(knl: Any, within: frozenset) -> frozenset:
    """The inames of ``within`` that are the work-item's hardware axes (group, local)."""
    return frozenset(i for i in within
                     if knl.iname_tags_of_type(i, (GroupInameTag, LocalInameTag)))


def _fold(knl: Any, name: str) -> tuple[list[Any], dict[str, Any]]:
    """The instructions and temporaries replacing the flag stores of gather ``name``."""
    code, raw, n = (knl.id_to_insn[f"check{k}_{name}"] for k in range(3))
    within = code.within_inames
    hw = _axes(knl, within)  # (every instruction must run on all of them: Loopy)
    lo, hi = prim.Variable(f"{name}_lo"), prim.Variable(f"{name}_hi")
    value, bound = raw.expression, n.expression
    temps = {v.name: lp.TemporaryVariable(v.name, _INT64, shape=(),
                                          address_space=lp.AddressSpace.PRIVATE)
             for v in (lo, hi)}
    # (0 and -1: in range for every n >= 0, and no offender on a work-item that read none)
    init = [lp.Assignment(v, start, id=f"checkinit_{v.name}", within_inames=hw)
            for v, start in ((lo, 0), (hi, -1))]
    writers = knl.writer_map()
    reads = frozenset().union(*(writers.get(v, ()) for v in get_dependencies(value)))
    # (a recipe's guards on the check, not its own condition on the index)
    guards = frozenset(p for p in code.predicates if name not in get_dependencies(p))
    # (selects, not OpenCL's min/max: PoCL calls those for longs, element by element)
    keep = [lp.Assignment(v, prim.If(prim.Comparison(value, op, v), value, v),
                          id=f"checkkeep_{v.name}", within_inames=within, predicates=guards,
                          depends_on=code.depends_on | reads | {f"checkinit_{v.name}"})
            for v, op in ((lo, "<"), (hi, ">"))]
    below = prim.Comparison(lo, "<", -bound)
    # (Loopy annotates predicates as strings; it takes expressions as well)
    bad: Any = prim.LogicalOr((below, prim.Comparison(hi, ">=", bound)))
    keep_ids = frozenset(k.id for k in keep)
    store = [lp.Assignment(c.assignee, v, id=f"checkstore{k}_{name}", within_inames=hw,
                           predicates=frozenset({bad}), depends_on=keep_ids)
             for k, (c, v) in enumerate(((code, code.expression),
                                         (raw, prim.If(below, lo, hi)), (n, bound)))]
    return init + keep + store, temps
