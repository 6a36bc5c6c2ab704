"""How the CPU rows recipe writes a row reduction's interleaved accumulators.

``rows._accumulators`` splits a contiguous row's reduction over ``count``
accumulators (element ``count * m + k`` goes to accumulator ``k``); here are the
rules that choose how their lanes are written and how many an arg-reduction's
index pass gets.
"""

from __future__ import annotations

from typing import Any

from .._lazy import lp
from .cpu_vector import LANES


def index_valued(knl: lp.LoopKernel, j: str) -> bool:
    """Whether a reduction over ``j`` uses ``j`` as a value, not only to address memory
    (an arg-reduction's index pass: ``min(where(x >= best, j, n))``)."""
    from loopy.symbolic import WalkMapper

    class _Uses(WalkMapper):
        found = False

        def map_subscript(self, expr: Any, *args: Any) -> None:
            self.rec(expr.aggregate, *args)  # the index only addresses memory

        def map_variable(self, expr: Any, *args: Any) -> None:
            self.found = self.found or expr.name == j

    uses = _Uses()
    for insn in knl.instructions:
        if (isinstance(insn, lp.Assignment) and isinstance(insn.expression, lp.Reduction)
                and insn.expression.inames == (j,)):
            uses(insn.expression.expr)
    return uses.found


def lane_tag(knl: lp.LoopKernel, insn: Any, count: int) -> str:
    """How the ``count`` accumulators of a ``max`` or ``min`` are written: a loop over
    their lanes (``ilp.seq``) where the row's elements are 4 bytes wide and the lanes
    fill a vector of 8, else (and for every other reduction) one statement per lane
    (``ilp``).

    PoCL's compiler (LLVM 14) vectorised the lane loop of a float32 or int32 max and
    of an argmax's index pass better than the same steps written out lane by lane
    (4096 rows of 1024, CPU time: float32 argmax 1.79 -> 1.35 ms, int32 argmax
    1.77 -> 1.05, int32 max 0.99 -> 0.69); on doubles the written-out lanes were
    faster (max 1.43 against 1.68 ms).  Sums gained nothing (plain: 0.60 ms either
    way) or lost: the n-body workload's pairwise sums (sqrt, where and products in
    their terms) took 8.7 ms of CPU time instead of 6.2 with the loop; and a float32
    max over rows of 128 (4 accumulators) 0.58 ms instead of 0.39.
    """
    from ..lower.reductions import NanMaxReductionOperation, NanMinReductionOperation

    selects = NanMaxReductionOperation | NanMinReductionOperation
    if count < LANES or not isinstance(insn.expression.operation, selects):
        return "ilp"
    # the reduction, and what its loop loads into temporaries (an argmax's index pass)
    (j,) = insn.expression.inames
    names = {n for i in knl.instructions if i.id == insn.id or j in i.within_inames
             for n in i.read_dependency_names()}
    read = [knl.arg_dict[n] for n in names
            if n in knl.arg_dict and isinstance(knl.arg_dict[n], lp.ArrayArg)]
    wide = any(a.dtype is None or a.dtype.numpy_dtype.itemsize > 4 for a in read)
    return "ilp" if wide or not read else "ilp.seq"
