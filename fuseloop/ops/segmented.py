"""Segmented primitives (VexCL's and thrust's ``*_by_key``): ``sort_by_key``,
``inclusive_scan_by_key``, ``exclusive_scan_by_key`` and ``reduce_by_key``.

A *segment* is a run of equal consecutive keys (thrust's definition: ``[1, 1, 2, 1]``
has three segments, the keys need not be sorted).  The scans are pyopencl's segmented
``GenericScanKernel``: the segment starts are found inside the scan by comparing each
key with the one before it (no flag array is written), and a cast of the values to the
result dtype is part of its input expression.  A lazy ``values`` (or ``keys``) is
evaluated by one fuseloop kernel first: the scan kernels are pyopencl's, not lowered
by fuseloop, so the producer cannot be fused into them (as for ``cumulative_sum``).
On CUDA devices the scans are fuseloop's own kernels (:mod:`.segmented_kernels`), and
``sort_by_key`` sorts with CuPy, as ``fl.sort`` does.
``reduce_by_key`` is the inclusive scan plus the compaction of each run's last element
(:mod:`fuseloop.ops.compaction`).  On a CPU device the scans and ``reduce_by_key``
are two kernels of :mod:`fuseloop.ops.segmented_cpu` each instead (pyopencl's scan
is slow on PoCL);
``sort_by_key`` is the stable radix sort of
:mod:`fuseloop.ops.sorting` with the values gathered through its permutation.
"""

from __future__ import annotations

import threading
from typing import Any

import numpy as np

from .. import caches as _caches
from ..array import Array, _coerce
from ..backends import require_backend
from ..dtypes import c_type_name
from ..errors import DeviceError, DTypeError, ShapeError, UnknownOpError
from ..evaluate import allocate
from ..expr.nodes import Gather
from ..runtime.devices import Device
from . import segmented_cpu as _cpu

OPS = ("add", "mul", "max", "min")
_INT64 = np.dtype(np.int64)

# (device, op, value dtype, result dtype, key dtype, exclusive) -> GenericScanKernel
_KERNELS: dict[tuple, Any] = {}
_lock = threading.Lock()
_caches.register("ops.segmented.kernels", _KERNELS.clear, lambda: len(_KERNELS),
                 why="one per device, operation, dtypes and scan kind")


def _combine(op: str, a: str, b: str, floating: bool) -> str:
    """C expression of ``op(a, b)``; max and min propagate NaN as numpy's maximum does."""
    if op == "add":
        return f"({a} + {b})"
    if op == "mul":
        return f"({a} * {b})"
    cmp = ">" if op == "max" else "<"
    nan = f"{a} != {a} || " if floating else ""
    return f"(({nan}{a} {cmp} {b}) ? {a} : {b})"


def _neutral(op: str, dt: np.dtype) -> str:
    if op in ("add", "mul"):
        return "0" if op == "add" else "1"
    ctype = c_type_name(dt)
    if dt.kind == "f":
        return f"(({ctype})(-INFINITY))" if op == "max" else f"(({ctype})INFINITY)"
    info = np.iinfo(dt)
    v = int(info.min if op == "max" else info.max)
    if v == -(2**63):  # (no C literal spells INT64_MIN)
        return "((long)(-9223372036854775807L - 1))"
    return f"(({ctype}){v}{'UL' if v > 2**63 - 1 else 'L'})"


def _scan_kernel(device: Device, op: str, vdt: np.dtype, rdt: np.dtype, kdt: np.dtype,
                 exclusive: bool) -> Any:
    key = (device, op, vdt, rdt, kdt, exclusive)
    with _lock:
        knl = _KERNELS.get(key)
        if knl is None:
            from pyopencl.scan import GenericScanKernel

            rt, vt, kt = c_type_name(rdt), c_type_name(vdt), c_type_name(kdt)
            out = (f"dst[i] = {_combine(op, 'init', 'prev_item', rdt.kind == 'f')};" if exclusive
                   else "dst[i] = item;")
            knl = _KERNELS[key] = GenericScanKernel(
                device.context, rdt,
                arguments=(f"__global const {kt} *keys, __global const {vt} *src, "
                           f"__global {rt} *dst, {rt} init"),
                input_expr=f"(({rt})src[i])",
                scan_expr=f"across_seg_boundary ? b : {_combine(op, 'a', 'b', rdt.kind == 'f')}",
                neutral=_neutral(op, rdt), output_statement=out,
                is_segment_start_expr="i == 0 || keys[i] != keys[i - 1]",
                index_dtype=_INT64)
    return knl


def _result_dtype(op: str, dt: np.dtype) -> np.dtype:
    # the values' dtype (thrust's rule), except that booleans are counted (numpy's sum)
    if dt == np.bool_:
        return _INT64 if op in ("add", "mul") else dt
    return dt


def _prepare(name: str, keys: Any, values: Any, op: str | None = None
             ) -> tuple[Array, Array]:
    """``keys`` and ``values`` as arrays on one device, checked (1-D, equal lengths)."""
    from ..creation import asarray

    if op is not None and op not in OPS:
        raise UnknownOpError(f"{name}: unknown op {op!r}; expected one of "
                             f"{', '.join(map(repr, OPS))}")
    keys, values = _coerce(keys), _coerce(values)
    if not isinstance(keys, Array):
        keys = asarray(np.asarray(keys))
    if not isinstance(values, Array):
        values = asarray(np.asarray(values), device=keys.device)
    if keys.ndim != 1:
        raise ShapeError(f"{name}: keys must be 1-D, got shape {keys.shape}")
    if values.ndim != 1 or values.shape[0] != keys.shape[0]:
        raise ShapeError(f"{name}: values of shape {values.shape} do not match keys of "
                         f"shape {keys.shape}: give one value per key (1-D, same length)")
    for what, a in (("keys", keys), ("values", values)):
        if a.dtype.kind not in "biuf":
            raise DTypeError(f"{name}: {what} of dtype {a.dtype} are not supported "
                             "(booleans, integers and floats are)")
    if values.device is not keys.device:
        raise DeviceError(f"{name}: keys live on {keys.device.name} but values on "
                          f"{values.device.name}; move one with fl.asarray(x, device=...)")
    return keys, values


def _concrete(a: Array) -> Array:
    """``a`` in a contiguous buffer of its own (booleans as uint8: the scan reads bytes)."""
    if a.dtype == np.bool_:
        a = a.astype(np.uint8)
    return a.copy().eval() if a.is_lazy or not a.is_contiguous else a


def _scan_dtype(rdt: np.dtype) -> np.dtype:
    """The dtype the scan runs in: pyopencl's scan takes 4- or 8-byte values, so
    narrower ones (and booleans) are scanned in 32 bits and converted back (sums and
    products wrap alike, maxima and minima are the same)."""
    if rdt.itemsize >= 4:
        return rdt
    return np.dtype(np.int32 if rdt.kind == "i" else np.uint32)


def _scan(keys: Array, values: Array, op: str, exclusive: bool, initial: Any) -> Array:
    """The segmented scan of checked ``keys`` and ``values`` (see :func:`_prepare`):
    pyopencl's on OpenCL devices, fuseloop's own kernels elsewhere (CUDA: see
    :mod:`fuseloop.ops.segmented_kernels`)."""
    rdt = _result_dtype(op, values.dtype)
    if keys.shape[0] and _cpu.supported(keys.device, keys.dtype, values.dtype):
        return _cpu.scan_by_key(_concrete(keys), _concrete(values), op, rdt, exclusive,
                                initial)
    sdt = _scan_dtype(rdt)
    kc, vc = _concrete(keys), _concrete(values)
    if keys.device.backend == "cuda":
        from .segmented_kernels import scan

        out = scan(kc, vc, op, sdt, exclusive, sdt.type(rdt.type(initial)))
        return out if sdt == rdt else out.astype(rdt)
    require_backend(keys.device, "a scan by key (pyopencl's segmented scan)")
    import pyopencl.array as cla

    dev, n = keys.device, keys.shape[0]
    out = Array._concrete(allocate(n * sdt.itemsize, dev), sdt, (n,))
    if n:
        knl = _scan_kernel(dev, op, vc.dtype, sdt, kc.dtype, exclusive)
        q = dev.queue
        knl(cla.Array(q, (n,), kc.dtype, data=kc._storage.buffer),  # type: ignore[union-attr]
            cla.Array(q, (n,), vc.dtype, data=vc._storage.buffer),  # type: ignore[union-attr]
            cla.Array(q, (n,), sdt, data=out._storage.buffer),  # type: ignore[union-attr]
            sdt.type(rdt.type(initial)), queue=q)
    return out if sdt == rdt else out.astype(rdt)


def inclusive_scan_by_key(keys: Any, values: Any, op: str = "add") -> Array:
    """Running ``op`` (``"add"``, ``"mul"``, ``"max"``, ``"min"``) of ``values`` within
    each run of equal consecutive ``keys`` (thrust's ``inclusive_scan_by_key``).

    The result has ``values``' dtype (booleans: int64 for add and mul)."""
    k, v = _prepare("inclusive_scan_by_key", keys, values, op)
    return _scan(k, v, op, False, 0)


def exclusive_scan_by_key(keys: Any, values: Any, op: str = "add",
                          initial: Any = 0) -> Array:
    """Like :func:`inclusive_scan_by_key`, each element excluded from its own result:
    a run starts with ``initial``, which also begins every running ``op``."""
    k, v = _prepare("exclusive_scan_by_key", keys, values, op)
    return _scan(k, v, op, True, initial)


def reduce_by_key(keys: Any, values: Any, op: str = "add") -> tuple[Array, Array]:
    """``(run keys, reductions)``: one key and one ``op``-reduction of ``values`` per run
    of equal consecutive ``keys`` (thrust's ``reduce_by_key``; sort the keys first, e.g.
    with :func:`sort_by_key`, to reduce per distinct key)."""
    from ..assignment import compute
    from ..creation import ones
    from .masks import flat_positions
    from .shape import concatenate

    k, v = _prepare("reduce_by_key", keys, values, op)
    kc = _concrete(k)  # (read by the scan and the gather: evaluated once)
    if k.shape[0] and _cpu.supported(k.device, kc.dtype, v.dtype):
        out_keys, out_vals = _cpu.reduce_by_key(kc, _concrete(v), op,
                                                _result_dtype(op, v.dtype))
        return (out_keys.astype(np.bool_) if k.dtype == np.bool_ else out_keys), out_vals
    scanned = _scan(kc, v, op, False, 0)
    if k.shape[0] == 0:
        return k.copy(), scanned
    # the last element of each run holds the run's reduction
    last = concatenate([kc[1:] != kc[:-1], ones(1, np.bool_, device=k.device)])
    pos = flat_positions(last)
    out_keys = Array._lazy(Gather(kc._node, pos._node, 0, checked=False), k.device)
    out_vals = Array._lazy(Gather(scanned._node, pos._node, 0, checked=False), k.device)
    if k.dtype == np.bool_:
        out_keys = out_keys.astype(np.bool_)
    compute(out_keys, out_vals)
    return out_keys, out_vals


def sort_by_key(keys: Any, values: Any) -> tuple[Array, Array]:
    """``(keys sorted, values permuted alike)``: a stable sort (equal keys keep their
    order; NaN keys last), as thrust's ``sort_by_key``."""
    from .sorting import _sort_rows

    k, v = _prepare("sort_by_key", keys, values)
    done = _sort_rows(k, False)
    return done.values, Array._lazy(Gather(v._node, done.order._node, 0, checked=False),
                                    k.device)


__all__ = ["exclusive_scan_by_key", "inclusive_scan_by_key", "reduce_by_key", "sort_by_key"]
