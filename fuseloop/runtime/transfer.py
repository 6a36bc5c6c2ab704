"""Host <-> device copies and waits, done the cheapest way for the device's type.

On a CPU device (PoCL's ``pthread`` driver) every command the host waits for
costs far more than the command: the host thread sleeps on the event and the
device's worker thread must wake it, which took 90 to 200 us on this project's
2-core CI machine (a virtual machine, where waking a sleeping CPU is slow)
against 5 us for a whole small kernel launch.  So on a CPU device:

* a wait polls the event for up to ``SPIN_S`` (yielding the CPU between polls,
  so the device's own threads keep running) before it sleeps: 30 to 60 us;
* an upload creates its buffer from the host data (``COPY_HOST_PTR``: a copy
  on the calling thread, no command, no wait): about 1 us for 4 KB, where a
  blocking write took 150 us.

* a wait with nothing enqueued by fuseloop since the last completed wait (the
  runtime's ``enqueued`` mark) is the queue's finish alone, which returns at once on
  an idle queue (where a marker and its polls took 50 us and woke the driver's
  threads): correct whatever the mark says (a command enqueued by another thread
  or through a queue held elsewhere is waited for), only slower for such a command.

GPUs keep the plain blocking calls, which their drivers already make cheap, and
uploads into pooled buffers (a fresh GPU allocation per upload costs more).

Queues, events and copies go through the device's backend: its runtime's bound
functions (``submit``, ``event_status``, ...: see :mod:`fuseloop.runtime.devices`).
"""

from __future__ import annotations

import os
import time
from typing import Any

import numpy as np

from .devices import Device, _runtime

# how long a wait on a CPU device polls before it sleeps: small results arrive in
# well under this; a long kernel loses at most this much of one CPU to the poll
SPIN_S = 1e-3
_yield = getattr(os, "sched_yield", lambda: None)


def wait(event: Any, device: Device) -> None:
    """Return once ``event`` has completed (raises the driver's error on failure)."""
    _wait(event, _runtime(device), device.type == "cpu")


def _wait(event: Any, rt: Any, poll: bool) -> None:
    """:func:`wait` on the device runtime ``rt``, polling first when ``poll``."""
    if poll:
        rt.submit(rt.bare_queue)  # (submitted before it is polled)
        status_of = rt.event_status
        deadline = time.perf_counter() + SPIN_S
        while True:
            status = status_of(event)
            if status == 0:  # complete
                return
            if status < 0 or time.perf_counter() > deadline:
                break  # failed (the wait raises) or long: sleep until it is done
            _yield()
    rt.wait_event(event)


#: checks to run before the next read back (a scatter's deferred range check: see
#: ``fuseloop.ops.scatter_kernel``; gathers' unread flags: ``fuseloop.flags``); each
#: removes itself once done
before_read: list[Any] = []


def read(host: np.ndarray, buffer: Any, device: Device, offset: int = 0) -> None:
    """Copy ``buffer`` (``host.nbytes`` bytes from byte ``offset``) into ``host``; waits."""
    if before_read:  # (raises the deferred error, if any, before the data is seen)
        for hook in tuple(before_read):
            hook()
    rt = _runtime(device)
    rt.flush()  # (deferred launches first: they may write the buffer; Device.queue's)
    at = (offset,) if offset else ()
    if device.type == "cpu":
        _wait(rt.enqueue_read(rt.queue, host, buffer, None, False, *at), rt, True)
    else:
        rt.enqueue_read(rt.queue, host, buffer, None, True, *at)
    rt.enqueued = False  # (an in-order queue: what came before the read has finished)


def write(buffer: Any, host: np.ndarray, device: Device) -> None:
    """Copy ``host`` into ``buffer``; waits, so the caller may change ``host`` at once."""
    queue = device.queue
    _runtime(device).enqueue_write(queue, buffer, host, None, True)


def finish(device: Device) -> None:
    """Wait until everything enqueued on ``device`` has finished."""
    rt = _runtime(device)
    rt.flush()  # (Device.queue's)
    queue = rt.bare_queue
    if device.type == "cpu" and rt.enqueued:
        # an in-order queue: its marker completes after every earlier command
        _wait(rt.marker(queue), rt, True)
    rt.finish_queue(queue)  # (on a CPU device: nothing is left, so this returns at once)
    rt.enqueued = False


def host_buffer(host: np.ndarray, device: Device) -> Any | None:
    """A new device buffer holding ``host``'s bytes, made without a queue command:
    on a CPU device only (None elsewhere: upload into a pooled buffer instead).
    Counted against the device's memory (raises DeviceMemoryError when it cannot fit)."""
    if device.type != "cpu" or not host.nbytes:
        return None
    return _runtime(device).pool.host_buffer(host)
