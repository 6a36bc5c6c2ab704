"""Pass 1: the expression DAG as hash-consed SSA entries (see :mod:`fuseloop.expr.ir`)."""

from __future__ import annotations

import math
import sys
from typing import Any

from ..expr import ir
from ..expr.mapper import Mapper
from ..expr.nodes import (
    Apply,
    Concat,
    Gather,
    Iota,
    Leaf,
    Literal,
    Node,
    Pointer,
    Reduce,
    Remap,
    SparseProduct,
)
from .build import Build


def iota_reach(node: Leaf | Iota) -> int:
    """An upper bound of every partial sum of an iota view's address (``offset`` plus
    ``index * stride`` terms): its lazy source's logical extent."""
    strides = node.view_strides()
    return abs(node.offset) + sum((n - 1) * abs(s)
                                  for n, s in zip(node.shape, strides) if n > 1)


def view_offset(b: Build, leaf: Leaf) -> Any:
    """The offset kind a buffer leaf is read with: 0 for a plain leaf (a whole buffer,
    ``strides`` None), else a parameter of its own whatever its value, so a view that
    moves (``a[i]``, ``x[i:i + 5]``) has one program at every offset, 0 included."""
    if leaf.strides is None:
        return 0
    return b.offset_param(leaf.offset, (id(leaf.storage), leaf.shape, leaf.strides))


def emit_entries(b: Build) -> None:
    """Linearise ``b.roots`` into ``b.entries``; set ``b.outputs``.

    Every node is computed at a symbolic index (its ``at``).  Elementwise
    arguments are read at the broadcast index; a leaf that walks the output's
    own C order is read at the flat index (strides ``"c"``); a reduction opens
    a loop of its own (with ``b.chunks``, each root reduction is the first
    stage of a two-stage reduction); gathers, remaps and concatenations
    rewrite the index their children are read at.  Equal entries are stored
    once.  Very deep expressions are retried with a higher recursion limit.
    """
    limit = sys.getrecursionlimit()
    try:
        b.outputs = tuple([emitter(b).root(r) for r in b.roots])
    except RecursionError:
        b.reset()
        sys.setrecursionlimit(max(limit, 200_000))
        try:
            b.outputs = tuple([emitter(b).root(r) for r in b.roots])
        finally:
            sys.setrecursionlimit(limit)


def emitter(b: Build) -> _Emitter:
    """The emitter of ``b``'s entries (one per linearisation: later passes that add
    entries share its memo, so a subexpression met again is not computed twice)."""
    if b.emitter is None:
        b.emitter = _Emitter(b)
    return b.emitter


class _Emitter(Mapper):
    """``map_<node>(node, at)``: the entry computing ``node`` at index ``at``."""

    def __init__(self, b: Build) -> None:
        super().__init__()
        self.b = b
        self.memo: dict[Any, int] = {}  # (id(node), at) or a reduction's structure -> entry
        self.structure = _Structure()
        self.kept: list[Node] = []  # nodes made while emitting (see map_apply)

    def root(self, r: Node) -> int:
        b = self.b
        rank = b.rank
        if b.chunks is not None:
            # output axis ``axis`` numbers the pieces; the reduction's own axes are the rest
            _, length, exact, axis = b.chunks
            assert type(r) is Reduce and r.shape == b.out_shape[:axis] + b.out_shape[axis + 1:]
            chunk = (b.param(length), axis, exact)
            return self.reduction(r, b.root_index[:axis] + b.root_index[axis + 1:], chunk)
        at = b.root_index[rank - len(r.shape):]
        return self.visit(r, tuple(0 if r.shape[k] == 1 else at[k] for k in range(len(r.shape))))

    def visit(self, node: Node, at: tuple) -> int:
        key = (id(node), at)
        ref = self.memo.get(key)
        if ref is None:
            ref = self.memo[key] = self.methods[type(node)](node, at)
        return ref

    def address(self, node: Leaf | Iota, at: tuple) -> tuple[Any, Any]:
        """The strides and offset kinds a leaf or iota is read with at ``at``."""
        b = self.b
        if node.strides is None and at == b.root_at:
            return "c", 0  # the common case: a whole array in the output's own order
        strides = node.view_strides()
        off = node.offset
        # (a buffer view's offset has a parameter of its own, 0 too: ``a[i]`` is one
        # kernel for every ``i``; an iota's offset is part of its key)
        off_kind = view_offset(b, node) if type(node) is Leaf else 0 if off == 0 else \
            b.param(off)
        if at == b.root_at and all(c == 0 or s == cs for c, s, cs in zip(at, strides, b.out_c)):
            return "c", off_kind  # walks the output's own C order: the flat index
        return tuple(0 if c == 0 else b.stride_kind(s) for c, s in zip(at, strides)), off_kind

    def args_at(self, node: Apply, at: tuple) -> tuple[int, ...]:
        n = len(node.shape)
        refs = []
        for a in node.args:
            r = len(a.shape)
            if r == n and a.shape == node.shape:
                refs.append(self.visit(a, at))
            elif r == 0:
                refs.append(self.visit(a, ()))
            else:  # broadcast: aligned from the right, unit axes at 0
                refs.append(self.visit(a, tuple(at[n - r + k] if a.shape[k] != 1 else 0
                                                for k in range(r))))
        return tuple(refs)

    def map_apply(self, node: Apply, at: tuple) -> int:
        if node.op == "power" and type(node.args[1]) is Literal:
            from ..powers import expansion  # (x ** e of a small constant e: by products)

            products = expansion(node)
            if products is not None:
                self.kept.append(products)  # (held: the memo's keys are ids)
                return self.visit(products, at)
        return self.b.add(ir.Op(node.op, node.loop_key, self.args_at(node, at)))

    def map_user_call(self, node: Any, at: tuple) -> int:
        return self.b.add(ir.Call(node.function.key, node.loop_key, self.args_at(node, at)))

    def slot(self, node: Leaf) -> int:
        b = self.b
        skey = id(node.storage)
        slot = b.slot_of_storage.get(skey)
        if slot is None:
            slot = b.slot_of_storage[skey] = len(b.storages)
            b.storages.append(node.storage)
            if node.storage.constant:  # (the program says so: it is part of the key)
                b.add(ir.CMem(slot, node.dtype.char))
        return slot

    def map_leaf(self, node: Leaf, at: tuple) -> int:
        kinds, off = self.address(node, at)
        return self.b.add(ir.Load(self.slot(node), node.dtype.char, at, kinds, off))

    def map_pointer(self, node: Pointer, at: tuple) -> int:
        leaf = node.leaf
        # (a parameter by value, as a sparse product's x: walks write these offsets out)
        off = 0 if leaf.strides is None else self.b.param(leaf.offset)
        return self.b.add(ir.Ptr(self.slot(leaf), leaf.dtype.char, off))

    def map_scalar(self, node: Any, at: tuple) -> int:
        # each scalar node is its own argument: values are data, not structure
        b = self.b
        ref = b.append(ir.Arg(len(b.scalars), node.dtype.char))
        b.scalars.append(node.value)
        b.scalar_nodes.append(node)
        return ref

    def map_literal(self, node: Literal, at: tuple) -> int:
        return self.b.add(ir.Lit(node.dtype.char, node.value.item()))

    def map_iota(self, node: Iota, at: tuple) -> int:
        self.b.reach(iota_reach(node))
        kinds, off = self.address(node, at)
        return self.b.add(ir.Iota(node.dtype.char, at, kinds, off))

    def map_reduce(self, node: Reduce, at: tuple) -> int:
        # equal reductions built as separate objects (a view of a reduction
        # re-creates it) are computed once
        skey = (self.structure(node), tuple(a for a, n in zip(at, node.shape) if n != 1))
        ref = self.memo.get(skey)
        if ref is None:
            ref = self.memo[skey] = self.reduction(node, at, None)
        return ref

    def reduction(self, node: Reduce, at: tuple, chunk: Any) -> int:
        """A reduction entry with a loop of its own (``chunk``: see :class:`ir.Reduce`)."""
        b = self.b
        rid = b.reductions
        b.reductions += 1
        child = node.child
        at = node.kept_index(at)
        c_at: list[Any] = []
        kept = 0
        sizes: list[Any] = []
        for k, n in enumerate(child.shape):
            if k in node.axes:
                if n == 1:
                    c_at.append(0)
                else:
                    c_at.append(("j", rid, len(sizes)))
                    sizes.append(b.param(n))
            else:
                c_at.append(at[kept])
                kept += 1
        cref = self.visit(child, tuple(c_at))
        total = b.param(math.prod(child.shape[a] for a in node.axes))
        return b.add(ir.Reduce(node.op, node.dtype.char, rid, cref, at, tuple(sizes), total,
                               chunk))

    def map_sparse(self, node: SparseProduct, at: tuple) -> int:
        # the matrix's buffers are read whole (their addresses come from the row and
        # the indices), x through its view: only its stride and offset are kept
        b = self.b
        leaves = (node.data, node.indices, node.indptr, node.x)
        slots = []
        for lf in leaves:
            if lf is None:
                slots.append(-1)
                continue
            slot = b.slot_of_storage.get(id(lf.storage))
            if slot is None:
                slot = b.slot_of_storage[id(lf.storage)] = len(b.storages)
                b.storages.append(lf.storage)
            slots.append(slot)
        chars = tuple("" if lf is None else lf.dtype.char for lf in leaves)
        x = node.x
        stride = x.view_strides()[0] if x.shape[0] > 1 else 1
        ell = node.fmt == "ell"
        return b.add(ir.Sparse(node.fmt, node.dtype.char, at, tuple(slots), chars,
                               b.stride_kind(stride),
                               0 if x.strides is None else b.param(x.offset),
                               b.param(node.shape[0]) if ell else 0,
                               b.param(node.width) if ell else 0))

    def map_gather(self, node: Gather, at: tuple) -> int:
        b = self.b
        ax = node.axis
        q = len(node.index.shape)
        iref = self.visit(node.index, at[ax:ax + q])
        length = b.param(node.child.shape[ax])
        c_at = (*at[:ax], ("g", iref, length, node.checked), *at[ax + q:])
        cref = self.visit(node.child, c_at)
        return b.add(ir.Gather(iref, cref, length))

    def map_remap(self, node: Remap, at: tuple) -> int:
        child = node.child
        self.b.reach(max(child.shape, default=0))  # (its affine positions index the child)
        c_at: list[Any] = []
        for k in range(len(child.shape)):
            if child.shape[k] == 1:
                c_at.append(0)
                continue
            terms = tuple((c, at[d]) for d, c in enumerate(node.coeffs[k]) if c and at[d] != 0)
            const = node.offsets[k]
            if const == 0 and len(terms) == 1 and terms[0][0] == 1:
                c_at.append(terms[0][1])
            else:
                c_at.append(("a", const, terms))
        return self.visit(child, tuple(c_at))

    def map_concat(self, node: Concat, at: tuple) -> int:
        b = self.b
        ax = node.axis
        pieces = node.pieces
        b.reach(node.shape[ax])  # (piece positions count along the joined axis)
        c = at[ax]
        if c == 0 or len(pieces) == 1:  # (a joined axis of length 1 has one piece)
            return self.visit(pieces[0], at)
        refs, bounds, kcs = [], [], []
        last = len(pieces) - 1
        for p, (piece, s) in enumerate(zip(pieces, node.starts)):
            n = piece.shape[ax]
            kc = 0 if n == 1 else ("k", c, 0 if s == 0 else b.param(s),
                                   None if p == last else b.param(n))
            refs.append(self.visit(piece, (*at[:ax], kc, *at[ax + 1:])))
            kcs.append(kc)
            if p:
                bounds.append(b.param(s))
        return b.add(ir.Concat(c, tuple(bounds), tuple(refs), self.flat_bounds(c, node, kcs)))

    def flat_bounds(self, c: Any, node: Concat, kcs: list) -> tuple | None:
        """Where pieces 1.. start in the flat loop over the output, if they tile it in order.

        That is when the joined axis is output dimension ``d`` and every output
        dimension before ``d`` has length 1: piece ``p`` is then the range
        ``[starts[p] * inner, starts[p + 1] * inner)`` of the flat C-order index
        (``inner`` the product of the later output dimensions).
        """
        b = self.b
        if c[0] != "r":
            return None
        inner = b.flat_inner(c[1])
        if inner is None:
            return None
        return (tuple(b.param(s * inner) for s in node.starts[1:]), tuple(kcs),
                tuple(b.stride_kind(s) for s in b.out_c))


def _squeezed(shape: tuple[int, ...]) -> tuple[int, ...]:
    return tuple(n for n in shape if n != 1)


class _Structure(Mapper):
    """What a node computes, up to length-1 axes (always at index 0).

    Views built around a reduction (``keepdims``, broadcasting against it)
    re-create its subtree with extra unit axes; squeezing them out lets the
    copies share one reduction.
    """

    def __init__(self) -> None:
        super().__init__()
        self.memo: dict[int, int] = {}
        # each distinct structure as a number: a node's tuple holds its children's
        # numbers, so hashing it never walks a shared subtree again (as nested tuples, a
        # DAG hashed as a tree, 2^depth)
        self.numbers: dict[tuple, int] = {}

    def __call__(self, node: Any, *args: Any) -> int:
        hit = self.memo.get(id(node))
        if hit is None:
            method = self.methods.get(type(node))
            # scalar arguments are data: never merged
            key = ("S", id(node)) if method is None else method(node)
            hit = self.memo[id(node)] = self.numbers.setdefault(key, len(self.numbers))
        return hit

    def map_leaf(self, node: Any) -> tuple:
        head = ("L", id(node.storage)) if type(node) is Leaf else ("I",)
        strides = tuple(st for st, n in zip(node.view_strides(), node.shape) if n != 1)
        return (*head, node.dtype.char, _squeezed(node.shape), strides, node.offset)

    map_iota = map_leaf

    def map_pointer(self, node: Pointer) -> tuple:
        leaf = node.leaf
        return ("P", id(leaf.storage), leaf.dtype.char, leaf.offset)

    def map_literal(self, node: Literal) -> tuple:
        return ("C", node.dtype.char, node.value.item())

    def map_apply(self, node: Any) -> tuple:
        fn = node.function.key if type(node) is not Apply else None
        n = len(node.shape)
        # where each argument's non-unit axes land among the node's non-unit axes
        kept = {d: k for k, d in enumerate(d for d in range(n) if node.shape[d] != 1)}
        args = tuple((tuple(kept[n - len(a.shape) + d] for d in range(len(a.shape))
                            if a.shape[d] != 1), self(a))
                     for a in node.args)
        return ("A", node.op, fn, node.loop_key, _squeezed(node.shape), args)

    map_user_call = map_apply

    def map_reduce(self, node: Reduce) -> tuple:
        child = node.child
        axes = tuple(sum(1 for d in range(a) if child.shape[d] != 1)
                     for a in node.axes if child.shape[a] != 1)
        return ("R", node.op, node.dtype.char, axes, self(child))

    def map_gather(self, node: Gather) -> tuple:  # with exact shapes: axes are not squeezed
        return ("G", node.axis, node.checked, node.child.shape, node.index.shape,
                self(node.child), self(node.index))

    def map_sparse(self, node: SparseProduct) -> tuple:
        return ("P", node.fmt, node.dtype.char, node.width,
                tuple(None if lf is None else self.map_leaf(lf)
                      for lf in (node.data, node.indices, node.indptr, node.x)))

    def map_remap(self, node: Remap) -> tuple:
        return ("M", node.shape, node.offsets, node.coeffs, node.child.shape, self(node.child))

    def map_concat(self, node: Concat) -> tuple:  # exact shapes, as for gathers
        return ("K", node.axis, node.shape, node.starts, tuple(self(p) for p in node.pieces))
