"""Halo uploads left to the destination device's deferred work (issue 29).

Halo rows between OpenCL devices of different contexts go through the host: read from
the source device, then written to the destination's halo buffer.  The write needs
the read done, so the host waits for the read, which on a source still running the
last step waits for that step.  Where that wait is taken decides what overlaps it:
in the stencil call, the host builds nothing while the devices finish; left to the
destination device's runtime (``_DeviceRuntime.deferred``, whose entries run before
anything else uses the device's queue, in order with its deferred small launches), the
stencil returns at once, its consumer is built while the reads complete, and each
part's launch waits only for its own halo rows, then writes them.  Nothing reads a
halo buffer but through its device's queue (kernels, reads, ``fl.synchronize()``, the
host path's evaluations all enqueue or wait on the deferred work first).

A read that fails (the driver's error at its wait) or a write that cannot be enqueued
ends its upload there: the rest of its reads are waited for (their rows and slots let
go), its writes dropped, and the error kept for the next synchronisation or read back
(``transfer.before_read``: ``fl.synchronize()``, ``.get()``, a split array's reads),
which raises it once as :class:`~fuseloop.errors.HaloTransferError`, as a gather's
out-of-range flag is raised.  The upload leaves its device's deferred work either way,
so the queue is not blocked by it: the parts launched meanwhile read rows never written
(their results are invalid, which the error says), later steps copy their halos anew.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Sequence
from typing import Any

import numpy as np

from ..errors import HaloTransferError
from ..runtime.devices import _runtime
from ..runtime.transfer import before_read, wait

#: which destination devices' halo uploads through the host wait in their deferred work,
#: with the host's wait for their reads: ``auto`` (default: GPUs; a CPU device's writes
#: block the host anyway), ``0`` (none: the host waits in the stencil call), ``1`` (every
#: device, PoCL's CPU too: tests); ``FUSELOOP_MULTI_DEFERRED_UPLOADS``
#: (``bench_multigpu --variants`` row ``-deferred``)
DEFERRED_UPLOADS = os.environ.get("FUSELOOP_MULTI_DEFERRED_UPLOADS", "auto").strip().lower()


def defers(devices: Sequence[Any]) -> bool:
    """Whether a batch's uploads to ``devices`` are left to their deferred work."""
    mode = DEFERRED_UPLOADS
    if mode in ("0", "off", "no", "false"):
        return False
    every = mode in ("1", "on", "yes", "true")
    return all(every or d.type != "cpu" for d in devices)


class InFlight:
    """A thread's halo writes under way: (the write's event, its device, the host rows it
    reads, the staging slot they lie in or None), kept until written.  Its owner (the
    thread whose batches made the writes) prunes it (:meth:`settle`); a
    :class:`DeferredUpload` appends its writes from whichever thread runs its device's
    deferred work, so the list is taken and put back under a lock (an append while the
    owner prunes is kept, not overwritten)."""

    __slots__ = ("_items", "_lock")

    def __init__(self) -> None:
        self._items: list[tuple[Any, Any, np.ndarray, Any]] = []
        self._lock = threading.Lock()

    def append(self, item: tuple[Any, Any, np.ndarray, Any]) -> None:
        with self._lock:
            self._items.append(item)

    def __len__(self) -> int:
        return len(self._items)

    def __iter__(self) -> Any:
        with self._lock:
            return iter(list(self._items))

    def settle(self, keep_max: int) -> None:
        """Let the completed writes give their host rows and slots back; one that failed
        is dropped (its slot let go) and raises its error here.  Those still running are
        kept, up to ``keep_max``, beyond which the oldest are waited for."""
        with self._lock:
            items, self._items = self._items, []
        keep: list[tuple[Any, Any, np.ndarray, Any]] = []
        done = 0
        try:
            for item in items:
                event, device, _, slot = item
                done += 1
                if event is not None:
                    status = _runtime(device).event_status(event)
                    if status > 0:
                        keep.append(item)
                        continue
                    if status < 0:
                        if slot is not None:
                            slot.release()
                        wait(event, device)  # (raises the driver's error)
                if slot is not None:
                    slot.release()
            over = max(0, len(keep) - keep_max)
            while over:
                event, device, _, slot = keep.pop(0)
                over -= 1
                wait(event, device)
                if slot is not None:
                    slot.release()
        finally:  # (an error: what was not looked at yet is kept, in order)
            with self._lock:
                self._items[:0] = keep + items[done:]


class DeferredUpload:
    """A destination device's halo uploads of one batch, an entry of its runtime's
    deferred work: called with the queue, it waits for the reads of its rows (on their
    devices), copies staged rows out and enqueues the writes (their host rows and slots
    noted in ``in_flight``, the batch's thread's :class:`InFlight`, let go once
    written).  Each read and write is done once: called again after an interruption
    (the runtime puts it back), it goes on from where it stopped; a driver's error ends
    it (:meth:`_abandon`)."""

    __slots__ = ("device", "failed_from", "in_flight", "reads", "writes")

    def __init__(self, device: Any, in_flight: InFlight) -> None:
        self.device, self.in_flight = device, in_flight
        self.failed_from: Any = None  # (the device of the read that failed)
        #: (the read's event, its device, the storage read, the host rows, what the read
        #: fills, the staging slot or None, the destination): ``_HostBatch.pending``'s
        self.reads: list[tuple] = []
        self.writes: list[tuple[np.ndarray, Any, Any]] = []  # (host rows, buffer, slot)

    def __call__(self, queue: Any) -> None:
        try:
            self._read()
            self._write(queue)
        except Exception as error:  # (the driver's: a failed read or a refused write)
            self._abandon(error)

    def _read(self) -> None:
        reads = self.reads
        while reads:
            event, source, _, host, into, slot, _ = reads[0]
            if event is not None:
                try:
                    wait(event, source)
                except Exception:
                    reads.pop(0)  # (done, failed)
                    self.failed_from = source
                    if slot is not None:
                        slot.release()
                    raise
            if into is not host:
                host.reshape(-1).view(np.uint8)[...] = into
            if slot is not None:
                slot.release()
            reads.pop(0)

    def _write(self, queue: Any) -> None:
        rt = _runtime(self.device)
        writes = self.writes
        while writes:
            host, buffer, slot = writes[0]
            event = rt.enqueue_write(queue, buffer, host, None, False)
            if slot is not None:
                slot.event = event  # (not handed out again before the write completed)
            self.in_flight.append((event, self.device, host, slot))
            writes.pop(0)

    def _abandon(self, error: Exception) -> None:
        """End this upload after ``error``: its other reads waited for (their failures
        ignored: one error is reported) and their slots let go, its writes dropped, the
        error kept for the next synchronisation or read back."""
        for event, source, _, _, _, slot, _ in self.reads:
            if event is not None:
                try:
                    wait(event, source)
                except Exception:
                    pass  # (the first error is the one reported)
            if slot is not None:
                slot.release()
        for _, _, slot in self.writes:
            if slot is not None:
                slot.release()
        self.reads.clear()
        self.writes.clear()
        source, device = self.failed_from, self.device
        whence = "" if source is None else f" from device [{source.index}] {source.name}"
        kept = HaloTransferError(
            f"halo rows of a split array could not be copied to device [{device.index}] "
            f"{device.name}{whence} ({type(error).__name__}: {error}); the parts launched "
            "since read rows never written, so results computed from them are invalid: "
            "compute them again (the devices' queues work again)")
        kept.__cause__ = error
        failed.append(kept)
        if raise_failed not in before_read:
            before_read.append(raise_failed)


#: errors of abandoned uploads not yet raised (the first is raised by :func:`raise_failed`)
failed: list[HaloTransferError] = []


def raise_failed() -> None:
    """Raise the first kept upload error, once (a ``transfer.before_read`` hook: the next
    synchronisation or read back); the others with it are dropped."""
    if raise_failed in before_read:
        before_read.remove(raise_failed)
    if failed:
        error = failed[0]
        failed.clear()
        raise error
