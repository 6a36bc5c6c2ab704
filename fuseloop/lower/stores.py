"""The stores of a lowered kernel's outputs (:func:`emit_outputs`).

Each output is written at its address in the current pass's loop; with several outputs
every value is computed before any store (outputs may alias inputs), and an output with
an update operation (``fl.add.at``, ``Target.atomic``) is one atomic update.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np

from .._lazy import lp, prim
from ..dtypes import kernel_dtype
from ..expr.program import Program
from .masking import guard_with_mask

if TYPE_CHECKING:
    from .kernel import _Lowering as Lowering


def values_before_stores(low: Lowering, program: Program) -> tuple[list[Any], list[frozenset]]:
    """Each output's value and what its store waits for.  With several outputs every
    value is computed (into a temporary) before any store: an output may be written into
    a buffer another output reads at the same element (``fl.compute(b * 2, a + 1,
    out=(a, b))``), and Loopy does not know that the two arguments alias."""
    outs = program.outputs
    if len(outs) < 2:
        return [low.exprs[r] for r in outs], [low.deps[r] for r in outs]
    values: list[Any] = []
    waits: frozenset = frozenset()
    for k, ref in enumerate(outs):
        value = low.exprs[ref]
        waits |= low.deps[ref]
        if not isinstance(value, prim.Variable | int | float | np.generic):
            tmp = f"ov{k}{low.sfx}"
            low.temporary(tmp, kernel_dtype(low.dtypes[ref]))
            low.instructions.append(lp.Assignment(
                prim.Variable(tmp), value, id=f"calc_{tmp}",
                within_inames=low.inames[ref] | low.base, depends_on=low.deps[ref]))
            value = prim.Variable(tmp)
            waits |= {f"calc_{tmp}"}
        values.append(value)
    return values, [waits] * len(outs)


def atomic_store(low: Lowering, k: int, addr: Any, value: Any, ref: int, op: str,
                  names: frozenset, deps: frozenset) -> Any:
    """``out<k>[addr] = op(out<k>[addr], value)`` as one atomic update: Loopy emits a
    compare-and-swap loop on the element's bits (any 4- or 8-byte type), so repeated
    positions each count (numpy's ``ufunc.at``)."""
    dt = low.dtypes[ref]
    place = prim.Variable(f"out{k}")[addr]
    if op == "add":
        new: Any = prim.Sum((place, value))
    elif op == "subtract":
        new = prim.Sum((place, prim.Product((-1, value))))
    else:
        new = low.helper_call(op, (dt, dt, dt), [place, value])
    return lp.Assignment(place, new, id=f"store_out{k}{low.sfx}", within_inames=names,
                         depends_on=deps, atomicity=(lp.AtomicUpdate(f"out{k}"),))


def emit_outputs(low: Lowering, program: Program, index_dtype: np.dtype) -> None:
    """The stores of the outputs (in the current pass's loop)."""
    root_at = tuple(0 if s == 1 else ("r", d) for d, s in enumerate(program.root_sizes))
    values, before = values_before_stores(low, program)
    for k, ref in enumerate(program.outputs):
        spec = program.out_specs[k]
        low.extra_deps = set()
        if spec == ():
            addr, names = low.contiguous_address(root_at)
        else:
            addr, names = low.address(*spec[:3])
            names = names | {n for c in spec[0] if c != 0 for n in low._static_inames(c)}
        names = names | low.inames[ref] | low.base
        if not isinstance(addr, prim.Variable | int):
            # Loopy resolves function calls on right-hand sides only
            tmp = f"oaddr{k}{low.sfx}"
            low.temporary(tmp, index_dtype)
            low.instructions.append(lp.Assignment(
                prim.Variable(tmp), addr, id=f"calc_{tmp}", within_inames=names,
                depends_on=frozenset(low.extra_deps)))
            low.extra_deps.add(f"calc_{tmp}")
            addr = prim.Variable(tmp)
        if len(spec) == 4:  # an atomic update (fl.add.at, Target.atomic)
            low.instructions.append(atomic_store(low, k, addr, values[k], ref, spec[3], names,
                                                  before[k] | frozenset(low.extra_deps)))
            continue
        low.instructions.append(lp.Assignment(
            prim.Variable(f"out{k}")[addr], values[k], id=f"store_out{k}{low.sfx}",
            within_inames=names, depends_on=before[k] | frozenset(low.extra_deps),
            # the pieces' loops write disjoint ranges
            no_sync_with=frozenset({(f"store_out{k}_k*", "any")}) if low.sfx else frozenset()))
    if program.mask is not None:  # (never in a piece's loop: see lower_program)
        guard_with_mask(low, program)
