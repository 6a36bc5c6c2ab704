"""Linearise an expression DAG into a hashable SSA program.

The program is a tuple of entries in dependency order; entries refer to earlier
ones by position.  It is both the structural part of the cache key and the input
of lowering, so the key is computed without touching Loopy.  Entries are
hash-consed: an array read twice at the same index is loaded once and a
subexpression built twice (even as separate Python objects) is computed once.

Every value is computed *at* a symbolic index: a tuple with one component per
dimension of the node.  Components are

* ``0``: the dimension has length 1 (or is broadcast);
* ``("r", d)``: output (root) dimension ``d``;
* ``("j", rid, k)``: the ``k``-th reduced dimension of reduction ``rid``;
* ``("g", ref, p, checked)``: the value of index entry ``ref``, wrapped and
  clamped to the length in parameter ``p`` (a gather; ``checked`` reports
  out-of-range values);
* ``("a", const, ((coef, comp), ...))``: an affine combination (a remap);
* ``("k", comp, start, length)``: a position within one piece of a
  concatenation, ``comp - start`` clamped to ``[0, length)`` (``start`` 0 or a
  parameter; ``length`` a parameter, or None for the last piece): the
  selected piece reads exactly there, and a piece value computed for an
  element of another piece (a temporary) still reads inside its own buffer.

Run-time integers (strides, offsets, sizes) are parameters: entries name
parameter slots, :class:`Bindings` carries their values.  A stride of 0 or 1
is structural (it is baked into the source so loads vectorise); any other
stride is a parameter, so one kernel serves every size.

Entries:

* ``("load", slot, dtype, at, strides, offset)``: ``strides[k]`` is 0, 1 or
  ``("p", slot)``; ``offset`` is 0 or ``("p", slot)``.
* ``("iota", dtype, at, strides, offset)``: the same address, as a value.
* ``("arg", slot, dtype)`` / ``("lit", dtype, value)``: scalars.
* ``("op", name, loop, refs)`` / ``("call", key, loop, refs)``: elementwise.
* ``("reduce", op, dtype, rid, child, at, sizes, total, chunk)``: reduction
  ``rid`` of entry ``child`` over the reduced dimensions whose lengths are the
  parameters ``sizes`` (product ``total``); ``chunk`` is None or
  ``(p_chunk, d, exact)``: only the ``chunk``-long piece number ``("r", d)`` of
  the reduced range is reduced (first stage of a two-stage reduction);
  ``exact`` when the pieces tile the range exactly (no bounds test).
* ``("gather", index_ref, child_ref, length_param)``: checked gather.
* ``("concat", comp, bounds, refs, flat)``: the value of piece ``refs[p]`` where
  ``bounds[p-1] <= comp < bounds[p]`` (``bounds`` are the parameters holding
  where pieces 1.. start): a nest of conditionals, so each element loads from
  one piece only.  ``flat`` is None, or, when ``comp`` is an output dimension
  preceded by unit dimensions only, ``(starts, kcs, cstrides)``: the
  parameters holding where pieces 1.. start in the flat C-order loop over the
  output (each piece is then one range of it: a recipe may give each piece its
  own loop, see :func:`fuseloop.lower.kernel.lower_program`), the position
  component each piece is read at (a ``"k"`` component, or 0 for a piece of
  length 1), and the output's C strides as address kinds (a load with these
  strides at the output's index, shifted into a piece, reads the piece's
  elements in the flat loop's order).
"""

from __future__ import annotations

import math
import sys
from collections.abc import Callable, Iterable, Sequence
from typing import Any, NamedTuple

import numpy as np

from .nodes import (
    Apply,
    Concat,
    Gather,
    Iota,
    Leaf,
    Literal,
    Node,
    Reduce,
    Remap,
    Scalar,
    Storage,
    UserCall,
    c_strides,
    signature_of,
)

# The largest value a launch may meet in an index expression and still use 32-bit
# indices (fuseloop.launching picks int64 above it, by the largest parameter, output
# size or input buffer's byte size).  A lazy source (an iota: arange, linspace) has
# no buffer to bound its addresses, so linearising records its reach as a parameter.
INT32_LIMIT = 2**31 - 1


def iota_reach(node: Node) -> int:
    """An upper bound of every partial sum of an iota view's address (``offset`` plus
    ``index * stride`` terms): its lazy source's logical extent."""
    strides = node.view_strides()  # type: ignore[attr-defined]
    return abs(node.offset) + sum((n - 1) * abs(s)  # type: ignore[attr-defined]
                                  for n, s in zip(node.shape, strides) if n > 1)


class Program(NamedTuple):
    entries: tuple[tuple, ...]
    outputs: tuple[int, ...]
    out_specs: tuple[tuple, ...]  # per output: () contiguous, or (at, strides, offset)
    root_sizes: tuple[Any, ...]  # per root dimension: ("p", slot), or 1
    row_dims: tuple[int, ...] | None  # None: one flat loop; else dims of the row loop
    chunked: bool = False  # first stage of a two-stage reduction (see Reduce entries)
    has_reduce: bool = False
    # a matmul-like sum of products (see fuseloop.expr.contraction), else None
    contraction: Any = None


def reachable_entries(roots: Iterable[int], inputs: Callable[[int, list[int]], bool],
                      limit: int | None = None) -> set[int] | None:
    """The entries of a program that ``roots`` are computed from, themselves included.

    ``inputs(ref, stack)`` pushes the entries that entry ``ref`` reads onto ``stack``;
    it returns False to give up (the result is then None), as does reaching more
    than ``limit`` entries.
    """
    seen: set[int] = set()
    stack = list(roots)
    while stack:
        ref = stack.pop()
        if ref in seen:
            continue
        seen.add(ref)
        if inputs(ref, stack) is False or (limit is not None and len(seen) > limit):
            return None
    return seen


class Bindings(NamedTuple):
    """The run-time values a program is launched with.

    ``scalar_nodes``: the scalar node each value of ``scalars`` came from, where
    known (a full linearisation), so a run plan can tell apart two scalar nodes
    that hold one value object (``x*2 + y*2``: Python's 2 converts to one object).
    """

    storages: list[Storage]
    scalars: list[np.generic]
    params: list[int]
    out_shape: tuple[int, ...]
    scalar_nodes: list[Node] | None = None


class Target(NamedTuple):
    """Where an output goes: a buffer seen through strides (elements) and an offset.

    ``scatter=(axis, indices, lengths, codes)`` writes element ``idx`` of the result
    to position ``indices[k][idx[axis:axis+q]]`` along axis ``axis + k`` of the view,
    for each ``k`` (``a[i, j] = v``; the index nodes broadcast together to ``q`` axes,
    aligned from the right).  ``codes[k]`` is the bounds check's code (see ``Gather``).
    """

    storage: Storage
    strides: tuple[int, ...] | None
    offset: int
    scatter: tuple | None = None


def linearize(roots: Sequence[Node], out_shape: tuple[int, ...],
              targets: Sequence[Target | None] | None = None,
              chunks: tuple[int, int, bool] | None = None,
              cache: bool = True) -> tuple[Program, Bindings]:
    """The program computing ``roots`` (each broadcast to ``out_shape``).

    ``chunks=(count, length, exact)`` makes every top-level reduction a first
    stage: the last output dimension (of length ``count``) numbers pieces of
    ``length`` reduced elements (``exact``: they tile every reduction exactly).

    Elementwise work into plain outputs is looked up in the structure cache
    (:func:`structure_entry`) first; ``cache=False`` always linearises.
    """
    if cache and chunks is None and (targets is None or all(
            t is None or (t.strides is None and t.offset == 0 and t.scatter is None)
            for t in targets)):
        hit = structure_entry(roots, out_shape)
        if hit is not None:
            entry, storages, scalars = hit
            return entry.program, Bindings(storages, scalars, list(entry.params), out_shape)
    entries: list[tuple] = []
    interned: dict[tuple, int] = {}
    memo: dict[tuple, int] = {}
    slot_of_storage: dict[int, int] = {}
    storages: list[Storage] = []
    scalars: list[np.generic] = []
    scalar_nodes: list[Node] = []
    params: list[int] = []
    param_of: dict[int, tuple] = {}  # small ints are interned as parameters too
    rid_counter = [0]

    def param(value: int) -> tuple:
        p = param_of.get(value)
        if p is None:
            p = param_of[value] = ("p", len(params))
            params.append(int(value))
        return p

    def reach(value: int) -> None:
        # an index expression may reach ``value``: above INT32_LIMIT, a parameter no
        # entry reads makes the launch pick 64-bit indices (the rule reads parameters)
        if value > INT32_LIMIT:
            param(value)

    def stride_kind(s: int) -> Any:
        return s if s in (0, 1) else param(s)

    def add(entry: tuple) -> int:
        ref = interned.get(entry)
        if ref is None:
            ref = interned[entry] = len(entries)
            entries.append(entry)
        return ref

    def address(node: Node, at: tuple) -> tuple[Any, Any]:
        if node.strides is None and at == root_at:  # type: ignore[attr-defined]
            return "c", 0  # the common case: a whole array in the output's own order
        strides = node.view_strides()  # type: ignore[attr-defined]
        off = node.offset  # type: ignore[attr-defined]
        off_kind = 0 if off == 0 else param(off)
        if at == root_at and all(c == 0 or s == cs for c, s, cs in zip(at, strides, out_c)):
            return "c", off_kind  # walks the output's own C order: the flat index
        kinds = tuple(0 if c == 0 else stride_kind(s) for c, s in zip(at, strides))
        return kinds, off_kind

    def flat_bounds(c: Any, node: Concat, kcs: list) -> tuple | None:
        """Where pieces 1.. start in the flat loop over the output, if they tile it in order.

        That is when the joined axis is output dimension ``d`` and every output
        dimension before ``d`` has length 1: piece ``p`` is then the range
        ``[starts[p] * inner, starts[p + 1] * inner)`` of the flat C-order index
        (``inner`` the product of the later output dimensions).
        """
        if c[0] != "r" or any(n != 1 for n in out_shape[:c[1]]):
            return None
        inner = math.prod(out_shape[c[1] + 1:])
        return (tuple(param(s * inner) for s in node.starts[1:]), tuple(kcs),
                tuple(stride_kind(s) for s in out_c))

    def visit(node: Node, at: tuple) -> int:
        key = (id(node), at)
        ref = memo.get(key)
        if ref is not None:
            return ref
        cls = type(node)
        if cls is Apply or cls is UserCall:
            n = len(node.shape)
            refs = []
            for a in node.args:  # type: ignore[attr-defined]
                r = len(a.shape)
                if r == n and a.shape == node.shape:
                    refs.append(visit(a, at))
                elif r == 0:
                    refs.append(visit(a, ()))
                else:
                    refs.append(visit(a, tuple(at[n - r + k] if a.shape[k] != 1 else 0
                                               for k in range(r))))
            if cls is Apply:
                ref = add(("op", node.op, node.loop_key, tuple(refs)))  # type: ignore[attr-defined]
            else:
                ref = add(("call", node.function.key, node.loop_key, tuple(refs)))  # type: ignore[attr-defined]
        elif cls is Leaf:
            skey = id(node.storage)  # type: ignore[attr-defined]
            slot = slot_of_storage.get(skey)
            if slot is None:
                slot = slot_of_storage[skey] = len(storages)
                storages.append(node.storage)  # type: ignore[attr-defined]
            kinds, off = address(node, at)
            ref = add(("load", slot, node.dtype.char, at, kinds, off))
        elif cls is Scalar:
            # each scalar node is its own argument: values are data, not structure
            ref = len(entries)
            entries.append(("arg", len(scalars), node.dtype.char))
            scalars.append(node.value)  # type: ignore[attr-defined]
            scalar_nodes.append(node)
        elif cls is Literal:
            ref = add(("lit", node.dtype.char, node.value.item()))  # type: ignore[attr-defined]
        elif cls is Iota:
            reach(iota_reach(node))
            kinds, off = address(node, at)
            ref = add(("iota", node.dtype.char, at, kinds, off))
        elif cls is Reduce:
            # equal reductions built as separate objects (a view of a reduction
            # re-creates it) are computed once
            skey = (structure(node), tuple(a for a, n in zip(at, node.shape) if n != 1))
            ref = memo.get(skey)  # type: ignore[arg-type]
            if ref is None:
                ref = memo[skey] = visit_reduce(node, at, None)  # type: ignore[arg-type,index]
        elif cls is Gather:
            ax = node.axis  # type: ignore[attr-defined]
            index = node.index  # type: ignore[attr-defined]
            q = len(index.shape)
            iref = visit(index, at[ax:ax + q])
            child = node.child  # type: ignore[attr-defined]
            length = param(child.shape[ax])
            checked = node.checked  # type: ignore[attr-defined]
            c_at = (*at[:ax], ("g", iref, length, checked), *at[ax + q:])
            cref = visit(child, c_at)
            ref = add(("gather", iref, cref, length))
        elif cls is Remap:
            child = node.child  # type: ignore[attr-defined]
            reach(max(child.shape, default=0))  # (its affine positions index the child)
            c_at = []
            for k in range(len(child.shape)):
                if child.shape[k] == 1:
                    c_at.append(0)
                    continue
                terms = tuple((c, at[d]) for d, c in enumerate(node.coeffs[k])  # type: ignore[attr-defined]
                              if c and at[d] != 0)
                const = node.offsets[k]  # type: ignore[attr-defined]
                if const == 0 and len(terms) == 1 and terms[0][0] == 1:
                    c_at.append(terms[0][1])
                else:
                    c_at.append(("a", const, terms))
            ref = visit(child, tuple(c_at))
        elif cls is Concat:
            ax = node.axis  # type: ignore[attr-defined]
            pieces = node.pieces  # type: ignore[attr-defined]
            reach(node.shape[ax])  # (piece positions count along the joined axis)
            c = at[ax]
            if c == 0 or len(pieces) == 1:  # (a joined axis of length 1 has one piece)
                ref = visit(pieces[0], at)
            else:
                refs, bounds, kcs = [], [], []
                last = len(pieces) - 1
                for p, (piece, s) in enumerate(zip(pieces, node.starts)):  # type: ignore[attr-defined]
                    n = piece.shape[ax]
                    kc = 0 if n == 1 else \
                        ("k", c, 0 if s == 0 else param(s), None if p == last else param(n))
                    refs.append(visit(piece, (*at[:ax], kc, *at[ax + 1:])))
                    kcs.append(kc)
                    if p:
                        bounds.append(param(s))
                ref = add(("concat", c, tuple(bounds), tuple(refs), flat_bounds(c, node, kcs)))
        else:
            raise AssertionError(f"unknown node {cls.__name__}")
        memo[key] = ref
        return ref

    sig_memo: dict[int, tuple] = {}

    def squeezed(shape: tuple[int, ...]) -> tuple[int, ...]:
        return tuple(n for n in shape if n != 1)

    def structure(node: Node) -> tuple:
        """What ``node`` computes, up to length-1 axes (always at index 0).

        Views built around a reduction (``keepdims``, broadcasting against it)
        re-create its subtree with extra unit axes; squeezing them out lets the
        copies share one reduction.
        """
        hit = sig_memo.get(id(node))
        if hit is not None:
            return hit
        cls = type(node)
        if cls is Leaf or cls is Iota:
            strides = tuple(st for st, n in zip(node.view_strides(), node.shape)  # type: ignore[attr-defined]
                            if n != 1)
            head = ("L", id(node.storage)) if cls is Leaf else ("I",)  # type: ignore[attr-defined]
            out: tuple = (*head, node.dtype.char, squeezed(node.shape), strides,
                          node.offset)  # type: ignore[attr-defined]
        elif cls is Literal:
            out = ("C", node.dtype.char, node.value.item())  # type: ignore[attr-defined]
        elif cls is Apply or cls is UserCall:
            fn = node.function.key if cls is UserCall else None  # type: ignore[attr-defined]
            n = len(node.shape)
            # where each argument's non-unit axes land among the node's non-unit axes
            kept = {d: k for k, d in enumerate(d for d in range(n) if node.shape[d] != 1)}
            args = tuple((tuple(kept[n - len(a.shape) + d] for d in range(len(a.shape))
                                if a.shape[d] != 1), structure(a))
                         for a in node.args)  # type: ignore[attr-defined]
            out = ("A", node.op, fn, node.loop_key, squeezed(node.shape), args)  # type: ignore[attr-defined]
        elif cls is Reduce:
            child = node.child  # type: ignore[attr-defined]
            axes = tuple(sum(1 for d in range(a) if child.shape[d] != 1)
                         for a in node.axes if child.shape[a] != 1)  # type: ignore[attr-defined]
            out = ("R", node.op, node.dtype.char, axes, structure(child))  # type: ignore[attr-defined]
        elif cls is Gather:  # with exact shapes: their axis numbers are not squeezed
            out = ("G", node.axis, node.checked, node.child.shape,  # type: ignore[attr-defined]
                   node.index.shape, structure(node.child),  # type: ignore[attr-defined]
                   structure(node.index))  # type: ignore[attr-defined]
        elif cls is Remap:
            out = ("M", node.shape, node.offsets, node.coeffs,  # type: ignore[attr-defined]
                   node.child.shape, structure(node.child))  # type: ignore[attr-defined]
        elif cls is Concat:  # exact shapes, as for gathers
            out = ("K", node.axis, node.shape, node.starts,  # type: ignore[attr-defined]
                   tuple(structure(p) for p in node.pieces))  # type: ignore[attr-defined]
        else:
            out = ("S", id(node))  # scalar arguments are data: never merged
        sig_memo[id(node)] = out
        return out

    def visit_reduce(node: Reduce, at: tuple, chunk: Any) -> int:
        rid = rid_counter[0]
        rid_counter[0] += 1
        child = node.child
        at = node.kept_index(at)
        c_at = []
        kept = 0
        sizes = []
        for k, n in enumerate(child.shape):
            if k in node.axes:
                if n == 1:
                    c_at.append(0)
                else:
                    c_at.append(("j", rid, len(sizes)))
                    sizes.append(param(n))
            else:
                c_at.append(at[kept])
                kept += 1
        cref = visit(child, tuple(c_at))
        total = param(math.prod(child.shape[a] for a in node.axes))
        return add(("reduce", node.op, node.dtype.char, rid, cref, at, tuple(sizes), total,
                    chunk))

    rank = len(out_shape)
    root_at = tuple(0 if n == 1 else ("r", d) for d, n in enumerate(out_shape))
    out_c = c_strides(out_shape)
    if chunks is not None:
        root_at = ("chunked",)  # never equal to a load's index: no flat shortcut

    def visit_root(r: Node) -> int:
        if chunks is not None:
            # the output's last axis numbers the pieces; the reduction's own axes lead
            assert type(r) is Reduce and r.shape == out_shape[:-1]
            chunk = (param(chunks[1]), rank - 1, chunks[2])
            return visit_reduce(r, root_index[:rank - 1], chunk)
        at = root_index[rank - len(r.shape):]
        at = tuple(0 if r.shape[k] == 1 else at[k] for k in range(len(r.shape)))
        return visit(r, at)

    root_index = tuple(0 if n == 1 else ("r", d) for d, n in enumerate(out_shape))
    limit = sys.getrecursionlimit()
    try:
        outputs = tuple([visit_root(r) for r in roots])
    except RecursionError:
        # very deep expression chains: retry with room for them
        entries.clear(), interned.clear(), memo.clear(), param_of.clear()
        slot_of_storage.clear(), storages.clear(), scalars.clear(), params.clear()
        scalar_nodes.clear()
        rid_counter[0] = 0
        sys.setrecursionlimit(max(limit, 200_000))
        try:
            outputs = tuple([visit_root(r) for r in roots])
        finally:
            sys.setrecursionlimit(limit)

    out_specs = []
    for t in (targets or [None] * len(roots)):
        if t is None or (t.strides is None and t.offset == 0 and t.scatter is None):
            out_specs.append(())
            continue
        at = root_index
        if t.scatter is not None:
            axis, index_nodes, lengths, codes = t.scatter
            q = max(len(i.shape) for i in index_nodes)
            comps = []
            for index_node, length, code in zip(index_nodes, lengths, codes):
                ishape = index_node.shape
                sub = root_index[axis + q - len(ishape):axis + q]
                iref = visit(index_node, tuple(0 if n == 1 else c for c, n in zip(sub, ishape)))
                comps.append(("g", iref, param(length), code))
            at = (*root_index[:axis], *comps, *root_index[axis + q:])
        assert t.strides is not None
        # a strided target's addresses: its buffer is not among the inputs the rule reads
        reach(abs(t.offset) + sum(
            abs(s) * (out_shape[c[1]] - 1 if c[0] == "r" else params[c[2][1]] - 1)
            for c, s in zip(at, t.strides) if c != 0))
        kinds = tuple(0 if c == 0 else stride_kind(s) for c, s in zip(at, t.strides))
        out_specs.append((at, kinds, 0 if t.offset == 0 else param(t.offset)))
    root_sizes = tuple(1 if n == 1 else param(n) for n in out_shape)

    # Reductions computed once per output row: the root loop splits into rows
    # (the dimensions reductions vary along) and elements within a row.
    row_dims = None
    if chunks is None:
        varying: set[int] = set()
        has_reduce = False
        for e in entries:
            if e[0] == "reduce":
                has_reduce = True
                _collect_root_dims(e[5], varying, entries)
        if has_reduce:
            elem = [d for d, n in enumerate(out_shape) if n != 1 and d not in varying]
            if elem:
                row_dims = tuple(sorted(varying))
    contraction = None
    if chunks is None and row_dims is None and rid_counter[0] == 1:
        from .contraction import find_contraction

        contraction = find_contraction(entries, outputs, out_specs, root_sizes, params, param)
    program = Program(tuple(entries), outputs, tuple(out_specs), root_sizes, row_dims,
                      chunks is not None, rid_counter[0] > 0, contraction)
    return program, Bindings(storages, scalars, params, out_shape, scalar_nodes)


def _collect_root_dims(at: tuple, out: set[int], entries: list[tuple]) -> None:
    for c in at:
        if c == 0:
            continue
        kind = c[0]
        if kind == "r":
            out.add(c[1])
        elif kind == "a":
            for _, comp in c[2]:
                _collect_root_dims((comp,), out, entries)
        elif kind == "g":
            _collect_entry_root_dims(c[1], out, entries)
        elif kind == "k":
            _collect_root_dims((c[1],), out, entries)
        # ("j", ...) components belong to an enclosing reduction's own loop


def _collect_entry_root_dims(ref: int, out: set[int], entries: list[tuple]) -> None:
    e = entries[ref]
    if e[0] in ("load", "iota"):
        _collect_root_dims(e[3] if e[0] == "load" else e[2], out, entries)
    elif e[0] in ("op", "call"):
        for r in e[3]:
            _collect_entry_root_dims(r, out, entries)
    elif e[0] == "reduce":
        _collect_root_dims(e[5], out, entries)
    elif e[0] == "gather":
        _collect_entry_root_dims(e[1], out, entries)
        _collect_entry_root_dims(e[2], out, entries)
    elif e[0] == "concat":
        _collect_root_dims((e[1],), out, entries)
        for r in e[3]:
            _collect_entry_root_dims(r, out, entries)


# {{{ structure cache

class StructureEntry:
    """What linearising one expression structure gives, minus the data.

    ``launches`` is for :mod:`fuseloop.evaluate` to remember, per index dtype
    and device, how the compiled kernel is launched for this structure.
    """

    __slots__ = ("launches", "max_param", "params", "program", "take")

    def __init__(self, program: Program, params: list[int]) -> None:
        self.program = program
        self.params = tuple(params)
        self.max_param = max(params, default=0)
        self.launches: dict[Any, Any] = {}
        # for an entry found by signature: operands -> (buffers, scalar values)
        self.take: Any = None


class _Uncacheable(Exception):
    pass


class _ScalarTokens(dict):
    def __missing__(self, char: str) -> tuple[str, str]:
        self[char] = ("S", char)
        return self[char]


_SCALAR_TOKENS = _ScalarTokens()


# the structure cache: key (see structure_entry) -> entry
structures: dict[tuple, StructureEntry] = {}
# (signature, out_shape) -> the entry last found under a key that starts with them;
# its program is right for any operands that repeat at least as its key says (an
# elementwise kernel into a new buffer may read one buffer through two arguments)
flat_entries: dict[tuple, StructureEntry] = {}
STRUCTURES_MAX = 2048  # entries kept (all are dropped when it is reached)
MAX_TOKENS = 512  # larger expressions are linearised every time
#: tests set this to compare every structure-cache hit with a fresh linearisation
CHECK_STRUCTURE_CACHE = False


def structure_key(roots: Sequence[Node], out_shape: tuple[int, ...]
                  ) -> tuple[tuple, list[Storage], list[np.generic]]:
    """A key for what :func:`linearize` makes of elementwise ``roots``, and their data.

    The key is a prefix code of the DAG, depth first, arguments in order: for an
    elementwise operation its name (a user call: ``("U", function key)``), loop
    dtypes and shape, then its arguments; for a leaf its dtype, shape, strides
    and offset and the *slot* of its buffer (buffers numbered by first
    appearance, so ``x * x`` and ``x * y`` differ); for a concatenation its
    axis, shape and piece starts, then its pieces; for a scalar argument its
    dtype and slot (one per scalar node, as in the program); literals and
    element indices in full.  A shared subexpression is written out again
    where it is met again: :func:`linearize` merges equal entries anyway, so
    its program depends on which buffers and scalar nodes are the same, not on
    which operation nodes are (``MAX_TOKENS`` bounds the walk of a DAG whose
    expansion is large).  The program, its parameters (sizes, strides,
    offsets) and the order of the bindings are a function of this key.  Raises
    ``_Uncacheable`` for reductions, gathers and remaps, or beyond
    ``MAX_TOKENS``.
    """
    toks: list[Any] = [out_shape, len(roots)]
    storages: list[Storage] = []
    scalars: list[np.generic] = []
    slots: dict[Any, int] = {}  # buffer or scalar node -> its slot
    try:
        for r in roots:
            _walk(r, toks, slots, storages, scalars)
    except RecursionError:
        raise _Uncacheable from None
    return tuple(toks), storages, scalars


def _walk(node: Node, toks: list[Any], slots: dict[Any, int], storages: list[Storage],
          scalars: list[np.generic], general: bool = False) -> None:
    """Append ``node``'s part of the structure key (see :func:`structure_key`).

    ``general`` also writes out reductions and remaps (for :mod:`fuseloop.run_plans`).
    """
    cls = type(node)
    if cls is Apply or cls is UserCall:
        # a shared operation node is walked again: the program does not depend on
        # which operations are shared, only on which buffers and scalars are
        toks.append(node.op if cls is Apply else ("U", node.function.key))  # type: ignore[attr-defined]
        toks.append(node.loop_key)  # type: ignore[attr-defined]
        toks.append(node.shape)
        if len(toks) > MAX_TOKENS:
            raise _Uncacheable
        for a in node.args:  # type: ignore[attr-defined]
            cls = type(a)
            if cls is Leaf:  # leaves and scalars in place: most arguments are one
                s = a.storage  # type: ignore[attr-defined]
                k = slots.get(s)
                if k is None:
                    k = slots[s] = len(storages)
                    storages.append(s)
                toks.append(a.token or a.leaf_token())  # type: ignore[attr-defined]
                toks.append(k)
            elif cls is Scalar:
                k = slots.get(a)
                if k is None:
                    k = slots[a] = len(scalars)
                    scalars.append(a.value)  # type: ignore[attr-defined]
                toks.append(_SCALAR_TOKENS[a.dtype.char])
                toks.append(k)
            else:
                _walk(a, toks, slots, storages, scalars, general)
    elif cls is Leaf:
        s = node.storage  # type: ignore[attr-defined]
        k = slots.get(s)
        if k is None:
            k = slots[s] = len(storages)
            storages.append(s)
        toks.append(node.token or node.leaf_token())  # type: ignore[attr-defined]
        toks.append(k)
    elif cls is Scalar:
        k = slots.get(node)
        if k is None:
            k = slots[node] = len(scalars)
            scalars.append(node.value)  # type: ignore[attr-defined]
        toks.append(_SCALAR_TOKENS[node.dtype.char])
        toks.append(k)
    elif cls is Literal:
        toks.append(("C", node.dtype.char, node.value.tobytes()))  # type: ignore[attr-defined]
    elif cls is Iota:
        toks.append(("I", node.dtype.char, node.shape, node.strides, node.offset))  # type: ignore[attr-defined]
    elif general and cls is Reduce:
        toks.append(("R", node.op, node.dtype.char, node.axes, node.shape))  # type: ignore[attr-defined]
        if len(toks) > MAX_TOKENS:
            raise _Uncacheable
        _walk(node.child, toks, slots, storages, scalars, True)  # type: ignore[attr-defined]
    elif general and cls is Remap:
        toks.append(("M", node.shape, node.offsets, node.coeffs))  # type: ignore[attr-defined]
        _walk(node.child, toks, slots, storages, scalars, True)  # type: ignore[attr-defined]
    elif general and cls is Gather and not node.checked:  # type: ignore[attr-defined]
        # computed in-range positions (roll, tile, repeat): no flag to read back
        toks.append(("G", node.axis, node.shape))  # type: ignore[attr-defined]
        if len(toks) > MAX_TOKENS:
            raise _Uncacheable
        _walk(node.child, toks, slots, storages, scalars, True)  # type: ignore[attr-defined]
        _walk(node.index, toks, slots, storages, scalars, True)  # type: ignore[attr-defined]
    elif cls is Concat:
        # the piece boundaries are in the key (as leaves' sizes are), parameters in the program
        toks.append(("K", node.axis, node.shape, node.starts))  # type: ignore[attr-defined]
        if len(toks) > MAX_TOKENS:
            raise _Uncacheable
        for p in node.pieces:  # type: ignore[attr-defined]
            _walk(p, toks, slots, storages, scalars, general)
    else:
        raise _Uncacheable


def walk_structure(roots: Sequence[Node], head: list[Any]
                   ) -> tuple[list[Any], dict[Any, int], list[Storage], list[np.generic]] | None:
    """The prefix code of :func:`structure_key` for any roots but checked gathers, after
    ``head``.

    Returns ``(tokens, slots, storages, scalars)`` (``slots`` maps each buffer
    and scalar node to its slot), or None for gathers and very large DAGs.
    """
    toks = head
    storages: list[Storage] = []
    scalars: list[np.generic] = []
    slots: dict[Any, int] = {}
    try:
        for r in roots:
            _walk(r, toks, slots, storages, scalars, True)
    except (_Uncacheable, RecursionError):
        return None
    return toks, slots, storages, scalars


def structure_entry(roots: Sequence[Node], out_shape: tuple[int, ...]
                    ) -> tuple[StructureEntry, list[Storage], list[np.generic]] | None:
    """The cached linearisation of elementwise ``roots`` into plain outputs, and its data.

    Returns ``(entry, storages, scalars)``: ``entry.program`` and
    ``entry.params`` are what :func:`linearize` would return with these
    bindings.  None when the expression is not cached (reductions, gathers,
    very large expressions).  A miss linearises once and remembers the result.

    One root with a structure signature (see :mod:`fuseloop.expr.nodes`) is
    looked up by the signature and the pattern of repeated operands, without a
    walk: the buffers and scalars are its operands, each at its first place.
    """
    if len(roots) == 1:
        root = roots[0]
        sig = root.sig or signature_of(root)
        if sig:
            operands = root.operands
            # each operand's first place: which buffers and scalar nodes are the same
            # (by identity: neither defines ==)
            key: tuple = (sig, out_shape, tuple(map(operands.index, operands)))
            entry = structures.get(key)
            if entry is not None and not CHECK_STRUCTURE_CACHE:
                flat_entries[key[:2]] = entry
                storages, scalars = entry.take(operands)
                return entry, storages, scalars
            found = _signed_miss(key, entry, root, out_shape)
            if structures.get(key) is found[0]:  # (not when it could not be cached)
                flat_entries[key[:2]] = found[0]
            return found
    for r in roots:
        if r.fancy:
            return None
    try:
        key, storages, scalars = structure_key(roots, out_shape)
    except _Uncacheable:
        return None
    entry = structures.get(key)
    if entry is not None and not CHECK_STRUCTURE_CACHE:
        return entry, storages, scalars
    return _linearised(key, entry, roots, out_shape, storages, scalars)


def _signed_miss(key: tuple, entry: StructureEntry | None, root: Node,
                 out_shape: tuple[int, ...]
                 ) -> tuple[StructureEntry, list[Storage], list[np.generic]]:
    """:func:`structure_entry` by signature on a miss (or, checking, on a hit)."""
    operands = root.operands
    assert operands is not None
    firsts = key[2]
    at = [k for k, f in enumerate(firsts) if f == k]  # first appearances, in walk order
    # (operands are buffers and scalar nodes; the entry's picker is generated once,
    # so a hit costs one call)
    storages = [operands[k] for k in at if type(operands[k]) is Storage]
    scalars = [operands[k].value for k in at if type(operands[k]) is not Storage]
    buffers = ", ".join(f"o[{k}]" for k in at if type(operands[k]) is Storage)
    values = ", ".join(f"o[{k}].value" for k in at if type(operands[k]) is not Storage)
    # the picker also checks that the operands repeat as in this structure (None if
    # not): evaluate.run_flat finds entries by signature and shape alone
    repeats = " and ".join(f"o[{k}] is o[{f}]" for k, f in enumerate(firsts) if f != k)
    take = eval(f"lambda o: ([{buffers}], [{values}])"
                + (f" if {repeats} else None" if repeats else ""))
    return _linearised(key, entry, [root], out_shape, storages, scalars, take)


def _linearised(key: tuple, entry: StructureEntry | None, roots: Sequence[Node],
                out_shape: tuple[int, ...], storages: list[Storage], scalars: list[np.generic],
                take: Any = None) -> tuple[StructureEntry, list[Storage], list[np.generic]]:
    """:func:`structure_entry` on a miss (``entry`` None) or, checking, on a hit.

    ``take`` is set on a new entry before other threads can see it.
    """
    program, bindings = linearize(roots, out_shape, cache=False)
    same = (len(bindings.storages) == len(storages) and len(bindings.scalars) == len(scalars)
            and all(a is b for a, b in zip(bindings.storages, storages))
            and all(a is b for a, b in zip(bindings.scalars, scalars)))
    if entry is not None:  # checking
        # (repr: a NaN literal makes equal programs unequal under ==)
        assert same and repr(entry.program) == repr(program) and \
            list(entry.params) == bindings.params, (
                "structure cache hit differs from a fresh linearisation", key)
        return entry, storages, scalars
    fresh = StructureEntry(program, bindings.params)
    fresh.take = take
    if not same:  # never expected: the walks visit in the same order; do not cache
        return fresh, bindings.storages, bindings.scalars
    if len(structures) >= STRUCTURES_MAX:
        structures.clear()
        flat_entries.clear()
    return structures.setdefault(key, fresh), storages, scalars


def clear_structure_cache() -> None:
    structures.clear()
    flat_entries.clear()


from ..caches import register as _register_cache  # noqa: E402  (cache registry: fuseloop/caches.py)

_register_cache("expr.program.structures", clear_structure_cache, lambda: len(structures) + len(flat_entries), 2 * STRUCTURES_MAX)  # noqa: E501  (flat_entries: one per structure)
_register_cache("expr.program.scalar_tokens", _SCALAR_TOKENS.clear, lambda: len(_SCALAR_TOKENS), why="one per dtype")  # noqa: E501

# }}}


def collapse_groups(program: Program) -> None:
    """Kept for the cache module's call; dimensions are coalesced before linearising."""
    return None
