"""The rule by which the GPU reduction recipe lays a contiguous-rows kernel out.

A rows kernel reduces each of ``N`` rows over ``p`` contiguous elements (``p``:
the kernel's length parameters ``p<k>``, one per reduction).  The layout is
chosen from those extents, which the recipe sees as Loopy assumptions: the
launch's size class (:func:`row_size_class`) states the facts the rule needs,
so each layout is its own cached kernel and the rule runs once per class.

* ``short`` (every ``p <= short_max`` and ``N >= short_rows``): no work-group
  reduction at all.  One work-item per row (``short_outputs`` neighbouring rows
  per work-item), the row walked sequentially; the class states ``p`` exactly up
  to ``short_exact``, so the walk is fully unrolled (pairwise distances of 3-D
  points reduce over 3); longer short rows share one class.  Fewer rows take
  the ``group`` layout: a group per row costs nothing while the groups do not
  fill the device, and its walk is one element long, so a loop's dot products
  (one row each) meet one class for all lengths up to ``group``.
* ``slice`` (every ``p <= slice_max`` and ``N >= slice_rows``): a slice of
  ``width`` work-items per row, ``block / width`` rows per work-group; ``width``
  is the smallest power of two from 32 (a warp) up to ``group`` with
  ``p <= width * row_items``.  Softmax over rows of 128: 32 work-items of 4
  elements per row, 8 rows to a group, instead of 512 work-items, 384 idle.
* ``group`` (otherwise: long rows, or few of them): one work-group of
  ``group`` work-items per row.

The recipe's ``layout`` parameter forces one of them (``"auto"``: the rule), so
:func:`fuseloop.tune` can search the choice.  Column-like (strided) reductions
and the two-stage split of full reductions are decided elsewhere (see
:mod:`fuseloop.recipes.rows` and :mod:`fuseloop.splits`).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from .._lazy import lp

LAYOUTS = ("auto", "short", "slice", "group")
#: the narrowest slice of a row (a warp on NVIDIA GPUs)
MIN_SLICE = 32


@dataclass(frozen=True)
class RowRule:
    """The rule's thresholds (the recipe's parameters of the same names)."""

    group: int
    short_max: int
    slice_max: int
    slice_rows: int
    row_items: int
    layout: str = "auto"
    column_group: int = 128
    #: short rows up to this length are a size class each (their walk unrolled);
    #: longer short rows share one class (a loop), so loops over growing rows
    #: do not build a kernel per length
    short_exact: int = 4
    #: the rows the short layout needs (fewer: the group layout)
    short_rows: int = 1

    def slice_width(self, longest: int) -> int:
        """Work-items per row in the ``slice`` layout for rows of at most ``longest``."""
        width = min(MIN_SLICE, self.group)
        while width < self.group and longest > width * self.row_items:
            width *= 2
        return width

    def kind(self, lengths: Sequence[int], rows: int) -> str:
        """The layout for rows of ``lengths`` (the reductions' ``p``) and ``rows`` rows."""
        if self.layout != "auto":
            return self.layout
        if not lengths:
            return "group"
        longest = max(lengths)
        if 0 < min(lengths) and longest <= self.short_max and rows >= self.short_rows:
            return "short"
        if longest <= self.slice_max and rows >= self.slice_rows:
            return "slice"
        return "group"


def pieces_conditions(name: str, p: int, group: int) -> str:
    """``p`` in pieces of ``group``, the pieces rounded up to a power of two ``b``:
    exact when ``p = b * group``, else the range ``(b/2) * group < p < b * group``
    (from 0 for one piece: an empty row is one piece's walk with no element).

    Two classes per power of two, so a loop whose rows grow by one element each
    step (a triangular solve's dot products) builds a handful of kernels, not one
    per piece count.
    """
    pieces = max(1, -(-p // group))
    bucket = 1 << (pieces - 1).bit_length()
    if p == bucket * group:
        return f"{name} = {p}"
    least = bucket // 2 * group + 1 if bucket > 1 else 0
    return f"{least} <= {name} <= {bucket * group - 1}"


def row_size_class(rule: RowRule, cache_items: int, slots: Sequence[int],
                   params: Sequence[int], n_rows: int, n_elem: int,
                   element_loop: bool) -> str:
    """The size class (Loopy assumptions) of a rows kernel under ``rule``.

    ``short``: every ``p`` exactly up to ``short_exact``, else ``p <= short_max``, and
    ``N >= short_rows``.
    ``slice``: every ``p`` in pieces of the slice's width (:func:`pieces_conditions`),
    and ``N >= slice_rows``.  ``group``: every ``p`` up to ``group * cache_items`` in
    pieces of ``group`` (see
    :func:`fuseloop.recipes.rows.make_row_size_class`), longer ones unstated.
    With an element loop as long as a row, ``NE = p`` too.
    """
    lengths = [params[s] for s in slots]
    kind = rule.kind(lengths, n_rows) if rule.layout == "auto" else rule.layout
    conds: list[str] = []
    width, per_item = rule.group, max(cache_items, 1)
    if kind == "slice":  # (every row must be stated: the class is what selects it)
        per_item = max(per_item, rule.row_items)
        width = rule.slice_width(max(lengths, default=1))
        if rule.layout == "auto":
            conds.append(f"N >= {rule.slice_rows}")
    elif kind == "short" and rule.layout == "auto" and rule.short_rows > 1:
        conds.append(f"N >= {rule.short_rows}")
    element_row = ""
    for slot, p in zip(slots, lengths, strict=True):
        name = f"p{slot}"
        if kind == "short":  # exact (an unrolled walk) where very short, else a range
            if not 0 < p <= rule.short_max:
                continue
            conds.append(f"{name} = {p}" if p <= rule.short_exact
                         else f"{rule.short_exact + 1} <= {name} <= {rule.short_max}")
        elif p <= width * per_item:
            conds.append(pieces_conditions(name, p, width))
        else:
            continue
        if element_loop and n_elem == p and not element_row:
            element_row = f"NE = {name}"
    return " and ".join([*conds, element_row] if element_row else conds)


def narrow_width(outputs: int, group: int) -> int:
    """The width of a narrow column-like group: the least power of two from 32
    holding ``outputs`` (a row's outputs), or 0 where that is not below ``group``
    (``column_group``: then a work-item per output, ``group`` to a group)."""
    if not 0 < outputs < group:
        return 0
    width = next(w for w in (1 << k for k in range(5, 16)) if w >= outputs)
    return width if width < group else 0


def column_slices(width: int, wide: int, slices: int, most: int) -> int:
    """Slices of the reduced axis in a narrow column-like group ``width`` outputs
    wide: ``slices``, or by rule (0) as many as fill ``wide`` work-items; at most
    ``most`` work-items in all (the device's limit).  1 where ``width`` is 0."""
    if not width:
        return 1
    return max(1, min(slices or wide // width, most // width))


def column_size_class(rule: RowRule, n_rows: int, n_elem: int, element_loop: bool) -> str:
    """The size class of a column-like kernel: ``NE <= w`` when its rows (pieces or
    outer axes, the outputs along them) have fewer elements than ``column_group``
    (``w``: :func:`narrow_width`; see :func:`fuseloop.recipes.row_gpu._gpu_columns`)."""
    outputs, name = (n_elem, "NE") if element_loop else (n_rows, "N")
    width = narrow_width(outputs, rule.column_group)
    return f"{name} <= {width}" if width else ""


@dataclass(frozen=True)
class Layout:
    """What the recipe does with a kernel: ``kind``, work-items per row (``width``),
    rows per work-group (``rows``) and whether the rows' lengths are constants."""

    kind: str
    width: int = 1
    rows: int = 1
    fixed: bool = False


def choose(knl: lp.LoopKernel, rule: RowRule, block: int, bounds: Sequence[str | None],
           implied: Any) -> Layout:
    """The layout of ``knl`` (a contiguous-rows kernel) from its assumptions.

    ``bounds`` are its reductions' length parameters (None: not ``0 <= j < p``);
    ``implied(knl, condition)`` tests the assumptions.  The same rule as
    :meth:`RowRule.kind`, read from what the size class states.
    """
    known = [b for b in bounds if b is not None]
    general = len(known) != len(bounds) or not known
    kind = rule.layout
    if kind == "auto":
        kind = "group"
        if not general and all(implied(knl, f"1 <= {p} <= {rule.short_max}") for p in known) \
                and (rule.short_rows <= 1 or implied(knl, f"N >= {rule.short_rows}")):
            kind = "short"
        elif (not general and implied(knl, f"N >= {rule.slice_rows}")
              and all(implied(knl, f"{p} <= {rule.slice_max}") for p in known)):
            kind = "slice"
    if kind == "short":
        fixed = not general and all(_constant(knl, p, implied) is not None for p in known)
        return Layout("short", 1, block, fixed)
    if kind == "slice":
        width = rule.group
        for w in (1 << k for k in range(5, 11)):
            if w <= rule.group and not general and all(
                    implied(knl, f"{p} <= {w * rule.row_items}") for p in known):
                width = w
                break
        return Layout("slice", width, max(1, block // width))
    return Layout("group", rule.group, 1)


def _constant(knl: lp.LoopKernel, p: str, implied: Any, limit: int = 1 << 10) -> int | None:
    """The value of ``p`` when the assumptions fix it (at most ``limit``)."""
    lo, hi = 0, limit
    if not implied(knl, f"{p} <= {hi}"):
        return None
    while lo < hi:  # the least upper bound
        mid = (lo + hi) // 2
        if implied(knl, f"{p} <= {mid}"):
            hi = mid
        else:
            lo = mid + 1
    return lo if implied(knl, f"{p} >= {lo}") else None
