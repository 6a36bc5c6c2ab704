"""Page-locked host memory for OpenCL reads that must not hold the host (issue 29).

A split array's parts each read a small result (a partial sum, halo rows) before the
host waits for any.  NVIDIA's OpenCL copies into ordinary (pageable) host memory
through its own staging, so a read enqueued without blocking may still return only
once it is done: the next device's read then starts late.  Into page-locked memory it
is a DMA that runs on its own.  OpenCL's way to that memory is a buffer made with
``CL_MEM_ALLOC_HOST_PTR`` and mapped: the mapped pointer is then the target of
ordinary reads from other buffers (NVIDIA's OpenCL guide recommends it).

:class:`PinnedStaging` keeps such buffers per device (its context), mapped once and
for good, handed out as :class:`Slot` s of a power-of-two size.  A slot given back
(:meth:`Slot.release`, once its bytes are copied out) is handed out again only after
the read recorded on it (:attr:`Slot.event`) has completed, so a slot given back early
(an error between the read and the wait) is never overwritten by a later read while
the first copy still runs.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable
from typing import Any

import numpy as np
import pyopencl as cl

from .. import caches as _caches

#: which OpenCL devices read a split array's small results (partials, halo rows) through
#: page-locked staging: ``auto`` (GPUs: their reads into pageable memory may block),
#: ``1`` (every OpenCL device, PoCL's CPU too: for tests and timing), ``0`` (none);
#: ``FUSELOOP_OPENCL_PINNED_READS``, read at each use (``bench_multigpu --variants``)
PINNED_READS = os.environ.get("FUSELOOP_OPENCL_PINNED_READS", "auto").strip().lower()
#: the smallest slot (bytes); larger reads get the next power of two
MIN_SLOT = 4096
#: at most this many slots of one size per device; beyond it, the oldest given back is
#: waited for rather than a new buffer made (a leak would otherwise grow without bound)
MAX_SLOTS = 64


def pinned_for(device: Any) -> bool:
    """Whether ``device``'s small reads go through :class:`PinnedStaging`."""
    mode = PINNED_READS
    if mode in ("0", "off", "no", "false"):
        return False
    return mode in ("1", "on", "yes", "true") or device.type != "cpu"


class Slot:
    """``size`` bytes of page-locked host memory (``host``, a mapped buffer's bytes) of
    one :class:`PinnedStaging`; ``event``: the last read into it (set by the reader)."""

    __slots__ = ("area", "buffer", "event", "host", "size")

    def __init__(self, area: PinnedStaging, buffer: Any, host: np.ndarray) -> None:
        self.area, self.buffer, self.host = area, buffer, host
        self.size = host.nbytes
        self.event: Any = None

    def release(self) -> None:
        """Give the slot back (its bytes copied out): handed out again once ``event``
        has completed."""
        area = self.area
        with area.lock:
            area.free.setdefault(self.size, []).append(self)


class PinnedStaging:
    """A device's page-locked slots (see the module's docstring)."""

    def __init__(self, device: Any) -> None:
        self.device = device
        self.free: dict[int, list[Slot]] = {}  # size -> slots given back, oldest first
        self.made: dict[int, int] = {}  # size -> slots made
        self.queue: Any = None  # (mapping's own: the device's may hold gated work)
        self.lock = threading.Lock()  # (threads reading split arrays share the slots)

    def take(self, nbytes: int) -> Slot:
        """A slot of at least ``nbytes`` bytes whose last read has completed."""
        size = max(MIN_SLOT, 1 << max(nbytes - 1, 0).bit_length())
        with self.lock:
            free = self.free.get(size) or []
            for i, slot in enumerate(free):
                event = slot.event
                if event is None or event.command_execution_status <= 0:
                    del free[i]
                    slot.event = None
                    return slot
            if not free or self.made.get(size, 0) < MAX_SLOTS:
                return self._make(size)
            oldest = free.pop(0)
        oldest.event.wait()  # (outside the lock: other threads' slots meanwhile)
        oldest.event = None
        return oldest

    def _make(self, size: int) -> Slot:
        context = self.device.context
        buffer = cl.Buffer(context, cl.mem_flags.READ_WRITE | cl.mem_flags.ALLOC_HOST_PTR,
                           size)
        if self.queue is None:
            self.queue = cl.CommandQueue(context, self.device.cl_device)
        # (mapped once, never unmapped: the pointer stays the target of reads from
        # other buffers)
        flags: Any = cl.map_flags.READ | cl.map_flags.WRITE
        mapped: Any = cl.enqueue_map_buffer(self.queue, buffer, flags, 0, (size,),
                                            np.dtype(np.uint8), is_blocking=True)
        host = mapped[0]
        self.made[size] = self.made.get(size, 0) + 1
        return Slot(self, buffer, host)


#: which OpenCL devices get a split stencil's halo rows by a write that waits, on the
#: device, for the reads bringing them from the other contexts (:func:`upload_after`)
#: rather than after the host waited for those reads: ``0`` (none, the default: each
#: read's completion callback costs pyopencl a thread of its own, and the write opens
#: only once the host lets a callback take the interpreter's lock: untimed on GPUs
#: yet), ``auto`` (GPUs, whose writes are asynchronous already), ``1`` (every OpenCL
#: device, PoCL's CPU too: for tests and timing); ``FUSELOOP_MULTI_HALO_EVENTS``, read at
#: each use (``bench_multigpu --variants`` row ``+chained``)
HALO_EVENTS = os.environ.get("FUSELOOP_MULTI_HALO_EVENTS", "0").strip().lower()


def chains_for(device: Any) -> bool:
    """Whether halo rows for ``device`` are uploaded by :func:`upload_after`."""
    mode = HALO_EVENTS
    if mode in ("0", "off", "no", "false"):
        return False
    return mode in ("1", "on", "yes", "true") or device.type != "cpu"


def upload_after(device: Any, buffer: Any, host: np.ndarray,
                 reads: list[tuple[Any, Callable[[int], None]]]) -> Any:
    """Enqueue the write of ``host`` into ``buffer`` on ``device``'s queue, held back by
    a user event of its context until every read of ``reads`` (``(event, then)``; events
    of other contexts, which a wait list cannot name) has completed: each read's
    completion callback (on the driver's thread) calls its ``then(status)`` (copying
    the rows read into ``host``), and the last one opens the gate.  The host waits
    for none of them; the kernels enqueued after the write wait on the device.  A
    failed read (or ``then``) fails the gate, so the write and what follows it fail
    rather than read stale rows.  The write's event."""
    gate = cl.UserEvent(device.context)
    left = [len(reads)]
    failed = [0]
    lock = threading.Lock()

    def opened(then: Callable[[int], None]) -> Callable[[int], None]:
        def fired(status: int) -> None:
            try:
                then(status)
            except BaseException:
                status = min(status, -1)
            finally:
                with lock:
                    left[0] -= 1
                    if status < 0 and not failed[0]:
                        failed[0] = status
                    last = left[0] == 0
                if last:
                    gate.set_status(failed[0] or _COMPLETE)
        return fired

    try:
        write = _enqueue_write(device.queue, buffer, host, [gate])
        for event, then in reads:
            event.set_callback(_COMPLETE, opened(then))
    except BaseException:
        gate.set_status(-1)  # (never left closed: the queue would wait for good)
        raise
    if not reads:
        gate.set_status(_COMPLETE)
    return write


def _enqueue_write(queue: Any, buffer: Any, host: np.ndarray, wait_for: list[Any]) -> Any:
    return cl.enqueue_copy(queue, buffer, host, is_blocking=False, wait_for=wait_for)


_COMPLETE = cl.command_execution_status.COMPLETE

# device index -> (device, its staging): by identity too (a device opened again under
# another index, or a cleared runtime, gets its own)
_AREAS: dict[int, tuple[Any, PinnedStaging]] = {}
_caches.register("opencl.pinned_staging", _AREAS.clear, lambda: len(_AREAS),
                 why="one per opened OpenCL device")


def slot_for(device: Any, nbytes: int) -> Slot | None:
    """A page-locked slot of ``nbytes`` for a read from ``device``, or None where its
    reads go to ordinary memory (:func:`pinned_for`)."""
    if not pinned_for(device):
        return None
    hit = _AREAS.get(device.index)
    if hit is None or hit[0] is not device:
        hit = _AREAS[device.index] = (device, PinnedStaging(device))
    return hit[1].take(nbytes)
