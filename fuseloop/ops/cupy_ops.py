"""Sorting and scans on CUDA devices, through CuPy (CUB and Thrust underneath).

On OpenCL devices these come from pyopencl (``ops/sorting.py``, ``ops/scan.py``);
on a CUDA device the same entry points run CuPy's functions on fuseloop's own
buffers (no copy) on the device's stream, with the same semantics: stable sorts,
NaN (of any sign) last in both directions, -0.0 equal to 0.0.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ..array import Array


def _view(x: Array, shape: tuple[int, ...]) -> Any:
    from ..cuda_interop import _cupy_view

    return _cupy_view(x).reshape(shape)


def _wrap(values: Any, device: Any) -> Array:
    """CuPy's result as a fuseloop array; a trace running (``fl.fuse``) learns that its
    memory was made by work the record does not hold (so its contents are no constant)."""
    from .. import tracing
    from ..cuda_interop import from_cuda

    out = from_cuda(values, device)
    if tracing._watched and out._storage is not None:
        tracing.note_born(out._storage.buffer)
    return out


def _keys(v: Any, descending: bool) -> Any:
    """Unsigned keys in ``v``'s order (see ``ops.sorting._key_expr``, the same rule)."""
    import cupy

    dt = v.dtype
    bits = dt.itemsize * 8
    unsigned = cupy.dtype(f"u{dt.itemsize}")
    sign = unsigned.type(1 << (bits - 1))
    if dt.kind == "f":
        u = v.view(unsigned)
        key = cupy.where(v == 0, sign, cupy.where(u & sign, ~u, u | sign))
        key = ~key if descending else key
        return cupy.where(cupy.isnan(v), unsigned.type(np.iinfo(unsigned).max), key)
    key = v.view(unsigned) ^ sign if dt.kind == "i" else v.astype(unsigned)
    return ~key if descending else key


def sort_rows(src: Array, rows: int, n: int, descending: bool) -> tuple[Array, Array]:
    """(values, positions within each row) of each row of the contiguous ``src`` sorted."""
    import cupy

    dev = src.device
    with dev.queue:
        v = _view(src, (rows, n))
        order = cupy.argsort(_keys(v, descending), axis=-1)  # (CuPy's sorts are stable)
        values = cupy.take_along_axis(v, order, axis=-1)
        order = order.astype(cupy.int64, copy=False)
    return _wrap(values, dev), _wrap(order, dev)


def scan_rows(src: Array, op: str) -> Array:
    """The inclusive scan (``op`` "sum" or "prod") of each row of the contiguous ``src``."""
    import cupy

    dev = src.device
    n = src.shape[-1] if src.ndim else 1
    with dev.queue:
        v = _view(src, (src.size // max(n, 1), n))
        scan = cupy.cumsum if op == "sum" else cupy.cumprod
        out = scan(v, axis=-1, dtype=v.dtype).reshape(src.shape)
    return _wrap(out, dev)


__all__ = ["scan_rows", "sort_rows"]
