"""Named program passes, in processing order.

:func:`fuseloop.expr.program.linearize` makes a :class:`Build` of its roots and
runs :data:`PASSES` on it in order; each pass is a function of the build that
fills in one part of the program (see each one's docstring):

1. :func:`emit_entries`: the expression DAG as hash-consed SSA entries
   (broadcasting, leaf addresses, reduction loops and two-stage first
   stages, gathers, remaps, concatenation pieces);
2. :func:`place_outputs`: where each output is stored (strided and scatter targets);
3. :func:`size_roots`: the output loop's sizes as parameters;
4. :func:`split_rows`: the row loop of reductions computed once per output row;
5. :func:`detect_contraction`: a matmul-like program for the tiled recipes.

The passes after the first read entries as records (:mod:`fuseloop.expr.ir`),
so each can be run alone on a build made by hand (see tests/test_passes.py).
"""

from __future__ import annotations

from .build import Build
from .emit import emit_entries
from .outputs import detect_contraction, place_outputs, size_roots, split_rows

PASSES = (emit_entries, place_outputs, size_roots, split_rows, detect_contraction)


def run_passes(b: Build) -> Build:
    """Run every pass of :data:`PASSES` on ``b``, in order."""
    for run in PASSES:
        run(b)
    return b


__all__ = ["PASSES", "Build", "detect_contraction", "emit_entries", "place_outputs",
           "run_passes", "size_roots", "split_rows"]
