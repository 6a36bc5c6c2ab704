"""Rows a part does not hold: halo exchange for stencils and shifted slices.

A part needing rows of another part gets them device to device where the backend can
(``Backend.copy_from``: CUDA's peer copy, ordered after the source's work; a device
listed twice: a copy on its own queue), else through the host (the rows read with
``get()``, then uploaded: the path for two OpenCL devices, each in its own context).
On one device listed twice it is still a copy, so the parts keep their own buffers
and the exchange is exercised as on several devices.  :data:`EXCHANGED` counts what
was copied (rows, bytes, copies; ``through_host``: the copies that went through the
host) for tests and benchmarks.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable
from typing import Any

import numpy as np

from ..array import Array
from ..expr.nodes import Leaf, c_strides

#: rows and bytes copied between parts since the process started
EXCHANGED = {"rows": 0, "bytes": 0, "copies": 0, "through_host": 0}


def _transfer(piece: Array, device: Any) -> Array:
    """``piece`` (rows of a part) copied to ``device``."""
    from ..backends import backend_for
    from ..creation import asarray
    from ..evaluate import allocate

    EXCHANGED["rows"] += piece.shape[0]
    EXCHANGED["bytes"] += piece.nbytes
    EXCHANGED["copies"] += 1
    source = piece.device
    backend = backend_for(device)
    if source.backend == device.backend and piece.nbytes:
        node = piece._node
        if type(node) is not Leaf or (node.strides is not None
                                      and node.strides != c_strides(node.shape)):
            node = piece.copy().eval()._node  # (one contiguous run of bytes)
        assert type(node) is Leaf
        offset = node.offset * piece.itemsize
        out = allocate(piece.nbytes, device)
        if source is device:
            backend.copy(device, out.buffer, node.storage.buffer, piece.nbytes, offset)
            return Array._concrete(out, piece.dtype, piece.shape)
        if backend.copy_from(device, out.buffer, source, node.storage.buffer, piece.nbytes,
                             offset):
            return Array._concrete(out, piece.dtype, piece.shape)
    EXCHANGED["through_host"] += 1
    return asarray(piece.get(), device=device)


def rows(x: Any, lo: int, hi: int, k: int) -> Array:
    """Rows ``lo:hi`` of the split array ``x`` as an array on part ``k``'s device: its
    own rows as a view, the others' copied (a lazy concatenation of the pieces)."""
    from ..creation import empty
    from ..ops.shape import concatenate

    device = x.devices[k]
    pieces = []
    for j, (a, b) in enumerate(zip(x.bounds, x.bounds[1:])):
        s, e = max(lo, a), min(hi, b)
        if s >= e:
            continue
        piece = x.parts[j][s - a:e - a]
        pieces.append(piece if j == k else _transfer(piece, device))
    if not pieces:
        return empty((0, *x.shape[1:]), x.dtype, device=device)
    return pieces[0] if len(pieces) == 1 else concatenate(pieces, axis=0)


def realign(x: Any, bounds: tuple[int, ...]) -> list[Array]:
    """The parts of ``x`` split at ``bounds`` instead of its own."""
    return [rows(x, lo, hi, k) for k, (lo, hi) in enumerate(itertools.pairwise(bounds))]


def _wrapped_rows(x: Any, lo: int, hi: int, k: int) -> Array:
    """Rows ``lo:hi`` of ``x`` taken modulo its row count (periodic boundary)."""
    from ..ops.shape import concatenate

    n = x.shape[0]
    pieces = []
    r = lo
    while r < hi:
        start = r % n
        take = min(hi - r, n - start)
        pieces.append(rows(x, start, start + take, k))
        r += take
    return pieces[0] if len(pieces) == 1 else concatenate(pieces, axis=0)


def _edge_rows(x: Any, count: int, top: bool, k: int, boundary: str, cval: Any,
               dtype: np.dtype) -> Array:
    """``count`` rows beyond the first (``top``) or last row of ``x`` by the rule."""
    from ..creation import full
    from ..ops.shape import broadcast_to

    shape = (count, *x.shape[1:])
    if boundary == "constant":
        return full(shape, cval, dtype, device=x.devices[k])
    n = x.shape[0]
    edge = rows(x, 0, 1, k) if top else rows(x, n - 1, n, k)
    return broadcast_to(edge.astype(dtype) if edge.dtype != dtype else edge, shape)


def stencil(apply: Callable[[Array], Array], x: Any, width: tuple[int, ...], center: Any,
            boundary: str, cval: Any, what: str) -> Any:
    """A stencil of ``width`` over the split ``x``: each part extended by the rows above
    and below that the stencil reads (from its neighbours, or by the boundary rule at
    the ends), ``apply`` run on the extended part, its own rows kept."""
    from ..creation import empty
    from ..ops.shape import concatenate
    from ..ops.stencil import _check
    from .array import MultiArray

    cen = _check(x, tuple(width), center, boundary, what)
    before, after = cen[0], width[0] - 1 - cen[0]
    n = x.shape[0]
    # (a constant's rows must hold cval as the single-device stencil's where() does)
    dtype = np.result_type(x.dtype, cval) if boundary == "constant" else x.dtype
    out: list[Array | None] = []
    for k, (lo, hi) in enumerate(zip(x.bounds, x.bounds[1:])):
        if hi == lo:
            out.append(None)
            continue
        if boundary == "wrap":
            ext = _wrapped_rows(x, lo - before, hi + after, k)
        else:
            pieces = []
            if lo - before < 0:
                pieces.append(_edge_rows(x, before - lo, True, k, boundary, cval, dtype))
            middle = rows(x, max(0, lo - before), min(n, hi + after), k)
            pieces.append(middle.astype(dtype) if middle.dtype != dtype else middle)
            if hi + after > n:
                pieces.append(_edge_rows(x, hi + after - n, False, k, boundary, cval, dtype))
            ext = pieces[0] if len(pieces) == 1 else concatenate(pieces, axis=0)
        out.append(apply(ext)[before:before + hi - lo])
    done = next(o for o in out if o is not None)
    parts = [o if o is not None else empty((0, *done.shape[1:]), done.dtype, device=d)
             for o, d in zip(out, x.devices)]
    return MultiArray(parts, x.bounds, x.device_set)
