"""Recognise a contraction (matmul, batched matmul, tensordot, einsum) in a program.

A program is a *contraction* when its one reduction is a sum, evaluated at the
output's own index, of the product of two operands ``X * Y`` such that

* ``X`` varies along some output dimensions that ``Y`` does not (the *M*
  dimensions, the rows of ``A @ B``), ``Y`` along some that ``X`` does not
  (*N*, the columns), both along the reduced dimensions (*K*), and any
  output dimension both vary along is a *batch* dimension;
* each operand is an elementwise expression of loads, scalars and literals
  (``A * 2``: elementwise producers are part of the operand), read through any
  affine index (transposes, slices and broadcasts are strides);
* everything else in the program is elementwise in the output index (the
  epilogue: ``tanh(A @ B + c)``).

Such a program is lowered with the operands as substitution rules
``fl_x(b, m, k)`` and ``fl_y(b, k, n)`` over flat M, N, K and batch indices
(:mod:`fuseloop.lower.contraction`), so that recipes of kind
``"contraction"`` can tile it (local-memory tiles, register tiles).

The decision is structural plus a few size thresholds; the sizes that matter
are recorded as parameters, so the cache key tells the cases apart.  Skinny
products (few rows or few columns, down to one: ``x @ A``) are contractions
as long as one side of the output is long (:data:`MIN_SIDE`); the recipes
choose their tiles from the extents.  A side may be empty (a vector operand)
only when the matrix operand is *not* contiguous along the reduced axis:
``A @ x`` over C-order rows is a dot product per row, which the reduction
kernels read contiguously, while ``x @ A`` walks columns and is tiled.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import Any, NamedTuple

from .ir import Entry, reachable_entries

#: the longer side of the output must have at least this many elements
MIN_SIDE = 32
#: and the contracted length at least this many
MIN_K = 4
#: outputs with fewer than ``K / MAX_K_PER_OUTPUT`` elements stay with the
#: reduction kernels (one tile row would loop over a huge K alone; no split-K)
MAX_K_PER_OUTPUT = 16
#: operands with more entries than this (long producer chains) are not inlined
MAX_OPERAND_ENTRIES = 64


class Contraction(NamedTuple):
    """Where the parts of a contraction are in a program (all structural)."""

    reduce: int  # the reduction entry
    x: int  # operand varying along the M dimensions (rows)
    y: int  # operand varying along the N dimensions (columns)
    m_dims: tuple[int, ...]  # output dimensions of each group, in order
    n_dims: tuple[int, ...]
    b_dims: tuple[int, ...]
    m_size: Any  # ("p", slot) of each group's total length; 1 for no batch
    n_size: Any
    b_size: Any
    k_size: Any
    # the least extents of the rows and columns that this program stands for: the
    # side's length when short, else MIN_SIDE (recipes without size classes rely on it)
    m_least: int = 1
    n_least: int = 1
    # a split-K first stage (fuseloop.split_k): ``(total, exact)``, the whole reduced
    # range's parameter and whether the pieces tile it; the batch group is then the
    # piece number (output dimension 0) and ``k_size`` a piece's length.  Else None.
    split: Any = None


def _operand(entries: Sequence[Entry], ref: int) -> set[int] | None:
    """The entries an operand is computed from, or None if it is not elementwise."""
    def inputs(r: int, stack: list[int]) -> bool:
        e: Any = entries[r]
        kind = e.kind
        if kind in ("op", "call"):
            stack.extend(e.refs)
            return True
        return kind in ("load", "arg", "lit", "iota")

    return reachable_entries((ref,), inputs, MAX_OPERAND_ENTRIES)


def _comp_dims(c: Any, dims: set[int]) -> bool:
    """Add the output dimensions of index component ``c``; True if it names a reduced one."""
    if c == 0:
        return False
    kind = c[0]
    if kind == "r":
        dims.add(c[1])
        return False
    if kind == "j":
        return True
    if kind == "a":
        red = False
        for _, sub in c[2]:
            red = _comp_dims(sub, dims) or red
        return red
    raise ValueError("gathered index")  # never in an operand (no gathers)


def _operand_dims(entries: Any, refs: set[int]) -> tuple[set[int], bool]:
    dims: set[int] = set()
    reduced = False
    for r in refs:
        e: Any = entries[r]
        if e.kind not in ("load", "iota"):
            continue
        at, kinds = e.at, e.strides
        if kinds == "c":
            kinds = (1,) * len(at)
        for c, k in zip(at, kinds):
            if k != 0:
                reduced = _comp_dims(c, dims) or reduced
    return dims, reduced


def _contiguous_along_k(entries: Any, refs: set[int]) -> bool:
    """Whether a load of the operand is contiguous (stride 1) along a reduced index."""
    for r in refs:
        e: Any = entries[r]
        if e.kind != "load" or e.strides == "c":
            continue
        for c, k in zip(e.at, e.strides):
            if k == 1 and c != 0 and c[0] == "j":
                return True
    return False


def find_contraction(entries: Sequence[Entry], outputs: tuple[int, ...], out_specs: list[tuple],
                     root_sizes: tuple[Any, ...], params: list[int],
                     param: Callable[[int], tuple]) -> Contraction | None:
    """The contraction in a linearised program, or None.

    ``params`` are the parameter values (for the size thresholds); ``param``
    interns a new parameter (a group's total length).
    """
    reduces = [k for k, e in enumerate(entries) if e.kind == "reduce"]
    # (user functions' pointer arguments and constant-memory buffers: reduction kernels)
    if len(reduces) != 1 or any(e.kind in ("gather", "concat", "ptr", "cmem")
                                for e in entries):
        return None
    red = reduces[0]
    r: Any = entries[red]
    child, at, total = r.child, r.at, r.total
    if r.op != "sum" or not r.sizes:
        return None
    # a first stage of pieces numbered by output dimension 0 (split-K): the pieces
    # are a batch of contractions over ranges of the reduced index
    piece = None if r.chunk is None else r.chunk[1]
    if piece not in (None, 0) or (piece is not None and root_sizes[0] == 1):
        return None
    root_at = tuple(0 if s == 1 else ("r", d) for d, s in enumerate(root_sizes)
                    if d != piece)
    if at != root_at:
        return None
    prod: Any = entries[child]
    if prod.kind != "op" or prod.name != "multiply" or len(prod.refs) != 2:
        return None
    x, y = prod.refs
    sx, sy = _operand(entries, x), _operand(entries, y)
    if sx is None or sy is None:
        return None
    dx, kx = _operand_dims(entries, sx)
    dy, ky = _operand_dims(entries, sy)
    if not (kx and ky):
        return None
    dims = [d for d, s in enumerate(root_sizes) if s != 1 and d != piece]
    if any(d not in dx and d not in dy for d in dims):
        return None
    m = tuple(d for d in dims if d in dx and d not in dy)
    n = tuple(d for d in dims if d in dy and d not in dx)
    b = tuple(d for d in dims if d in dx and d in dy)
    if (not m and not n) or (piece is not None and b):
        return None
    if not m or not n:
        # a vector operand: tiled only when the matrix operand walks columns
        matrix = sx if not n else sy
        if _contiguous_along_k(entries, matrix):
            return None
    if (dims[-1] in m) or not n:
        # the output's last (contiguous) dimension goes along the columns
        m, n, x, y = n, m, y, x
    for spec in out_specs:
        if spec and any(c != 0 and c[0] == "g" for c in spec[0]):
            return None  # scatter targets stay with the reduction kernels
    inside = sx | sy | {child}
    if any(o in inside for o in outputs):
        return None

    def length(ds: tuple[int, ...]) -> int:
        return math.prod(params[root_sizes[d][1]] for d in ds)

    k_size = total if piece is None else r.chunk[0]
    nm, nn, nk = length(m), length(n), params[k_size[1]]
    if max(nm, nn) < MIN_SIDE or nk < MIN_K or nm * nn * MAX_K_PER_OUTPUT < nk:
        return None

    def group(ds: tuple[int, ...]) -> Any:
        if not ds:
            return 1
        return root_sizes[ds[0]] if len(ds) == 1 else param(length(ds))

    if piece is not None:
        return Contraction(red, x, y, m, n, (piece,), group(m), group(n), root_sizes[piece],
                           k_size, min(nm, MIN_SIDE), min(nn, MIN_SIDE),
                           (total, bool(r.chunk[2])))
    return Contraction(red, x, y, m, n, b, group(m), group(n), group(b), total,
                       min(nm, MIN_SIDE), min(nn, MIN_SIDE))


# {{{ node level: what a contraction's operands compute first

#: operand nodes looked at (longer producer chains are never inlined, see above)
_MAX_OPERAND_NODES = 4 * MAX_OPERAND_ENTRIES


def _varying(node: Any, budget: list[int], memo: dict[int, frozenset[int]]
             ) -> frozenset[int]:
    """The dimensions of ``node``'s shape along which its value may change.

    A superset where unsure (every non-unit dimension): an operand then looks like
    a batch and nothing is pulled out of it.
    """
    from .nodes import Apply, Leaf, Literal, Remap, Scalar

    got = memo.get(id(node))
    if got is not None:
        return got
    shape = node.shape
    every = frozenset(d for d, n in enumerate(shape) if n != 1)
    budget[0] -= 1
    cls = type(node)
    if budget[0] < 0:
        out = every
    elif cls is Leaf:
        strides = node.view_strides()
        out = frozenset(d for d in every if strides[d] != 0)
    elif cls is Scalar or cls is Literal:
        out = frozenset()
    elif isinstance(node, Apply):
        n = len(shape)
        acc: set[int] = set()
        for a in node.args:
            shift = n - len(a.shape)
            acc.update(shift + d for d in _varying(a, budget, memo))
        out = frozenset(acc) & every
    elif cls is Remap:
        out = frozenset(d for d in every if any(row[d] for row in node.coeffs))
    else:  # (a reduction's result keeps unit axes where it is broadcast)
        out = every
    memo[id(node)] = out
    return out


def _pull(node: Any, found: list[Any], seen: set[int]) -> bool:
    """Collect the reductions, gathers and sparse products inside an operand;
    False where it holds something else that no contraction inlines (a concatenation)."""
    from .nodes import Apply, Gather, Reduce, Remap, SparseProduct

    if id(node) in seen or not node.fancy:
        return True
    seen.add(id(node))
    cls = type(node)
    if cls is Reduce or cls is Gather or cls is SparseProduct:
        found.append(node)
        return True
    if cls is Remap:  # (a view of a gather: the gather runs first, at its own size)
        return _pull(node.child, found, seen)
    if isinstance(node, Apply):
        return all(_pull(a, found, seen) for a in node.args)
    return False  # (a concatenation, or anything else not inlined)


def operand_producers(node: Any) -> list[Any]:
    """What runs before the contraction that reduction ``node`` would be.

    When ``node`` is a sum over a product ``X * Y`` whose output has rows that
    only ``X`` varies along and columns that only ``Y`` varies along (the sizes as
    :func:`find_contraction` asks), a reduction, gather or sparse product inside
    an operand would be computed again for every output element it reaches, and
    a program holding one is no contraction: those run first (each as its own
    kernel) so that the product keeps a tiled recipe; elementwise producers stay
    in the operand.  Else (or where an operand holds a concatenation): empty.
    """
    from .nodes import Apply

    child = node.child
    if node.op != "sum" or not isinstance(child, Apply) or child.op != "multiply" \
            or len(child.args) != 2 or not child.fancy:
        return []
    shape = child.shape
    budget = [_MAX_OPERAND_NODES]
    memo: dict[int, frozenset[int]] = {}
    vx, vy = ((frozenset(len(shape) - len(a.shape) + d for d in _varying(a, budget, memo)))
              for a in child.args)
    axes = set(node.axes)
    if budget[0] < 0 or not (vx & axes and vy & axes):
        return []
    out = [d for d, n in enumerate(shape) if n != 1 and d not in axes]
    m = [d for d in out if d in vx and d not in vy]
    n = [d for d in out if d in vy and d not in vx]
    if not m or not n or any(d not in vx and d not in vy for d in out):
        return []
    nm = math.prod(shape[d] for d in m)
    nn = math.prod(shape[d] for d in n)
    nk = math.prod(shape[d] for d in axes)
    if max(nm, nn) < MIN_SIDE or nk < MIN_K or nm * nn * MAX_K_PER_OUTPUT < nk:
        return []
    found: list[Any] = []
    seen: set[int] = set()
    if not all(_pull(a, found, seen) for a in child.args):
        return []
    return found

# }}}
