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
#: device, for the reads bringing them from the other contexts (:func:`uploads_after`)
#: rather than after the host waited for those reads: ``0`` (none, the default: the
#: reads' completion callback costs pyopencl a thread of its own per step, and the
#: writes open only once the host lets it take the interpreter's lock: untimed on GPUs
#: yet), ``auto`` (GPUs, whose writes are asynchronous already), ``1`` (every OpenCL
#: device, PoCL's CPU too: for tests and timing); ``FUSELOOP_MULTI_HALO_EVENTS``, read at
#: each use (``bench_multigpu --variants`` row ``+chained``)
HALO_EVENTS = os.environ.get("FUSELOOP_MULTI_HALO_EVENTS", "0").strip().lower()


def chains_for(device: Any) -> bool:
    """Whether halo rows for ``device`` are uploaded by :func:`uploads_after`."""
    mode = HALO_EVENTS
    if mode in ("0", "off", "no", "false"):
        return False
    return mode in ("1", "on", "yes", "true") or device.type != "cpu"


def uploads_after(uploads: list[tuple[Any, Any, np.ndarray]],
                  reads: list[tuple[Any, Callable[[int], None]]]) -> list[Any]:
    """Enqueue each write of ``uploads`` (``(device, buffer, host)``: ``host`` into
    ``buffer`` on the device's queue), held back by a user event of the device's context
    until every read of ``reads`` (``(event, then)``; events of other contexts, which a
    wait list cannot name) has completed.  One completion callback, on the last read
    (pyopencl runs each callback on a thread it makes: one per call, not per read), waits
    for the others, calls each read's ``then(status)`` (copying the rows read into the
    writes' host rows) and opens the gates.  The host waits for none of them; the
    kernels enqueued after a write wait on its device.  A failed read (or ``then``) fails
    every gate, so the writes and what follows them fail rather than read stale rows.
    The writes' events, in order."""
    gates: list[Any] = []
    writes: list[Any] = []

    def fired(status: int) -> None:
        failed = 0
        try:
            for event, then in reads:
                mine = status if event is reads[-1][0] else _finished(event)
                try:
                    then(mine)
                except BaseException:
                    mine = min(mine, -1)
                if mine < 0 and not failed:
                    failed = mine
        finally:
            for gate in gates:
                gate.set_status(failed or _COMPLETE)

    try:
        for device, buffer, host in uploads:
            gates.append(cl.UserEvent(device.context))
            writes.append(_enqueue_write(device.queue, buffer, host, [gates[-1]]))
        if reads:
            reads[-1][0].set_callback(_COMPLETE, fired)
    except BaseException:
        for gate in gates:  # (never left closed: the queue would wait for good)
            gate.set_status(-1)
        raise
    if not reads:
        for gate in gates:
            gate.set_status(_COMPLETE)
    return writes


def _finished(event: Any) -> int:
    """``event``'s final status, once it has one (0: complete; negative: failed)."""
    try:
        event.wait()  # (pyopencl lets go of the interpreter's lock meanwhile)
    except Exception:  # (a failed command: its status says how)
        pass
    return min(0, int(event.command_execution_status))


# (pyopencl's own write, as the backend's enqueue_write takes it: enqueue_copy's dispatch
# on its arguments' types costs several microseconds a call)
_write_buffer = getattr(cl._cl, "_enqueue_write_buffer", None)


def _enqueue_write(queue: Any, buffer: Any, host: np.ndarray, wait_for: list[Any]) -> Any:
    if _write_buffer is not None:
        return _write_buffer(queue, buffer, host, 0, wait_for, False)
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
