"""Cumulative sums and products: a segmented scan on the device (``pyopencl.scan``).

The input is evaluated first (with the scanned axis moved last, contiguous); one
segmented scan then runs over all rows at once, each row a segment.  The scan kernels
are pyopencl's (``GenericScanKernel``), enqueued on the device's in-order queue, not
fuseloop kernels: their producer is not fused into them (a fused producer would need
the scan in the lowering; left for later).
"""

from __future__ import annotations

import math
import threading
from typing import Any

import numpy as np

from .. import caches as _caches
from ..array import Array, _coerce
from ..backends import require_backend
from ..dtypes import as_dtype, c_type_name
from ..errors import ShapeError
from ..evaluate import allocate
from ..runtime.devices import Device
from .shape import concatenate, moveaxis, normalize_axis, reshape

# (device, op, dtype, index dtype) -> the GenericScanKernel; a few per dtype and device
_KERNELS: dict[tuple, Any] = {}
_lock = threading.Lock()
_caches.register("ops.scan.kernels", _KERNELS.clear, lambda: len(_KERNELS),
                 why="one per device, operation (sum, prod) and dtype")

_NEUTRAL = {"sum": "0", "prod": "1"}
# (pyopencl's segmented scans leave the reset at a segment start to the expression)
_EXPR = {"sum": "across_seg_boundary ? b : a + b", "prod": "across_seg_boundary ? b : a * b"}


def _scan_kernel(device: Device, op: str, dtype: np.dtype, index: np.dtype) -> Any:
    key = (device, op, dtype, index)
    with _lock:
        knl = _KERNELS.get(key)
        if knl is None:
            from pyopencl.scan import GenericScanKernel

            ctype, itype = c_type_name(dtype), c_type_name(index)
            expr, neutral, preamble = _EXPR[op], _NEUTRAL[op], ""
            if dtype.kind == "c":  # pyopencl's complex types: a union, no C operators
                from ..lower.complex_ops import complex_header

                p = "cfloat" if dtype == np.complex64 else "cdouble"
                expr = f"across_seg_boundary ? b : {p}_{'add' if op == 'sum' else 'mul'}(a, b)"
                neutral = f"{p}_fromreal({neutral})"
                preamble = ("#define PYOPENCL_DEFINE_CDOUBLE\n" if p == "cdouble" else "") \
                    + complex_header()
            knl = _KERNELS[key] = GenericScanKernel(
                device.context, dtype,
                arguments=f"__global const {ctype} *src, __global {ctype} *dst, {itype} row",
                input_expr="src[i]", scan_expr=expr, neutral=neutral,
                output_statement="dst[i] = item;", is_segment_start_expr="i % row == 0",
                index_dtype=index, preamble=preamble)
    return knl


def _scan_rows(src: Array, op: str) -> Array:
    """The inclusive scan of each row (last axis) of the contiguous concrete ``src``."""
    if src.device.backend == "cuda":
        from .cupy_ops import scan_rows

        return scan_rows(src, op)
    require_backend(src.device, "a cumulative sum or product (pyopencl's scan)")
    import pyopencl.array as cla

    dev, dt = src.device, src.dtype
    out = allocate(src.nbytes, dev)
    result = Array._concrete(out, dt, src.shape)
    if src.size:
        index = np.dtype(np.int32 if src.size < 2**31 else np.int64)
        knl = _scan_kernel(dev, op, dt, index)
        queue = dev.queue
        flat = (src.size,)
        knl(cla.Array(queue, flat, dt, data=src._storage.buffer),  # type: ignore[union-attr]
            cla.Array(queue, flat, dt, data=out.buffer), index.type(src.shape[-1]),
            queue=queue)
    return result


def _cumulative(op: str, x: Any, axis: Any, dtype: Any, include_initial: bool) -> Array:
    from .reductions import _sum_dtype

    x = _coerce(x)
    name = f"cumulative_{op}"
    if x.ndim == 0:
        raise ShapeError(f"{name} needs an array of at least one dimension")
    if axis is None:
        if x.ndim != 1:
            raise ShapeError(f"{name}: axis is required for an array of {x.ndim} "
                             f"dimensions (shape {x.shape})")
        axis = 0
    ax = normalize_axis(axis, x.ndim)
    if dtype is not None:
        dt = as_dtype(dtype)
    elif op == "sum":
        dt = _sum_dtype(x.dtype, None)
    else:
        dt = np.prod(np.ones(1, x.dtype)).dtype
    moved = moveaxis(x, ax, -1)
    src = moved.astype(dt, copy=False)
    # pyopencl's scan takes values of 4 bytes or more: bools and 1- and 2-byte integers
    # are scanned as uint32 (sums and products modulo 2**32, then 2**8 or 2**16, wrap
    # as numpy's do; a bool's running sum or product is nonzero where numpy's is True)
    narrow = dt.itemsize < 4
    if narrow:
        src = src.astype(np.uint32)
    if src.is_lazy or not src.is_contiguous:
        src = src.copy().eval()
    scanned = _scan_rows(src, op)
    if narrow:
        scanned = scanned.astype(dt)
    if include_initial:
        from ..creation import full

        first = full((*moved.shape[:-1], 1), int(_NEUTRAL[op]), dt, x.device)
        scanned = concatenate([first, scanned], axis=-1)
    elif math.prod(moved.shape) == 0:
        scanned = reshape(scanned, moved.shape)
    return moveaxis(scanned, -1, ax)


def cumulative_sum(x: Any, /, *, axis: int | None = None, dtype: Any = None,
                   include_initial: bool = False) -> Array:
    """Running sums along ``axis`` (required beyond 1-D), with ``sum``'s dtype rule;
    ``include_initial`` starts each row with 0."""
    return _cumulative("sum", x, axis, dtype, include_initial)


def cumulative_prod(x: Any, /, *, axis: int | None = None, dtype: Any = None,
                    include_initial: bool = False) -> Array:
    """Running products along ``axis`` (required beyond 1-D), with ``prod``'s dtype rule;
    ``include_initial`` starts each row with 1."""
    return _cumulative("prod", x, axis, dtype, include_initial)


__all__ = ["cumulative_prod", "cumulative_sum"]
