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
shrunk more than that through fuseloop's own allocations) or ``CHECK_EVERY``; on a
device with memory of its own (a GPU) only when they exceed that room.

Buffers of at least the pool's ``huge_from`` bytes (a CPU device's, where the kernel gives
huge pages only on request: :mod:`fuseloop.runtime.huge_pages`) are taken from the pool by
:meth:`DeviceMemory.allocate` alone, which has a block new from the driver advised before
its first use; the hot paths' own allocation (:meth:`DeviceMemory.reserve`) leaves them to it.
"""

from __future__ import annotations

import gc
import threading
from typing import TYPE_CHECKING, Any

import numpy as np

from ..errors import DeviceMemoryError, OutOfMemoryError, RuntimeUnavailableError

if TYPE_CHECKING:
    from ..backends.base import BufferPool
    from .devices import Device

try:
    import resource
    _getrlimit, _AS, _DATA = resource.getrlimit, resource.RLIMIT_AS, resource.RLIMIT_DATA
    _UNLIMITED = resource.RLIM_INFINITY
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
    space, data = _getrlimit(_AS)[0], _getrlimit(_DATA)[0]
    if space == _UNLIMITED and data == _UNLIMITED:  # (the common case: no /proc read)
        return None
    limits = [(lim, f) for lim, f in ((space, 0), (data, 5)) if lim != _UNLIMITED]  # (statm)
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

    __slots__ = ("OutOfMemory", "_blocked", "_huge_from", "_lock", "_max_alloc", "_plain_max",
                 "_pool", "_release", "context", "credit", "device", "direct", "pooled",
                 "refused")

    def __init__(self, device: Device, context: Any, queue: Any) -> None:
        from ..backends import backend_for

        backend = backend_for(device)
        self.device = device
        self.context = context
        self._max_alloc = device.max_alloc_size
        pool = backend.buffer_pool(device, context, queue)
        self.refused = pool.refused
        self.pool = pool
        #: what :meth:`allocate` raises when the driver refuses (catch OutOfMemoryError)
        self.OutOfMemory: type[OutOfMemoryError] = backend.OutOfMemory
        self._release = self._release_direct  # (bound once: every direct buffer holds it)
        self.direct = 0  # bytes of live buffers made outside the pool
        #: bytes that may be handed out before the next full check (negative: check at
        #: the next allocation)
        self.credit = -1
        # reentrant: a dying buffer's __del__ may run while this thread holds it
        self._lock = threading.RLock()
        self._blocked: str | None = None

    @property
    def pool(self) -> BufferPool:
        """The backend's buffer pool.  ``pooled`` is its ``allocate`` and ``refused``
        the driver's refusals (the backend pool's), kept for the hot paths' own
        allocation (see :meth:`reserve`)."""
        return self._pool

    @pool.setter
    def pool(self, pool: BufferPool) -> None:
        self._pool = pool
        self.pooled = pool.allocate
        # from this size allocate takes the pool's block by _large: its huge pages are
        # advised when it is new (huge_pages); a stand-in pool may lack the attribute
        huge_from = getattr(pool, "huge_from", None)
        self._huge_from = 1 << 62 if huge_from is None else huge_from
        self._plain_max = min(self._max_alloc, self._huge_from - 1)

    @property
    def blocked(self) -> str | None:
        """Why this runtime may not be used any more (fork, interpreter exit), or None."""
        return self._blocked

    @blocked.setter
    def blocked(self, reason: str | None) -> None:
        self._blocked = reason
        if reason is not None:
            self.credit = -1 << 62  # (so the hot paths' own allocation goes here)

    @property
    def in_use(self) -> int:
        """Bytes the driver holds for this device's buffers (pooled blocks included)."""
        return self.pool.managed_bytes + self.direct

    def reserve(self, nbytes: int) -> int:
        """What a pooled buffer of ``nbytes`` counts against :attr:`credit`.

        For callers on a hot path that allocate one size again and again (a launch
        plan's output): with ``r = reserve(nbytes)`` computed once, ``credit -= r``
        while it stays non-negative and then ``pooled(nbytes)`` (catching
        ``refused``) is :meth:`allocate` without its frame; otherwise they call
        :meth:`allocate`.  Larger than any credit when the buffer must not come from
        the pool (empty, or too large for the pool's rounding).
        """
        # at least what the pool allocates: it rounds up to its bin's size, which
        # keeps the leading 4 bits of the size
        size = nbytes + (nbytes >> 4) + 1
        return size if nbytes >= 1 and size <= self._plain_max else 1 << 62

    def allocate(self, nbytes: int) -> Any:
        """A buffer of at least ``nbytes`` (at least 1), pooled where the pool can."""
        if self._blocked is not None:
            raise RuntimeUnavailableError(self._blocked)
        if nbytes < 1:
            nbytes = 1
        size = nbytes + (nbytes >> 4) + 1  # (see reserve)
        if size > self._plain_max:
            return self._large(nbytes, size)
        credit = self.credit - size
        if credit < 0:
            self._check(size, nbytes)
        else:
            self.credit = credit
        try:  # (free while nothing is raised)
            return self.pooled(nbytes)
        except self.refused as exc:
            raise self._refusal(nbytes, exc) from None

    __call__ = allocate

    def _large(self, nbytes: int, size: int) -> Any:
        """:meth:`allocate` of a buffer that the pool's rounding could make larger than
        the largest allocation, or of at least the pool's ``huge_from`` bytes."""
        if size > self._max_alloc:  # (exact size instead)
            return self._direct(nbytes)
        credit = self.credit - size
        if credit < 0:
            self._check(size, nbytes)
        else:
            self.credit = credit
        pool = self._pool
        held = pool.managed_bytes
        try:
            buffer = self.pooled(nbytes)
        except self.refused as exc:
            raise self._refusal(nbytes, exc) from None
        if nbytes >= self._huge_from and pool.managed_bytes > held:  # (new from the driver)
            pool.advise(buffer)
        return buffer

    def host_buffer(self, host: np.ndarray) -> Any:
        """A new buffer holding a copy of ``host``'s bytes (no queue command)."""
        if self._blocked is not None:
            raise RuntimeUnavailableError(self._blocked)
        return self._direct(host.nbytes, host)

    def _direct(self, nbytes: int, host: np.ndarray | None = None) -> Any:
        if nbytes > self._max_alloc:
            raise self._too_large(nbytes)
        self.credit -= nbytes
        if self.credit < 0:
            self._check(nbytes, nbytes)
        try:
            buffer = self.pool.buffer(nbytes, host, self._release)
        except self.refused as exc:
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
        device = self.device
        device_room = device.global_mem_size - self._pool.managed_bytes - self.direct
        process = _process_room() if device.type == "cpu" else None
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
            # give the pool's unused blocks, unheld arrays' buffers and the host path's kept
            # maps (fuseloop.host_path) back, then look again
            from .. import host_path
            from ..expr.nodes import register_readers

            register_readers()
            host_path.clear()
            gc.collect()
            self.pool.free_held()
            device_room, process_room = self._room()
        room = device_room if process_room is None else min(device_room, process_room)
        if size > room:
            self.credit = -1
            limit = (f"the device reports {device.global_mem_size} bytes of global memory"
                     if process_room is None or device_room <= process_room else
                     f"this process's memory limit (ulimit -v, RLIMIT_AS/RLIMIT_DATA) leaves "
                     f"{max(process_room, 0)} bytes")
            raise DeviceMemoryError(
                f"out of device memory: cannot allocate {nbytes} bytes on {device}; "
                f"{self.in_use} bytes are in use by fuseloop's arrays and its buffer pool "
                f"and {limit}. Delete arrays you no longer need (del x), work on smaller "
                "pieces, or choose a device with more memory (fl.set_device)")
        if process_room is None and device.type != "cpu":
            # memory of its own, which only the buffers counted here take: all of the
            # room may be handed out before the next check (a large buffer allocated
            # per call is not checked per call)
            self.credit = room - size
        else:
            self.credit = min((room - size) // 4, CHECK_EVERY)
