"""A device's buffers, counted against what the device and the process can hold.

The buffers themselves come from the device's backend (:meth:`Backend.buffer_pool
<fuseloop.backends.base.Backend.buffer_pool>`); this module counts them, and turns
the driver's refusals into the backend's ``OutOfMemory`` (a
:class:`~fuseloop.errors.OutOfMemoryError`).

OpenCL drivers do not all fail cleanly when memory runs out: PoCL's CPU device
hands out buffers it cannot back (a later kernel or fill then writes through a
failed allocation and the process dies of SIGSEGV), and accepts requests larger
than its reported global memory.  So every buffer fuseloop makes goes through a
:class:`DeviceMemory`, which keeps the bytes the driver holds for it (the pool's
blocks, in use or held for reuse, and the buffers made outside the pool) and
raises :class:`~fuseloop.errors.DeviceMemoryError` before asking the driver for
more than fits:

* the device's global memory, less what is in use;
* on a CPU device (whose memory is the process's), also the room the process's
  address-space and data-size limits (``ulimit -v``, ``RLIMIT_AS``/``RLIMIT_DATA``)
  leave, less ``PROCESS_MARGIN`` for the driver's and Python's own needs.

Blocks freed by dead arrays go back to the pool, which keeps them for reuse; when
a request does not fit, the pool's unused blocks are given back to the driver and
unheld lazy arrays let go first, and only then is it refused.  The full check
reads the process's memory map, so it runs only when the bytes handed out since
the last one exceed a quarter of the room that check found (the room cannot have
shrunk more than that through fuseloop's own allocations) or ``CHECK_EVERY``.
"""

from __future__ import annotations

import gc
import threading
from typing import TYPE_CHECKING, Any

import numpy as np

from ..errors import DeviceMemoryError, OutOfMemoryError, RuntimeUnavailableError

if TYPE_CHECKING:
    from .devices import Device

try:
    import resource
except ImportError:  # (not on Windows: no process limits to respect there)
    resource = None  # type: ignore[assignment]

# room left for the driver's bookkeeping, its threads and Python itself under a
# process memory limit: a CPU driver needs some after the buffer is made
PROCESS_MARGIN = 64 << 20
# the most bytes handed out between two full checks (each reads /proc: about 10 us),
# so that a limit set later, or host memory the process uses meanwhile, is seen soon
CHECK_EVERY = 32 << 20
_PAGE = 4096


def _process_room() -> int | None:
    """Bytes the process's address-space and data limits still allow (None: unlimited
    or unknown)."""
    if resource is None:
        return None
    limits = [(resource.getrlimit(resource.RLIMIT_AS)[0], 0),
              (resource.getrlimit(resource.RLIMIT_DATA)[0], 5)]  # (statm field)
    limits = [(lim, f) for lim, f in limits if lim != resource.RLIM_INFINITY]
    if not limits:
        return None
    try:
        with open("/proc/self/statm") as f:
            pages = f.read().split()
    except OSError:
        return None
    return min(lim - int(pages[field]) * _PAGE for lim, field in limits)


class DeviceMemory:
    """A device's buffer pool and its other buffers, refusing what cannot fit.

    Callable with a byte count, like pyopencl's allocators (``fl.Device.allocator``).
    ``pool`` is the backend's :class:`~fuseloop.backends.base.BufferPool` of the
    opened device (``context``, ``queue``).
    """

    __slots__ = ("OutOfMemory", "_lock", "_max_alloc", "_refused", "_release", "_slack",
                 "_unchecked", "blocked", "context", "device", "direct", "pool")

    def __init__(self, device: Device, context: Any, queue: Any) -> None:
        from ..backends import backend_for

        backend = backend_for(device)
        self.device = device
        self.context = context
        self._max_alloc = device.max_alloc_size
        self.pool = backend.buffer_pool(device, context, queue)
        #: what :meth:`allocate` raises when the driver refuses (catch OutOfMemoryError)
        self.OutOfMemory: type[OutOfMemoryError] = backend.OutOfMemory
        self._refused = self.pool.refused
        self._release = self._release_direct  # (bound once: every direct buffer holds it)
        self.direct = 0  # bytes of live buffers made outside the pool
        # bytes handed out since the last full check, and how many may be before the next
        self._unchecked = 0
        self._slack = -1
        # reentrant: a dying buffer's __del__ may run while this thread holds it
        self._lock = threading.RLock()
        #: why this runtime may not be used any more (fork, interpreter exit), or None
        self.blocked: str | None = None

    @property
    def in_use(self) -> int:
        """Bytes the driver holds for this device's buffers (pooled blocks included)."""
        return self.pool.managed_bytes + self.direct

    def allocate(self, nbytes: int) -> Any:
        """A buffer of at least ``nbytes`` (at least 1), pooled where the pool can."""
        if self.blocked is not None:
            raise RuntimeUnavailableError(self.blocked)
        if nbytes < 1:
            nbytes = 1
        # at least what the pool allocates: it rounds up to its bin's size, which
        # keeps the leading 4 bits of the size
        size = nbytes + (nbytes >> 4) + 1
        if size > self._max_alloc:
            # the pool's rounding could exceed the largest allocation: exact size instead
            return self._direct(nbytes)
        unchecked = self._unchecked + size
        if unchecked > self._slack:
            self._check(size, nbytes)
        else:
            self._unchecked = unchecked
        try:  # (free while nothing is raised)
            return self.pool.allocate(nbytes)
        except self._refused as exc:
            raise self._refusal(nbytes, exc) from None

    __call__ = allocate

    def host_buffer(self, host: np.ndarray) -> Any:
        """A new buffer holding a copy of ``host``'s bytes (no queue command)."""
        if self.blocked is not None:
            raise RuntimeUnavailableError(self.blocked)
        return self._direct(host.nbytes, host)

    def _direct(self, nbytes: int, host: np.ndarray | None = None) -> Any:
        if nbytes > self._max_alloc:
            raise self._too_large(nbytes)
        self._unchecked += nbytes
        if self._unchecked > self._slack:
            self._check(nbytes, nbytes)
        try:
            buffer = self.pool.buffer(nbytes, host, self._release)
        except self._refused as exc:
            raise self._refusal(nbytes, exc) from None
        with self._lock:
            self.direct += nbytes
        return buffer

    def _refusal(self, nbytes: int, exc: BaseException) -> OutOfMemoryError:
        return self.OutOfMemory(
            f"the driver refused to allocate {nbytes} bytes on {self.device} "
            f"({exc}); {self.in_use} bytes are in use by fuseloop's arrays and its buffer "
            "pool. Delete arrays you no longer need (del x), work on smaller pieces, or "
            "choose a device with more memory (fl.set_device)")

    def _release_direct(self, nbytes: int) -> None:
        with self._lock:
            self.direct -= nbytes

    def _room(self) -> tuple[int, int | None]:
        """(bytes the device has left, bytes the process's limits leave or None)."""
        device_room = self.device.global_mem_size - self.in_use
        process = _process_room() if self.device.type == "cpu" else None
        return device_room, None if process is None else process - PROCESS_MARGIN

    def _too_large(self, nbytes: int) -> DeviceMemoryError:
        device = self.device
        return DeviceMemoryError(
            f"cannot allocate {nbytes} bytes on {device}: its largest single allocation "
            f"is {device.max_alloc_size} bytes (global memory {device.global_mem_size} bytes, "
            f"{self.in_use} in use); use smaller arrays or a device with more memory")

    def _check(self, size: int, nbytes: int) -> None:
        """Raise DeviceMemoryError unless ``size`` more bytes fit (``nbytes`` asked for)."""
        device = self.device
        device_room, process_room = self._room()
        if size > min(device_room, process_room if process_room is not None else device_room):
            # give the pool's unused blocks and unheld arrays' buffers back, then look again
            from ..expr.nodes import register_readers

            register_readers()
            gc.collect()
            self.pool.free_held()
            device_room, process_room = self._room()
        room = device_room if process_room is None else min(device_room, process_room)
        if size > room:
            self._unchecked = 0
            self._slack = -1
            limit = (f"the device reports {device.global_mem_size} bytes of global memory"
                     if process_room is None or device_room <= process_room else
                     f"this process's memory limit (ulimit -v, RLIMIT_AS/RLIMIT_DATA) leaves "
                     f"{max(process_room, 0)} bytes")
            raise DeviceMemoryError(
                f"out of device memory: cannot allocate {nbytes} bytes on {device}; "
                f"{self.in_use} bytes are in use by fuseloop's arrays and its buffer pool "
                f"and {limit}. Delete arrays you no longer need (del x), work on smaller "
                "pieces, or choose a device with more memory (fl.set_device)")
        self._unchecked = 0
        self._slack = min((room - size) // 4, CHECK_EVERY)
