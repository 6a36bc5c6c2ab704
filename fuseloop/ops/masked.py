"""Masks that skip work: ``fl.compute(expr, out=y, where=mask)`` (RoughPy's masked
kernels, numpy's ufunc ``where=``).

The mask becomes ``Target.mask``: the kernel computes it first and guards the whole
computation of the value and its store with it (:mod:`fuseloop.lower.masking`), so
elements where it is false cost one mask read and keep their values in ``out``;
``fl.where(mask, expr, y)`` computes ``expr`` everywhere and rewrites every element.

A mask is a boolean array broadcasting to ``out``'s shape, or packed words declared
with :func:`bitmask` (one bit per element of ``out`` in C order, as
``numpy.packbits`` writes them; :func:`packbits` makes them on the device).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from ..array import Array, _coerce
from ..errors import MaskError, ShapeError
from ..expr.nodes import Gather, Iota, Node, broadcast_shapes

_WORD_BITS = {np.dtype(np.uint8): 8, np.dtype(np.uint16): 16, np.dtype(np.uint32): 32,
              np.dtype(np.uint64): 64}


class BitMask:
    """Packed mask words (see :func:`bitmask`): ``words`` (1-D, unsigned) and
    ``bitorder`` (``"big"``: an element's bit counts from the most significant)."""

    __slots__ = ("bitorder", "words")

    def __init__(self, words: Array, bitorder: str) -> None:
        self.words = words
        self.bitorder = bitorder

    @property
    def bits(self) -> int:
        """Bits per word."""
        return _WORD_BITS[self.words.dtype]

    def __repr__(self) -> str:
        return (f"fl.bitmask({self.words.shape[0]} {self.words.dtype} words, "
                f"bitorder={self.bitorder!r})")


def bitmask(words: Any, *, bitorder: str = "big") -> BitMask:
    """Declare ``words`` (1-D uint8, uint16, uint32 or uint64) a packed mask for
    ``where=``: element ``k`` of the target (C order) is bit ``k % w`` of word
    ``k // w`` (``w`` bits a word), counted from the most significant bit with
    ``bitorder="big"`` (``numpy.packbits``' default), from the least with ``"little"``.
    uint8 words are ``numpy.packbits``' output; ``packbits(m, bitorder="little")``
    viewed as ``<u4`` gives the uint32 words of ``"little"``.  Bits past the last
    element are ignored."""
    from ..creation import asarray

    w = _coerce(words)
    if not isinstance(w, Array):
        w = asarray(np.asarray(words))
    if w.dtype not in _WORD_BITS or w.ndim != 1:
        raise MaskError(f"fl.bitmask takes 1-D words of uint8, uint16, uint32 or uint64, "
                        f"got {w.dtype} of shape {w.shape}")
    if bitorder not in ("big", "little"):
        raise ValueError(f"fl.bitmask: bitorder must be 'big' or 'little', not {bitorder!r}")
    return BitMask(w, bitorder)


def packbits(a: Any, /, *, bitorder: str = "big") -> Array:
    """``numpy.packbits(a, axis=None)``: the nonzero elements of ``a`` (flattened, C
    order) as bits of uint8 words, 8 to a word, the last one padded with zeros; one
    reduction kernel.  Use the result as ``where=fl.bitmask(words)``."""
    from ..creation import asarray, zeros
    from .reductions import sum as fl_sum
    from .shape import concatenate, ravel, reshape

    if bitorder not in ("big", "little"):
        raise ValueError(f"packbits: bitorder must be 'big' or 'little', not {bitorder!r}")
    x = _coerce(a)
    if not isinstance(x, Array):
        x = asarray(np.asarray(a))
    if x.dtype.kind not in "biu":
        raise MaskError(f"packbits takes booleans or integers, got {x.dtype}")
    flat = ravel(x) != 0
    n = flat.shape[0]
    words = -(-n // 8)
    if words * 8 != n:
        flat = concatenate([flat, zeros(words * 8 - n, np.bool_, device=x.device)])
    weights = np.left_shift(1, np.arange(8)[::-1] if bitorder == "big" else np.arange(8))
    bits = reshape(flat, (words, 8)).astype(np.uint8)
    return fl_sum(bits * asarray(weights.astype(np.uint8), device=x.device), axis=1,
                  dtype=np.uint8)


def mask_node(where: Any, shape: tuple[int, ...], targets: Sequence[Array]) -> Node:
    """The boolean node of ``shape`` that ``where`` selects (checked: nothing has run).

    A mask whose own computation cannot share the masked kernel (it has reductions or
    checked gathers, or reads a target elsewhere than at the element written) is
    evaluated into a buffer of its own first.
    """
    from ..creation import asarray
    from ..expr.views import affine_view, broadcast_map

    device = targets[0].device
    if isinstance(where, BitMask):
        return _packed_node(where, shape, device)
    m = _coerce(where)
    if not isinstance(m, Array):
        arr = np.asarray(where)
        if arr.dtype != np.bool_:
            raise MaskError(_not_boolean(arr.dtype, arr.shape))
        m = asarray(arr, device=device)
    if m.dtype != np.bool_:
        raise MaskError(_not_boolean(m.dtype, m.shape))
    if m.device is not device:
        from ..errors import DeviceError

        raise DeviceError(f"where= lives on {m.device.name} but out= on {device.name}; "
                          "move one with fl.asarray(x, device=...)")
    try:
        fits = broadcast_shapes(m.shape, shape) == shape
    except ShapeError:
        fits = False
    if not fits:
        raise ShapeError(f"where= mask of shape {m.shape} does not broadcast to out= of "
                         f"shape {shape}")
    if m.is_lazy and (_needs_own_kernel(m._node) or _reads_targets_elsewhere(
            m._node, shape, targets)):
        m = m.copy().eval()
    node = m._node
    if node.shape != shape:
        off, coeffs = broadcast_map(node.shape, shape)
        node = affine_view(node, shape, off, coeffs)
    return node


def _not_boolean(dtype: np.dtype, shape: tuple[int, ...]) -> str:
    return (f"where= takes a boolean mask, got {dtype} of shape {shape}; compare it "
            "(m != 0), or declare packed words with fl.bitmask(words)")


def _packed_node(mask: BitMask, shape: tuple[int, ...], device: Any) -> Node:
    n = int(np.prod(shape))
    w = mask.bits
    need = -(-n // w)
    words = mask.words
    if words.shape[0] != need:
        raise ShapeError(f"where= bitmask of {words.shape[0]} {words.dtype} words "
                         f"(shape {words.shape}) does not fit out= of shape {shape}: "
                         f"{n} elements need {need} words of {w} bits")
    if words.device is not device:
        from ..errors import DeviceError

        raise DeviceError(f"where= bitmask lives on {words.device.name} but out= on "
                          f"{device.name}; move one with fl.asarray(x, device=...)")
    if words.is_lazy:
        words = words.copy().eval()  # (read once per element: a buffer of its own)
    idt = np.dtype(np.int32 if n < 2**31 else np.int64)
    pos = Array._lazy(Iota(shape, idt), device)
    log2 = w.bit_length() - 1
    word = Array._lazy(Gather(words._node, (pos >> log2)._node, 0, checked=False), device)
    lane = pos & (w - 1)
    shift = (w - 1) - lane if mask.bitorder == "big" else lane
    return (((word >> shift.astype(word.dtype)) & 1) != 0)._node


def _needs_own_kernel(node: Node, seen: set[int] | None = None) -> bool:
    from ..expr.nodes import Apply, Concat, Reduce, Remap

    seen = set() if seen is None else seen  # (a shared subtree once: 2^depth as a tree)
    if id(node) in seen:
        return False  # (its answer was False, or the walk had stopped)
    seen.add(id(node))
    if isinstance(node, Reduce):
        return True
    if isinstance(node, Gather):
        return bool(node.checked) or _needs_own_kernel(node.child, seen) or \
            _needs_own_kernel(node.index, seen)
    if isinstance(node, Remap):
        return _needs_own_kernel(node.child, seen)
    if isinstance(node, Apply):
        return any(_needs_own_kernel(a, seen) for a in node.args)
    if isinstance(node, Concat):
        return any(_needs_own_kernel(p, seen) for p in node.pieces)
    return False


def _reads_targets_elsewhere(node: Node, shape: tuple[int, ...],
                             targets: Sequence[Array]) -> bool:
    from ..evaluate import _reads_only_in_place
    from ..expr.program import Target

    for t in targets:
        storage = t._storage
        if storage is None or storage not in node.storages:
            continue
        leaf: Any = t._node
        if not _reads_only_in_place([node], Target(storage, leaf.view_strides(), leaf.offset),
                                    shape, t.dtype.itemsize):
            return True
    return False


__all__ = ["BitMask", "bitmask", "mask_node", "packbits"]
