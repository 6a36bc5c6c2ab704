"""Walks of expression trees that evaluation and assignment share: nodes substituted
(:func:`_rebuild`), whether a write into a view of a buffer overwrites what the
expression still reads (:func:`reads_outside`, :func:`_reads_only_in_place`), whether it
has a checked gather (:func:`_may_fail`).  (Split from :mod:`fuseloop.evaluate`, which
imports them under these names for its importers.)
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from .expr.nodes import (
    Apply,
    Concat,
    Gather,
    Leaf,
    Node,
    Reduce,
    Remap,
    Storage,
    UserCall,
    c_strides,
)
from .expr.overlap import View, views_disjoint
from .expr.program import Target
from .splits import children as _children


def _rebuild(node: Node, replace: dict[int, Node], memo: dict[int, Node]) -> Node:
    """``node`` with the nodes named in ``replace`` (by id) substituted."""
    hit = replace.get(id(node))
    if hit is not None:
        return hit
    done = memo.get(id(node))
    if done is not None:
        return done
    # (the walks of the general path narrow with isinstance: UserCall is Apply's only
    # subclass, the other node classes have none)
    out: Node
    if isinstance(node, Apply):
        args = tuple(_rebuild(a, replace, memo) for a in node.args)
        if all(a is b for a, b in zip(args, node.args)):
            out = node
        elif isinstance(node, UserCall):
            out = UserCall(node.function, args, node.loop, node.shape)
        else:
            out = Apply(node.op, args, node.loop, node.shape)
    elif isinstance(node, Reduce):
        child = _rebuild(node.child, replace, memo)
        out = node if child is node.child else Reduce(
            node.op, child, node.axes, node.dtype, node.shape)
    elif isinstance(node, Gather):
        child = _rebuild(node.child, replace, memo)
        index = _rebuild(node.index, replace, memo)
        out = node if (child is node.child and index is node.index) else Gather(
            child, index, node.axis, node.checked)
    elif isinstance(node, Remap):
        child = _rebuild(node.child, replace, memo)
        out = node if child is node.child else Remap(
            child, node.shape, node.offsets, node.coeffs)
    elif isinstance(node, Concat):
        pieces = tuple(_rebuild(p, replace, memo) for p in node.pieces)
        same = all(a is b for a, b in zip(pieces, node.pieces))
        out = node if same else Concat(pieces, node.axis)
    else:
        out = node
    memo[id(node)] = out
    return out


def reads_outside(node: Node, storage: Storage, written: View, itemsize: int) -> bool:
    """True when ``node`` reads no element of ``storage`` that the view ``written``
    (of elements of ``itemsize`` bytes) covers.  Every read of a buffer is through a
    leaf whose view covers what its parents read, so checking the leaves suffices."""
    seen: set[int] = set()
    stack = [node]
    while stack:
        n = stack.pop()
        if id(n) in seen or storage not in n.storages:
            continue
        seen.add(id(n))
        if type(n) is Leaf:
            if n.dtype.itemsize != itemsize or not views_disjoint(
                    written, (n.shape, n.view_strides(), n.offset)):
                return False
        else:
            stack.extend(_children(n))
    return True


def _may_fail(node: Node) -> bool:
    """Whether ``node`` has a gather whose indices are checked (and may be out of range)."""
    # (each node once: a DAG's shared subtrees, walked as a tree, cost 2^depth)
    seen: set[int] = set()
    stack = [node]
    while stack:
        n = stack.pop()
        if isinstance(n, Gather):
            if n.checked:
                return True
            kids: Any = (n.child, n.index)
        elif isinstance(n, Remap | Reduce):
            kids = (n.child,)
        elif isinstance(n, Apply):
            kids = n.args
        elif isinstance(n, Concat):
            kids = n.pieces
        else:
            continue
        for k in kids:
            if id(k) not in seen:
                seen.add(id(k))
                stack.append(k)
    return False


def _reads_only_in_place(roots: Sequence[Node], target: Target,
                         out_shape: tuple[int, ...], itemsize: int) -> bool:
    """True when every read of the target's buffer is of the element being written,
    or of elements that are not written at all (``A[i, j] += A[i, j - 1]``)."""
    want = target.strides if target.strides is not None else c_strides(out_shape)
    written = (out_shape, want, target.offset)
    ok = [True]
    seen: set[int] = set()

    def walk(node: Node, top: bool) -> None:
        if id(node) in seen or target.storage not in node.storages:
            return
        seen.add(id(node))
        if isinstance(node, Leaf):
            same = (top and node.shape == out_shape and node.view_strides() == want
                    and node.offset == target.offset)
            if not same and (node.dtype.itemsize != itemsize or not views_disjoint(
                    written, (node.shape, node.view_strides(), node.offset))):
                ok[0] = False
        elif isinstance(node, Apply):
            for a in node.args:
                walk(a, top and a.shape == out_shape)
        elif not reads_outside(node, target.storage, written, itemsize):
            # a reduction, gather or remap may read any element of its operand at any
            # time of the launch: safe only when none of them is written
            ok[0] = False

    for r in roots:
        walk(r, r.shape == out_shape)
    return ok[0]
