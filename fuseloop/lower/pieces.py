"""Concatenations as one loop per piece (the CPU recipe's ``concat_chunk``).

An elementwise kernel reading a concatenation whose pieces are consecutive
ranges of the flat loop can run the whole kernel once per piece, over only that
piece's part of each work-item's chunk, reading the piece directly: no
per-element selection, so each loop vectorises (see docs/design.md).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from .._lazy import lp, prim
from ..expr.program import Program, reachable_entries

FLAT_INAME = "i"
#: piece ``p`` of a concatenation split into loops runs over ``i_k<p>``
PIECE_INAME_PREFIX = f"{FLAT_INAME}_k"
#: concatenations with more pieces keep the selection (the body is repeated per piece)
MAX_PIECE_LOOPS = 64


def _comp_refs(c: Any, out: list[int]) -> None:
    """The entries (gathered index values) that index component ``c`` reads."""
    if c == 0:
        return
    if c[0] == "g":
        out.append(c[1])
    elif c[0] == "k":
        _comp_refs(c[1], out)
    elif c[0] == "a":
        for _, sub in c[2]:
            _comp_refs(sub, out)


def live_entries(program: Program, resolved: Any) -> set[int]:
    """The entries computed in the loop over piece ``resolved[1]`` of the concatenation
    ``resolved[0]``: its other pieces are not read there."""
    entries = program.entries
    roots = list(program.outputs)
    for spec in program.out_specs:
        if spec:
            for c in spec[0]:
                _comp_refs(c, roots)

    def inputs(ref: int, stack: list[int]) -> bool:
        e: Any = entries[ref]
        kind = e.kind
        if kind in ("load", "iota"):
            for c in e.at:
                _comp_refs(c, stack)
        elif kind in ("op", "call"):
            stack.extend(e.refs)
        elif kind == "reduce":
            stack.append(e.child)
            for c in e.at:
                _comp_refs(c, stack)
        elif kind == "gather":
            stack.extend((e.index, e.child))
        elif kind == "concat":
            _comp_refs(e.comp, stack)
            stack.extend((e.refs[resolved[1]],) if (e.comp, e.bounds) == resolved[0] else e.refs)
        return True

    live = reachable_entries(roots, inputs)
    assert live is not None  # (inputs never gives up)
    return live


def piece_loops(program: Program) -> tuple | None:
    """The concatenation whose pieces can each get a loop of their own, or None.

    Returns ``(comp, bounds, refs, flat)`` of a ``concat`` entry whose pieces are
    consecutive ranges of the flat loop (``flat`` is not None), in an elementwise
    kernel (no reduction) with at most ``MAX_PIECE_LOOPS`` pieces.  Other
    concatenations of the kernel keep their selection.
    """
    if program.has_reduce or program.row_dims is not None or program.contraction is not None:
        return None
    e: Any  # an Entry, read by its kind tag
    for e in program.entries:
        if e.kind == "concat" and e.flat is not None and len(e.refs) <= MAX_PIECE_LOOPS:
            return (e.comp, e.bounds, e.refs, e.flat)
    return None


def lower_pieces(low: Any, program: Program, index_dtype: np.dtype, chunk: int,
                 split: tuple, emit_outputs: Callable[[Any, Program, np.dtype], None]) -> None:
    """The kernel as one pass per piece of the concatenation ``split``.

    ``i`` numbers chunks of ``chunk`` elements of the flat loop; piece ``p``'s
    pass runs the whole kernel over ``i_k<p>``, the elements of the chunk in
    piece ``p`` (its domain holds the piece's range: Loopy makes it the loop's
    bounds), with the concatenation replaced by the piece, read unclamped.
    """
    comp, bounds, refs, (flat, kcs, cstrides) = split
    low.domains.append(f"[N] -> {{[{FLAT_INAME}]: 0 <= {FLAT_INAME} and "
                       f"{chunk}*{FLAT_INAME} < N}}")
    first = chunk * prim.Variable(FLAT_INAME)
    last = len(refs) - 1
    for p in range(len(refs)):
        iname = f"{PIECE_INAME_PREFIX}{p}"
        # the loop's bounds are temporaries computed per chunk: written in the domain
        # as the intersection of the chunk and the piece, Loopy's bounds (maxima and
        # minima) would come with a test per element
        lo: Any = first if p == 0 else prim.Variable("max")(first, low.size(flat[p - 1]))
        hi: Any = prim.Variable("min")(first + chunk, prim.Variable("N") if p == last
                                       else low.size(flat[p]))
        lo_name, hi_name = f"lo_k{p}", f"hi_k{p}"
        for tmp, value in ((lo_name, lo), (hi_name, hi)):
            low.temporary(tmp, index_dtype)
            low.instructions.append(lp.Assignment(
                prim.Variable(tmp), value, id=f"calc_{tmp}",
                within_inames=frozenset({FLAT_INAME})))
        low.domains.append(f"[{lo_name}, {hi_name}] -> {{[{iname}]: "
                           f"{lo_name} <= {iname} < {hi_name}}}")
        low.start_pass(p, ((comp, bounds), p, kcs[p], 0 if p == 0 else flat[p - 1], cstrides),
                       iname,
                       frozenset({FLAT_INAME, iname}))
        before = len(low.instructions)
        low.setup_root()
        low.run()
        emit_outputs(low, program, index_dtype)
        bound_ids = frozenset({f"calc_{lo_name}", f"calc_{hi_name}"})
        low.instructions[before:] = [insn.copy(depends_on=insn.depends_on | bound_ids)
                                     for insn in low.instructions[before:]]
