"""Arrays on CUDA devices shared with torch, CuPy and JAX without a copy, and
fuseloop's work on a caller's stream (``fl.cuda``).

* ``x.__cuda_array_interface__`` (version 3) and ``x.__dlpack__()`` of an array on a
  CUDA device describe its own device memory: ``torch.as_tensor(x, device="cuda")``,
  ``cupy.asarray(x)``, ``torch.from_dlpack(x)`` and ``jax.dlpack.from_dlpack(x)``
  read it in place.  The interface names fuseloop's stream, so a consumer orders
  its reads after fuseloop's writes.
* ``fl.asarray(t)`` of an object with ``__cuda_array_interface__`` (a CUDA torch
  tensor, a CuPy array) on a CUDA device, and ``fl.from_dlpack`` of a CUDA DLPack
  producer, wrap its memory (C-contiguous; otherwise a copy, and ``copy=False``
  raises ``BufferError``); the producer is kept alive while the array is.
* ``with fl.cuda.stream(torch.cuda.current_stream()):`` runs fuseloop's launches
  and copies on that stream for the block.
"""

from __future__ import annotations

import contextlib
import weakref
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

import numpy as np

from .errors import DeviceError

if TYPE_CHECKING:
    from .array import Array

_DL_CUDA = 2
# a Storage over a producer's memory -> the producer, kept alive while it lives
_owners: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()


class _Foreign:
    """Device memory that another library allocated: its address and size."""

    __slots__ = ("ptr", "size")

    def __init__(self, ptr: int, size: int) -> None:
        self.ptr = ptr
        self.size = size


def _on_cuda(x: Array, what: str) -> None:
    if x.device.backend != "cuda":
        raise AttributeError(f"{what} exists for arrays on CUDA devices only; this one is on "
                             f"{x.device.name} ({x.device.backend})")


def _own_buffer(x: Array) -> Array:
    """``x`` evaluated into a buffer it fills in C order (a copy for a strided view)."""
    x.eval()
    if not x.is_contiguous:
        x = x.copy().eval()
    from .flags import check_pending

    check_pending()  # (a gather's unread range flag: reported before a consumer reads)
    return x


def cuda_array_interface(x: Array) -> dict[str, Any]:
    """``x.__cuda_array_interface__``: version 3, fuseloop's stream included."""
    _on_cuda(x, "__cuda_array_interface__")
    x = _own_buffer(x)
    storage = x._storage
    assert storage is not None
    queue = x.device.queue  # (enqueues deferred launches first)
    return {"shape": tuple(x.shape), "typestr": x.dtype.str, "strides": None,
            "data": (int(storage.buffer.ptr) if x.size else 0, False), "version": 3,
            "stream": int(queue.ptr) or None}


def _cupy_view(x: Array) -> Any:
    import cupy

    x = _own_buffer(x)
    storage = x._storage
    assert storage is not None
    memory = cupy.cuda.UnownedMemory(int(storage.buffer.ptr), max(storage.nbytes, 1), storage,
                                     device_id=x.device.cl_device.ordinal)
    return cupy.ndarray(x.shape, x.dtype, cupy.cuda.MemoryPointer(memory, 0))


def dlpack(x: Array, stream: Any = None, max_version: Any = None, dl_device: Any = None,
           copy: bool | None = None) -> Any:
    """``__dlpack__`` of an array on a CUDA device: its own memory (no copy), or a
    copy when ``copy=True``."""
    view = _cupy_view(x)
    if copy:
        with x.device.queue:
            view = view.copy()
    # the consumer's stream waits for fuseloop's work (DLPack's stream argument)
    x.device.queue.synchronize() if stream is None else _wait_on(x.device.queue, stream)
    kwargs: dict[str, Any] = {}
    if max_version is not None:
        kwargs["max_version"] = max_version
    if dl_device is not None:
        kwargs["dl_device"] = dl_device
    return view.__dlpack__(stream=-1, **kwargs)


def _wait_on(queue: Any, consumer: Any) -> None:
    """Make the consumer's stream (DLPack's integer convention) wait for ``queue``."""
    import cupy

    if consumer in (-1, None):
        return
    from .backends.cuda import event_on

    ptr = {1: cupy.cuda.Stream.null.ptr, 2: cupy.cuda.Stream.ptds.ptr}.get(consumer, consumer)
    cupy.cuda.ExternalStream(ptr).wait_event(event_on(queue))


def dlpack_device(x: Array) -> tuple[int, int]:
    return (_DL_CUDA, x.device.cl_device.ordinal)


def from_cuda(obj: Any, device: Any, dtype: Any = None, copy: bool | None = None) -> Array:
    """A fuseloop array over the memory of ``obj`` (``__cuda_array_interface__``)."""
    from .array import Array
    from .dtypes import as_dtype
    from .expr.nodes import Storage

    cai = obj.__cuda_array_interface__
    shape = tuple(int(n) for n in cai["shape"])
    dt = as_dtype(np.dtype(cai["typestr"]))
    strides = cai.get("strides")
    contiguous = strides is None or tuple(strides) == _c_strides(shape, dt.itemsize)
    ptr = int(cai["data"][0])
    why = ("it is copied: copy=True" if copy else
           f"the device is not a CUDA device ({device.name}, {device.backend})"
           if device.backend != "cuda" else
           "it is not C-contiguous" if not contiguous else
           f"it is on CUDA device {_ordinal_of(ptr)}, not {device.cl_device.ordinal}"
           if _ordinal_of(ptr) not in (None, device.cl_device.ordinal) else
           f"a dtype conversion to {np.dtype(dtype)} was asked for"
           if dtype is not None and np.dtype(dtype) != dt else "")
    if why:
        if copy is False:
            raise BufferError(f"fl.asarray cannot share this array's memory: {why}")
        import cupy

        host = cupy.asnumpy(cupy.asarray(obj))
        from .creation import asarray

        return asarray(host, dtype=dtype, device=device)
    stream = cai.get("stream")
    if stream:
        import cupy

        # the producer's pending writes finish before fuseloop's stream reads
        _wait_on(cupy.cuda.ExternalStream(int(stream)), device.queue.ptr)
    nbytes = int(np.prod(shape, dtype=np.int64)) * dt.itemsize
    storage = Storage(_Foreign(ptr, nbytes), nbytes, device)
    _owners[storage] = obj
    return Array._concrete(storage, dt, shape)


def from_dlpack(obj: Any, device: Any, copy: bool | None = None) -> Array:
    """A fuseloop array from a CUDA DLPack producer (through CuPy, no copy)."""
    import cupy

    return from_cuda(cupy.from_dlpack(obj), device, copy=copy)


def _c_strides(shape: tuple[int, ...], itemsize: int) -> tuple[int, ...]:
    strides, step = [], itemsize
    for n in reversed(shape):
        strides.append(step)
        step *= max(n, 1)
    return tuple(reversed(strides))


def _ordinal_of(ptr: int) -> int | None:
    import cupy

    if not ptr:
        return None
    try:
        return int(cupy.cuda.runtime.pointerGetAttributes(ptr).device)
    except Exception:  # (host memory or a driver that cannot tell)
        return None


@contextlib.contextmanager
def stream(external: Any, device: Any = None) -> Iterator[Any]:
    """Run fuseloop's work on ``device`` (default: the current device, a CUDA one) on
    the caller's stream for the block: a torch stream (``cuda_stream``), a CuPy stream
    (``ptr``) or a raw ``cudaStream_t`` address.  Work enqueued before the block is
    ordered before it, and work in the block before what follows it."""
    import cupy

    from .runtime.devices import _runtime, get_device

    dev = get_device() if device is None else device
    if dev.backend != "cuda":
        raise DeviceError(f"fl.cuda.stream needs a CUDA device, not {dev.name} ({dev.backend})")
    ptr = getattr(external, "cuda_stream", None) or getattr(external, "ptr", None) or external
    if not isinstance(ptr, int):
        raise TypeError(f"fl.cuda.stream takes a torch or CuPy stream or a stream address, "
                        f"not {type(external).__name__}")
    rt = _runtime(dev)
    with rt.launch_lock:
        if rt.deferred:
            rt.flush()
        own = rt.queue
        theirs = cupy.cuda.ExternalStream(ptr, dev.cl_device.ordinal)
        from .backends.cuda import STREAM_DEVICES

        STREAM_DEVICES[ptr] = dev.cl_device.ordinal
        _wait_on(own, ptr)
        rt.queue = theirs
    try:
        yield theirs
    finally:
        with rt.launch_lock:
            if rt.deferred:
                rt.flush()
            _wait_on(theirs, own.ptr)
            rt.queue = own


__all__ = ["cuda_array_interface", "dlpack", "dlpack_device", "from_cuda", "from_dlpack",
           "stream"]
