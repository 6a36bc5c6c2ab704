"""The flat hot path's launches at other view offsets.

``evaluate.run_flat`` finds a flat elementwise expression's structure entry by its
signature and shape alone (``expr.program.flat_entries``).  Signatures leave views'
offsets out (``expr.nodes``), so ``(x[i:i + 4] * 2).eval()`` or ``s = s + x[i]`` in a
loop finds the entry made for another ``i``; its launch plan holds that call's offsets.
Where the kernel reads offsets only as arguments (``launching.offset_consts``: not in
its grid or size class), one *moving* plan of the entry's (``launching.moving_plan``,
as a run plan's step has) takes them as launch arguments after the launch's scalars:
every offset of a loop is then the same plan and launcher, and a launch sets only the
offsets that changed (a plan per offsets, bound anew, made a plan and a launcher per
statement of a loop, and each launch set all of its constants again)."""

from __future__ import annotations

from typing import Any

from .expr.program import StructureEntry
from .launching import LaunchPlan, kernel_key, moving_plan, offset_consts, rows_of
from .runtime.devices import Device


def moved_launch(entry: StructureEntry, plan: LaunchPlan, offs: tuple, scalars: list[Any],
                 shape: tuple[int, ...], device: Device) -> tuple[LaunchPlan, list[Any]] | None:
    """``plan`` (``entry``'s launch plan, made at ``entry.offs``) at the view offsets
    ``offs`` (a node of ``entry``'s signature: the same views, offsets equal where
    ``entry.offs`` are): the entry's moving plan of ``plan`` and its launch's scalars,
    ``scalars`` then the offsets; None where the kernel's grid or size class names an
    offset or the entry's offsets are not known."""
    known = entry.rebind
    if known is None or known[0] is not plan or known[2] != len(scalars):
        known = entry.rebind = (plan, *_moving(entry, plan, len(scalars), shape, device))
    moving = known[1]
    if moving is None:
        return None
    return moving, scalars + list(map(offs.__getitem__, known[3]))


def _moving(entry: StructureEntry, plan: LaunchPlan, n_scalars: int, shape: tuple[int, ...],
            device: Device) -> tuple[LaunchPlan | None, int, tuple[int, ...]]:
    """``plan``'s moving plan for ``entry`` (None: its grid or size class names an offset),
    the scalars it follows and per offset it takes, that offset's place among a node's
    ``offs``."""
    table, at = _offset_table(entry, plan, shape, device)
    if table is None:
        return None, n_scalars, ()
    place = dict(at)  # (parameter slot -> place among the offsets)
    moving = moving_plan(plan, table, n_scalars)
    moving.small_bytes, moving.reserve = plan.small_bytes, plan.reserve
    return moving, n_scalars, tuple(place[idx] for _, idx, _ in table)


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
