"""A sparse product's entry (:class:`fuseloop.expr.ir.Sparse`) in the Loopy kernel.

Each product is a sum over a loop ``sp<ref>`` of its own, nested in the loops of
its row's position: for CSR over ``[indptr[row], indptr[row + 1])``, bounds held
in two temporaries written in the row's loop (a Loopy domain whose parameters
are values: Loopy nests the loop inside the instructions that write them); for
ELL over the fixed width, entry ``k`` of the row at ``k * rows + row``, padding
(column -1) adding nothing, so a non-finite ``x[0]`` never reaches other rows.
The column indices were checked when the matrix was built: ``x`` is read
without a bounds check.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np

from .._lazy import lp, prim

if TYPE_CHECKING:
    from .kernel import _Lowering


def lower_sparse(low: _Lowering, e: Any, ref: int) -> tuple[Any, np.dtype, frozenset]:
    """Value (a temporary holding the row's sum), dtype and inames of sparse entry
    ``e`` (entry number ``ref``); what the value waits for goes to ``low.extra_deps``."""
    from .reductions import reduction_operation  # (Loopy's classes)

    dt = np.dtype(e.dtype)
    ins = [prim.Variable(f"in{slot}") for slot in e.slots]
    for slot, char in zip(e.slots, e.chars):
        if slot >= 0:
            low.inputs[slot] = np.dtype(char)
    row, names = low.comp(e.at[0])
    names = names | low.base
    loop = f"sp{ref}{low.sfx}"  # (``s<k>`` are scalar arguments)
    jj = prim.Variable(loop)
    deps = frozenset(low.extra_deps)
    if e.fmt == "csr":
        bounds = []
        for end, pos in (("lo", row), ("hi", row + 1)):
            tmp = f"sp_{end}{ref}{low.sfx}"
            low.temporary(tmp, low.index_dtype)
            low.instructions.append(lp.Assignment(
                prim.Variable(tmp), ins[2][pos], id=f"calc_{tmp}", within_inames=names,
                depends_on=deps))
            bounds.append(tmp)
        low.domains.append(f"[{bounds[0]}, {bounds[1]}] -> "
                           f"{{[{loop}]: {bounds[0]} <= {loop} < {bounds[1]}}}")
        deps = frozenset(f"calc_{b}" for b in bounds)
        pos = jj
    else:
        width = low.size(e.width)
        low.domains.append(f"[{width}] -> {{[{loop}]: 0 <= {loop} < {width}}}")
        pos = jj * low.size(e.rows) + row
    col = ins[1][pos]
    xpos = col if e.x_stride == 1 else low.size(e.x_stride) * col
    if e.x_offset != 0:
        xpos = xpos + low.size(e.x_offset)
    terms = []
    for value, char in ((ins[0][pos], e.chars[0]), (ins[3][xpos], e.chars[3])):
        frm = np.dtype(char)
        terms.append(value if frm == dt else low.helper_call("cast", (frm, dt), [value]))
    body: Any = prim.Product(tuple(terms))
    if e.fmt == "ell":
        body = prim.If(prim.Comparison(col, ">=", 0), body, dt.type(0))
    tmp = f"sp_v{ref}{low.sfx}"
    low.temporary(tmp, dt)
    low.instructions.append(lp.Assignment(
        prim.Variable(tmp), lp.Reduction(reduction_operation("sum", dt), (loop,), body),
        id=f"calc_{tmp}", within_inames=names, depends_on=deps))
    low.extra_deps.add(f"calc_{tmp}")
    return prim.Variable(tmp), dt, names
