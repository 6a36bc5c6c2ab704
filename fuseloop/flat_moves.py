"""The flat hot path's launch plans at other view offsets.

``evaluate.run_flat`` finds a flat elementwise expression's structure entry by its
signature and shape alone (``expr.program.flat_entries``).  Signatures leave views'
offsets out (``expr.nodes``), so ``(x[i:i + 4] * 2).eval()`` in a loop finds the entry
made for another ``i``; its launch plan holds that call's offsets.  Where the kernel
reads offsets only as arguments (``launching.offset_consts``: not in its grid or size
class), the plan at this call's offsets is the entry's with those arguments bound anew
(``launching.rebound``), kept for the last few offsets met (a time loop's few)."""

from __future__ import annotations

from typing import Any

from .expr.program import StructureEntry
from .launching import LaunchPlan, kernel_key, offset_consts, rebound, rows_of
from .runtime.devices import Device

# plans at other offsets an entry keeps (the oldest dropped beyond)
MOVED_MAX = 8


def moved_plan(entry: StructureEntry, plan: LaunchPlan, offs: tuple, shape: tuple[int, ...],
               device: Device) -> LaunchPlan | None:
    """``plan`` (``entry``'s launch plan, made at ``entry.offs``) at the view offsets
    ``offs`` (a node of ``entry``'s signature: the same views, offsets equal where
    ``entry.offs`` are), or None where the kernel's grid or size class names an offset
    or the entry's offsets are not known."""
    moved = entry.moved
    if moved is not None:
        got = moved.get(offs)
        if got is not None and got[0] is plan:
            return got[1]
    known = entry.rebind
    if known is None or known[0] is not plan.compiled:
        known = entry.rebind = (plan.compiled, *_offset_table(entry, plan, shape, device))
    _, table, at = known
    if table is None:
        return None
    params = list(entry.params)
    for slot, k in at:
        params[slot] = offs[k]
    made = rebound(plan, params, table)
    made.small_bytes, made.reserve = plan.small_bytes, plan.reserve
    if moved is None:
        moved = entry.moved = {}
    elif len(moved) >= MOVED_MAX:
        moved.pop(next(iter(moved)))
    moved[offs] = (plan, made)
    return made


def _offset_table(entry: StructureEntry, plan: LaunchPlan, shape: tuple[int, ...],
                  device: Device) -> tuple[Any, tuple[tuple[int, int], ...]]:
    """Where ``plan`` holds the entry's offset parameters among its constants (None: its
    grid or size class names one), and per offset parameter its place among
    ``entry.offs`` (each holds one of them: a view's offset)."""
    offs, params = entry.offs, entry.params
    at = []
    for slot in entry.offset_slots:
        if params[slot] not in offs:  # (never expected: a view's offset not among offs)
            return None, ()
        at.append((slot, offs.index(params[slot])))
    recipe, program = plan.recipe, entry.program
    if recipe is None or plan.index_dtype is None or program.first is not None:
        return None, ()
    n_rows, n_elem = rows_of(program, shape, recipe)
    sizes = kernel_key(program, plan.index_dtype, device, recipe, params, n_rows, n_elem)[-1]
    return offset_consts(plan.compiled, sizes, entry.offset_slots), tuple(at)
