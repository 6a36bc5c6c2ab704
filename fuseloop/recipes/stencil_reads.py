"""Reading a stencil off a kernel's index expressions (for :mod:`.stencil_tiles`).

After the flat loop is replaced by one loop per output axis (``i_s0, i_s1, ...``) and
the pinned sizes by their values, a read of a neighbour is an address
``sum(stride[d] * A[d])`` where each ``A[d]`` is ``i_sd + shift`` (a slice), or that
index under a boundary rule as ``fl.stencil`` computes it (:func:`~fuseloop.ops.stencil.
shifted`, through integer temporaries and helper calls): ``min(max(i + s, 0), n - 1)``
(clamp; also the gather of the constant rule, whose ``where`` stays in the
arithmetic) or ``(i + s) mod n`` (wrap).  :func:`neighbourhoods` finds, per input
array, the strides, every read's shifts and each axis' rule.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, NamedTuple

import numpy as np

from .._lazy import lp, prim

#: an axis' boundary rule: ("clamp", n) or ("wrap", n) (n: the array's extent), or None
Mode = tuple[str, int] | None


def linear(expr: Any, fixed: dict[str, int]) -> tuple[dict[str, int], int] | None:
    """``expr`` as {iname: coefficient} and a constant, the ``fixed`` names replaced by
    their values; None when it is not affine with constant coefficients."""
    if isinstance(expr, int | np.integer):
        return {}, int(expr)
    if isinstance(expr, prim.Variable):
        if expr.name in fixed:
            return {}, fixed[expr.name]
        return {expr.name: 1}, 0
    if isinstance(expr, prim.Sum):
        coefs: dict[str, int] = {}
        const = 0
        for child in expr.children:
            part = linear(child, fixed)
            if part is None:
                return None
            for n, c in part[0].items():
                coefs[n] = coefs.get(n, 0) + c
            const += part[1]
        return coefs, const
    if isinstance(expr, prim.Product):
        coefs, const = {}, 1
        for child in expr.children:
            part = linear(child, fixed)
            if part is None or (part[0] and coefs):
                return None  # (a product of two indices)
            if part[0]:
                coefs = {n: c * const for n, c in part[0].items()}
                const = part[1] * const
            else:
                coefs = {n: c * part[1] for n, c in coefs.items()}
                const *= part[1]
        return coefs, const
    return None


def split_offset(offset: int, strides: Sequence[int]) -> tuple[int, ...] | None:
    """``offset`` as per-axis shifts along ``strides`` (C order, the last 1), each but
    the last rounded to the nearest multiple (a neighbour is a few elements away along
    each axis); None when the last shift reaches half the next stride."""
    shifts = []
    for s in strides[:-1]:
        k = (offset + s // 2) // s if s > 0 else 0
        shifts.append(k)
        offset -= k * s
    shifts.append(offset)
    if len(strides) > 1 and 2 * abs(offset) >= max(strides[-2], 2):
        return None
    return tuple(shifts)


# the elementwise helpers (fuseloop.lower.scalar_ops) an index computation goes through
_PLAIN = {"fl_add_": "+", "fl_minimum_": "min", "fl_maximum_": "max",
          "fl_remainder_": "wrap", "fl_cast_": "cast"}


def _helper(name: str) -> str | None:
    for prefix, op in _PLAIN.items():
        if name.startswith(prefix):
            return op
    return None


def _integer(dtype: Any) -> bool:
    return np.dtype(getattr(dtype, "numpy_dtype", dtype)).kind in "iu"


class Normaliser:
    """Integer temporaries replaced by what computes them, helper calls by plain
    operations (``+``, ``min``, ``max``, ``wrap``; casts dropped), for reading
    indices; None where an index is something else."""

    def __init__(self, knl: lp.LoopKernel) -> None:
        self.defs: dict[str, Any] = {}
        counts: dict[str, int] = {}
        for insn in knl.instructions:
            for v in insn.assignee_var_names():
                counts[v] = counts.get(v, 0) + 1
        for insn in knl.instructions:
            if not isinstance(insn, lp.Assignment) or insn.predicates:
                continue
            target = insn.assignee
            tv = knl.temporary_variables.get(getattr(target, "name", ""))
            if (isinstance(target, prim.Variable) and tv is not None
                    and counts[target.name] == 1 and _integer(tv.dtype)):
                self.defs[target.name] = insn.expression

    def __call__(self, expr: Any, depth: int = 0) -> Any:
        if depth > 32:
            return None
        if isinstance(expr, int | np.integer):
            return int(expr)
        if isinstance(expr, prim.Variable):
            if expr.name in self.defs:
                return self(self.defs[expr.name], depth + 1)
            return expr
        if isinstance(expr, prim.Sum | prim.Product):
            kids = [self(c, depth + 1) for c in expr.children]
            return None if any(k is None for k in kids) else type(expr)(tuple(kids))
        if isinstance(expr, lp.TypeCast):
            return self(expr.child, depth + 1)
        if isinstance(expr, prim.Call):
            name = getattr(expr.function, "name", "")
            args = [self(p, depth + 1) for p in expr.parameters]
            if any(a is None for a in args):
                return None
            op = name if name in ("min", "max") else _helper(name)
            if op == "cast" and len(args) == 1:
                return args[0]
            if op == "+" and len(args) == 2:
                return prim.Sum((args[0], args[1]))
            if op in ("min", "max", "wrap") and len(args) == 2:
                return prim.Variable(op)(*args)
        return None


class Read(NamedTuple):
    """One read: per axis its stride, the shift inside its boundary rule (0 on a plain
    axis) and the rule; ``const``: the rest of the address (plain axes' shifts and the
    view's offset)."""

    strides: tuple[int, ...]
    shifts: tuple[int, ...]
    modes: tuple[Mode, ...]
    const: int


def _bounded(expr: Any, inames: Sequence[str], fixed: dict[str, int]
             ) -> tuple[int, int, Mode] | None:
    """``(axis, shift, mode)`` of ``min(max(i + s, 0), n - 1)`` (either nesting) or
    ``wrap(i + s, n)``, else None."""
    if not isinstance(expr, prim.Call):
        return None
    op = getattr(expr.function, "name", "")
    a, b = expr.parameters
    bound = linear(b, fixed)
    if bound is None or bound[0]:
        return None
    if op == "wrap":
        inner, mode = a, ("wrap", bound[1])
    elif op in ("min", "max") and isinstance(a, prim.Call) \
            and getattr(a.function, "name", "") == ("max" if op == "min" else "min"):
        other = linear(a.parameters[1], fixed)
        if other is None or other[0]:
            return None
        lo, hi = (other[1], bound[1]) if op == "min" else (bound[1], other[1])
        if lo != 0:
            return None
        inner, mode = a.parameters[0], ("clamp", hi + 1)
    else:
        return None
    lin = linear(inner, fixed)
    if lin is None or len(lin[0]) != 1:
        return None
    ((name, coef),) = lin[0].items()
    if coef != 1 or name not in inames:
        return None
    return list(inames).index(name), lin[1], mode


def _terms(expr: Any) -> list[Any]:
    if isinstance(expr, prim.Sum):
        return [t for c in expr.children for t in _terms(c)]
    return [expr]


def analyse_read(index: Any, inames: Sequence[str], fixed: dict[str, int]) -> Read | None:
    """The read at ``index`` (normalised) as a :class:`Read`, or None."""
    rank = len(inames)
    strides = [0] * rank
    shifts = [0] * rank
    modes: list[Mode] = [None] * rank
    const = 0
    for term in _terms(index):
        lin = linear(term, fixed)
        if lin is not None:
            if set(lin[0]) - set(inames):
                return None
            for n, c in lin[0].items():
                strides[list(inames).index(n)] += c
            const += lin[1]
            continue
        coef, inner = 1, term
        if isinstance(term, prim.Product) and len(term.children) == 2:
            k = [linear(c, fixed) for c in term.children]
            for j in (0, 1):
                if k[j] is not None and not k[j][0]:  # type: ignore[index]
                    coef, inner = k[j][1], term.children[1 - j]  # type: ignore[index]
        found = _bounded(inner, inames, fixed)
        if found is None or modes[found[0]] is not None or strides[found[0]]:
            return None
        d, shift, mode = found
        strides[d], shifts[d], modes[d] = coef, shift, mode
    if strides[-1] != 1 or 0 in strides:
        return None
    return Read(tuple(strides), tuple(shifts), tuple(modes), const)


def floor_split(offset: int, strides: Sequence[int]) -> tuple[int, ...]:
    """``offset`` (not negative) as per-axis indices along ``strides``, each but the
    last as large as fits (a view's origin: the row, then the column)."""
    out = []
    for s in strides[:-1]:
        out.append(offset // s)
        offset -= out[-1] * s
    return (*out, offset)


class Neighbourhood(NamedTuple):
    """An array's stencil: its strides, each axis' rule, the ``origin`` every read is
    relative to (per axis, from the smallest constant part ``base``) and the reads'
    shifts from it: a read is of ``sum(strides[d] * (origin[d] + rule_d(i_d + shift[d])))``
    (no rule on a plain axis)."""

    strides: tuple[int, ...]
    shifts: list[tuple[int, ...]]
    modes: tuple[Mode, ...]
    base: int
    origin: tuple[int, ...]

    def shifts_of(self, read: Read) -> tuple[int, ...] | None:
        """``read``'s shifts from the origin (None: its constant part does not split
        into plain axes' shifts of a few elements)."""
        diff = split_offset(read.const - self.base, self.strides)
        if diff is None or any(k and m is not None for k, m in zip(diff, read.modes)):
            return None
        return tuple(s + k for s, k in zip(read.shifts, diff))

    @property
    def lo(self) -> list[int]:
        return [min(s[d] for s in self.shifts) for d in range(len(self.strides))]

    @property
    def hi(self) -> list[int]:
        return [max(s[d] for s in self.shifts) for d in range(len(self.strides))]


def array_reads(knl: lp.LoopKernel) -> dict[str, list[Any]]:
    """Per input array, the indices it is read at (``in<k>[...]`` in any instruction);
    an array also named bare (a user function's pointer argument, which reads global
    memory there) is left out."""
    from loopy.symbolic import WalkMapper

    reads: dict[str, list] = {}
    bare: set[str] = set()

    class Reads(WalkMapper):
        def map_subscript(self, expr: Any, *args: Any) -> None:
            name = getattr(expr.aggregate, "name", "")
            if name.startswith("in"):
                reads.setdefault(name, []).append(expr.index)
            self.rec(expr.index, *args)  # (not the aggregate: named, not bare)

        def map_variable(self, expr: Any, *args: Any) -> None:
            if expr.name.startswith("in"):
                bare.add(expr.name)

    for insn in knl.instructions:
        Reads()(insn.expression)
        for p in insn.predicates:
            Reads()(p)
    return {name: found for name, found in reads.items() if name not in bare}


def neighbourhoods(knl: lp.LoopKernel, inames: Sequence[str], fixed: dict[str, int],
                   shape: Sequence[int]) -> dict[str, Neighbourhood]:
    """Per input array read only as a neighbourhood (one set of strides, at most one
    boundary rule per axis, at least two different reads), its :class:`Neighbourhood`.

    The reads' constant parts are split relative to the smallest one (its floor split
    is the origin, the differences are rounded to the nearest per-axis shifts): two
    reads of a view whose columns straddle half a row split alike.  A plain read along
    an axis with a rule is read through the rule from the tile, so it must stay where
    the rule changes nothing (``[0, n)``) for every output index of ``shape``."""
    norm = Normaliser(knl)
    out = {}
    for name, indices in array_reads(knl).items():
        found = [analyse_read(n, inames, fixed) if (n := norm(i)) is not None else None
                 for i in indices]
        reads = [r for r in found if r is not None]
        if len(reads) < len(found) or len({r.strides for r in reads}) != 1:
            continue
        modes: list[Mode] = [None] * len(inames)
        ok = True
        for r in reads:
            for d, m in enumerate(r.modes):
                if m is not None:
                    ok = ok and modes[d] in (None, m)
                    modes[d] = m
        base = min(r.const for r in reads)
        if not ok or base < 0:
            continue
        hood = Neighbourhood(reads[0].strides, [], tuple(modes), base,
                             floor_split(base, reads[0].strides))
        shifts = [hood.shifts_of(r) for r in reads]
        kept = [s for s in shifts if s is not None]
        if len(kept) < len(shifts) or len(set(kept)) < 2 or any(
                m is not None and r.modes[d] is None
                and not 0 <= sh[d] <= m[1] - shape[d]
                for r, sh in zip(reads, kept) for d, m in enumerate(modes)):
            continue
        out[name] = hood._replace(shifts=kept)
    return out


def rewrite_reads(knl: lp.LoopKernel, name: str, hood: Neighbourhood, inames: Sequence[str],
                  fixed: dict[str, int], extents: Sequence[int]) -> lp.LoopKernel:
    """The kernel with every read of ``name`` as ``name[i_s0 + shift0, ...]`` (the
    boundary rule left to the fetch) and ``name`` a multi-dimensional argument of the
    neighbourhood's strides; index computations nothing reads any more removed."""
    from loopy.symbolic import IdentityMapper

    norm = Normaliser(knl)

    class Rewrite(IdentityMapper):
        def map_subscript(self, expr: Any, *args: Any) -> Any:
            if getattr(expr.aggregate, "name", "") != name:
                return super().map_subscript(expr, *args)
            read = analyse_read(norm(expr.index), inames, fixed)
            shifts = hood.shifts_of(read)  # type: ignore[arg-type]
            return prim.Subscript(expr.aggregate, tuple(
                prim.Variable(n) + k if k else prim.Variable(n)
                for n, k in zip(inames, shifts)))  # type: ignore[arg-type]

    mapper = Rewrite()
    insns = [insn.with_transformed_expressions(mapper) for insn in knl.instructions]
    arg = knl.arg_dict[name]
    tags = ",".join(f"stride:{s}" for s in hood.strides)
    # (Loopy checks no bounds here: the extents only need to cover what is read)
    new_arg = lp.GlobalArg(name, arg.dtype, shape=tuple(extents), dim_tags=tags,
                           is_output=False, is_input=True)
    knl = knl.copy(instructions=insns, args=[new_arg if a.name == name else a
                                             for a in knl.args])
    return drop_unread(knl)


def drop_unread(knl: lp.LoopKernel) -> lp.LoopKernel:
    """The kernel without the instructions whose temporaries nothing reads."""
    insns = list(knl.instructions)
    while True:
        read: set[str] = set()
        for insn in insns:
            read |= insn.read_dependency_names()
        dead = {insn.id for insn in insns if isinstance(insn, lp.Assignment)
                and isinstance(insn.assignee, prim.Variable)
                and insn.assignee.name in knl.temporary_variables
                and insn.assignee.name not in read}
        if not dead:
            break
        insns = [insn.copy(depends_on=insn.depends_on - dead) for insn in insns
                 if insn.id not in dead]
    used = set().union(*(insn.dependency_names() for insn in insns))
    temps = {n: t for n, t in knl.temporary_variables.items() if n in used}
    return knl.copy(instructions=insns, temporary_variables=temps)
