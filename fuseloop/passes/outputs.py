"""Passes 2-5: where outputs go, the loop sizes, the row split, contractions."""

from __future__ import annotations

from typing import Any

from ..expr.contraction import find_contraction
from ..expr.ir import Entry
from .build import Build
from .emit import emitter


def place_outputs(b: Build) -> None:
    """Set ``b.out_specs``: per output ``()`` (a plain output), or ``(at, strides, offset)``.

    A strided target (a view written in place) is stored at the output's index
    through its strides and its offset's parameter; a scatter target (``a[i, j] = v``)
    at gathered index components, whose index values become entries here.  The
    targets' mask, if any, becomes an entry too (``b.mask``).
    """
    specs = b.out_specs = []
    for t in (b.targets or [None] * len(b.roots)):
        if t is None or (t.strides is None and t.offset == 0 and t.scatter is None):
            specs.append(())
            continue
        at = b.root_index
        if t.scatter is not None:
            axis, index_nodes, lengths, codes = t.scatter
            q = max(len(i.shape) for i in index_nodes)
            comps = []
            visit = emitter(b).visit
            for index_node, length, code in zip(index_nodes, lengths, codes):
                ishape = index_node.shape
                sub = b.root_index[axis + q - len(ishape):axis + q]
                iref = visit(index_node, tuple(0 if n == 1 else c for c, n in zip(sub, ishape)))
                comps.append(("g", iref, b.param(length), code))
            at = (*b.root_index[:axis], *comps, *b.root_index[axis + q:])
        assert t.strides is not None
        # a strided target's addresses: its buffer is not among the inputs the rule reads
        b.reach(abs(t.offset) + sum(
            abs(s) * (b.out_shape[c[1]] - 1 if c[0] == "r" else b.params[c[2][1]] - 1)
            for c, s in zip(at, t.strides) if c != 0))
        kinds = tuple(0 if c == 0 else b.stride_kind(s) for c, s in zip(at, t.strides))
        # (not a whole buffer: its offset is a parameter, 0 too, as a view's; see emit)
        spec = (at, kinds, b.offset_param(t.offset, (id(t.storage), b.out_shape, t.strides)))
        # (an atomic update names its operation: fl.add.at, see Target.atomic)
        specs.append(spec if t.atomic is None else (*spec, t.atomic))
    masks = {id(t.mask): t.mask for t in (b.targets or ()) if t is not None
             and t.mask is not None}
    assert len(masks) <= 1, "the targets of one program share one mask"
    for mask in masks.values():
        # evaluated at the output's own index, before any guarded work (lower/kernel.py)
        b.mask = emitter(b).visit(mask, b.root_index)


def size_roots(b: Build) -> None:
    """Set ``b.root_sizes``: per output dimension its length's parameter, or 1."""
    b.root_sizes = tuple(1 if n == 1 else b.param(n) for n in b.out_shape)


def split_rows(b: Build) -> None:
    """Set ``b.row_dims``: the output dimensions reductions vary along, or None.

    Reductions are then computed once per output row: the root loop splits
    into rows (these dimensions) and elements within a row.  None (one flat
    loop) without reductions, for a chunked first stage of contiguous pieces, or
    when every output dimension is a row dimension.  A first stage whose pieces
    are numbered by the first axis (column-like reductions) has that axis as its
    rows: the piece is then a row's constant, not a division of the flat index
    by the number of columns in every element's address.
    """
    b.row_dims = None
    if b.chunks is not None:
        axis = b.chunks[3]
        if axis < len(b.out_shape) - 1 and any(
                n != 1 for d, n in enumerate(b.out_shape) if d != axis):
            b.row_dims = (axis,)
        return
    varying: set[int] = set()
    has_reduce = False
    for e in b.entries:
        if e.kind == "reduce":
            has_reduce = True
            collect_root_dims(e.at, varying, b.entries)
    if has_reduce:
        elem = [d for d, n in enumerate(b.out_shape) if n != 1 and d not in varying]
        if elem:
            b.row_dims = tuple(sorted(varying))
            return
        dims = [d for d, n in enumerate(b.out_shape) if n != 1]
        if len(dims) > 1 and walks_columns(b.entries) and not (
                b.reductions == 1 and find_contraction(
                    b.entries, b.outputs, b.out_specs, b.root_sizes, b.params, b.param)):
            # a column-like reduction to several axes (a middle axis): rows of the last
            # axis, so neighbouring outputs need no division in their addresses (a
            # contraction, ``a.T @ b``, keeps its flat loop for the tiled recipes)
            b.row_dims = tuple(dims[:-1])


def detect_contraction(b: Build) -> None:
    """Set ``b.contraction``: a matmul-like sum of products (see
    :mod:`fuseloop.expr.contraction`), or None."""
    b.contraction = None
    if b.reductions != 1 or b.mask is not None:
        return
    if b.chunks is None and b.row_dims is None:
        b.contraction = find_contraction(b.entries, b.outputs, b.out_specs, b.root_sizes,
                                         b.params, b.param)
    elif b.chunks is not None and b.chunks[3] == 0:
        # split-K (fuseloop.split_k): pieces numbered by the first axis are a batch
        # of contractions; the tiled recipes walk the output flat, as unsplit ones
        b.contraction = find_contraction(b.entries, b.outputs, b.out_specs, b.root_sizes,
                                         b.params, b.param)
        if b.contraction is not None:
            b.row_dims = None


def walks_columns(entries: list[Entry] | tuple[Entry, ...]) -> bool:
    """Whether the program's reductions read memory only across rows: some load
    is at a reduction loop's position, none with stride 1 along it."""
    found = False
    e: Any  # an Entry, read by its kind tag
    for e in entries:
        if e.kind != "load" or e.strides == "c":
            continue
        for c, k in zip(e.at, e.strides):
            if c != 0 and c[0] == "j" and k != 0:
                if k == 1:
                    return False
                found = True
    return found


def collect_root_dims(at: tuple, out: set[int], entries: list[Entry]) -> None:
    """Add to ``out`` the output dimensions index ``at`` varies along."""
    for c in at:
        if c == 0:
            continue
        kind = c[0]
        if kind == "r":
            out.add(c[1])
        elif kind == "a":
            for _, comp in c[2]:
                collect_root_dims((comp,), out, entries)
        elif kind == "g":
            _collect_entry_root_dims(c[1], out, entries)
        elif kind == "k":
            collect_root_dims((c[1],), out, entries)
        # ("j", ...) components belong to an enclosing reduction's own loop


def _collect_entry_root_dims(ref: int, out: set[int], entries: list[Entry]) -> None:
    e: Any = entries[ref]
    kind = e.kind
    if kind in ("load", "iota", "sparse"):
        collect_root_dims(e.at, out, entries)
    elif kind in ("op", "call"):
        for r in e.refs:
            _collect_entry_root_dims(r, out, entries)
    elif kind == "reduce":
        collect_root_dims(e.at, out, entries)
    elif kind == "gather":
        _collect_entry_root_dims(e.index, out, entries)
        _collect_entry_root_dims(e.child, out, entries)
    elif kind == "concat":
        collect_root_dims((e.comp,), out, entries)
        for r in e.refs:
            _collect_entry_root_dims(r, out, entries)
