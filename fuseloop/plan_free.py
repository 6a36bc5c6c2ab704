"""Signatures with their lengths as symbols: run plans found without a walk at every
length of a loop over slices of changing length (issue 26).

A node's signature (``expr.nodes``) holds its shapes, so a loop whose slices grow
(durbin's ``y[:k] += alpha * flip(y[:k])``, trisolv's ``L[i, :i] @ x[:i]``) has new
signatures every iteration, and its plans by signature (``run_plans``) missed at every
new length: each statement walked its tree for the walk's key, which writes lengths as
symbols (``program.ViewOffsets``).  :func:`free_of` writes a signature's fields as
that key does: every length above 1 the walk writes as a symbol (an operation's,
a view's, a reduction's shape) as ``(which distinct length, its bit length)``, the
rest as they are (gathers', remaps', element indices' shapes: the walk writes those
out too).  So equal answers for one structure's signatures mean equal walk keys, and
the lengths of that key are some of :func:`free_of`'s, in an order learnt once
(``run_plans`` keeps, per free key, the walk's key and where each of its lengths is
among these).  ``bound`` is the walk's too (the largest shape's size times two per
axis): past int32 the walk keeps the lengths in its key, and the free key is not used.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from . import caches as _caches
from .expr.nodes import _fields_before, _sig_fields

# kinds whose fields are written as they are (no children, no lengths symbolised)
_EXACT_KINDS = frozenset(("S", "C", "I"))
# kind -> (where its shape is among its fields, where its children begin)
_SHAPED = {"A": (3, 4), "R": (4, 5)}
# kinds whose shape the walk writes out (gathers, remaps, a split array's windows)
_CHILDREN_ONLY = {"G": 4, "M": 4, "K": 4}
# (NPBench M's growing loops meet 5000-6000 lengths a pass, a signature each: a memo
# cleared every 4096 of them missed at every statement, a walk each)
FREE_MAX = 1 << 14
# (signatures, output shape) -> free_of's answer
_memo: dict[tuple, tuple[tuple, tuple[int, ...], int] | None] = {}


class _Walk:
    """The tokens, distinct lengths and bound of one :func:`free_of`."""

    __slots__ = ("bound", "index", "lens", "toks")

    def __init__(self) -> None:
        self.toks: list[Any] = []
        self.lens: list[int] = []
        self.index: dict[int, tuple[int, int]] = {}
        self.bound = 0

    def shape(self, shape: tuple[int, ...]) -> tuple:
        out: list[Any] = []
        index = self.index
        size = 1
        for n in shape:
            size *= n
            if n <= 1:
                out.append(n)
                continue
            sym = index.get(n)
            if sym is None:
                sym = index[n] = (len(self.lens), n.bit_length())
                self.lens.append(n)
            out.append(sym)
        bound = size << len(shape)
        if bound > self.bound:
            self.bound = bound
        return tuple(out)

    def sig(self, sig: int) -> bool:
        """Append ``sig``'s tokens; False where its fields are not known."""
        fields = _sig_fields.get(sig) or _fields_before[0].get(sig)
        if fields is None:
            return False
        kind = fields[0]
        toks = self.toks
        if kind in _EXACT_KINDS:
            toks.append(fields)
            return True
        if kind == "L" or kind == "LC":  # a whole buffer: (kind, dtype, shape, None, 0)
            toks.append((kind, fields[1], self.shape(fields[2])))
            return True
        if kind == "V":
            toks.append(("V", fields[1], fields[2], self.shape(fields[3]), fields[4]))
            return True
        if kind == "J" or kind == "O":  # (joined operands, offsets' places: then the sig)
            toks.append((kind, fields[2]))
            return self.sig(fields[1])
        shaped = _SHAPED.get(kind)
        if shaped is not None:
            at, children = shaped
            toks.append((*fields[:at], self.shape(fields[at]), len(fields) - children))
        else:
            children = _CHILDREN_ONLY.get(kind, -1)
            if children < 0:
                return False
            toks.append((*fields[:children], len(fields) - children))
        for child in fields[children:]:
            if not self.sig(child):
                return False
        return True


def free_of(sigs: Sequence[int], out_shape: tuple[int, ...]
            ) -> tuple[tuple, tuple[int, ...], int] | None:
    """The free key of roots of signatures ``sigs`` evaluated to ``out_shape`` (their
    tokens, the output's shape last), the distinct lengths its symbols stand for (first
    met first) and the walk's bound; None where a signature's fields are not known."""
    key = (tuple(sigs), out_shape)
    got = _memo.get(key, _memo)
    if got is not _memo:
        return got  # type: ignore[return-value]
    walk = _Walk()
    try:
        ok = True
        for s in sigs:
            if not walk.sig(s):
                ok = False
                break
    except RecursionError:
        ok = False
    if ok:
        walk.toks.append(walk.shape(out_shape))
    answer = (tuple(walk.toks), tuple(walk.lens), walk.bound) if ok else None
    if len(_memo) >= FREE_MAX:
        _memo.clear()
    _memo[key] = answer
    return answer


def places(walked: Sequence[int], lens: Sequence[int]) -> tuple[int, ...] | None:
    """Where each of the walk's lengths ``walked`` is among ``lens`` (:func:`free_of`'s),
    or None where one is not there."""
    out = []
    for n in walked:
        try:
            out.append(lens.index(n))
        except ValueError:
            return None
    return tuple(out)


_caches.register("plan_free.memo", _memo.clear, lambda: len(_memo), FREE_MAX)
