"""A split stencil step replayed from a plan kept per structure (issue 29).

The first steps of a stencil over a partition walk the general path
(``exchange.stencil``: each halo's rows found by walking the parts, a buffer per part
for the rows read through the host, each part's expression moved onto its buffers by
its kept template).  Once a step made every part that way, what it did depends only on
the structure (the stencil, the partition, the parts' buffer layout), so it is kept as
a :class:`StepPlan`: per part, the halo reads (which part, byte offset, rows) in the
order they were enqueued, and the part's template with where each of its buffers comes
from (a part of the input, the part's halo buffer, a constant boundary's rows).  A later
step over parts of that layout checks the layout, enqueues the reads through the same
host batch and moves the templates onto this step's buffers: no halo walk, no window,
no template look-up; the parts' launches then replay their run plans as before.
"""

from __future__ import annotations

import math
from typing import Any

from .. import caches as _caches
from ..array import Array
from ..expr.nodes import Leaf, c_strides

#: whether the last split stencil was replayed from a kept step plan (1) or not (0)
LAST_STEP_PLAN: list[int] = [0]

_STEPS: dict[tuple, StepPlan] = {}
STEPS_MAX = 64
_caches.register("multi.step_plans", _STEPS.clear, lambda: len(_STEPS), STEPS_MAX)


def layout(x: Any) -> tuple | None:
    """The buffer layout of ``x``'s parts (each a C-ordered buffer view on its device:
    its leaf's fields, and the first part viewing the same buffer), or None where a
    part is lazy or strided (no plan then)."""
    out = []
    seen: list[Any] = []
    for p, d in zip(x.parts, x.devices):
        node = p._node
        if type(node) is not Leaf or node.storage.device is not d or (
                node.strides is not None and node.strides != c_strides(node.shape)):
            return None
        s = node.storage
        j = 0
        while j < len(seen) and seen[j] is not s:
            j += 1
        seen.append(s)
        out.append((node.leaf_token(), j))
    return tuple(out)


def find(key: tuple | None, x: Any) -> tuple[StepPlan | None, tuple | None]:
    """(the plan kept for ``key`` (the stencil's plan key) and ``x``'s layout, or None;
    the full key to keep a plan under, or None where none may be kept)."""
    if key is None:
        return None, None
    lay = layout(x)
    if lay is None:
        return None, None
    full = (key, lay)
    return _STEPS.get(full), full


class Recorder:
    """What a general step did, noted as it goes (``exchange.stencil`` calls it): per
    part, the halo reads the host batch enqueued into the part's arena, then the
    template that made the part and the buffers it was moved onto."""

    __slots__ = ("made", "ok", "reads")

    def __init__(self) -> None:
        #: per part, its halo reads (None: an empty part)
        self.reads: list[list[tuple[Any, int, tuple[int, ...], Any]] | None] = []
        #: per part, (template, buffers moved onto, its arena)
        self.made: list[tuple[Any, list[Any] | None, Any]] = []
        self.ok = True

    def halos(self, empty: bool) -> None:
        """The next part's halos are read from now on."""
        self.reads.append(None if empty else [])

    def read(self, storage: Any, offset: int, shape: tuple[int, ...], placed: bool,
             source: Any) -> None:
        """A halo read of ``shape`` rows from byte ``offset`` of ``storage`` (``placed``:
        into the current part's arena)."""
        reads = self.reads[-1] if self.reads else None
        if not placed or reads is None:
            self.ok = False
            return
        reads.append((storage, offset, shape, source))

    def part(self, mover: Any, storages: list[Any] | None, arena: Any) -> None:
        """The next non-empty part was made by ``mover`` onto ``storages`` (None: not
        moved), ``arena`` its halo buffer (or None)."""
        if mover is None or storages is None:
            self.ok = False
        self.made.append((mover, storages, arena))

    def plan(self, x: Any, constants: dict) -> StepPlan | None:
        """The step as a :class:`StepPlan` over ``x``'s parts, or None where it cannot be
        replayed so (a halo copied otherwise than through a part's arena, a part not
        moved by its template, a buffer of unknown origin)."""
        if not self.ok or len(self.made) != sum(r is not None for r in self.reads):
            return None
        by_storage = {id(p._node.storage): j for j, p in enumerate(x.parts)}
        consts = {id(a._node.storage): a for _, a in constants.values()
                  if type(a._node) is Leaf}
        parts: list[_PartPlan | None] = []
        made = iter(self.made)
        for reads in self.reads:
            if reads is None:
                parts.append(None)
                continue
            mover, storages, arena = next(made)
            assert storages is not None  # (self.ok: every part was moved)
            copies = []
            for storage, offset, shape, source in reads:
                j = by_storage.get(id(storage))
                if j is None or x.parts[j]._node.storage is not storage \
                        or source is not x.devices[j]:
                    return None
                copies.append((j, offset, shape))
            roles: list[tuple[str, Any]] = []
            for s in storages:
                j = by_storage.get(id(s))
                if j is not None and x.parts[j]._node.storage is s:
                    roles.append(("x", j))
                elif arena is not None and s is arena.storage:
                    roles.append(("arena", None))
                elif id(s) in consts:
                    roles.append(("const", consts[id(s)]))
                else:
                    return None
            rows = arena.rows if arena is not None else 0
            parts.append(_PartPlan(mover, tuple(copies), tuple(roles), rows))
        return StepPlan(parts)


def keep(full: tuple, plan: StepPlan) -> None:
    if len(_STEPS) >= STEPS_MAX:
        _STEPS.clear()
    _STEPS[full] = plan


class _PartPlan:
    """One part of a kept step: its template (``mover``), its halo reads ((source part,
    byte offset, rows shape) in order) and its arena's rows, and per template buffer its
    origin (``("x", j)``: part ``j``'s buffer; ``("arena", None)``: the part's halo
    buffer; ``("const", rows)``: a constant boundary's kept rows)."""

    __slots__ = ("copies", "mover", "roles", "rows")

    def __init__(self, mover: Any, copies: tuple, roles: tuple, rows: int) -> None:
        self.mover, self.copies, self.roles, self.rows = mover, copies, roles, rows


class StepPlan:
    """A kept split stencil step: one :class:`_PartPlan` per part (None: an empty one)."""

    __slots__ = ("parts",)

    def __init__(self, parts: list[_PartPlan | None]) -> None:
        self.parts = parts

    def enqueue_reads(self, x: Any, host_batch: Any, counts: dict[str, int]) -> list[Any]:
        """Every part's halo reads enqueued through ``host_batch`` (each part's into one
        arena, as the general step's; ``counts``: ``exchange.EXCHANGED``); per part its
        arena (None: no reads)."""
        arenas: list[Any] = []
        parts = x.parts
        for k, pp in enumerate(self.parts):
            if pp is None or not pp.copies:
                arenas.append(None)
                continue
            device = x.devices[k]
            first = parts[k]
            host_batch.arena(device, pp.rows, first.shape[1:], x.dtype)
            arena = host_batch.current
            for j, offset, shape in pp.copies:
                host_batch.add_run(parts[j]._node.storage, offset, shape, x.dtype,
                                   x.devices[j], device)
                counts["rows"] += shape[0]
                counts["bytes"] += math.prod(shape) * x.dtype.itemsize
                counts["copies"] += 1
                counts["through_host"] += 1
            arenas.append(arena)
        host_batch.close_arena()
        return arenas

    def make_parts(self, x: Any, arenas: list[Any]) -> list[Array | None]:
        """Each part's expression: its template moved onto this step's buffers."""
        out: list[Array | None] = []
        parts = x.parts
        for k, pp in enumerate(self.parts):
            if pp is None:
                out.append(None)
                continue
            arena = arenas[k]
            storages = [parts[v]._node.storage if r == "x" else
                        arena.storage if r == "arena" else v._node.storage
                        for r, v in pp.roles]
            out.append(Array._lazy(pp.mover.onto(storages), x.devices[k]))
        return out
