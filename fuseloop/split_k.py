"""Split-K: contractions whose output tiles leave most of the device idle.

``8 x 4096 @ 4096 x 4096`` has 32 thousand outputs: the GPU contraction recipe
makes of them a few dozen work-groups (``64 x 4096`` outputs: 32 tiles of
128 x 128), so most compute units of a large GPU sit idle while each
work-group walks the whole reduced range.  Such a contraction runs in two
stages instead, through the machinery of every other two-stage reduction
(:func:`fuseloop.splits.two_stage_split`, ``evaluate._first_stage``): the
reduced range is cut into ``S`` pieces numbered by a new *first* output axis,
so the first stage is again a contraction, with ``S`` times the work-groups,
writing an ``(S, M, N)`` buffer of partial products (the piece is a batch
dimension of the contraction kernel, see :mod:`fuseloop.expr.contraction`);
the second stage is a column-like sum over that first axis, fused with the
epilogue (``tanh(A @ B + c)``).  The pieces are added in a fixed order: no
atomics, the same result every run.

``S`` comes from the contraction recipe's ``split_k`` parameter: 0 (the
default) asks :func:`split_rule`, which estimates the work-items the recipe's
kernel would have (:func:`gpu_work_items`) and splits until there are about
:data:`ITEMS_PER_UNIT` per compute unit, keeping pieces at least
:data:`MIN_PIECE` long; ``evaluate._first_stage`` then prefers a count down to
half that divides the range (no bounds test).  The streaming kernel of a short
side (:func:`fuseloop.recipes.skinny.stream_long`) has few work-items and needs
more of them to keep the long operand's loads in flight: the rule aims for
:data:`STREAM_BYTES_PER_UNIT` of loads in flight per compute unit
(:func:`stream_items_per_unit`: the work-items follow the kernel's columns and
unroll) and its pieces may be as short as :func:`stream_min_piece` (128 for up to 8
outputs on the short side).  A
recipe without the parameter
(the CPU recipe: its blocks fill a CPU's few cores) leaves contractions to the
other two-stage rules.  ``fl.tune`` times kernels, not evaluations, so it does
not search ``split_k`` (its search space is the rule alone); set it with
``gpu_tiled.with_params(split_k=...)``.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Mapping, Sequence
from typing import Any

from ._lazy import LazyModule
from .caches import register as _register_cache
from .expr.nodes import Apply, Reduce
from .recipe_state import recipe_for
from .runtime.devices import Device

# (a recipe module: loaded with the recipes, not by import fuseloop)
_skinny = LazyModule(".recipes.skinny", __package__)

#: pieces of the reduced range are at least this long (shorter ones spend more on
#: writing and reading partial products than they gain: 64 x 4096 @ 4096 x 4096 on an
#: H200 ran faster in 8 pieces than in 16; probes/matmul_family.py)
MIN_PIECE = 512
#: the shortest pieces for the streaming kernel of a short side (stream_min_piece)
STREAM_MIN_PIECE = 128
#: at most this many pieces (the partial products are S times the output)
MAX_PIECES = 32
#: work-items per compute unit the rule aims for (``split_k_items``' default)
ITEMS_PER_UNIT = 1024
#: bytes of the long operand's loads in flight per compute unit that the rule aims for
#: with the streaming kernel (stream_items_per_unit): its work-items have
#: ``per * unroll`` loads each in flight
STREAM_BYTES_PER_UNIT = 64 * 1024


def _short_side(values: Mapping[str, Any], m: int, n: int) -> int | None:
    few = values["few"]
    short = [s for s in (m, n) if s <= few]
    return min(short) if short else None


def gpu_work_items(values: Mapping[str, Any], m: int, n: int, batch: int, itemsize: int,
                   k_fast: bool) -> int:
    """Work-items of the ``gpu-tiled`` recipe's kernel for an ``m x n`` output (``batch``
    of them), as :func:`fuseloop.recipes.contraction._gpu_tiled` shapes it; ``k_fast``:
    the long side's operand is contiguous along the reduced range."""
    short = _short_side(values, m, n)
    group = values["skinny_group"]
    if short is not None:
        long = n if short == m else m
        if short <= values.get("stream", 0) and not k_fast:
            # skinny.stream_long: work-groups along the long side only
            per = _skinny.stream_per(short, values["stream_per"], itemsize,
                                     values["stream_accumulators"])
            width = values["stream_group"] * per
            return batch * -(-long // width) * values["stream_group"]
        if values["skinny"] == "lanes":
            lanes = min(32, group) if k_fast else values["skinny_lanes"]
            width = max(1, group // lanes)
            return batch * -(-long // width) * group
        # skinny_tiles: the short side is one block of four outputs a work-item
        t_short = max(1, (1 << (short - 1).bit_length()) // 4)
        t_long = max(1, group // t_short)
        return batch * -(-long // (4 * t_long)) * t_short * t_long
    cfg = values["wide_tiles"] if itemsize > 4 else values["tiles"]
    return batch * -(-m // cfg.bm) * -(-n // cfg.bn) * cfg.tm * cfg.tn


def split_rule(items: int, k: int, compute_units: int,
               items_per_unit: int = ITEMS_PER_UNIT, min_piece: int = MIN_PIECE,
               most: int = MAX_PIECES) -> int:
    """Pieces of a reduced range of ``k`` for a kernel of ``items`` work-items: about
    enough that ``compute_units`` get ``items_per_unit`` each, at most ``most``, each at
    least ``min_piece`` long (1: no split)."""
    want = items_per_unit * max(1, compute_units)
    # (to the nearest whole number: a kernel just short of the aim is not split in two)
    pieces = (want + items // 2) // max(1, items)
    return max(1, min(pieces, k // min_piece, most))


def stream_min_piece(short: int) -> int:
    """The shortest piece for :func:`~fuseloop.recipes.skinny.stream_long`'s kernel with
    ``short`` outputs on its short side: its pieces' partial products (``2 * short``
    values written and read per column and piece) stay within an eighth of the long
    operand's ``piece`` values per column read; at least :data:`STREAM_MIN_PIECE`.

    Shorter pieces than :data:`MIN_PIECE` pay here: this kernel has few work-items
    (a work-group covers ``stream_group * per`` columns), and only more pieces put
    more of the long operand's loads in flight."""
    return max(STREAM_MIN_PIECE, 16 * short)


def stream_items_per_unit(values: Mapping[str, Any], short: int, itemsize: int) -> int:
    """Work-items per compute unit the split rule aims for with
    :func:`~fuseloop.recipes.skinny.stream_long`'s kernel: enough that their loads of
    the long operand (``per * unroll`` of ``itemsize`` bytes each, in flight together)
    come to the recipe's ``stream_bytes`` (:data:`STREAM_BYTES_PER_UNIT` by default) per
    unit (the memory's bandwidth times its latency, shared by a device's units, with a
    margin).  So a kernel of fewer loads a work-item (``stream_per=1``, a smaller unroll)
    gets more pieces, and one of more gets fewer (fewer partial products); at the
    defaults (2 columns, 8 steps, 4 bytes) it is :data:`ITEMS_PER_UNIT`."""
    per = _skinny.stream_per(short, values["stream_per"], itemsize, values["stream_accumulators"])
    loads = per * values["stream_unroll"] * itemsize
    return max(1, -(-values.get("stream_bytes", STREAM_BYTES_PER_UNIT) // loads))


def split_param(device: Device) -> int | None:
    """The device's contraction recipe's ``split_k`` (None: it has none); run plans keep
    it in their key, since it decides the kernels an evaluation runs."""
    value = recipe_for(device, "contraction").values.get("split_k")
    return None if value is None else int(value)


#: contraction_pieces' answers by (signature, shapes, device, recipe): a loop of one
#: statement over moving slices asks again at each length, and the answer takes a
#: linearisation of the product
_PIECES: OrderedDict[tuple, int | None] = OrderedDict()
PIECES_MAX = 4096


def contraction_pieces(tops: Sequence[Reduce], out_shape: tuple[int, ...],
                       device: Device) -> int | None:
    """Pieces to split the reduced range of a contraction into (1: none), or None when
    ``tops`` (the top-level reductions of an evaluation) are not one unbatched
    contraction or the device's contraction recipe has no ``split_k`` parameter (the
    other two-stage rules then apply)."""
    if len(tops) != 1:
        return None
    top = tops[0]
    child = top.child
    if top.op != "sum" or type(child) is not Apply or child.op != "multiply":
        return None
    fixed = split_param(device)
    if fixed is None:
        return None
    # (a signature stands for the structure, leaves' strides included; the shapes give
    # the extents m, n and k)
    sig = top.sig
    key = (sig, child.shape, out_shape, device.index,
           recipe_for(device, "contraction").cache_id)
    known = _PIECES.get(key, False) if sig else False
    if known is not False:
        return known
    pieces = _contraction_pieces(top, out_shape, device, fixed)
    if sig:
        _PIECES[key] = pieces
        while len(_PIECES) > PIECES_MAX:  # (the oldest first)
            try:
                _PIECES.popitem(last=False)
            except KeyError:  # (emptied by another thread)
                break
    return pieces


def _contraction_pieces(top: Reduce, out_shape: tuple[int, ...], device: Device,
                        fixed: int) -> int | None:
    values = recipe_for(device, "contraction").values
    from .expr.program import linearize

    program, bindings = linearize([top], out_shape, cache=False)
    c = program.contraction
    if c is None or c.b_dims:
        return None
    params = bindings.params

    def extent(size: Any) -> int:
        return size if isinstance(size, int) else params[size[1]]

    m, n, k = extent(c.m_size), extent(c.n_size), extent(c.k_size)
    if fixed:
        return max(1, min(fixed, k // 2))
    itemsize = _itemsize(program, c)
    k_fast = _long_k_fast(program, c, m, n, values)
    items = gpu_work_items(values, m, n, 1, itemsize, k_fast)
    short = _short_side(values, m, n)
    if short is not None and short <= values.get("stream", 0) and not k_fast:
        long = n if short == m else m
        if _skinny.lanes_fill(values, short, long, device.compute_units,
                              nbytes=long * k * itemsize):
            return 1
        return split_rule(items, k, device.compute_units,
                          stream_items_per_unit(values, short, itemsize),
                          stream_min_piece(short), values.get("stream_pieces", MAX_PIECES))
    return split_rule(items, k, device.compute_units)


_register_cache("split_k.pieces", _PIECES.clear, lambda: len(_PIECES), PIECES_MAX)


def _itemsize(program: Any, c: Any) -> int:
    import numpy as np

    e: Any = program.entries[c.reduce]
    return max(4, np.dtype(e.dtype).itemsize)


def _long_k_fast(program: Any, c: Any, m: int, n: int, values: Mapping[str, Any]) -> bool:
    """Whether the operand along the long side is contiguous along the reduced range."""
    from .lower.contraction import COL, RED, ROW, _fast_axis

    short = _short_side(values, m, n)
    if short is None:
        return False
    if short == m:  # the columns are long: Y
        return _fast_axis(program.entries, c.y, c.n_dims, COL, COL) == RED
    return _fast_axis(program.entries, c.x, c.m_dims, ROW, RED) == RED
