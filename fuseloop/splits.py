"""Which reductions run in two stages, along which axis, in how many pieces.

A large reduction to few values splits its reduced range into pieces that many
work-groups reduce at once (the first stage), then a second kernel combines the
pieces and applies the expression around the reductions (the epilogue).  The
first stage is run by ``evaluate._first_stage``; this module decides.
"""

from __future__ import annotations

import math
import os
from collections.abc import Callable, Sequence
from typing import NamedTuple

from .expr.nodes import (
    Apply,
    Concat,
    Gather,
    Leaf,
    Node,
    Pointer,
    Reduce,
    Remap,
    SparseProduct,
    UserCall,
)
from .recipe_state import recipe_for
from .runtime.devices import Device
from .split_k import contraction_pieces

# A reduction over at least this many elements per result, with fewer results
# than TWO_STAGE_MAX_ROWS, is split over many work-groups (two stages).
TWO_STAGE_MIN_LENGTH = 32768
TWO_STAGE_MAX_ROWS = 64
# the reductions that split (and the reduction combining their pieces)
SPLITTABLE = {"sum": "sum", "prod": "prod", "max": "max", "min": "min"}
# A split full reduction runs both stages in one launch (the last group to finish
# combines: fuseloop.lower.one_launch); False (FUSELOOP_ONE_LAUNCH=0): two launches
ONE_LAUNCH = os.environ.get("FUSELOOP_ONE_LAUNCH", "1").strip().lower() not in (
    "0", "off", "false", "no")
# A column reduction nested in a split column reduction runs its first stage only where
# the pieces can combine its partials (``folds_into``); False (FUSELOOP_COLUMN_FOLD=0):
# it runs both stages first
COLUMN_FOLD = os.environ.get("FUSELOOP_COLUMN_FOLD", "1").strip().lower() not in (
    "0", "off", "false", "no")


def children(node: Node) -> tuple[Node, ...]:
    cls = type(node)
    if cls is Apply or cls is UserCall:
        return node.args  # type: ignore[attr-defined]
    if cls is Reduce or cls is Remap:
        return (node.child,)  # type: ignore[attr-defined]
    if cls is Gather:
        return (node.child, node.index)  # type: ignore[attr-defined]
    if cls is Concat:
        return node.pieces  # type: ignore[attr-defined]
    if cls is SparseProduct:
        return node.leaves()  # type: ignore[attr-defined]
    if cls is Pointer:  # (its leaf covers every element the function may read)
        return (node.leaf,)  # type: ignore[attr-defined]
    return ()


def has_reduce(node: Node) -> bool:
    """Whether ``node`` is or holds a reduction."""
    # (each node once: a DAG's shared subtrees, walked as a tree, cost 2^depth)
    seen: set[int] = set()
    stack = [node]
    while stack:
        n = stack.pop()
        if type(n) is Reduce:
            return True
        for c in children(n):
            if id(c) not in seen:
                seen.add(id(c))
                stack.append(c)
    return False


def _reduces_under_ops(node: Node, out: list[Reduce], other_ok: Callable[[Node], bool],
                       seen: set[int] | None = None) -> bool:
    """Collect the reductions under elementwise ops into ``out``; False where a node
    that is neither fails ``other_ok``."""
    # (``seen``: the nodes already found fine; a shared subtree is walked once)
    seen = set() if seen is None else seen
    if id(node) in seen:
        return True
    cls = type(node)
    if cls is Reduce:
        if node not in out:
            out.append(node)  # type: ignore[arg-type]
        ok = True
    elif cls is Apply or cls is UserCall:
        ok = all(_reduces_under_ops(a, out, other_ok, seen)
                 for a in node.args)  # type: ignore[attr-defined]
    else:
        ok = other_ok(node)
    if ok:
        seen.add(id(node))
    return ok


def _no_arrays(node: Node) -> bool:
    cls = type(node)
    return not node.storages and cls is not Gather and cls is not Remap and cls is not Concat


def top_reduces(node: Node, out: list[Reduce]) -> bool:
    """Collect reductions under elementwise ops; False if something else is in the way."""
    return _reduces_under_ops(node, out, _no_arrays)


class TwoStage(NamedTuple):
    """How a reduction runs in two stages (see :func:`two_stage_split`)."""

    tops: list[Reduce]  # the reductions split
    length: int  # the longest reduced length
    columns: bool  # pieces split the reduced axes of column-like reductions
    pieces: int  # number of pieces (at least 2)


def two_stage_split(roots: Sequence[Node], out_shape: tuple[int, ...],
                    device: Device) -> TwoStage | None:
    """How the top-level reductions of ``roots`` run in two stages, or None.

    Two cases.  Large reductions to few values (fewer than ``TWO_STAGE_MAX_ROWS``,
    each over at least ``TWO_STAGE_MIN_LENGTH`` elements) along contiguous axes:
    pieces of each output's reduced range, numbered by a last axis.  Column-like
    reductions (no input walks a reduced axis contiguously, the last axis is
    kept: :func:`_column_like`) with too few outputs to give the device work
    (:func:`_column_pieces`): the reduced range is split into pieces numbered by a
    first axis, so the first stage is again a column reduction, over fewer rows.
    """
    tops: list[Reduce] = []
    if all(_epilogue_reduces(r, tops) for r in roots) and len(tops) == 1 \
            and tops[0].shape == out_shape:
        # a contraction (its epilogue may read arrays at the output's index: the
        # combining stage reads them there too): split-K by its recipe's rule
        pieces = contraction_pieces(tops, out_shape, device)
        if pieces is not None:
            length = math.prod(tops[0].child.shape) // max(1, math.prod(out_shape))
            return TwoStage(tops, length, True, pieces) if pieces > 1 else None
    tops = []
    if not (all(top_reduces(r, tops) for r in roots) and tops and all(
            t.op in SPLITTABLE and t.shape == out_shape for t in tops)):
        return None
    longest = max(math.prod(t.child.shape) // max(1, math.prod(t.shape)) for t in tops)
    if all(_column_like(t) for t in tops):
        inner = min(_kept_inner(t) for t in tops)
        pieces = _column_pieces(math.prod(out_shape), longest, device, inner)
        return TwoStage(tops, longest, True, pieces) if pieces > 1 else None
    if math.prod(out_shape) < TWO_STAGE_MAX_ROWS and longest >= TWO_STAGE_MIN_LENGTH:
        # (a lower TWO_STAGE_MIN_LENGTH can ask for a split of one piece: no split)
        pieces = piece_count(longest, device)
        return TwoStage(tops, longest, False, pieces) if pieces > 1 else None
    return None


def chunking(split: TwoStage, out_shape: tuple[int, ...]) -> tuple[int, int, bool, int]:
    """``(pieces, chunk, exact, axis)`` of ``split``'s first stage (``linearize``'s
    ``chunks``): its pieces, each one's length, whether they divide the reduced length
    exactly, and the axis numbering them."""
    length, pieces = split.length, split.pieces
    # pieces that divide the length exactly need no bounds test per element
    same = all(math.prod(t.child.shape) // max(1, math.prod(t.shape)) == length
               for t in split.tops)
    if same:  # (down to half as many pieces, never to one)
        for p in range(pieces, (max(2, pieces // 2) if pieces > 1 else 1) - 1, -1):
            if length % p == 0:
                pieces = p
                break
    exact = same and length % pieces == 0
    return pieces, -(-length // pieces), exact, 0 if split.columns else len(out_shape)


def folds_into(inner: TwoStage, outer: TwoStage) -> bool:
    """Whether the first stage of ``inner`` (a reduction nested in ``outer``'s tops)
    may run alone, each piece of ``outer`` combining its partials: both split column
    reductions, and combining them costs each piece at most half as many reads as
    its own rows (``inner.pieces`` values, read again by every piece, against
    ``outer.length / outer.pieces`` rows), so the combining launch is saved."""
    return COLUMN_FOLD and inner.columns and outer.columns and len(inner.tops) == 1 \
        and 2 * inner.pieces * outer.pieces <= outer.length


def one_launch(split: TwoStage, out_shape: tuple[int, ...]) -> bool:
    """Whether ``split``'s two stages are to share one launch: a full reduction (one
    value per top) along contiguous axes, while ``ONE_LAUNCH`` is on."""
    return ONE_LAUNCH and not split.columns and math.prod(out_shape) == 1


def piece_count(length: int, device: Device) -> int:
    """Pieces of a reduction of ``length`` elements per result split along contiguous
    axes (1: not worth a split)."""
    if device.type == "cpu":
        # contiguous pieces of at most ~64k elements (each work-item sums one
        # sequentially: short pieces keep float error small), several per core
        return max(1, min(16 * max(1, device.compute_units), length // 4096),
                   min(4096, length // 65536))
    # (up to 2048 pieces of at least 4096 elements; past 2**26 elements, more pieces of
    # at least GPU_LONG_PIECE, up to GPU_MAX_PIECES: an H200's sum of 2**30 ran fastest
    # at 16384-32768 pieces and of 2**28 at 8192, where 2**26 and less wanted 2048 or
    # fewer: benchmarks/probes/multi_part_kernel.py)
    return max(1, min(2048, length // 4096), min(GPU_MAX_PIECES, length // GPU_LONG_PIECE))


# a long contiguous split on a GPU: pieces of at least this many elements past 2048 of
# them, and at most this many pieces (see piece_count)
GPU_LONG_PIECE = 32768
GPU_MAX_PIECES = 16384


def _epilogue_reduces(node: Node, out: list[Reduce]) -> bool:
    """Collect reductions under elementwise ops whose other operands hold no reduction
    (arrays read at the output's index included); False if something else is in the way."""
    return _reduces_under_ops(node, out, lambda n: not has_reduce(n))


# Pieces of a column-like reduction's first stage reduce at least this many rows each
COLUMN_MIN_PIECE = 64
# Defaults of the reduction recipe's parameters read here (a recipe without them)
COLUMN_WIDTH = 1
COLUMN_ITEMS_PER_UNIT = 1024


def column_params(device: Device) -> tuple[int, int]:
    """(outputs per work-item, work-items wanted per compute unit) of column-like
    reductions on ``device``: its reduction recipe's ``column_width`` and
    ``column_items`` (see :mod:`fuseloop.recipes.rows`)."""
    values = recipe_for(device, "reduction").values
    width = values.get("column_width") or COLUMN_WIDTH
    items = values.get("column_items") or COLUMN_ITEMS_PER_UNIT
    return int(width), int(items)


def column_wide(device: Device) -> tuple[int, int]:
    """(outputs per work-item, the least rows per piece) of a split column-like
    reduction's first stage with long pieces (``column_wide``, ``column_wide_rows`` of
    the reduction recipe, see :mod:`fuseloop.recipes.rows`; a recipe without them: 0, 0,
    never)."""
    values = recipe_for(device, "reduction").values
    return int(values.get("column_wide") or 0), int(values.get("column_wide_rows") or 0)


def column_narrow(device: Device) -> tuple[int, int, int]:
    """(``column_group``, the work-items of a narrow group, ``column_slices``) of the
    reduction recipe on ``device``: what :func:`fuseloop.recipes.row_layout.column_slices`
    needs (a recipe without them: 1, 1, 0, never narrow)."""
    values = recipe_for(device, "reduction").values
    group = int(values.get("column_group") or 1)
    return group, max(group, int(values.get("group") or 1)), int(
        values.get("column_slices") or 0)


def _kept_inner(t: Reduce) -> int:
    """The outputs of ``t`` after its last reduced axis: the work-items along a row of
    its column-like kernel (all of them for a 2-D column reduction, and where the last
    axis is reduced: a transposed operand's columns, :func:`_column_like`)."""
    shape = t.child.shape
    last = max((d for d in t.axes if shape[d] != 1), default=-1)
    if last == len(shape) - 1:
        return math.prod(t.shape)
    return math.prod(shape[last + 1:])


def _column_pieces(outputs: int, length: int, device: Device, inner: int = 0) -> int:
    """Pieces to split a column-like reduction's reduced range into (1: none).

    ``outputs / column_width`` work-items run without a split, or, where a row has
    fewer outputs (``inner``) than ``column_group``, a narrow group of work-items
    per row's outputs, the reduced axis split over its ``slices`` (see
    :func:`fuseloop.recipes.row_gpu._gpu_columns`).  With fewer than ``column_items``
    work-items per compute unit, the rows are split so that there are about that
    many, each piece at least ``COLUMN_MIN_PIECE`` rows per slice.  Small reductions
    (below ``TWO_STAGE_MIN_LENGTH`` elements) are not worth a second launch.
    """
    if outputs * length < TWO_STAGE_MIN_LENGTH:
        return 1
    # (imported here: the recipes package loads with the first kernel, not with fuseloop)
    from .recipes.row_layout import column_slices, narrow_width

    width, per_unit = column_params(device)
    items = -(-outputs // width)
    group, wide, chosen = column_narrow(device)
    narrow = narrow_width(inner, group)
    slices = column_slices(narrow, wide, chosen, device.max_work_group_size)
    if narrow:  # (a group per row's outputs: their width, a power of two, by the slices)
        items = -(-outputs // inner) * narrow * slices
    want = per_unit * max(1, device.compute_units)
    wide, rows = column_wide(device)
    if not narrow and wide > width and inner >= max(width + 1, wide // 4) \
            and -(-length // 2) >= rows:
        # rows that fill a quarter of a ``wide`` block, long enough for pieces of ``rows``:
        # blocks of ``wide`` outputs, the rows split for work-items (the first stage's
        # size class states it: row_cpu._column_block; a narrow split below leaves pieces
        # shorter than ``rows``, or none: ``width`` blocks)
        wide_items = -(-outputs // wide)
        if wide_items < want:
            return max(2, min(-(-want // wide_items), length // rows, 4096))
    if items >= want:
        return 1
    return max(1, min(-(-want // items), length // (COLUMN_MIN_PIECE * slices), 4096))


def _column_like(t: Reduce) -> bool:
    """Whether ``t`` walks its reduced axes across rows of memory: no input read
    through elementwise operations has stride +-1 along a reduced axis (a transposed
    input's columns are rows), and the child's last axis is kept or, where that axis
    is reduced, an input has stride +-1 along a kept axis (``d[:, i] @ d[:, i:]``
    sums the last axis of a transposed view: neighbouring outputs read neighbouring
    addresses).  Anything else in the child (a gather, a view of a reduction, a
    concatenation): False."""
    child = t.child
    n = len(child.shape)
    if n < 2 or child.shape[-1] == 1:
        return False
    reduced = [d for d in t.axes if child.shape[d] != 1]
    kept = [d for d in range(n) if d not in t.axes and child.shape[d] != 1]
    leaves: list[Node] = []
    ok = [True]
    seen: set[int] = set()

    def walk(node: Node) -> None:
        if id(node) in seen or not ok[0]:
            return
        seen.add(id(node))
        cls = type(node)
        if cls is Leaf:  # (an Iota reads no memory: argmin's positions along columns)
            leaves.append(node)
        elif cls is Apply or cls is UserCall:
            for a in node.args:  # type: ignore[attr-defined]
                walk(a)
        elif cls is not Reduce and (node.storages or cls is Gather or cls is Remap
                                    or cls is Concat):
            ok[0] = False  # (a nested reduction runs first: its result is a kept-axes value)

    walk(child)
    if not ok[0]:
        return False

    def strides_along(leaf: Node, dims: list[int]) -> list[int]:
        st = leaf.view_strides()  # type: ignore[attr-defined]
        r = len(leaf.shape)
        return [abs(st[d - n + r]) for d in dims if d >= n - r and leaf.shape[d - n + r] != 1]

    if any(1 in strides_along(x, reduced) for x in leaves):
        return False
    return (n - 1) not in t.axes or any(1 in strides_along(x, kept) for x in leaves)


def nested_reduces(node: Node, out: list[Reduce], seen: set[int] | None = None) -> None:
    """The outermost reductions inside ``node``."""
    seen = set() if seen is None else seen  # (a shared subtree once)
    if id(node) in seen:
        return
    seen.add(id(node))
    if type(node) is Reduce:
        if node not in out:
            out.append(node)
        return
    for c in children(node):
        nested_reduces(c, out, seen)


def runs_child_first(red: Reduce) -> bool:
    """Whether ``red``'s child runs first as a kernel of its own, rather than the
    reductions inside it one by one.

    True when the child holds reductions whose results vary along ``red``'s reduced
    axes (reached through elementwise operations) and has no more elements than the
    largest of them: ``mean(logsumexp(x, axis=1) - x[rows, labels])`` computes the
    per-row value in one row kernel (maximum, sum and the gathered element
    together, as a softmax does) and then sums that, where running the inner
    reductions first made a kernel per reduction, each reading the rows again.
    """
    axes = set(red.axes)
    child = red.child
    n = len(child.shape)
    biggest = [0]
    seen: set[int] = set()

    def walk(node: Node, dims: frozenset) -> None:
        if id(node) in seen or not node.fancy:
            return
        seen.add(id(node))
        if isinstance(node, Reduce):
            if any(node.shape[d] != 1 for d in dims):
                biggest[0] = max(biggest[0], math.prod(node.shape))
        elif isinstance(node, Apply):
            m = len(node.shape)
            for a in node.args:
                r = len(a.shape)
                walk(a, frozenset(k for k in range(r) if (m - r + k) in dims))

    walk(child, frozenset(d for d in range(n) if d in axes))
    return 0 < math.prod(child.shape) <= biggest[0]


def fits_one_row(roots: Sequence[Node], out_size: int, limit: int) -> bool:
    """Whether full reductions consumed by ``roots`` can run inside their kernel.

    True when the output and every reduced range are shorter than ``limit``
    (``evaluate.ONE_ROW_MAX_LENGTH``) and every reduction reached without a gather,
    a view or a concatenation in between is a full one (one value): the kernel is then
    one row, whose reductions are each computed once before its element loop.
    Such reductions run in one work-group anyway (see ``TWO_STAGE_MIN_LENGTH``),
    so fusing them costs no parallelism there and saves a launch, and a buffer,
    per reduction (and per reduction nested in another, which ran twice).
    """
    if out_size >= limit:
        return False
    found = [False]
    seen: set[int] = set()

    def ok(node: Node) -> bool:
        if id(node) in seen or not node.fancy:
            return True
        seen.add(id(node))
        if isinstance(node, Reduce):
            found[0] = True
            return math.prod(node.shape) == 1 and \
                math.prod(node.child.shape) < limit and ok(node.child)
        if isinstance(node, Apply):
            return all(ok(a) for a in node.args)
        return True  # (behind a gather, view or concatenation: runs first in any case)

    return all(ok(r) for r in roots) and found[0]
