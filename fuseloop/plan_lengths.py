"""Run plans whose lengths are run-time values, as view offsets are.

A loop over slices of changing length (``x[i] = (b[i] - L[i, :i] @ x[:i]) / L[i, i]``,
``A[i, j] -= A[i, :j] @ A[j, :j]``) evaluates one structure at ever new lengths.  A run
plan's key (``run_plans._key``) therefore writes each length above 1 as which of the
walk's distinct lengths it is, with its class (its bit length: the split and layout
thresholds are powers of two; see ``ViewOffsets.shape``), and the plan remembers the
lengths it was recorded for.  Met with other lengths, the key's evaluation is recorded
again and the two records are compared (:func:`infer`): when they have the same steps
(programs, buffers, scalars, offsets) and each parameter, output length and temporary's
size is, in both, the same number or ``c`` times a product of at most two of the lengths
that changed, the plan keeps those :class:`Forms`, from which its plan at any other
lengths of its key is made (:func:`sized`; the lengths that did not change pinned,
:func:`fits`) as a record there would be; otherwise the key keeps one plan per lengths
(``run_plans`` marks it so).

Why two records suffice: a program's parameters are its output's and reductions'
lengths and their products (C strides, reduced sizes), the strides of the caller's
views (in the key) and offsets (substituted per call); the one kind of parameter
that follows lengths by rounding, the pieces of a split reduction (two-stage,
split-K), comes with a chunked first stage (launched alone or in its combining stage's
launch, ``Program.first``).  A plan with one holds its split (:func:`split_of`: the
pieces, their length, whether they divide the reduced length, the axis numbering them),
and its forms are inferred only from two records of one split and used only at
lengths where the evaluation splits so again (``covariance``'s ``d[:, i] @ d[:, i:]``:
split-K over the fixed column length, a new output length every row).
Decisions a length makes about the kernels (split or not, 1 or more, the index type)
are in the key: the class of each length, and lengths kept exact where a node of
the class could pass int32 (``ViewOffsets.bound``).  Launch plans (grids, size
classes) are made per parameters as for new offsets.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from itertools import combinations_with_replacement
from typing import Any, NamedTuple

from . import evaluate as _ev
from . import splits as _sp
from .expr.nodes import Node
from .expr.program import INT32_LIMIT
from .runtime.devices import Device

#: ``(c, symbols)``: the value ``c * prod(lengths[k] for k in symbols)``
Form = tuple[int, tuple[int, ...]]


class Forms(NamedTuple):
    """How a plan's sizes follow from its lengths (see the module docstring)."""

    pins: tuple[tuple[int, int], ...]  # (symbol, length) of the lengths that must match
    allocs: tuple[Form, ...]  # the temporaries' byte sizes
    params: tuple[tuple[Form | None, ...], ...]  # per step (None: an offset's place)
    shapes: tuple[tuple[Form, ...], ...]  # per step: its output's shape


def value(form: Form, lengths: Sequence[int]) -> int:
    c, ks = form
    for k in ks:
        c *= lengths[k]
    return c


def fits(forms: Forms, lengths: Sequence[int]) -> bool:
    """Whether ``lengths`` (of the plan's key) have the pinned values."""
    for k, n in forms.pins:
        if lengths[k] != n:
            return False
    return True


def _fit(va: int, vb: int, la: Sequence[int], lb: Sequence[int],
         monomials: list[tuple[int, ...]]) -> Form | None:
    """The one form giving ``va`` at lengths ``la`` and ``vb`` at ``lb``, or None."""
    found: Form | None = (va, ()) if va == vb else None
    for ks in monomials:
        ma = math.prod(la[k] for k in ks)
        if va % ma:
            continue
        c = va // ma
        if c >= 1 and c * math.prod(lb[k] for k in ks) == vb:
            if found is not None:
                return None  # (two forms fit: which one holds is unknown)
            found = (c, ks)
    return found


#: a plan's split (:func:`split_of`): (pieces, piece length, exact, axis, columns)
Split = tuple[int, int, bool, int, bool]


def split_of(roots: Sequence[Node], out_shape: tuple[int, ...], device: Device
             ) -> Split | None:
    """How an evaluation of ``roots`` splits its reduction in two stages, as
    ``evaluate.run_unplanned`` decides it where no reduction runs before it and none
    nests in the split one (else None: not known without running it)."""
    if not any(r.fancy for r in roots) or _ev._reduces_to_materialise(roots, out_shape):
        return None
    split = _sp.two_stage_split(roots, out_shape, device)
    if split is None or any(_sp.has_reduce(top.child) for top in split.tops):
        return None
    return (*_sp.chunking(split, out_shape), split.columns)


def splits(plan: Any) -> bool:
    """Whether ``plan`` has a step of a split reduction's first stage."""
    return any(s.program.chunked or s.program.first is not None for s in plan.steps)


def infer(a: Any, b: Any, la: Sequence[int], lb: Sequence[int]) -> Forms | None:
    """The forms of plan ``a`` (recorded at lengths ``la``) that also give plan ``b``
    (recorded at ``lb``), or None where the two differ otherwise (see the module
    docstring; plans with a split: only records of one known split, ``Plan.split``)."""
    varying = [k for k in range(len(la)) if la[k] != lb[k]]
    if not varying or len(a.steps) != len(b.steps) or a.results != b.results \
            or len(a.allocs) != len(b.allocs):
        return None
    if splits(a) and (a.split is None or a.split != b.split):
        return None
    monomials = [ks for d in (1, 2) for ks in combinations_with_replacement(varying, d)]

    def fit(va: int, vb: int) -> Form:
        form = _fit(va, vb, la, lb, monomials)
        if form is None:
            raise _NoFit
        return form

    try:
        allocs = tuple(fit(x, y) for x, y in zip(a.allocs, b.allocs))
        params, shapes = [], []
        for x, y in zip(a.steps, b.steps):
            if not _same_step(x, y):
                return None
            offsets = {j for j, _ in x.offsets}
            params.append(tuple(None if j in offsets else fit(p, q)
                                for j, (p, q) in enumerate(zip(x.params, y.params))))
            shapes.append(tuple(fit(p, q) for p, q in zip(x.out_shape, y.out_shape)))
    except _NoFit:
        return None
    pins = tuple((k, la[k]) for k in range(len(la)) if k not in varying)
    return Forms(pins, allocs, tuple(params), tuple(shapes))


class _NoFit(Exception):
    pass


def _same_step(x: Any, y: Any) -> bool:
    return (x.program == y.program and x.offsets == y.offsets
            and x.storage_refs == y.storage_refs and x.out_refs == y.out_refs
            and x.scalar_refs == y.scalar_refs and len(x.params) == len(y.params)
            and len(x.out_shape) == len(y.out_shape))


#: plans a key keeps for lengths that split otherwise than its first (see :func:`learn`)
VARIANTS_MAX = 8


def _variant(base: Any, split: Split | None) -> Any | None:
    for plan in base.variants:
        if plan.split == split:
            return plan
    return None


def owner(base: Any, split: Split | None) -> Any | None:
    """The plan of ``base``'s key for lengths that split as ``split`` (:func:`split_of`
    at them): ``base`` or one of its variants, or None (none recorded yet)."""
    return base if base.split == split else _variant(base, split)


#: splits a plan remembers by its key's lengths (:func:`owner_at`), at most
SPLITS_AT_MAX = 4096


def owner_at(base: Any, roots: Sequence[Node], out_shape: tuple[int, ...], device: Device,
             lengths: tuple[int, ...] | None = None) -> Any | None:
    """:func:`owner` of ``base`` for the lengths of ``roots`` (their split asked only
    where ``base`` splits or has variants).  Given the key's ``lengths``, which decide
    the split (the key holds the structure, strides and recipes), ``base`` remembers
    it: a loop over moving lengths asks each once, not at every replay."""
    if base.split is None and not base.variants:
        return base
    if lengths is None:
        return owner(base, split_of(roots, out_shape, device))
    known = base.splits_at
    if known is None:
        known = base.splits_at = {}
    split = known.get(lengths, False)
    if split is False:
        if len(known) >= SPLITS_AT_MAX:
            known.clear()
        split = known[lengths] = split_of(roots, out_shape, device)
    return owner(base, split)


def learn(base: Any, fresh: Any) -> bool:
    """Learn from ``fresh``, a record of ``base``'s key at other lengths, how the key's
    plans follow its lengths; whether the key goes on following them (else it keeps a
    plan per lengths).  A record that splits otherwise than ``base`` (split-K over fewer
    output rows, no split at short lengths) is of another of the key's *variants*, which
    learn their forms as ``base`` does: the first record of a split is its variant (up
    to ``VARIANTS_MAX``), so that a loop over lengths crossing a split's threshold
    records each split once or twice, not at each of its lengths again every pass."""
    plan = base
    if fresh.split != base.split and (fresh.split is not None or not splits(fresh)):
        plan = _variant(base, fresh.split)
        if plan is None:
            if len(base.variants) < VARIANTS_MAX:
                base.variants = (*base.variants, fresh)
            return True
    forms = infer(plan, fresh, plan.lengths, fresh.lengths)
    # (forms that pin fewer lengths replace the plan's: a loop over two lengths pins the
    # outer one until a record differs in both)
    if forms is not None and (plan.forms is None or len(forms.pins) < len(plan.forms.pins)):
        plan.forms = forms
    return plan.forms is not None or plan is not base


def sized(forms: Forms, steps: Sequence[Any], lengths: Sequence[int]
          ) -> tuple[list[int], list[tuple[list[int], tuple[int, ...]]]] | None:
    """The temporaries' sizes and each step's (parameters, output shape) at
    ``lengths`` (offsets' places keep the recorded values), or None where a size
    passes int32 (the walk's exact key then decides)."""
    allocs = [value(f, lengths) for f in forms.allocs]
    out = []
    for step, pforms, sforms in zip(steps, forms.params, forms.shapes):
        params = [p if f is None else value(f, lengths) for p, f in zip(step.params, pforms)]
        shape = tuple(value(f, lengths) for f in sforms)
        if max(params, default=0) > INT32_LIMIT or math.prod(shape) > INT32_LIMIT:
            return None
        out.append((params, shape))
    if max(allocs, default=0) > INT32_LIMIT:
        return None
    return allocs, out
