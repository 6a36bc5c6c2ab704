"""Array creation: host copies, filled buffers and lazy generators."""

from __future__ import annotations

import functools
import inspect
import math
import operator
from collections.abc import Callable
from typing import Any, TypeVar, cast

import numpy as np

from .array import Array, Constant
from .backends import backend_for
from .dtypes import as_dtype, result_type, scalar_kind
from .errors import DTypeError, ShapeError
from .evaluate import _check_alloc_size, allocate, cast_node, upload
from .expr.nodes import Apply, Iota, Scalar
from .multi_hooks import splits
from .runtime.devices import Device, device_set, find_device, get_device
from .runtime.transfer import wait
from .trace_hooks import Contents, by_traced_code, constant_buffers, constant_contents

ShapeLike = int | tuple[int, ...] | list[int]
F = TypeVar("F", bound=Callable[..., Any])


def _splits_in_device_set(func: F) -> F:
    """Decorator: called without a device inside ``with fl.device([...])``, ``func``
    makes an array split over the device set (:mod:`fuseloop.multi`)."""
    at = list(inspect.signature(func).parameters).index("device")

    @functools.wraps(func)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        if (args[at] if len(args) > at else kwargs.get("device")) is None:
            dset = device_set()
            if dset is not None:
                from .multi import create

                return create(func, dset, args, kwargs)
        return func(*args, **kwargs)

    return cast(F, wrapper)


def _device(device: Any) -> Device:
    return get_device() if device is None else find_device(device)


def _shape(shape: ShapeLike) -> tuple[int, ...]:
    if isinstance(shape, int | np.integer):
        shape = (int(shape),)
    try:
        shape = tuple(int(s) for s in shape)
    except TypeError:
        raise ShapeError(f"a shape is an int or a tuple of ints, not {shape!r}") from None
    if any(s < 0 for s in shape):
        raise ShapeError(f"negative dimensions are not allowed: {shape}")
    return shape


def _check_device_dtype(dtype: np.dtype, device: Device) -> None:
    if dtype == np.float64 and not device.has_fp64:
        raise DTypeError(
            f"device {device.name} does not support float64; use dtype=np.float32 "
            "or choose a device with fp64 (fl.devices(fp64=True))")


def _default_float(dtype: Any, dev: Device) -> Any:
    """``dtype``, or for None the default floating dtype: float64 where the device has
    fp64 (numpy's), else float32 (the Array API's default for such a device)."""
    if dtype is not None:
        return dtype
    return np.float64 if dev.has_fp64 else np.float32


@_splits_in_device_set
def empty(shape: ShapeLike, dtype: Any = None, device: Any = None) -> Array:
    """A new uninitialised array (by default of float64, float32 without fp64)."""
    dev, shp = _device(device), _shape(shape)
    dt = as_dtype(_default_float(dtype, dev))
    _check_device_dtype(dt, dev)
    out = Array._concrete(allocate(math.prod(shp) * dt.itemsize, dev), dt, shp)
    if constant_buffers and by_traced_code():  # (fl.fuse tracing: the function's new array)
        constant_contents(out._storage.buffer, Contents())  # type: ignore[union-attr]
    return out


def _fill_dtype(fill_value: Any) -> Any:
    """The dtype ``np.full`` picks for ``fill_value``: ``np.array(fill_value).dtype``
    (a Python int past int64 is uint64; one past uint64 would be an object array)."""
    dt = np.asarray(fill_value).dtype
    if dt.kind == "O" and isinstance(fill_value, int):
        raise OverflowError(
            f"Python integer {fill_value} fits neither int64 nor uint64 (numpy would make "
            "an object array, which fuseloop does not support); pass a float or a dtype")
    return dt


def _fill_pattern(fill_value: Any, dtype: np.dtype) -> np.ndarray:
    """``fill_value`` as one element of ``dtype``, converted as ``np.full`` converts it
    (numpy 2, NEP 50): a Python int outside the dtype's range is an OverflowError,
    anything else is cast (numpy scalars and floats wrap or truncate as C casts do)."""
    pattern = np.empty((), dtype)
    np.copyto(pattern, fill_value, casting="unsafe")
    return pattern


@_splits_in_device_set
def full(shape: ShapeLike, fill_value: Any, dtype: Any = None, device: Any = None) -> Array:
    """A new array filled with ``fill_value`` (dtype and conversion as ``np.full``)."""
    if dtype is None:
        dtype = _fill_dtype(fill_value)
        if isinstance(fill_value, float) and not _device(device).has_fp64:
            dtype = np.float32  # a Python float fills the device's default float
    if np.ndim(fill_value) != 0:
        # an array-like fill broadcasts (np.full(3, [1, 2, 3])): filled on the host
        host = np.full(_shape(shape), np.asarray(fill_value), as_dtype(dtype))
        return asarray(host, device=device)
    out = empty(shape, dtype, device)
    pattern = _fill_pattern(fill_value, out.dtype)  # (raises before any fill is enqueued)
    if out.size:
        if out.dtype == np.bool_:
            pattern = pattern.astype(np.uint8)
        backend_for(out.device).fill(out.device, out._storage.buffer,  # type: ignore[union-attr]
                                     pattern, out.nbytes)
        if constant_buffers:  # (fl.fuse tracing: a constant of the function)
            constant_contents(out._storage.buffer, Contents(pattern))  # type: ignore[union-attr]
    return out


@_splits_in_device_set
def zeros(shape: ShapeLike, dtype: Any = None, device: Any = None) -> Array:
    """A new array of zeros (by default of float64, float32 without fp64)."""
    return full(shape, 0, _default_float(dtype, _device(device)), device)


@_splits_in_device_set
def ones(shape: ShapeLike, dtype: Any = None, device: Any = None) -> Array:
    """A new array of ones (by default of float64, float32 without fp64)."""
    return full(shape, 1, _default_float(dtype, _device(device)), device)


def _like(proto: Any, dtype: Any, shape: Any, device: Any) -> tuple:
    return (_shape(shape) if shape is not None else tuple(np.shape(proto)),
            dtype if dtype is not None else np.asarray(proto).dtype
            if not isinstance(proto, Array) else proto.dtype,
            device if device is not None else proto.device if isinstance(proto, Array)
            else None)


@splits()
def empty_like(a: Any, dtype: Any = None, shape: Any = None, device: Any = None) -> Array:
    s, d, dev = _like(a, dtype, shape, device)
    return empty(s, d, dev)


@splits()
def zeros_like(a: Any, dtype: Any = None, shape: Any = None, device: Any = None) -> Array:
    s, d, dev = _like(a, dtype, shape, device)
    return zeros(s, d, dev)


@splits()
def ones_like(a: Any, dtype: Any = None, shape: Any = None, device: Any = None) -> Array:
    s, d, dev = _like(a, dtype, shape, device)
    return ones(s, d, dev)


@splits()
def full_like(a: Any, fill_value: Any, dtype: Any = None, shape: Any = None,
              device: Any = None) -> Array:
    s, d, dev = _like(a, dtype, shape, device)
    return full(s, fill_value, d, dev)


_COPY_NEEDED = ("asarray(copy=False): {why} needs a copy; pass copy=None to allow one "
                "(or copy=True to always copy)")


@_splits_in_device_set
def asarray(obj: Any, dtype: Any = None, device: Any = None, *,
            copy: bool | None = None) -> Array:
    """Copy host data to a device (or convert/move an existing fuseloop array).

    ``copy`` as in the Array API: True always copies, False raises ValueError where a
    copy is needed (host data always needs one: device memory is separate), None copies
    only where needed.
    """
    if isinstance(obj, Array):
        dev = obj.device if device is None else find_device(device)
        same_dtype = dtype is None or as_dtype(dtype) == obj.dtype
        if copy is False and (dev is not obj.device or not same_dtype):
            why = (f"moving to {dev}" if dev is not obj.device
                   else f"converting {obj.dtype} to {as_dtype(dtype)}")
            raise ValueError(_COPY_NEEDED.format(why=why))
        if dev is not obj.device:
            return asarray(obj.get(), dtype, dev)
        if not same_dtype:
            return obj.astype(dtype)
        return obj.copy() if copy else obj
    if hasattr(obj, "__cuda_array_interface__"):  # (CUDA torch tensors, CuPy arrays)
        from .cuda_interop import from_cuda

        return from_cuda(obj, _device(device), dtype, copy)
    if copy is False:
        raise ValueError(_COPY_NEEDED.format(why=f"uploading {type(obj).__name__} to the "
                                                 "device"))
    dev = _device(device)
    if _is_pyopencl_array(obj):
        return _from_pyopencl(obj, dtype, dev)
    if isinstance(obj, np.ndarray):  # too large: refused before any conversion or copy
        itemsize = obj.dtype.itemsize if dtype is None else np.dtype(dtype).itemsize
        _check_alloc_size(obj.size * itemsize, dev)
    try:
        host = np.asarray(obj, dtype=None if dtype is None else np.dtype(dtype))
    except (TypeError, ValueError) as exc:
        raise DTypeError(f"cannot convert {type(obj).__name__} to an array: {exc}") from None
    if not host.dtype.isnative:
        # byte-swapped data (np.dtype('>f4') on a little-endian host): converted to the
        # native order, values unchanged, as numpy's own arithmetic would
        host = host.astype(host.dtype.newbyteorder("="))
    dt = as_dtype(host.dtype)
    _check_device_dtype(dt, dev)
    host = np.asarray(host, order="C")  # (np.ascontiguousarray makes 0-d arrays 1-d)
    storage = upload(host, dev)
    if constant_buffers:  # (fl.fuse tracing: host data, a constant of the function)
        constant_contents(storage.buffer, Contents(host=host.copy()))
    return Array._concrete(storage, dt, host.shape)


def _is_pyopencl_array(obj: Any) -> bool:
    # (pyopencl.array is imported only when an object might be one of its arrays)
    if type(obj).__module__ != "pyopencl.array":
        return False
    import pyopencl.array as cla

    return isinstance(obj, cla.Array)


def _pyopencl_host(src: Any) -> np.ndarray:
    """A numpy copy of ``src``, strided too (pyopencl's ``get`` takes contiguous ones)."""
    import pyopencl as cl  # (src is a pyopencl array: pyopencl is loaded already)

    shape, dtype = tuple(int(n) for n in src.shape), np.dtype(src.dtype)
    if not src.size:
        return np.empty(shape, dtype)
    if src.flags.forc:
        return src.get()
    # the bytes the view spans, read at once, then seen through its strides
    lo = sum(min(0, (n - 1) * s) for n, s in zip(shape, src.strides))
    hi = sum(max(0, (n - 1) * s) for n, s in zip(shape, src.strides)) + dtype.itemsize
    raw = np.empty(hi - lo, np.uint8)
    queue = src.queue if src.queue is not None else cl.CommandQueue(src.context)
    cl.enqueue_copy(queue, raw, src.base_data, src_offset=src.offset + lo,
                    wait_for=src.events or None, is_blocking=True)
    return np.ndarray(shape, dtype, buffer=raw, offset=-lo, strides=src.strides).copy()


def _from_pyopencl(src: Any, dtype: Any, dev: Device) -> Array:
    """A copy of the ``pyopencl.array.Array`` ``src`` on ``dev``: buffer to buffer when it
    lives in the device's context and is C-contiguous, else through the host."""
    if not src.size or not src.flags.c_contiguous or dev.backend != "opencl" \
            or src.context != dev.context:
        return asarray(_pyopencl_host(src), dtype, dev)
    dt = as_dtype(src.dtype)
    _check_device_dtype(dt, dev)
    shape = tuple(int(n) for n in src.shape)
    storage = allocate(src.nbytes, dev)
    if src.nbytes:
        # after the writes src's queue has enqueued; waited for, so src may be freed
        wait_for = list(src.events) if src.events else None
        if src.queue is not None and src.queue != dev.queue:
            src.queue.finish()
            wait_for = None
        event = backend_for(dev).copy(dev, storage.buffer, src.base_data, src.nbytes,
                                      src.offset, wait_for)
        wait(event, dev)
    out = Array._concrete(storage, dt, shape)
    return out if dtype is None or as_dtype(dtype) == dt else out.astype(dtype)


@_splits_in_device_set
def arange(start: Any, stop: Any = None, step: Any = 1, dtype: Any = None,
           device: Any = None) -> Array:
    """Like ``np.arange``, but lazy: inside an expression it allocates nothing."""
    if stop is None:
        start, stop = 0, start
    for v in (start, stop, step):
        if isinstance(v, Array | Constant):
            raise TypeError("fl.arange takes Python or numpy scalars")
    if step == 0:
        raise ValueError("arange: step must not be zero")
    length = max(0, math.ceil((stop - start) / step))
    # numpy's dtype: a float stop makes integer start and step float too
    probe = type(stop)(start + step) if isinstance(stop, float | np.floating) else start + step
    natural = np.arange(start, probe, step).dtype if dtype is None else as_dtype(dtype)
    natural = as_dtype(natural)
    dev = _device(device)
    work: np.dtype = np.dtype(np.int64) if natural.kind in "iub" else np.dtype(np.float64)
    if natural == np.float32 and not dev.has_fp64:
        work = np.dtype(np.float32)
    _check_device_dtype(work, dev)
    index = Iota((length,), np.dtype(np.int64))
    node = cast_node(index, work)
    if step != 1:
        node = Apply("multiply", (Scalar(work.type(step)), node), (work, work, work), node.shape)
    if start != 0:
        node = Apply("add", (Scalar(work.type(start)), node), (work, work, work), node.shape)
    return Array._lazy(cast_node(node, natural), dev)


@_splits_in_device_set
def linspace(start: Any, stop: Any, num: int = 50, endpoint: bool = True, dtype: Any = None,
             device: Any = None) -> Array:
    """Like ``np.linspace`` (lazy): ``num`` evenly spaced values, ending at ``stop``."""
    try:
        num = operator.index(num)  # (as numpy: a float would reach the allocator)
    except TypeError:
        raise TypeError(f"'{type(num).__name__}' object cannot be interpreted as an integer: "
                        f"linspace's num must be an integer, not {num!r}") from None
    if num < 0:
        raise ValueError(f"number of samples, {num}, must be non-negative")
    dev = _device(device)
    out_dt = as_dtype(dtype) if dtype is not None else \
        result_type(scalar_kind(start), scalar_kind(stop), float)
    work = np.dtype(np.float64) if dev.has_fp64 else np.dtype(np.float32)
    div = (num - 1) if endpoint else num
    step = (stop - start) / div if div > 0 else 0.0
    index = Iota((num,), np.dtype(np.int64))
    x = Array._lazy(cast_node(index, work), dev)
    values = x * work.type(step) + work.type(start)
    if endpoint and num > 1:
        from .ufuncs import where

        values = where(Array._lazy(index, dev) == num - 1, work.type(stop), values)
    return values.astype(out_dt) if values.dtype != out_dt else values


def eye(n_rows: int, n_cols: int | None = None, /, *, k: int = 0, dtype: Any = None,
        device: Any = None) -> Array:
    """Ones on the ``k``-th diagonal, zeros elsewhere (lazy: nothing is allocated until a
    consumer reads it); by default of float64 (float32 without fp64)."""
    rows_n, cols_n = (operator.index(n_rows),
                      operator.index(n_rows if n_cols is None else n_cols))
    dev = _device(device)
    dt = as_dtype(_default_float(dtype, dev))
    _check_device_dtype(dt, dev)
    shape = _shape((rows_n, cols_n))
    k = operator.index(k)
    if not -rows_n < k < cols_n:  # no diagonal element (and k may pass int64's range)
        return zeros(shape, dt, dev)
    index = np.dtype(np.int64)
    rows = Array._lazy(Iota(shape, index, (1, 0), 0), dev)
    cols = Array._lazy(Iota(shape, index, (0, 1), 0), dev)
    return (cols - rows == k).astype(dt)


def meshgrid(*arrays: Any, indexing: str = "xy") -> list[Array]:
    """Coordinate matrices from 1-D arrays (``numpy.meshgrid``; new arrays, lazy)."""
    from .ops.shape import _lazy_copy, broadcast_to, reshape

    if indexing not in ("xy", "ij"):
        raise ValueError(f"meshgrid: indexing must be 'xy' or 'ij', not {indexing!r}")
    arrs = [asarray(a) for a in arrays]
    for a in arrs:
        if a.ndim != 1:
            raise ShapeError(f"meshgrid takes 1-D arrays, got shape {a.shape}")
    shape = [a.shape[0] for a in arrs]
    if indexing == "xy" and len(arrs) > 1:
        shape[0], shape[1] = shape[1], shape[0]
    out = []
    for k, a in enumerate(arrs):
        axis = (1 - k if k < 2 else k) if indexing == "xy" and len(arrs) > 1 else k
        unit = tuple(a.shape[0] if d == axis else 1 for d in range(len(arrs)))
        out.append(_lazy_copy(broadcast_to(reshape(a, unit), tuple(shape))))
    return out


def astype(x: Any, dtype: Any, /, *, copy: bool = True, device: Any = None) -> Any:
    """``x`` converted to ``dtype`` (and moved to ``device``): the Array API's function."""
    if not isinstance(x, Array):
        if device is not None:
            return asarray(x, dtype, device)
        return np.asarray(x).astype(as_dtype(dtype))
    if device is not None and find_device(device) is not x.device:
        x = asarray(x, device=device)
        copy = False  # (the move made a new array)
    return x.astype(dtype, copy=copy)


__all__ = [
    "arange",
    "asarray",
    "astype",
    "empty",
    "empty_like",
    "eye",
    "full",
    "full_like",
    "linspace",
    "meshgrid",
    "ones",
    "ones_like",
    "zeros",
    "zeros_like",
]
