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

Outside an evaluation (``fl.explain``'s timed runs, kernels written by hand) a
flagged launch reads its flag at once.

* With ``FUSELOOP_GATHER_WAIT=defer``, on a device that is not a CPU, an evaluation's
  flag is not read at its end (a wait for its kernels: the host could not prepare the
  next call while they run): it is kept, unread, and the next evaluation on that
  device has its kernels write the same buffer.  It is read, and the error raised, at
  the first of: the next read back to the host on any device (``transfer.before_read``),
  ``fl.synchronize()``, a kernel writing a user's array (:func:`check_pending`), a
  scatter at device indices, or an array shared with CUDA libraries.  A result
  computed from an out-of-range index therefore never reaches the host or a user's
  array unreported, as CUDA reports a device-side assert at the next synchronisation.
  One still unread when the interpreter exits is printed to stderr.
  On a CPU device the flag is read at the evaluation's end as before (numpy reads
  small arrays there without a read back, and a round trip costs little).
"""

from __future__ import annotations

import atexit
import os
import sys
import threading
from collections.abc import Callable
from typing import Any, TypeVar

import numpy as np

from .errors import index_value_out_of_bounds
from .runtime.devices import Device, _runtime
from .runtime.transfer import before_read, read

# error-flag codes from this one up are fl.check's (fuseloop.checks.CHECK_CODE_BASE)
CHECK_CODE_BASE = 1 << 40
FLAG_WORDS = 3
#: zeroed flag buffers a device runtime keeps (more are made when threads need them)
POOL_MAX = 8
#: defer on a CPU device too (tests: the CPU's small reads by numpy run no hook)
DEFER_ON_CPU = False
# device -> flag buffers of finished evaluations not read yet (FUSELOOP_GATHER_WAIT=defer);
# one per device but where threads evaluated at once
_unread: dict[Device, list[Any]] = {}
_unread_lock = threading.Lock()


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
        # (an unread flag is written on: it reports this evaluation's error or an earlier one)
        buf = pending[device] = _take_unread(device) or take(device)
    return buf, True


def defers(device: Device) -> bool:
    """Whether an evaluation on ``device`` leaves its flag unread (see the module)."""
    return (DEFER_ON_CPU or device.type != "cpu") and \
        os.environ.get("FUSELOOP_GATHER_WAIT", "").strip().lower() == "defer"


def _take_unread(device: Device) -> Any:
    if not _unread:
        return None
    with _unread_lock:
        bufs = _unread.get(device)
        if not bufs:
            return None
        buf = bufs.pop()
        if not bufs:
            del _unread[device]
        return buf


def _leave_unread(device: Device, buf: Any) -> None:
    global _at_exit
    with _unread_lock:
        _unread.setdefault(device, []).append(buf)
        if read_unread not in before_read:
            before_read.append(read_unread)
        if not _at_exit:
            _at_exit = True
            atexit.register(report_at_exit)


_at_exit = False


def report_at_exit() -> None:
    """At the interpreter's exit, print (it cannot raise) the error of a flag still
    unread: a result computed from an index out of range that nothing read back."""
    try:
        read_unread()
    except Exception as e:  # (an index out of range, an fl.check, or a device gone)
        print(f"fuseloop: a gather's error was never reported (no read back or "
              f"fl.synchronize() after it): {type(e).__name__}: {e}", file=sys.stderr)


def read_unread() -> None:
    """Read every flag left unread (see the module); raise as :func:`check` for the first
    one set (the others stay unread, reported later)."""
    with _unread_lock:
        if read_unread in before_read:  # (the flags' own reads run no hook of theirs)
            before_read.remove(read_unread)
    try:
        while True:
            with _unread_lock:
                if not _unread:
                    return
                device, bufs = next(iter(_unread.items()))
                buf = bufs.pop()
                if not bufs:
                    del _unread[device]
            check(buf, device)
    finally:
        with _unread_lock:
            if _unread and read_unread not in before_read:
                before_read.append(read_unread)


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
    array), and those left unread by earlier evaluations; raises as :func:`check`."""
    if _unread:
        read_unread()
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
    except BaseException:
        _local.pending = None
        # (on an error the flags are dropped, whatever they hold, but for those that may
        # hold an earlier evaluation's report)
        for device, buf in pending.items():
            if defers(device):
                _leave_unread(device, buf)
        raise
    _local.pending = None
    for device, buf in pending.items():
        if defers(device):
            _leave_unread(device, buf)
        else:
            check(buf, device)
    return out
