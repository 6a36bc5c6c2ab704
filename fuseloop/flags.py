"""Error flags of kernels with checked gathers (device indices, ``fl.check``).

A kernel that gathers through indices it must check gets a buffer of three int64
(code, value, bound) that a work-item writes only where an index is out of range
(:mod:`fuseloop.lower`); the host reads it back after the kernel, which waits for the
device, and raises when it is not zero.

* Flag buffers come from a pool per device runtime (``_DeviceRuntime.flags``): a
  flag read back as zeros is still zero, so the next launch takes it as it is.  A
  new buffer per launch was an allocation with a host copy on a GPU, and its
  release, per evaluation.
* Within one evaluation (:func:`deferring`, around ``evaluate.run``) the flagged
  kernels of a device share one flag, read once when all of the evaluation's kernels
  are enqueued, not after each of them: cross-entropy's row kernel (which gathers
  the labels' logits) is followed by the mean's kernel with no wait between them.
  The kernels of an in-order queue run one after the other, so a later failing kernel
  writes all three words after an earlier one: the report is still one kernel's.
* Before a kernel writes a user's array (a target of ``out[...] =``, an in-place
  operator, ``out=``), the evaluation reads its pending flags (:func:`check_pending`),
  so a failed check leaves every user array as it was.

Outside an evaluation (``fl.fuse``'s replays, ``fl.explain``'s timed runs, kernels
written by hand) a flagged launch reads its flag at once.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any, TypeVar

import numpy as np

from .errors import index_value_out_of_bounds
from .runtime.devices import Device, _runtime
from .runtime.transfer import read

# error-flag codes from this one up are fl.check's (fuseloop.checks.CHECK_CODE_BASE)
CHECK_CODE_BASE = 1 << 40
FLAG_WORDS = 3
#: zeroed flag buffers a device runtime keeps (more are made when threads need them)
POOL_MAX = 8

class _Local(threading.local):
    # (a class default: reading ``pending`` where no thread set it costs no
    # AttributeError, 0.35 us at every small write of fuseloop.host_writes)
    pending: Any = None


_local = _Local()
_T = TypeVar("_T")


def take(device: Device) -> Any:
    """A zeroed flag buffer on ``device``: one of its runtime's pool, else a new one."""
    pool = _runtime(device).flags
    try:
        return pool.pop()
    except IndexError:
        from .backends import backend_for

        return backend_for(device).buffer_from_host(device, np.zeros(FLAG_WORDS, np.int64))


def flag_for(device: Device) -> tuple[Any, bool]:
    """The flag buffer for a launch on ``device``, and whether reading it waits for the
    end of the evaluation in progress (False: the caller reads it with :func:`check`)."""
    pending = getattr(_local, "pending", None)
    if pending is None:
        return take(device), False
    buf = pending.get(device)
    if buf is None:
        buf = pending[device] = take(device)
    return buf, True


def check(buf: Any, device: Device) -> None:
    """Read the flag ``buf`` back (waits for its kernels); raise when an index was out of
    range, else give the buffer back to the pool."""
    err = np.empty(FLAG_WORDS, np.int64)
    read(err, buf, device)
    if not err.any():
        pool = _runtime(device).flags
        if len(pool) < POOL_MAX:
            pool.append(buf)
        return
    # (a flag that was written is dropped: the pool holds zeroed buffers only)
    if err[0] >= CHECK_CODE_BASE:  # an fl.check failed (see fuseloop.checks)
        from .checks import failure

        raise failure(int(err[0]), int(err[1]), int(err[2]))
    # (several offending work items may interleave their writes: the parts are each
    # true of some offender, not necessarily of the same one)
    raise index_value_out_of_bounds(
        int(err[1]), int(err[0]) - 2 if err[0] >= 2 else None, int(err[2]))


def check_pending() -> None:
    """Read the flags of the evaluation in progress now (before a kernel writes a user's
    array); raises as :func:`check`."""
    pending = getattr(_local, "pending", None)
    if pending:
        items = list(pending.items())
        pending.clear()
        for device, buf in items:
            check(buf, device)


def deferring(fn: Callable[..., _T], *args: Any) -> _T:
    """``fn(*args)`` with the flags of its launches read once at its end (see the module
    docstring); inside another such call, just ``fn(*args)``."""
    if getattr(_local, "pending", None) is not None:
        return fn(*args)
    pending: dict[Device, Any] = {}
    _local.pending = pending
    try:
        out = fn(*args)
    finally:
        # (on an error the flags are dropped, whatever they hold)
        _local.pending = None
    for device, buf in pending.items():
        check(buf, device)
    return out
