"""What the host path's evaluations read, measured on an expression's tree and kept per
structure signature (:mod:`fuseloop.host_path` asks before it takes an evaluation):
the most elements a reduction, remap or gather reads, how many nodes it computes, and
whether it reads a complex value.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

from . import caches as _caches
from .expr.nodes import (
    Apply,
    Concat,
    Gather,
    Leaf,
    Literal,
    Node,
    Pointer,
    Reduce,
    Remap,
    Scalar,
    SparseProduct,
    per_signature,
)

_size = math.prod


# structure signature -> the most elements one reduction, remap or gather of it reads
# (see _largest_read): a signature fixes every node's shape, so this is its answer
_reads: dict[int, int] = {}
READS_MAX = 4096
_FOREIGN = (Pointer, SparseProduct)


def _largest_read(node: Node) -> int:
    """The most elements an input of a reduction (or a computed input of a remap or
    gather) in ``node``'s tree has; 0 for an elementwise tree, whose every node is no
    larger than its root.  A node never computed here counts as too large."""
    most = 0
    stack = [node]
    seen: set[int] = set()  # (a shared subtree once: as a tree, a DAG costs 2^depth)
    while stack:
        n: Any = stack.pop()
        cls = type(n)
        if cls is Reduce:
            kids: Sequence[Node] = (n.child,)
            most = max(most, _size(n.child.shape))
        elif cls is Remap or cls is Gather:
            kids = (n.child,) if cls is Remap else (n.child, n.index)
            for k in kids:
                if type(k) is not Leaf:
                    most = max(most, _size(k.shape))
        elif cls is Apply:
            kids = n.args
        elif cls is Concat:
            kids = n.pieces
        elif isinstance(n, _FOREIGN):
            return 1 << 62
        else:
            continue
        for k in kids:
            if k.fancy and id(k) not in seen:  # (elementwise subtrees: no larger)
                seen.add(id(k))
                stack.append(k)
    return most


def small_reads(roots: Sequence[Node]) -> bool:
    """Whether no reduction, remap or gather in ``roots`` reads more than the host
    path's ``HOST_MAX_WORK`` elements (what it computes; a small result of a large
    input, ``X.sum(axis=1)``, is the kernels' work).  Asked before the device's queue
    is finished: the answer is known from the tree, once per signature."""
    limit = _host.HOST_MAX_WORK
    for r in roots:
        if not r.fancy:
            continue
        if per_signature(_reads, r, _largest_read, READS_MAX) > limit:
            return False
    return True



# structure signature -> how many computed nodes it has (see tracks_uses)
_computed: dict[int, int] = {}


def _walk(root: Node, stop_kinds: str = "") -> int:
    """How many computed nodes ``root``'s tree has (a shared one counted once); -1 as
    soon as a node reached (a leaf, scalar or literal too) has a dtype of a kind in
    ``stop_kinds``.  The walk of :func:`tracks_uses` (its node count) and :func:`_has_complex` (the
    rule is a string, not a function: no call per node)."""
    seen: set[int] = set()
    stack = [root]
    while stack:
        node: Any = stack.pop()
        if stop_kinds and node.dtype.kind in stop_kinds:
            return -1
        cls = type(node)
        if cls is Leaf or cls is Scalar or cls is Literal or id(node) in seen:
            continue
        seen.add(id(node))
        if cls is Apply:
            stack.extend(node.args)
        elif cls is Reduce or cls is Remap:
            stack.append(node.child)
        elif cls is Gather:
            stack.append(node.child)
            stack.append(node.index)
        elif cls is Concat:
            stack.extend(node.pieces)
    return len(seen)


def tracks_uses(roots: Sequence[Node], size: int) -> bool:
    """Whether an evaluation of ``size`` output elements lets go of (or computes into)
    each value once read (see the host path's ``TRACK_USES_AT``): only where its
    temporaries together are many elements (``TRACK_USES_WORK``); counting the readers
    costs more than a few small temporaries do.  Node counts kept per signature."""
    if size < _host.TRACK_USES_AT:
        return False
    n = 0
    for r in roots:
        n += per_signature(_computed, r, _walk, READS_MAX)
    return size * n >= _host.TRACK_USES_WORK


# structure signature -> whether it reads or computes a complex value (see reads_complex)
_complexes: dict[int, int] = {}


def _has_complex(node: Node) -> int:
    return 1 if _walk(node, "c") < 0 else 0


def reads_complex(roots: Sequence[Node]) -> bool:
    """Whether ``roots`` read or compute a complex value (the host path's limit is
    then its ``COMPLEX_MAX_WORK``); kept per signature."""
    for r in roots:
        if per_signature(_complexes, r, _has_complex, READS_MAX):
            return True
    return False


# structure signature -> the bytes its cheap elementwise work moves (see cheap_work)
_moved: dict[int, int] = {}
#: operations whose numpy loops move memory more than they compute (one pass over
#: their operands, no division, no function): their cost is the bytes they touch
CHEAP_OPS = frozenset((
    "add", "subtract", "multiply", "negative", "positive", "absolute", "square", "cast",
    "minimum", "maximum", "fmin", "fmax", "where", "equal", "not_equal", "less",
    "less_equal", "greater", "greater_equal", "logical_and", "logical_or", "logical_xor",
    "logical_not", "bitwise_and", "bitwise_or", "bitwise_xor", "invert"))
_COSTLY = 1 << 62


def _bytes_moved(root: Node) -> int:
    """The bytes ``root``'s elementwise tree reads and writes: each leaf's elements
    and each operation's result (a shared node once); a node that is not a cheap
    operation of its operands (a reduction, a remap, a division, a function) counts
    as too costly."""
    total = 0
    seen: set[int] = set()
    stack = [root]
    while stack:
        node: Any = stack.pop()
        if id(node) in seen:
            continue
        seen.add(id(node))
        cls = type(node)
        total += _size(node.shape) * node.dtype.itemsize
        if cls is Apply and node.op in CHEAP_OPS:
            stack.extend(node.args)
        elif cls is not Leaf and cls is not Scalar and cls is not Literal:
            return _COSTLY
    return total


def cheap_work(roots: Sequence[Node]) -> bool:
    """Whether ``roots`` are cheap elementwise work (:data:`CHEAP_OPS` only) touching at
    most the host path's ``CHEAP_MAX_BYTES`` bytes, counted per signature: numpy's
    single pass over them costs less than a kernel's launch even beyond
    ``HOST_MAX_WORK`` elements (mandelbrot2's ``np.logical_not(I, I)`` on 40000
    booleans: a kernel each iteration)."""
    limit = _host.CHEAP_MAX_BYTES
    total = 0
    for r in roots:
        total += per_signature(_moved, r, _bytes_moved, READS_MAX)
        if total > limit:
            return False
    return True


from . import host_path as _host  # noqa: E402  (it imports this module first)

_caches.register("host_path.reads", _reads.clear, lambda: len(_reads), READS_MAX)
_caches.register("host_path.complexes", _complexes.clear, lambda: len(_complexes),
                 READS_MAX)
_caches.register("host_path.moved", _moved.clear, lambda: len(_moved), READS_MAX)
_caches.register("host_path.computed", _computed.clear, lambda: len(_computed), READS_MAX)
