"""Index remapping without copies: affine views pushed down to the leaves.

A view maps each index ``new`` of the result to an index of the viewed node:
``old[k] = offsets[k] + sum(coeffs[k][d] * new[d])``.  Slices, transposes,
broadcasts, flips, diagonals and inserted or removed unit axes are all of
this form.  Elementwise operations commute with such maps, so a view of an
expression becomes the same expression over views of its leaves, and a view of
a buffer is just new strides and a new offset: the consuming kernel reads the
right elements and nothing is copied.  Reductions take the map into their
child; the few nodes it cannot enter are wrapped in a :class:`Remap`.

A view of a :class:`Concat` whose map moves along the joined axis with at most
one result axis (a slice, a flip, a broadcast, a fixed index) becomes a
concatenation of views of the pieces it touches, along that result axis; any
other map (a map mixing result axes into the joined one) is a :class:`Remap`.
"""

from __future__ import annotations

import math
from bisect import bisect_right
from collections.abc import Sequence
from functools import lru_cache

from .. import caches as _caches
from .nodes import (
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
    Scalar,
    SparseProduct,
    UserCall,
)
from .templates import built, operand_pattern

AffineMap = tuple[tuple[int, ...], tuple[tuple[int, ...], ...]]  # (offsets, coeffs)


def affine_view(node: Node, shape: tuple[int, ...], offsets: Sequence[int],
                coeffs: Sequence[Sequence[int]]) -> Node:
    """``node`` seen through the affine map, as a node of ``shape``."""
    shape = tuple(shape)
    if type(node) is Leaf:  # the commonest case (a view of a buffer): new strides at once
        return _leaf_view(node, shape, offsets, coeffs)
    off, co = tuple(offsets), tuple(map(tuple, coeffs))  # (map: no generator frame)
    if node.sig:  # (an expression: pushed once per structure and map, then copied)
        key = ("view", node.sig, operand_pattern(node.operands), node.offs, shape, off, co)
        return built(key, node, lambda: _pushed(node, shape, off, co))
    return _pushed(node, shape, off, co)


def _pushed(node: Node, shape: tuple[int, ...], off: tuple[int, ...],
            coeffs: tuple[tuple[int, ...], ...]) -> Node:
    """:func:`affine_view` of a node other than a leaf."""
    out = _push(node, shape, off, coeffs, {})
    if out.shape != shape:
        # a reduction broadcast along new axes: an explicit elementwise broadcast
        out = Apply("positive", (out,), (out.dtype, out.dtype), shape)
    return out


def _push(node: Node, shape: tuple[int, ...], off: tuple[int, ...],
          coeffs: tuple[tuple[int, ...], ...], memo: dict[tuple, Node]) -> Node:
    """``node`` through the map; the result may keep length 1 where ``shape`` broadcasts."""
    key = (id(node), shape, off, coeffs)  # (a concatenation pushes pieces at other shapes)
    hit = memo.get(key)
    if hit is not None:
        return hit
    m = len(shape)
    result: Node
    # (isinstance narrows for mypy: UserCall is Apply's only subclass, the other node
    # classes have none; operations first: most pushed nodes are)
    if isinstance(node, Apply):
        result = _push_apply(node, shape, off, coeffs, memo)
    elif isinstance(node, Leaf):
        result = _leaf_view(node, shape, off, coeffs)
    elif isinstance(node, Iota):
        strides = node.view_strides()
        offset = node.offset + sum(s * o for s, o in zip(strides, off))
        new_strides = tuple(sum(strides[k] * coeffs[k][d] for k in range(len(strides)))
                            for d in range(m))
        result = Iota(shape, node.dtype, new_strides, offset)
    elif isinstance(node, Scalar | Literal | Pointer):
        result = node
    elif isinstance(node, Reduce):
        # kept axes follow the map; reduced axes move to the end, unchanged.
        # Axes along which the map does not move stay length 1: the reduction
        # is computed once and broadcast by its consumer, not recomputed.
        red = node.axes
        child = node.child
        r = len(red)
        # the map's rows as rows of the kept axes (a keepdims result has unit axes more)
        kept_rows = node.kept_index(tuple(zip(off, coeffs)))
        off = tuple(0 if k == 0 else k[0] for k in kept_rows)
        coeffs = tuple((0,) * m if k == 0 else k[1] for k in kept_rows)
        shape = tuple(1 if all(row[d] == 0 for row in coeffs) else n
                      for d, n in enumerate(shape))
        c_shape = shape + tuple(child.shape[a] for a in red)
        c_off, c_coeffs = [], []
        kept = 0
        for k in range(len(child.shape)):
            if k in red:
                t = red.index(k)
                c_off.append(0)
                c_coeffs.append(tuple(1 if d == m + t else 0 for d in range(m + r)))
            else:
                c_off.append(off[kept])
                c_coeffs.append(coeffs[kept] + (0,) * r)
                kept += 1
        new_child = _push(child, c_shape, tuple(c_off), tuple(c_coeffs), memo)
        result = Reduce(node.op, new_child, tuple(range(m, m + r)), node.dtype)
    elif isinstance(node, Remap):
        # compose the two maps
        o2, c2 = node.offsets, node.coeffs
        n_inner = len(node.shape)
        new_off = tuple(o2[k] + sum(c2[k][j] * off[j] for j in range(n_inner))
                        for k in range(len(o2)))
        new_coeffs = tuple(tuple(sum(c2[k][j] * coeffs[j][d] for j in range(n_inner))
                                 for d in range(m)) for k in range(len(o2)))
        result = Remap(node.child, shape, new_off, new_coeffs)
    elif isinstance(node, Concat):
        result = _push_concat(node, shape, off, coeffs, memo)
    else:
        assert type(node) is Gather or type(node) is SparseProduct, type(node)
        result = Remap(node, shape, off, coeffs)
    memo[key] = result
    return result


def _push_apply(node: Apply, shape: tuple[int, ...], off: tuple[int, ...],
                coeffs: tuple[tuple[int, ...], ...], memo: dict[tuple, Node]) -> Node:
    """:func:`_push` of an elementwise operation: its arguments through the map (each
    aligned from the right, its unit axes broadcast), the operation over them."""
    n = len(node.shape)
    m = len(shape)
    # (an argument of the operation's shape without unit axes takes the map as it is:
    # the common case, worked out once)
    whole = 1 not in node.shape
    args = []
    for a in node.args:
        ash = a.shape
        if not ash:  # (scalars, literals, pointers: unchanged by any map)
            args.append(_push(a, shape, (), (), memo))
            continue
        if whole and ash == node.shape:
            args.append(_push(a, shape, off, coeffs, memo))
            continue
        r = len(ash)
        a_off = tuple(off[n - r + k] if ash[k] != 1 else 0 for k in range(r))
        a_coeffs = tuple(coeffs[n - r + k] if ash[k] != 1 else (0,) * m for k in range(r))
        args.append(_push(a, shape, a_off, a_coeffs, memo))
    if type(node) is UserCall:
        return UserCall(node.function, tuple(args), node.loop, shape)
    return Apply(node.op, tuple(args), node.loop, shape, node.loop_key)


def _leaf_view(node: Leaf, shape: tuple[int, ...], off: Sequence[int],
               coeffs: Sequence[Sequence[int]]) -> Leaf:
    """The leaf ``node`` through the map: its strides and offset composed with it."""
    strides = node.view_strides()
    offset = node.offset
    for s, o in zip(strides, off):
        offset += s * o
    new_strides = [0] * len(shape)
    for s, row in zip(strides, coeffs):
        if s:
            for d, c in enumerate(row):
                if c:
                    new_strides[d] += s * c
    return Leaf(node.storage, node.dtype, shape, tuple(new_strides), offset)


def concat_node(pieces: Sequence[Node], axis: int) -> Node:
    """``pieces`` joined along ``axis``: a :class:`Concat`, or the piece when only one is left.

    Empty pieces are dropped (no element reads them); pieces that keep length 1
    where the others are longer (a pushed-down reduction) are broadcast first.
    """
    kept = [p for p in pieces if p.shape[axis]] or [pieces[0]]
    full = [max(p.shape[d] for p in kept) for d in range(len(kept[0].shape))]
    out = []
    for p in kept:
        want = (*full[:axis], p.shape[axis], *full[axis + 1:])
        if p.shape != want:
            p = Apply("positive", (p,), (p.dtype, p.dtype), want)
        out.append(p)
    return out[0] if len(out) == 1 else Concat(tuple(out), axis)


def _push_concat(node: Concat, shape: tuple[int, ...], off: tuple[int, ...],
                 coeffs: tuple[tuple[int, ...], ...], memo: dict[tuple, Node]) -> Node:
    """A view of a concatenation: views of the pieces, concatenated along the moving axis."""
    ax = node.axis
    row = coeffs[ax]
    moving = [d for d, c in enumerate(row) if c]
    if len(moving) > 1:
        return Remap(node, shape, off, coeffs)  # rare (never from the public views)
    o = off[ax]
    if not moving:  # one position along the joined axis: one piece
        p = bisect_right(node.starts, o) - 1
        sub = (*off[:ax], o - node.starts[p], *off[ax + 1:])
        return _push(node.pieces[p], shape, sub, coeffs, memo)
    d = moving[0]
    k, n = row[d], shape[d]
    ends = (*node.starts[1:], node.shape[ax])
    parts = []
    for piece, s, e in zip(node.pieces, node.starts, ends):
        # the positions t along result axis d whose o + k*t falls in [s, e)
        if k > 0:
            lo, hi = -(-(s - o) // k), -(-(e - o) // k)
        else:
            lo, hi = (o - e) // -k + 1, (o - s) // -k + 1
        lo, hi = max(lo, 0), min(hi, n)
        if lo >= hi:
            continue
        sub_shape = (*shape[:d], hi - lo, *shape[d + 1:])
        sub_off = tuple(off[r] + coeffs[r][d] * lo - (s if r == ax else 0)
                        for r in range(len(off)))
        parts.append((lo, _push(piece, sub_shape, sub_off, coeffs, memo)))
    if not parts:  # an empty view: no element reads any piece
        return _push(node.pieces[0], shape, (*off[:ax], 0, *off[ax + 1:]), coeffs, memo)
    parts.sort(key=lambda x: x[0])  # a negative step visits the pieces backwards
    return concat_node([p for _, p in parts], d)


# {{{ maps for the common views


@lru_cache(maxsize=1024)  # (pure; its tuples are never changed)
def identity_map(n: int) -> AffineMap:
    return (0,) * n, tuple(tuple(1 if d == k else 0 for d in range(n)) for k in range(n))


@lru_cache(maxsize=1024)  # (pure; its tuples are never changed)
def transpose_map(perm: Sequence[int]) -> AffineMap:
    n = len(perm)
    coeffs = [[0] * n for _ in range(n)]
    for d, k in enumerate(perm):
        coeffs[k][d] = 1
    return (0,) * n, tuple(tuple(r) for r in coeffs)


@lru_cache(maxsize=1024)  # (pure; its tuples are never changed)
def broadcast_map(old: tuple[int, ...], new: tuple[int, ...]) -> AffineMap:
    n, r = len(new), len(old)
    coeffs = tuple(tuple(1 if (d == n - r + k and old[k] != 1) else 0 for d in range(n))
                   for k in range(r))
    return (0,) * r, coeffs


@lru_cache(maxsize=4096)  # (a pure function of three tuples, called per reshape)
def nocopy_reshape_strides(shape: tuple[int, ...], strides: tuple[int, ...],
                           new_shape: tuple[int, ...]) -> tuple[int, ...] | None:
    """Strides that view ``shape``/``strides`` as ``new_shape`` without a copy, or None.

    Walks both shapes in chunks of equal element counts; within a chunk the old
    axes must be contiguous with each other (as numpy requires).
    """
    if math.prod(shape) != math.prod(new_shape):
        return None
    if math.prod(shape) == 0:
        return tuple(0 for _ in new_shape)
    old = [(n, s) for n, s in zip(shape, strides) if n != 1]
    new_strides = [0] * len(new_shape)
    oi = ni = 0
    new_idx = [d for d, n in enumerate(new_shape) if n != 1]
    while oi < len(old) and ni < len(new_idx):
        o_start, n_start = oi, ni
        o_prod, n_prod = old[oi][0], new_shape[new_idx[ni]]
        while o_prod != n_prod:
            if o_prod < n_prod:
                oi += 1
                o_prod *= old[oi][0]
            else:
                ni += 1
                n_prod *= new_shape[new_idx[ni]]
        for k in range(o_start, oi):
            if old[k][1] != old[k + 1][1] * old[k + 1][0]:
                return None
        stride = old[oi][1]
        for k in range(ni, n_start - 1, -1):
            new_strides[new_idx[k]] = stride
            stride *= new_shape[new_idx[k]]
        oi += 1
        ni += 1
    return tuple(new_strides)


def reshape_view(node: Node, new_shape: tuple[int, ...]) -> Node | None:
    """``node`` reshaped without copying, or None when some leaf cannot be viewed so."""
    if node.shape == new_shape:
        return node
    if isinstance(node, Leaf | Iota):
        strides = nocopy_reshape_strides(node.shape, node.view_strides(), new_shape)
        if strides is None:
            return None
        if isinstance(node, Leaf):
            return Leaf(node.storage, node.dtype, new_shape, strides, node.offset)
        return Iota(new_shape, node.dtype, strides, node.offset)
    # (a 0-d scalar or literal gains its unit axes through the view at the end)
    if isinstance(node, Apply):
        if not node.sig:
            return _reshape_apply(node, new_shape)
        key = ("reshape", node.sig, operand_pattern(node.operands), node.offs, new_shape)
        return built(key, node, lambda: _reshape_apply(node, new_shape))
    if isinstance(node, Concat):
        v = _reshape_concat(node, new_shape)
        if v is not None:
            return v
    # only unit axes can be added to or removed from other nodes without a copy
    if tuple(n for n in node.shape if n != 1) == tuple(n for n in new_shape if n != 1):
        src = [d for d, n in enumerate(node.shape) if n != 1]
        dst = [d for d, n in enumerate(new_shape) if n != 1]
        rows = [[0] * len(new_shape) for _ in node.shape]
        for s, d in zip(src, dst):
            rows[s][d] = 1
        return affine_view(node, new_shape, (0,) * len(node.shape), rows)
    return None


def _reshape_apply(node: Apply, new_shape: tuple[int, ...]) -> Node | None:
    """:func:`reshape_view` of an elementwise operation: of its arguments."""
    args = []
    for a in node.args:
        if a.shape != node.shape and a.shape != ():
            off, coeffs = broadcast_map(a.shape, node.shape)
            a = _push(a, node.shape, off, tuple(coeffs), {})
            if a.shape != node.shape:
                return None  # a broadcast reduction: its result must be computed first
        v = reshape_view(a, new_shape) if a.shape != () else a
        if v is None:
            return None
        args.append(v)
    if isinstance(node, UserCall):
        return UserCall(node.function, tuple(args), node.loop, new_shape)
    return Apply(node.op, tuple(args), node.loop, new_shape)


def _reshape_concat(node: Concat, new_shape: tuple[int, ...]) -> Node | None:
    """A reshape that keeps the joined axis whole: the pieces reshaped, concatenated again.

    It needs a result axis ``d`` with the axes before it holding exactly the
    axes before the joined one, and ``new_shape[d]`` the joined axis times a
    factor ``q`` of what follows it (``(n, m)`` along 0 -> ``(n*m,)``).
    """
    ax, shape = node.axis, node.shape
    if not math.prod(shape):
        return None
    outer, inner = math.prod(shape[:ax]), math.prod(shape[ax + 1:])
    acc = 1
    for d, n in enumerate(new_shape):
        if acc == outer:
            rest = math.prod(new_shape[d + 1:])
            if inner % rest == 0 and n == shape[ax] * (inner // rest):
                q = inner // rest
                pieces = []
                for p in node.pieces:
                    v = reshape_view(p, (*new_shape[:d], p.shape[ax] * q, *new_shape[d + 1:]))
                    if v is None:
                        return None
                    pieces.append(v)
                return concat_node(pieces, d)
        acc *= n
        if acc > outer:
            break
    return None

# }}}


_caches.register_function("expr.views.nocopy_reshape_strides", nocopy_reshape_strides)
for _f in (identity_map, transpose_map, broadcast_map):
    _caches.register_function(f"expr.views.{_f.__name__}", _f)
