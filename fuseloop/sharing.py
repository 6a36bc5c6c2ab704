"""One temporary per value within an evaluation, whatever views reach it.

A view of an expression is pushed down to its leaves (:mod:`fuseloop.expr.views`), so
``d.T`` of ``d = x - x.mean(axis=0)`` holds a reduction of its own: the column means
again, over a transposed view of ``x``.  Nodes that run first as kernels of their own
(reductions a kernel cannot fuse, a reduction's operand, a contraction's producers)
would then run once per view that reaches them: the means twice in ``d.T @ d``,
``Q @ K.T`` three times in ``softmax(Q @ K.T) @ V``.

So every evaluation keeps a *scope* (:func:`scope`; nested evaluations, as
materialising runs them, share their outermost one's) of what it has materialised,
keyed by the node's canonical form (:func:`canonical`): the node seen through the
permutation of its axes that orders them by how they stride through its inputs, unit
axes dropped, so two views of one value that only transpose, broadcast or insert unit
axes have the same form.  Equal forms (equal signatures over the same buffers and
scalar nodes) are equal values: the second is read from the first one's buffer through
a view, and a node whose reductions are all found there is computed inline by its
consumer (:meth:`Scope.materialise`).

A kernel also computes a reduction it keeps more than once where the reduction is
broadcast along an output axis others vary along (``x.T @ x + x.sum(0)``: the column
sums once per output row): :func:`recomputed` says which run first instead.
"""

from __future__ import annotations

import math
import threading
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager

from .expr.nodes import Apply, Iota, Leaf, Literal, Node, Reduce, Scalar, SparseProduct
from .expr.views import affine_view
from .runtime.devices import Device
from .splits import children

#: share materialised values between the views of one evaluation (False: each view is
#: computed on its own, as before; clear the caches after changing it, as run plans
#: remember what was decided)
SHARE_VIEWS = True
# leaf reads a node's walk looks at to order its axes (a larger tree is shared only
# with a copy of the same view)
MAX_READS = 512

_local = threading.local()


class Scope:
    """What one evaluation has materialised, by canonical key (see the module's
    docstring): each entry a leaf of the canonical shape (a view of the buffer).
    A value is keyed when a node of its element count is looked up (most never are)."""

    __slots__ = ("entries", "keep", "unkeyed")

    def __init__(self) -> None:
        self.entries: dict[tuple, Leaf] = {}
        # element count -> values not keyed yet: (node, its leaf)
        self.unkeyed: dict[int, list[tuple[Node, Leaf]]] = {}
        self.keep: list[Node] = []  # (the keyed nodes stay alive: their ids stay unique)

    def lookup(self, node: Node) -> Node | None:
        """``node``'s value as a view of what the scope holds, or None."""
        size = math.prod(node.shape)
        if size not in self.unkeyed:
            return None
        for held, leaf in self.unkeyed[size]:
            self._key(held, leaf)
        self.unkeyed[size] = []
        found = canonical(node)
        if found is None:
            return None
        key, order, _ = found
        hit = self.entries.get(key)
        return None if hit is None else _from_canonical(hit, node.shape, order)

    def store(self, node: Node, leaf: Leaf) -> None:
        """Remember ``leaf`` (``node``'s value, of its shape)."""
        self.unkeyed.setdefault(math.prod(node.shape), []).append((node, leaf))

    def _key(self, node: Node, leaf: Leaf) -> None:
        found = canonical(node)
        if found is None:
            return
        key, order, canon = found
        if key not in self.entries:
            self.entries[key] = _to_canonical(leaf, canon.shape, order)
            self.keep.append(canon)

    def cached_parts(self, node: Node) -> dict[int, Node]:
        """The nodes inside ``node`` (not itself) that the scope holds, by id: their
        views (the outermost of nested ones)."""
        out: dict[int, Node] = {}
        seen: set[int] = set()
        stack = list(children(node))
        while stack:
            n = stack.pop()
            if id(n) in seen or not n.fancy:
                continue
            seen.add(id(n))
            hit = self.lookup(n)
            if hit is not None:
                out[id(n)] = hit
            else:
                stack.extend(children(n))
        return out

    def materialise(self, key_node: Node, node: Node, device: Device,
                    materialise: Callable[[Node, Device], Leaf],
                    rebuild: Callable[[Node, dict[int, Node], dict[int, Node]], Node]) -> Node:
        """The value of ``key_node`` (whose form ``node`` computes: ``key_node`` with
        what ran before it substituted): a view of what the scope holds, else ``node``
        with the parts the scope holds read from there, computed by ``materialise``
        (or left to its consumer when nothing else in it needs a kernel)."""
        if not SHARE_VIEWS:
            return materialise(node, device)
        hit = self.lookup(key_node)
        if hit is not None:
            return hit
        if self.unkeyed:
            parts = self.cached_parts(node)
            if parts:
                node = rebuild(node, parts, {})
                if not node.fancy:  # (elementwise over held values: inlined by its reader)
                    return node
        leaf = materialise(node, device)
        self.store(key_node, leaf)
        return leaf


def active() -> Scope | None:
    """The scope of this thread's evaluation in progress, if any."""
    return getattr(_local, "scope", None)


@contextmanager
def scope() -> Iterator[Scope]:
    """A new scope for this thread's evaluation (and the evaluations it nests)."""
    saved = getattr(_local, "scope", None)
    _local.scope = s = Scope()
    try:
        yield s
    finally:
        _local.scope = saved


# {{{ canonical forms


def _axis_reads(node: Node) -> list[list[int]] | None:
    """Per axis of ``node``: the stride along it of each leaf (and element index) read,
    in the order of a walk of the tree; None where the walk meets a node it cannot
    see through (a gather, a remap, a concatenation) or too many reads."""
    cols: list[list[int]] = [[] for _ in node.shape]
    budget = [MAX_READS]

    def walk(nd: Node, amap: tuple[int, ...]) -> bool:
        # amap: per axis of nd, the axis of ``node`` it runs along (-1: none)
        budget[0] -= 1
        if budget[0] < 0:
            return False
        if isinstance(nd, Leaf | Iota):
            for c in cols:
                c.append(0)
            for a, s in zip(amap, nd.view_strides()):
                if a >= 0:
                    cols[a][-1] += s
            return True
        if isinstance(nd, Scalar | Literal):
            return True
        if isinstance(nd, Apply):  # (UserCall too: elementwise in its arguments)
            m = len(nd.shape)
            for arg in nd.args:
                r = len(arg.shape)
                sub = tuple(amap[m - r + k] if n != 1 else -1 for k, n in enumerate(arg.shape))
                if not walk(arg, sub):
                    return False
            return True
        if isinstance(nd, Reduce):
            child = nd.child
            kept = [d for d in range(len(child.shape)) if d not in nd.axes]
            cmap = [-1] * len(child.shape)
            if len(kept) == len(nd.shape):
                pairs = zip(kept, range(len(kept)))
            else:  # (keepdims: the non-unit axes correspond in order)
                pairs = zip([d for d in kept if child.shape[d] != 1],
                            [k for k, n in enumerate(nd.shape) if n != 1])
            for ca, ka in pairs:
                cmap[ca] = amap[ka]
            return walk(child, tuple(cmap))
        return False

    return cols if walk(node, tuple(range(len(node.shape)))) else None


def canonical(node: Node) -> tuple[tuple, tuple[int, ...], Node] | None:
    """``(key, order, form)``: ``node``'s canonical form, the axes of ``node`` it runs
    along in order (unit axes left out) and its key; None without a signature.

    Axes are ordered by the strides of the walk's reads along them, largest first (a
    C-order result keeps its order); axes with equal reads and lengths are
    interchangeable, so the order makes equal forms of views that only permute axes.
    Where the walk cannot see every read, the form is the node itself (shared with
    copies of the same view only)."""
    if not node.sig or isinstance(node, Leaf | SparseProduct):
        return None
    shape = node.shape
    cols = _axis_reads(node)
    if cols is None:
        order, form, tag = tuple(range(len(shape))), node, "same"
    else:
        order = tuple(sorted((k for k, n in enumerate(shape) if n != 1),
                             key=lambda k: (cols[k], shape[k]), reverse=True))
        tag = "canonical"
        if order == tuple(range(len(shape))):
            form = node
        else:
            coeffs = tuple(tuple(1 if o == k else 0 for o in order) for k in range(len(shape)))
            form = affine_view(node, tuple(shape[k] for k in order), (0,) * len(shape), coeffs)
    if not form.sig or form.operands is None:
        return None
    return (tag, form.sig, form.offs, form.shape, tuple(map(id, form.operands))), order, form


def _to_canonical(leaf: Leaf, shape: tuple[int, ...], order: tuple[int, ...]) -> Leaf:
    """``leaf`` (a node's value) seen in the canonical form's shape."""
    if order == tuple(range(len(leaf.shape))):
        return leaf
    coeffs = tuple(tuple(1 if o == k else 0 for o in order) for k in range(len(leaf.shape)))
    out = affine_view(leaf, shape, (0,) * len(leaf.shape), coeffs)
    assert type(out) is Leaf
    return out


def _from_canonical(leaf: Leaf, shape: tuple[int, ...], order: tuple[int, ...]) -> Leaf:
    """The held canonical ``leaf`` seen as the node of ``shape`` whose axes ``order``
    names (its unit axes: stride 0)."""
    if order == tuple(range(len(shape))) and leaf.shape == shape:
        return leaf
    coeffs = tuple(tuple(1 if d == o else 0 for d in range(len(shape))) for o in order)
    out = affine_view(leaf, shape, (0,) * len(order), coeffs)
    assert type(out) is Leaf
    return out

# }}}


def materialise_pending(pending: Sequence[Node], device: Device,
                        materialise: Callable[[Node, Device], Leaf],
                        rebuild: Callable[[Node, dict[int, Node], dict[int, Node]], Node]
                        ) -> dict[int, Node]:
    """Run each of ``pending`` (reductions, sparse products, a reduction's operand)
    into a buffer; return what replaces each (its leaf, a view of a value the
    evaluation holds, or an expression of such) by the node's id.

    A pending reduction nested in another (softmax's maximum inside its sum)
    runs first, and the outer one reads its result instead of computing it again.
    """
    by_id = {id(p): p for p in pending}
    replace: dict[int, Node] = {}
    shared = active()

    def nested(node: Node, acc: list[Node], seen: set[int]) -> None:
        if id(node) in seen or not node.fancy:
            return
        seen.add(id(node))
        hit = by_id.get(id(node))  # (``node`` itself, as a pending reduction)
        if hit is not None:
            acc.append(hit)
        for c in children(node):
            nested(c, acc, seen)

    def run_one(p: Node) -> None:
        if id(p) in replace:
            return
        inner: list[Node] = []
        if not isinstance(p, SparseProduct):  # (a sparse product's operands are leaves)
            for c in children(p):
                nested(c, inner, set())
        for q in inner:
            run_one(q)
        node = rebuild(p, replace, {}) if inner else p
        replace[id(p)] = materialise(node, device) if shared is None else \
            shared.materialise(p, node, device, materialise, rebuild)

    for p in pending:
        run_one(p)
    return replace


def recomputed(kept: Sequence[tuple[Node, frozenset[int]]]) -> list[Node]:
    """Of the reductions a kernel keeps (each with the output axes it varies along),
    those it would compute more than once: it computes them once per row of the
    axes any of them varies along, so one varying along fewer axes than another is
    computed again for each step along the others.  Those run first, but for the
    reductions of the most elements (their pattern of axes), and for any of these
    that another view of one running first computes (read from there)."""
    if not SHARE_VIEWS:
        return []
    classes: dict[frozenset[int], list[Node]] = {}
    for node, dims in kept:
        classes.setdefault(dims, []).append(node)
    if len(classes) < 2:
        return []
    best = max(classes.values(), key=lambda group: max(math.prod(r.shape) for r in group))
    out = [r for group in classes.values() if group is not best for r in group]
    keys = {found[0] for found in map(canonical, out) if found is not None}
    for r in best:
        found = canonical(r)
        if found is not None and found[0] in keys:
            out.append(r)
    return out


def varying_axes(node: Node, rank: int) -> frozenset[int]:
    """The axes of an output of ``rank`` axes that ``node`` (broadcast to it from the
    right) varies along."""
    r = len(node.shape)
    return frozenset(rank - r + k for k, n in enumerate(node.shape) if n != 1)


__all__ = ["SHARE_VIEWS", "Scope", "active", "canonical", "materialise_pending",
           "recomputed", "scope", "varying_axes"]
