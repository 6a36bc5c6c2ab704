"""How the CPU rows recipe writes a row reduction's interleaved accumulators.

``row_cpu._accumulators`` splits a contiguous row's reduction over ``count``
accumulators (element ``count * m + k`` goes to accumulator ``k``); here are the
rules that choose how their lanes are written and how many an arg-reduction's
index pass gets, and the tree that combines them.
"""

from __future__ import annotations

from typing import Any

from .._lazy import isl, lp, prim
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


def tree_steps(count: int) -> list[tuple[int, int]]:
    """The halvings that combine ``count`` accumulators into the first: ``(n, h)``
    combines accumulator ``k + h`` into ``k`` for ``k < n``.

    A row's accumulators combined one after another are a chain of ``count`` dependent
    steps per row (a compare and a select each for a max): on rows of 1024 float32 an
    argmax's 32 and 8 took 0.91 of the CPU time as a tree (PoCL 3.0, hand-edited
    kernel).  Each level's steps are independent, so the compiler makes vectors of them.
    """
    steps, n = [], count
    while n > 1:
        h = (n + 1) // 2
        steps.append((n - h, h))
        n = h
    return steps


def combine_tree(parts: str, bound: str, count: int, combine: Any, within: frozenset[str],
                 after: str) -> tuple[list[Any], list[Any], str]:
    """Instructions and domains combining the ``count`` accumulators ``parts`` into
    ``parts[0]`` (see :func:`tree_steps`), and the last one's id.  A row of ``bound``
    elements leaves the accumulators past its end unset: a step reads only those below
    ``bound``.  ``combine(a, b)`` is the reduction's operation, ``after`` the id of the
    instruction that set the accumulators."""
    insns, domains = [], []
    for level, (n, h) in enumerate(tree_steps(count)):
        t = f"{parts}_tree{level}"
        domains.append(isl.BasicSet(f"[{bound}] -> {{ [{t}] : 0 <= {t} < {n} "
                                    f"and {t} + {h} < {bound} }}"))
        lane, other = prim.Variable(parts)[prim.Variable(t)], \
            prim.Variable(parts)[prim.Variable(t) + h]
        insns.append(lp.Assignment(lane, combine(lane, other), id=f"{t}_step",
                                   within_inames=within | {t},
                                   depends_on=frozenset({after})))
        after = f"{t}_step"
    return insns, domains, after
