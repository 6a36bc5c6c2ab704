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

GPUs keep the plain blocking calls, which their drivers already make cheap, and
uploads into pooled buffers (a fresh GPU allocation per upload costs more).
"""

from __future__ import annotations

import os
import time
from typing import Any

import numpy as np
import pyopencl as cl

from .devices import Device, _runtime

# how long a wait on a CPU device polls before it sleeps: small results arrive in
# well under this; a long kernel loses at most this much of one CPU to the poll
SPIN_S = 1e-3
_COMPLETE = cl.command_execution_status.COMPLETE
_yield = getattr(os, "sched_yield", lambda: None)


def wait(event: cl.Event, device: Device) -> None:
    """Return once ``event`` has completed (raises as ``event.wait()`` on failure)."""
    if device.type == "cpu":
        _runtime(device).queue.flush()  # (submitted before it is polled)
        deadline = time.perf_counter() + SPIN_S
        while True:
            status = event.command_execution_status
            if status == _COMPLETE:
                return
            if status < 0 or time.perf_counter() > deadline:
                break  # failed (wait() raises) or long: sleep until it is done
            _yield()
    event.wait()


def read(host: np.ndarray, buffer: Any, device: Device) -> None:
    """Copy ``buffer`` (its first ``host.nbytes`` bytes) into ``host``; waits."""
    queue = device.queue  # (deferred launches enqueued first: they may write the buffer)
    if device.type == "cpu":
        wait(cl.enqueue_copy(queue, host, buffer, is_blocking=False), device)
    else:
        cl.enqueue_copy(queue, host, buffer, is_blocking=True)


def finish(device: Device) -> None:
    """Wait until everything enqueued on ``device`` has finished."""
    queue = device.queue
    if device.type == "cpu":
        # an in-order queue: its marker completes after every earlier command
        wait(cl.enqueue_marker(queue), device)
    queue.finish()  # (on a CPU device: nothing is left, so this returns at once)


def host_buffer(host: np.ndarray, device: Device) -> cl.Buffer | None:
    """A new device buffer holding ``host``'s bytes, made without a queue command:
    on a CPU device only (None elsewhere: upload into a pooled buffer instead).
    Counted against the device's memory (raises DeviceMemoryError when it cannot fit)."""
    if device.type != "cpu" or not host.nbytes:
        return None
    return _runtime(device).pool.host_buffer(host)
