"""Keep a row in registers when a GPU rows kernel reads it in several passes.

Softmax reads each row three times: for the max, for the sum of exponentials
and for the output.  With a work-group per row, the later passes find the row
in L1/L2 only when few rows are in flight; on an H200 they mostly went back to
memory (softmax at 44-58% of copy bandwidth, pipelined).  This transformation
loads each work-item's share of the row once into a private array of
``items`` elements (registers, the loops over it are unrolled) and lets every
pass read it there.  Rows longer than ``group * items`` elements read their
remainder from global memory as before.

It applies to loads ``arr[base + X]`` where ``X`` is a row loop (a reduction
loop ``j<n>`` over ``0 <= j < p`` or the element loop ``e``) and ``base`` does
not depend on any row loop, when the same ``(arr, base)`` is read by at least
two row loops and at least one of them is a reduction loop.  The element loop
reads the cache only when its length equals ``p`` (checked at run time).
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import islpy as isl
import loopy as lp
import numpy as np
import pymbolic.primitives as prim
from loopy.symbolic import IdentityMapper, get_dependencies

from ..lower.kernel import ELEMENT_INAME, FLAT_INAME
from . import select

PLACEHOLDER = "fl_row_cache"


@dataclass
class CachedRow:
    array: str
    base: Any  # pymbolic expression: the row's first element
    bound: str  # the parameter bounding the reduction loops that read it
    loops: set[str] = field(default_factory=set)


def row_bound(knl: lp.LoopKernel, j: str) -> str | None:
    """``p`` when the domain of ``j`` is exactly ``0 <= j < p``."""
    for dom in knl.domains:
        if dom.get_var_names(isl.dim_type.set) != [j]:
            continue
        params = dom.get_var_names(isl.dim_type.param)
        if len(params) != 1:
            return None
        p = params[0]
        want = isl.BasicSet(f"[{p}] -> {{ [{j}] : 0 <= {j} < {p} }}")
        return p if dom.is_equal(want) else None
    return None


def implied(knl: lp.LoopKernel, condition: str) -> bool:
    """Whether the kernel's assumptions imply ``condition`` (on its parameters)."""
    assumptions = knl.assumptions
    names = assumptions.get_var_names(isl.dim_type.param)
    mentioned = set(re.findall(r"[A-Za-z_]\w*", condition)) - {"and", "or", "not"}
    if not mentioned <= set(names):
        return False
    wanted = isl.BasicSet(f"[{', '.join(names)}] -> {{ : {condition} }}")  # type: ignore[arg-type]
    return assumptions.is_subset(wanted)


def head_items(knl: lp.LoopKernel, bound: str, group: int, items: int) -> tuple[int, int]:
    """(cached elements per work-item needed, of them the ones always inside the row).

    ``items`` and 0 unless the assumptions (a size class) bound the row length
    ``bound``: then rows known to be shorter need fewer elements per
    work-item, and those known to lie inside every row need no bounds test.
    """
    used = next((c for c in range(1, items + 1) if implied(knl, f"{bound} <= {c * group}")),
                items)
    inside = next((c for c in range(used, 0, -1) if implied(knl, f"{bound} >= {c * group}")),
                  0)
    return used, inside


def _offset_of(index: Any, iname: str, row_inames: set[str]) -> Any:
    """``base`` when ``index`` is ``base + iname`` with no row loop in ``base``."""
    terms = index.children if isinstance(index, prim.Sum) else (index,)
    hits = [k for k, t in enumerate(terms) if t == prim.Variable(iname)]
    if len(hits) != 1:
        return None
    rest = tuple(t for k, t in enumerate(terms) if k != hits[0])
    if not rest:
        return 0
    base = rest[0] if len(rest) == 1 else prim.Sum(rest)
    if get_dependencies(base) & (row_inames | {PLACEHOLDER}):
        return None
    return base


class _Collector(IdentityMapper):
    def __init__(self, inputs: set[str], row_inames: set[str]) -> None:
        super().__init__()
        self.inputs = inputs
        self.row_inames = row_inames
        self.found: list[tuple[str, Any, str]] = []  # (array, base, loop)

    def map_reduction(self, expr, scope=frozenset()):
        return super().map_reduction(expr, scope | frozenset(expr.inames))

    def map_subscript(self, expr, scope=frozenset()):
        agg = expr.aggregate
        if isinstance(agg, prim.Variable) and agg.name in self.inputs:
            for loop in scope & self.row_inames:
                base = _offset_of(expr.index, loop, self.row_inames)
                if base is not None:
                    self.found.append((agg.name, base, loop))
                    break
        return super().map_subscript(expr, scope)


class _Placeholders(IdentityMapper):
    """``arr[base + X]`` -> ``fl_row_cache(n, X)`` for the cached rows."""

    def __init__(self, rows: list[CachedRow], row_inames: set[str]) -> None:
        super().__init__()
        self.rows = rows
        self.row_inames = row_inames

    def map_reduction(self, expr, scope=frozenset()):
        return super().map_reduction(expr, scope | frozenset(expr.inames))

    def map_subscript(self, expr, scope=frozenset()):
        agg = expr.aggregate
        for loop in scope & self.row_inames:
            for n, row in enumerate(self.rows):
                if (isinstance(agg, prim.Variable) and agg.name == row.array
                        and loop in row.loops
                        and _offset_of(expr.index, loop, self.row_inames) == row.base):
                    return prim.Variable(PLACEHOLDER)(n, prim.Variable(loop))
        return super().map_subscript(expr, scope)


def plan(knl: lp.LoopKernel, max_rows: int = 2) -> list[CachedRow]:
    """The rows worth caching in ``knl`` (a ``fuseloop_rows`` kernel before splitting)."""
    js = select.inames(knl, f"tag:{select.REDUCTION}")
    bounds = {j: row_bound(knl, j) for j in js}
    row_inames = {j for j, b in bounds.items() if b is not None}
    if not row_inames:
        return []
    if ELEMENT_INAME in knl.all_inames():
        row_inames.add(ELEMENT_INAME)
    outputs = {a.name for a in knl.args if getattr(a, "is_output", False)}
    inputs = {a.name for a in knl.args if isinstance(a, lp.ArrayArg)} - outputs
    collect = _Collector(inputs, row_inames)
    for insn in knl.instructions:
        if isinstance(insn, lp.Assignment):
            collect(insn.expression, frozenset(insn.within_inames))
    rows: dict[tuple[str, Any], CachedRow] = {}
    for array, base, loop in collect.found:
        key = (array, base)
        row = rows.get(key)
        bound = bounds.get(loop)
        if row is None:
            row = rows[key] = CachedRow(array, base, bound or "")
        if bound is not None:
            if row.bound and row.bound != bound:
                row.bound = "?"  # read by reductions of different lengths
            row.bound = row.bound or bound
        row.loops.add(loop)
    chosen = [r for r in rows.values()
              if r.bound not in ("", "?") and len(r.loops) >= 2]
    return chosen[:max_rows]


def insert_placeholders(t_unit: lp.TranslationUnit, rows: list[CachedRow]
                        ) -> lp.TranslationUnit:
    knl = t_unit.default_entrypoint
    row_inames = set().union(*(r.loops for r in rows))
    mapper = _Placeholders(rows, row_inames)
    insns = []
    for insn in knl.instructions:
        if isinstance(insn, lp.Assignment):
            new = mapper(insn.expression, frozenset(insn.within_inames))
            if new != insn.expression:
                insn = insn.copy(expression=new,
                                 depends_on=insn.depends_on | {f"fill_row{n}"
                                                               for n in range(len(rows))})
        insns.append(insn)
    return t_unit.with_kernel(knl.copy(instructions=insns))


class _Resolver(IdentityMapper):
    """``fl_row_cache(n, index)`` -> the cached element, or the load past the cache."""

    def __init__(self, rows: list[CachedRow], group: int, items: int) -> None:
        super().__init__()
        self.rows = rows
        self.group = group
        self.items = items

    def map_call(self, expr, *args, **kwargs):
        if not (isinstance(expr.function, prim.Variable)
                and expr.function.name == PLACEHOLDER):
            return super().map_call(expr, *args, **kwargs)
        n, index = expr.parameters
        row = self.rows[n]
        deps = get_dependencies(index)
        outer = next(d for d in deps if d.endswith("_outer_outer"))
        loop = outer[:-len("_outer_outer")]
        slot = prim.Variable(f"{loop}_outer_inner")
        cond: prim.Expression = prim.Comparison(prim.Variable(outer), "==", 0)
        if loop == ELEMENT_INAME:
            cond = prim.LogicalAnd((prim.Comparison(prim.Variable("NE"), "==",
                                                    prim.Variable(row.bound)), cond))
        load = prim.Variable(row.array)[index if row.base == 0 else row.base + index]
        return prim.If(cond, prim.Variable(f"row{n}")[slot], load)


def add_fills(t_unit: lp.TranslationUnit, rows: list[CachedRow], group: int,
              items: int) -> lp.TranslationUnit:
    """The fill instructions and private arrays, and the placeholders resolved."""
    knl = t_unit.default_entrypoint
    resolver = _Resolver(rows, group, items)
    insns = [insn.copy(expression=resolver(insn.expression))
             if isinstance(insn, lp.Assignment) else insn for insn in knl.instructions]
    temps = dict(knl.temporary_variables)
    domains = list(knl.domains)
    silenced = list(knl.silenced_warnings)
    for n, row in enumerate(rows):
        k, lane = f"row{n}_k", f"row{n}_lane"
        p = row.bound
        used, inside = head_items(knl, p, group, items)
        # no bounds guard per element (on an H200 softmax went from 63% to 90% of copy
        # bandwidth without them): slots past the row's end repeat its last element,
        # and the readers mask them
        domains.append(isl.BasicSet(
            f"{{ [{k}, {lane}] : 0 <= {k} < {used} and 0 <= {lane} < {group} }}"))
        dtype = knl.arg_dict[row.array].dtype
        temps[f"row{n}"] = lp.TemporaryVariable(f"row{n}", dtype, shape=(used,),
                                                address_space=lp.AddressSpace.PRIVATE)
        offset: prim.Expression = prim.Variable(lane) + group * prim.Variable(k)
        predicates: frozenset = frozenset()
        if inside < used:  # some slots may lie past the row's end
            past: Any = prim.Comparison(offset, "<", prim.Variable(p))
            if inside:  # the first ``inside`` slots never do
                past = prim.LogicalOr((prim.Comparison(prim.Variable(k), "<", inside), past))
            offset = prim.If(past, offset, prim.Variable(p) - 1)
            if not implied(knl, f"{p} >= 1"):
                predicates = frozenset({prim.Comparison(prim.Variable(p), ">", 0)})
        insns.append(lp.Assignment(
            prim.Variable(f"row{n}")[prim.Variable(k)],
            prim.Variable(row.array)[offset if row.base == 0 else row.base + offset],
            id=f"fill_row{n}", within_inames=frozenset({FLAT_INAME, k, lane}),
            predicates=predicates))
        # each work-item fills and reads its own private copy
        silenced.append(f"write_race(fill_row{n})")
    knl = knl.copy(instructions=insns, temporary_variables=temps, domains=domains,
                   silenced_warnings=silenced)
    t_unit = t_unit.with_kernel(knl)
    return lp.tag_inames(t_unit, {f"row{n}_k": "unr" for n in range(len(rows))}
                         | {f"row{n}_lane": "l.0" for n in range(len(rows))})


class _Peeler(IdentityMapper):
    """Row loop ``X`` -> ``position``; cached loads -> the private row or memory.

    ``slot`` is the private array index in the head part (``None`` in the
    tail, which reads memory); ``length`` is the loop's bound when it is not
    the cached rows' (the element loop: the cache serves it only when equal).
    """

    def __init__(self, loop: str, position: Any, rows: list[CachedRow],
                 slot: Any, length: str | None) -> None:
        super().__init__()
        self.loop = loop
        self.position = position
        self.rows = rows
        self.slot = slot
        self.length = length

    def map_variable(self, expr, *args, **kwargs):
        return self.position if expr.name == self.loop else expr

    def map_call(self, expr, *args, **kwargs):
        if not (isinstance(expr.function, prim.Variable)
                and expr.function.name == PLACEHOLDER):
            return super().map_call(expr, *args, **kwargs)
        n, index = expr.parameters
        if index != prim.Variable(self.loop):
            return super().map_call(expr, *args, **kwargs)
        row = self.rows[n]
        load = prim.Variable(row.array)[self.position if row.base == 0
                                        else row.base + self.position]
        if self.slot is None:
            return load
        cached = prim.Variable(f"row{n}")[self.slot]
        if self.length is None or self.length == row.bound:
            return cached
        same = prim.Comparison(prim.Variable(self.length), "==", prim.Variable(row.bound))
        return prim.If(same, cached, load)


def typed_neutral(operation: Any, dtype: Any, t_unit: lp.TranslationUnit) -> Any:
    """``operation``'s neutral value, typed as ``dtype`` when it is a bare number.

    A bare 0 beside a uint64 value makes Loopy type the expression double.
    """
    neutral, _ = operation.neutral_element(
        dtype, callables_table=t_unit.callables_table, target=t_unit.target)
    if isinstance(neutral, (int, float, np.generic)):
        neutral = dtype.numpy_dtype.type(neutral)
    return neutral


def _domain_of(knl: lp.LoopKernel, loop: str) -> isl.BasicSet | None:
    for dom in knl.domains:
        if dom.get_var_names(isl.dim_type.set) == [loop]:
            return dom
    return None


def peel(t_unit: lp.TranslationUnit, rows: list[CachedRow], group: int, items: int,
         ops: dict[str, Callable[..., Any]]) -> tuple[lp.TranslationUnit, set[str]]:
    """Cached row loops as a straight-line head and a separate tail loop.

    A row loop ``0 <= X < p`` read through the cache becomes, per work-item
    ``X_inner`` (``l.0``): a head ``X = X_inner + group * X_h`` with
    ``X_h < items`` unrolled, reading the private row, and a tail loop
    ``X = group * items + X_inner + group * X_t`` reading memory.  Splitting
    the loop ``X`` by ``group`` and ``items`` gives the same order, but keeps
    one loop around both, with the cache read under ``X_outer_outer == 0``:
    on an H200 softmax ran at 58% of copy bandwidth per call that way and at
    81% with the loop gone.

    A reduction ``t = reduce(op, [j], f)`` becomes ``t_head`` and ``t_tail``
    (private, per work-item) and ``t = reduce(op, [j_inner], op(t_head, t_tail))``,
    which the caller combines across the group.  Instructions inside the
    element loop are duplicated into head and tail copies.  ``ops`` maps each
    reduction's result temporary to a callable combining two expressions.
    With a size class bounding ``p`` (see :func:`head_items`) the head is
    only as long as needed, elements known to lie inside the row are neither
    masked nor guarded, and the tail is left out when no row reaches it.
    Returns the loops peeled; the others are left alone.
    """
    knl = t_unit.default_entrypoint
    cached = set().union(*(r.loops for r in rows))
    insns = list(knl.instructions)
    temps = dict(knl.temporary_variables)
    domains = list(knl.domains)
    tags: dict[str, str] = {}
    peeled: set[str] = set()
    for loop in sorted(cached):
        dom = _domain_of(knl, loop)
        bound = row_bound(knl, loop)
        users = [insn for insn in insns if loop in insn.within_inames
                 or (isinstance(insn, lp.Assignment)
                     and isinstance(insn.expression, lp.Reduction)
                     and insn.expression.inames == (loop,))]
        if dom is None or bound is None or not users:
            continue
        if loop != ELEMENT_INAME and (len(users) != 1 or loop in users[0].within_inames
                                      or users[0].assignee_var_names()[0] not in ops):
            continue
        part = _PeeledLoop.make(knl, loop, bound, rows, group, items)
        domains = [d for d in domains if d is not dom] + part.domains()
        tags |= {part.lane: "l.0", part.head: "unr"}
        peeled.add(loop)
        user_ids = {insn.id for insn in users}
        new: list[lp.InstructionBase] = []
        for insn in insns:
            if insn.id not in user_ids:
                new.append(insn)
            elif part.is_element:
                new.extend(part.element_copies(insn, user_ids))
            else:
                new.extend(part.reduction_parts(insn, temps, ops, t_unit))
        insns = new
    if not peeled:
        return t_unit, peeled
    knl = knl.copy(instructions=insns, temporary_variables=temps, domains=domains)
    return lp.tag_inames(t_unit.with_kernel(knl), tags), peeled


@dataclass
class _PeeledLoop:
    """One row loop ``loop`` (``0 <= loop < bound``) as a head and a tail (see :func:`peel`)."""

    loop: str
    bound: str
    group: int
    head_length: int  # group * items
    used: int  # head slots per work-item (see head_items)
    inside: int  # of them, those always inside the row
    has_tail: bool
    head_map: _Peeler
    tail_map: _Peeler

    @property
    def lane(self) -> str:
        return f"{self.loop}_inner"

    @property
    def head(self) -> str:
        return f"{self.loop}_h"

    @property
    def tail(self) -> str:
        return f"{self.loop}_t"

    @property
    def is_element(self) -> bool:
        return self.loop == ELEMENT_INAME

    @classmethod
    def make(cls, knl: lp.LoopKernel, loop: str, bound: str, rows: list[CachedRow],
             group: int, items: int) -> _PeeledLoop:
        vl, vh, vt = (prim.Variable(f"{loop}_{s}") for s in ("inner", "h", "t"))
        used, inside = head_items(knl, bound, group, items)
        length: str | None = bound if loop == ELEMENT_INAME else None
        if length is not None and rows and all(implied(knl, f"{bound} = {r.bound}")
                                               for r in rows):
            length = None  # the size class says the element loop is as long as the rows
        return cls(loop, bound, group, group * items, used, inside,
                   not implied(knl, f"{bound} <= {group * items}"),
                   _Peeler(loop, vl + group * vh, rows, vh, length),
                   _Peeler(loop, group * items + vl + group * vt, rows, None, length))

    def domains(self) -> list[isl.BasicSet]:
        lane, head, tail, bound = self.lane, self.head, self.tail, self.bound
        out = [isl.BasicSet(f"{{ [{lane}] : 0 <= {lane} < {self.group} }}")]
        if self.is_element and self.inside < self.used:  # stores past the row's end skipped
            out.append(isl.BasicSet(
                f"[{bound}, {lane}] -> {{ [{head}] : 0 <= {head} < {self.used} "
                f"and {lane} + {self.group} * {head} < {bound} }}"))
        else:  # reduced, masked: no branch per element
            out.append(isl.BasicSet(f"{{ [{head}] : 0 <= {head} < {self.used} }}"))
        if self.has_tail:
            out.append(isl.BasicSet(
                f"[{bound}, {lane}] -> {{ [{tail}] : {tail} >= 0 "
                f"and {self.head_length} + {lane} + {self.group} * {tail} < {bound} }}"))
        return out

    def element_copies(self, insn: Any, user_ids: set[str]) -> list[Any]:
        """An instruction of the element loop, as its head and tail copies."""
        within = (insn.within_inames - {self.loop}) | {self.lane}
        out = [insn.copy(expression=self.head_map(insn.expression),
                         assignee=self.head_map(insn.assignee),
                         within_inames=within | {self.head})]
        if self.has_tail:
            out.append(insn.copy(
                id=f"{insn.id}_tail", expression=self.tail_map(insn.expression),
                assignee=self.tail_map(insn.assignee), within_inames=within | {self.tail},
                depends_on=frozenset(f"{d}_tail" if d in user_ids else d
                                     for d in insn.depends_on)))
        return out

    def reduction_parts(self, insn: Any, temps: dict[str, Any],
                        ops: dict[str, Callable[..., Any]],
                        t_unit: lp.TranslationUnit) -> list[Any]:
        """A reduction over the loop as head and tail reductions (into new private
        temporaries, added to ``temps``) and their combination over the lanes."""
        red = insn.expression
        target = insn.assignee_var_names()[0]
        dtype = temps[target].dtype
        head_expr = self.head_map(red.expr)
        if self.inside < self.used:  # mask the elements that may lie past the row's end
            vh = prim.Variable(self.head)
            at_head = prim.Variable(self.lane) + self.group * vh
            within_row: Any = prim.Comparison(at_head, "<", prim.Variable(self.bound))
            if self.inside:  # the head's first ``inside`` elements never do
                within_row = prim.LogicalOr((prim.Comparison(vh, "<", self.inside),
                                             within_row))
            head_expr = prim.If(within_row, head_expr,
                                typed_neutral(red.operation, dtype, t_unit))
        pieces = [("head", head_expr, self.head)]
        if self.has_tail:
            pieces.append(("tail", self.tail_map(red.expr), self.tail))
        out, parts = [], []
        for suffix, expr, iname in pieces:
            name = f"{target}_{suffix}"
            temps[name] = lp.TemporaryVariable(name, dtype, shape=(),
                                               address_space=lp.AddressSpace.PRIVATE)
            out.append(lp.Assignment(
                prim.Variable(name), lp.Reduction(red.operation, (iname,), expr),
                id=f"{insn.id}_{suffix}", within_inames=insn.within_inames | {self.lane},
                depends_on=insn.depends_on))
            parts.append(prim.Variable(name))
        combined = ops[target](*parts) if len(parts) == 2 else parts[0]
        out.append(insn.copy(
            expression=lp.Reduction(red.operation, (self.lane,), combined),
            depends_on=insn.depends_on | {f"{insn.id}_{suffix}" for suffix, _, _ in pieces}))
        return out
