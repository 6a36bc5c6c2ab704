"""The state the program passes share: what one linearisation has built so far."""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np

from ..expr.ir import INT32_LIMIT, Entry
from ..expr.nodes import Node, Storage, c_strides


class Build:
    """One linearisation in progress (see :func:`fuseloop.expr.program.linearize`).

    The inputs (``roots``, ``out_shape``, ``targets``, ``chunks``), the tables the
    passes fill (entries, bindings, parameters) and the program's other fields,
    set by the passes in :data:`fuseloop.passes.PASSES`.
    """

    def __init__(self, roots: Sequence[Node], out_shape: tuple[int, ...],
                 targets: Sequence[Any] | None = None,
                 chunks: tuple[int, int, bool, int] | None = None) -> None:
        self.roots = roots
        self.out_shape = out_shape
        self.targets = targets
        self.chunks = chunks
        self.rank = len(out_shape)
        # the output's own index: one component per dimension
        self.root_index: tuple = tuple(0 if n == 1 else ("r", d)
                                       for d, n in enumerate(out_shape))
        # a chunked output's index is never equal to a load's: no flat shortcut
        self.root_at: tuple = ("chunked",) if chunks is not None else self.root_index
        self.out_c = c_strides(out_shape)
        self.reset()
        # set by the passes after emit_entries
        self.out_specs: list[tuple] = []
        self.root_sizes: tuple[Any, ...] = ()
        self.row_dims: tuple[int, ...] | None = None
        self.contraction: Any = None
        self.mask: int | None = None  # the entry of the targets' mask (Target.mask)

    def reset(self) -> None:
        """Forget every entry and binding (a retry with a deeper recursion limit)."""
        self.entries: list[Entry] = []
        self.interned: dict[tuple, int] = {}
        self.storages: list[Storage] = []
        self.slot_of_storage: dict[int, int] = {}
        self.scalars: list[np.generic] = []
        self.scalar_nodes: list[Node] = []
        self.params: list[int] = []
        self.param_of: dict[int, tuple] = {}  # small ints are interned as parameters too
        # a buffer view's offset gets a parameter of its own (never shared with a size or
        # stride, nor with another view's offset of equal value), so the program does not
        # depend on offsets' values and a run plan can replay it with other offsets (see
        # fuseloop.run_plans)
        self.offset_of: dict[tuple, tuple] = {}
        self.reductions = 0  # reductions numbered so far (their ``rid``)
        self.outputs: tuple[int, ...] = ()
        self.emitter: Any = None  # (see fuseloop.passes.emit.emitter)

    def param(self, value: int) -> tuple:
        """The parameter holding ``value`` (one per distinct value)."""
        p = self.param_of.get(value)
        if p is None:
            p = self.param_of[value] = ("p", len(self.params))
            self.params.append(int(value))
        return p

    def offset_param(self, value: int, view: tuple) -> tuple:
        """The parameter holding the offset ``value`` of a buffer view or target that is
        not a whole buffer (0 too): one per distinct ``view`` (its buffer, shape and
        strides) and offset, apart from the other parameters.  Views that only happen to
        start at one place (``A[i, :j]`` and ``A[i, j]`` at ``j == 0``) have one each, so
        the program is the same at every offset."""
        key = (value, *view)
        p = self.offset_of.get(key)
        if p is None:
            p = self.offset_of[key] = ("p", len(self.params))
            self.params.append(int(value))
        return p

    def offset_slots(self) -> tuple[int, ...]:
        """The positions in ``params`` of the offset parameters."""
        return tuple(p[1] for p in self.offset_of.values())

    def reach(self, value: int) -> None:
        """Note that an index expression may reach ``value``.

        Above ``INT32_LIMIT``, a parameter no entry reads makes the launch pick
        64-bit indices (the rule reads parameters).
        """
        if value > INT32_LIMIT:
            self.param(value)

    def stride_kind(self, s: int) -> Any:
        """A stride as the source sees it: 0 and 1 are structural, others parameters."""
        return s if s in (0, 1) else self.param(s)

    def add(self, entry: Entry) -> int:
        """The position of ``entry``, appended unless an equal entry is there already."""
        ref = self.interned.get(entry)
        if ref is None:
            ref = self.interned[entry] = len(self.entries)
            self.entries.append(entry)
        return ref

    def append(self, entry: Entry) -> int:
        """The position of ``entry``, always appended (scalar arguments: data)."""
        self.entries.append(entry)
        return len(self.entries) - 1

    def flat_inner(self, d: int) -> int | None:
        """The product of the output dimensions after ``d``, if all before it have length 1."""
        if any(n != 1 for n in self.out_shape[:d]):
            return None
        return math.prod(self.out_shape[d + 1:])
