"""Device discovery and selection, and each device's runtime.

Devices come from every backend's discovery (:mod:`fuseloop.backends`); a device's
runtime (context, queue, buffers, deferred launches) is opened through its backend
on first use, and the queue and event functions it needs are bound then.

The default device comes from ``FUSELOOP_DEVICE`` (``gpu``, ``cpu``, an index
or a substring of a device, platform or runtime name), else the first GPU, else
the first CPU (by :data:`fuseloop.runtime.icd.CPU_RUNTIME_PREFERENCE` among
CPU runtimes).  ``set_device``
changes it; ``with device(...)`` changes it for a block (per thread and task).
A device whose compiler is known to reject every kernel (``Device.problem``)
comes after the others wherever a type or a name selects one.
"""

from __future__ import annotations

import atexit
import collections
import contextlib
import contextvars
import os
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

from ..errors import DeviceNotFoundError, RuntimeUnavailableError
from . import icd
from .memory import DeviceMemory

# before the first OpenCL call (and before pyopencl is imported by the OpenCL
# backend): pyopencl's ICD loader reads its environment then
icd.register_runtimes()

@dataclass(frozen=True, eq=False)
class Device:
    """A device fuseloop can run on (OpenCL, through the backend named by ``backend``)."""

    index: int
    name: str
    type: str
    platform: str
    vendor: str
    driver_version: str
    global_mem_size: int
    max_alloc_size: int
    has_fp64: bool
    cl_device: Any = field(repr=False)
    compute_units: int = 1
    #: why this device's OpenCL compiler cannot build kernels, when that is known
    problem: str | None = None
    #: the OpenCL runtime and its version, e.g. 'PoCL 3.0-rc2 (LLVM 14.0.6)'
    runtime: str = ""
    #: the label of the backend it runs on (see :mod:`fuseloop.backends`)
    backend: str = "opencl"
    max_work_group_size: int = 256
    #: the largest buffer readable as OpenCL ``__constant`` memory (fl.constant arrays)
    max_constant_buffer_size: int = 65536

    @property
    def usable(self) -> bool:
        """False when the device's compiler is known to reject every kernel."""
        return self.problem is None

    @property
    def identity(self) -> tuple[str, str, str, str]:
        """What a compiled kernel depends on (part of the disk cache key)."""
        return (self.platform, self.vendor, self.name, self.driver_version)

    @property
    def context(self) -> Any:
        """The backend's context of the device (OpenCL: a ``pyopencl.Context``)."""
        return _runtime(self).context

    @property
    def queue(self) -> Any:
        """The device's in-order queue, with every deferred small launch enqueued."""
        rt = _runtime(self)
        # always through the lock: another thread may have taken launches out of
        # ``deferred`` and not yet enqueued them
        rt.flush()
        return rt.queue

    @property
    def allocator(self) -> DeviceMemory:
        """The device's buffer allocator (a pool that refuses what cannot fit)."""
        return _runtime(self).pool

    def __str__(self) -> str:
        return f"[{self.index}] {self.name} ({self.type}, {self.platform})"


class _DeviceRuntime:
    """A device's context, queue and buffers (``pool``), and its deferred small launches.

    Opened through the device's backend, whose queue and event functions are bound
    here once (``submit``, ``marker``, ``finish_queue`` and ``finish`` of its own
    queue, ``event_status``, ``wait_event``, ``hold``, ``enqueue_read``,
    ``enqueue_write``) so the runtime's
    callers do not look the backend up.

    Small elementwise launches are not enqueued at once but kept in ``deferred``
    (see :func:`fuseloop.launching.enqueue_or_defer`) and enqueued back to back by
    :meth:`flush`: before anything else uses the queue (``Device.queue``), at
    ``fl.synchronize()``, before a large launch and when ``DEFER_MAX`` are
    waiting.  On PoCL's CPU device an enqueue between pieces of Python work
    costs the host thread about twice what it costs back to back (the device's
    worker threads are woken for every kernel and compete with it for the CPUs).
    On a CPU device a batch of at least ``gate_at`` launches is also held behind
    a user event until all of it is enqueued, so the workers wake once for it.

    fuseloop's commands reach the queue through :attr:`queue`, which marks the
    runtime ``enqueued``; a completed wait clears the mark, and a wait finds the
    queue idle by it (see :func:`fuseloop.runtime.transfer.finish`).  ``bare_queue``
    is the same queue for waits, which leave the mark alone.
    """

    __slots__ = ("bare_queue", "context", "deferred", "device", "enqueue_read", "enqueue_write",
                 "enqueued", "event_status", "finish", "finish_queue", "flags", "gate_at",
                 "hold", "launch_lock", "marker", "pool", "submit", "wait_event")

    def __init__(self, device: Device) -> None:
        from ..backends import backend_for

        self.device = device
        backend = backend_for(device)
        cold = _cold(device)
        if cold and device.type != "cpu":
            _preload_loopy()  # (where discovery did not: beside the context's making)
        self.context, self.bare_queue = backend.open(device)
        self.enqueued = False
        if cold:  # (after this process's context: a driver making two at once made each slower)
            _ready_worker(device)
        self.pool = DeviceMemory(device, self.context, self.bare_queue)
        # zeroed error-flag buffers of checked gathers (see fuseloop.flags)
        self.flags: list[Any] = []
        self.submit = backend.submit
        self.marker = backend.marker
        self.finish_queue = backend.finish_queue
        self.finish = backend.finisher(self.bare_queue)  # (finish_queue(queue), bound)
        self.event_status = backend.event_status
        self.wait_event = backend.wait_event
        self.hold = backend.hold
        self.enqueue_read = backend.enqueue_read
        self.enqueue_write = backend.enqueue_write
        # (enqueue function, its arguments but the queue), oldest first
        self.deferred: collections.deque[tuple[Any, tuple]] = collections.deque()
        # held while enqueueing deferred launches or a launch that must follow them
        self.launch_lock = threading.RLock()
        self.gate_at = GATE_AT if device.type == "cpu" else 0

    @property
    def queue(self) -> Any:
        """The queue, to enqueue on: the runtime is marked as holding work since its last
        completed wait (the mark is set on the way to every enqueue, by this property)."""
        self.enqueued = True
        return self.bare_queue

    @queue.setter
    def queue(self, queue: Any) -> None:  # (fl.cuda.stream's, for its block)
        self.bare_queue = queue

    def flush(self) -> None:
        """Enqueue the deferred launches, oldest first."""
        if _blocked is not None:
            raise RuntimeUnavailableError(_blocked)
        with self.launch_lock:
            if not self.gate_at or len(self.deferred) < self.gate_at:
                self._enqueue_deferred()
                return
            # PoCL wakes its workers at every enqueue; held behind a user event, a
            # batch is enqueued without them competing with this thread for the CPUs
            release = self.hold(self.context, self.queue)
            try:
                self._enqueue_deferred()
            finally:  # (always: a closed gate would block the queue for good)
                if release is not None:
                    release()

    def _enqueue_deferred(self) -> None:
        deferred = self.deferred
        if not deferred:
            return
        queue = self.queue
        while deferred:
            go, args = deferred.popleft()  # taken first: a re-entrant flush skips it
            try:
                go(*args, queue)
            except BaseException:
                # Interrupted or refused: put it back so no result is silently
                # missing (an elementwise launch into its own new buffer can run
                # twice); the next use of the queue tries again.
                deferred.appendleft((go, args))
                raise

GATE_AT = 8

_lock = threading.Lock()
_devices: list[Device] | None = None  # every backend's devices, once discovered
_first: list[Device] | None = None  # the first backend's, discovered before the others
_runtimes: dict[int, _DeviceRuntime] = {}
_default: Device | None = None
_override: contextvars.ContextVar[Device | None] = contextvars.ContextVar(
    "fuseloop_device", default=None)
# the device set of ``with fl.device([d0, d1, ...])`` (a fuseloop.multi.DeviceSet), or None
_device_set: contextvars.ContextVar[Any] = contextvars.ContextVar(
    "fuseloop_device_set", default=None)


def _runtime(device: Device) -> _DeviceRuntime:
    rt = _runtimes.get(device.index)
    if rt is None or _blocked is not None:
        if _blocked is not None:
            raise RuntimeUnavailableError(_blocked)
        with _lock:
            rt = _runtimes.get(device.index)
            if rt is None:
                rt = _runtimes[device.index] = _DeviceRuntime(device)
    return rt


def flush_deferred(device: Device) -> None:
    """Enqueue ``device``'s deferred launches now, if it has any."""
    rt = _runtimes.get(device.index)
    if rt is not None and rt.deferred:
        rt.flush()


# {{{ process lifecycle: fork and interpreter exit

#: why the OpenCL runtime may not be used in this process any more, or None
_blocked: str | None = None
# runtimes inherited through fork: kept alive, never used or released (either could
# wait forever on driver threads that the child does not have)
_orphans: list[_DeviceRuntime] = []
FORK_MESSAGE = (
    "fuseloop cannot use OpenCL in this process: it was forked (os.fork, or a "
    "multiprocessing pool or process with the 'fork' start method) after its parent had "
    "used OpenCL, and OpenCL drivers do not survive fork (their threads are not copied, "
    "so any evaluation would wait forever). Use multiprocessing.get_context('spawn') or "
    "'forkserver', or fork before the parent first uses fuseloop")
EXIT_MESSAGE = (
    "fuseloop's OpenCL runtime was shut down at interpreter exit; a thread (a daemon "
    "thread?) used fuseloop after the main thread finished. Join such threads before "
    "exiting, or stop them first")
# how long the exit hook waits for a thread that holds a device's launch lock
EXIT_LOCK_WAIT_S = 5.0


def _block(reason: str) -> None:
    global _blocked
    _blocked = reason
    for rt in (*_runtimes.values(), *_orphans):
        rt.pool.blocked = reason


def _after_fork_in_child() -> None:
    # Even a driver that only listed its devices (clGetPlatformIDs) hangs in a forked
    # child (PoCL 3.0: a fresh context's first kernel never completes), so a fresh
    # runtime cannot be offered: the child gets a clear error instead of a hang.
    if _devices is None and _first is None:
        return  # OpenCL not touched yet: the child may use it as any process
    global _lock
    _lock = threading.Lock()  # (another thread of the parent may have held it)
    _orphans.extend(_runtimes.values())
    _runtimes.clear()
    _block(FORK_MESSAGE)


def _quiesce(rt: _DeviceRuntime) -> None:
    """Let everything enqueued on ``rt`` finish; drop launches never enqueued."""
    locked = rt.launch_lock.acquire(timeout=EXIT_LOCK_WAIT_S)
    try:
        rt.deferred.clear()  # (their results can no longer be read)
        rt.finish()
    except Exception:  # (the driver's error for a failed command)
        pass  # nothing is left running either way
    finally:
        if locked:
            rt.launch_lock.release()


def _shutdown_at_exit() -> None:
    """Stop new launches and wait for the queues, before the interpreter and the driver
    are torn down while a daemon thread may still be running kernels (which aborted
    the process: 'terminate called without an active exception')."""
    if _blocked is not None:
        return  # (a forked child: its inherited runtimes must not be waited on)
    _block(EXIT_MESSAGE)
    runtimes = list(_runtimes.values())
    for rt in runtimes:
        _quiesce(rt)
    if threading.active_count() > 1:
        # a thread that passed the check just before the block may enqueue once more
        time.sleep(0.01)
        for rt in runtimes:
            _quiesce(rt)


# (registered after pyopencl's own exit hook, so it runs before that one)
atexit.register(_shutdown_at_exit)
if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_after_fork_in_child)

# }}}


def _cold(device: Device | None) -> bool:
    """Whether this disk cache never saw ``device`` (None: any device) opened: the process
    will build kernels (a marker: one stat, or a folder's listing)."""
    from .. import cache_disk

    return not cache_disk.opened_before(None if device is None else device.identity)


def _preload_loopy() -> None:
    from .. import _lazy

    _lazy.preload_loopy()


def _start_early() -> None:
    """At the start of device discovery, where the disk cache never saw a device opened:
    start a compile worker (the process will build kernels, and its first build would
    otherwise wait at the first miss for the worker's start: Python, the driver), and
    where a GPU's driver is listed, import Loopy on a thread beside the driver's start
    and the context (see :func:`fuseloop._lazy.preload_loopy`).  A process whose kernels
    are on disk does neither (the first miss starts a worker and imports Loopy)."""
    if not _cold(None):
        return  # (a warm process: one listing, compile_workers not even imported)
    from ..backends import BACKENDS

    spec = os.environ.get("FUSELOOP_DEVICE", "").strip().lower()
    later = spec.partition(":")[0] in list(BACKENDS)[1:]  # (a later backend's device)
    if later or (spec != "cpu" and icd.lists_other_runtimes()):
        # (a CPU runtime's process has little GIL-free time to put the import beside, and
        # its small arrays' first results may never need Loopy: numpy computes them)
        _preload_loopy()
    if not later:
        from . import compile_workers

        compile_workers.prestart()


def _ready_worker(device: Device) -> None:
    """Have a compile worker ready ``device`` (its driver, a context, the compiler's first
    build) while this process copies and lowers, where the disk cache never saw it
    opened; the device is marked as seen."""
    from .. import cache_disk
    from . import compile_workers

    compile_workers.prestart(device)
    cache_disk.note_opened(device.identity)


def _discover(names: list[str], start: int) -> list[Device]:
    """The devices of backends ``names``, indexed from ``start``."""
    from ..backends import get_backend

    found: list[Device] = []
    for name in names:
        try:
            backend = get_backend(name)
            if start == 0 and not found and backend.worker_builder is not None:
                _start_early()  # (the worker loads the backend's builder meanwhile)
            infos = backend.discover()
        except ImportError:  # (a backend whose driver is not installed)
            continue
        for info in infos:
            found.append(Device(
                index=start + len(found), name=info.name, type=info.type,
                platform=info.platform, vendor=info.vendor,
                driver_version=info.driver_version,
                global_mem_size=info.global_mem_size, max_alloc_size=info.max_alloc_size,
                has_fp64=info.has_fp64, cl_device=info.handle,
                compute_units=info.compute_units, problem=info.problem,
                runtime=info.runtime, backend=info.backend,
                max_work_group_size=info.max_work_group_size,
                max_constant_buffer_size=info.max_constant_buffer_size))
    return found


def _first_devices() -> list[Device]:
    """The first backend's devices (OpenCL's), discovered alone.

    Discovering the other backends costs a cold start more than the rest of device
    discovery (CuPy's import and CUDA's initialisation: tenths of a second), so the
    default device and most specs are chosen from these when no device of a later
    backend could rank before the choice (see :func:`_best`)."""
    global _first
    if _devices is not None:
        return _devices
    if _first is None:
        from ..backends import BACKENDS

        with _lock:
            if _first is None and _devices is None:
                _first = _discover(list(BACKENDS)[:1], 0)
    return _devices if _devices is not None else _first


def _all_devices() -> list[Device]:
    global _devices
    if _devices is None:
        first = _first_devices()
        from ..backends import BACKENDS

        with _lock:
            if _devices is None:
                # (the first backend's Device objects are kept: a device chosen
                # from them is the same object in the full list)
                _devices = [*first, *_discover(list(BACKENDS)[1:], len(first))]
    return _devices


def known_devices() -> list[Device]:
    """The devices discovered so far: every device with a lower index than one of
    them is among them (backends are discovered in order)."""
    return _devices if _devices is not None else _first_devices()


#: the least ``icd.preference`` of a device of a later backend (a GPU API's, not one
#: of the CPU runtimes that list ranks)
_LATER_PREFERENCE = len(icd.CPU_RUNTIME_PREFERENCE)


def _best(matching: Callable[[list[Device]], list[Device]],
          key: Callable[[Device], tuple], floor: tuple) -> Device | None:
    """The first device of least ``key`` among ``matching(devices)``, or None.

    ``floor`` is the least key a device of a later backend can have: a choice among
    the first backend's devices whose key is at most ``floor`` is final (ties go to
    the lower index, the first backend's), and the other backends are not
    discovered."""
    found = _first_devices()
    matches = matching(found)
    if matches:
        best = min(matches, key=key)
        if found is _devices or key(best) <= floor:
            return best
    if found is _devices:
        return None
    matches = matching(_all_devices())
    return min(matches, key=key) if matches else None


def devices(type: str | Callable[[Device], bool] | None = None, name: str | None = None,
            fp64: bool | None = None) -> list[Device]:
    """OpenCL devices present, optionally filtered (like VexCL's device filters).

    ``type`` is ``"gpu"``, ``"cpu"`` or ``"accelerator"``, or a predicate called with
    each :class:`Device` (``fl.devices(lambda d: d.global_mem_size > 2**32)``);
    ``name`` a case-insensitive substring of the device name, the platform name or
    the runtime (``Device.runtime``: ``"pocl"``, ``"intel opencl"``); ``fp64=True``
    keeps devices with double precision.
    """
    result = _all_devices()
    if callable(type):
        result = [d for d in result if type(d)]
    elif type is not None:
        if not isinstance(type, str):
            raise TypeError(f"fl.devices: type must be 'gpu', 'cpu', 'accelerator' or a "
                            f"predicate taking a Device, not {type!r}")
        result = [d for d in result if d.type == type.lower()]
    if name is not None:
        if not isinstance(name, str):
            raise TypeError(f"fl.devices: name must be a string, not {name!r}")
        key = name.lower()
        result = [d for d in result if key in d.name.lower() or _names_runtime(d, key)]
    if fp64 is not None:
        result = [d for d in result if d.has_fp64 == fp64]
    return result


def _names_runtime(d: Device, key: str) -> bool:
    return key in d.platform.lower() or key in d.runtime.lower()


def _describe_all() -> str:
    found = _all_devices()
    notes = "".join(f"\n  note: {n}" for n in icd.registration().notes)
    if not found:
        return "no OpenCL devices were found (is pocl-binary-distribution installed?)" + notes
    return "available devices:\n" + "\n".join(
        f"  {d}" + ("" if d.usable else " -- cannot build kernels") for d in found) + notes


def _named_by_env() -> Device | None:
    """The device FUSELOOP_DEVICE names by index or name, if it names one that way."""
    spec = os.environ.get("FUSELOOP_DEVICE", "").strip()
    if not spec or spec.lower() in ("gpu", "cpu", "accelerator"):
        return None
    try:
        return find_device(spec)
    except DeviceNotFoundError:
        return None



def _backend_device(key: str) -> Device | None:
    """The device a ``backend:index`` spec names (``cuda:0``, ``opencl:1``: the index
    counts that backend's devices), None when ``key`` is not of that form."""
    from ..backends import BACKENDS

    backend, sep, rest = key.partition(":")
    if not sep or backend not in BACKENDS or not rest.strip().isdigit():
        return None
    found = _first_devices() if backend == next(iter(BACKENDS)) else _all_devices()
    of_backend = [d for d in found if d.backend == backend]
    idx = int(rest)
    if idx < len(of_backend):
        return of_backend[idx]
    raise DeviceNotFoundError(
        f"no {backend} device with index {idx} ({len(of_backend)} found: "
        f"{'is its driver installed?' if not of_backend else 'indexes from 0'}); "
        f"{_describe_all()}")


def find_device(spec: Device | int | str) -> Device:
    """Resolve a device spec: Device, index, 'gpu'/'cpu'/'accelerator' or a name substring."""
    if isinstance(spec, Device):
        return spec
    if isinstance(spec, int) or (isinstance(spec, str) and spec.strip().isdigit()):
        idx = int(spec)
        found = _first_devices()
        if not 0 <= idx < len(found):
            found = _all_devices()
        if 0 <= idx < len(found):
            return found[idx]
        raise DeviceNotFoundError(f"no device with index {idx}; {_describe_all()}")
    if not isinstance(spec, str):
        raise DeviceNotFoundError(f"cannot select a device from {spec!r}; {_describe_all()}")
    key = spec.strip().lower()
    by_backend = _backend_device(key)
    if by_backend is not None:
        return by_backend
    if key in ("gpu", "cpu", "accelerator"):
        # a type means the device FUSELOOP_DEVICE names, when it is of that type
        # ('cpu' is the Intel runtime's CPU under FUSELOOP_DEVICE=intel)
        env = _named_by_env()

        def first(d: Device) -> tuple:
            return (not d.usable, d is not env, icd.preference(d.runtime))

        best = _best(lambda found: [d for d in found if d.type == key], first,
                     (False, True, _LATER_PREFERENCE))
    else:
        def first(d: Device) -> tuple:
            # 'intel' means Intel's runtime before PoCL's 'pthread-Intel(R) Xeon(R) ...'
            return (not d.usable, not _names_runtime(d, key), icd.preference(d.runtime))

        best = _best(lambda found: [d for d in found if key in d.name.lower()
                                    or _names_runtime(d, key)], first,
                     (False, False, _LATER_PREFERENCE))
    if best is None:
        raise DeviceNotFoundError(f"no OpenCL device matches {spec!r}; {_describe_all()}")
    return best


def _initial_default() -> Device:
    spec = os.environ.get("FUSELOOP_DEVICE", "").strip()
    if spec:
        try:
            return find_device(spec)
        except DeviceNotFoundError as exc:
            raise DeviceNotFoundError(f"FUSELOOP_DEVICE={spec!r}: {exc}") from None
    # usable devices first (a usable CPU before a GPU whose compiler rejects
    # everything), then GPUs before CPUs before the rest; when nothing is usable the
    # first one is chosen and its first build error says why
    rank = {"gpu": 0, "cpu": 1}
    best = _best(list, lambda d: (not d.usable, rank.get(d.type, 2),
                                  icd.preference(d.runtime)), (False, 0, _LATER_PREFERENCE))
    if best is None:
        raise DeviceNotFoundError(_describe_all())
    return best


def get_device() -> Device:
    """The device new arrays go to."""
    dev = _override.get()
    if dev is not None:
        return dev
    global _default
    if _default is None:
        _default = _initial_default()
    return _default


def set_device(spec: Device | int | str) -> Device:
    """Make ``spec`` the default device for new arrays."""
    global _default
    _default = find_device(spec)
    return _default


def device_set() -> Any:
    """The device set new arrays are split over (``with fl.device([...])``), or None."""
    return _device_set.get()


@contextlib.contextmanager
def device(spec: Device | int | str | list | tuple, weights: Any = None) -> Iterator[Any]:
    """``with fl.device("cpu"):`` runs the block with another default device.

    A list of devices (``fl.device(fl.devices(type="gpu"))``; one may appear more than
    once) makes new arrays in the block split along their first axis over the devices
    (:class:`fuseloop.multi.MultiArray`), in proportion to ``weights`` (see
    :class:`fuseloop.multi.DeviceSet`); the block gets the set, and functions that do
    not split make arrays on its first device.
    """
    if isinstance(spec, list | tuple) or hasattr(spec, "weights"):
        from ..multi import DeviceSet

        dset = DeviceSet.of(spec, weights)
        token_set = _device_set.set(dset)
        token = _override.set(dset.devices[0])
        try:
            yield dset
        finally:
            _override.reset(token)
            _device_set.reset(token_set)
        return
    if weights is not None:
        raise TypeError("fl.device: weights= goes with a list of devices")
    token_set = _device_set.set(None)
    token = _override.set(find_device(spec))
    try:
        yield _override.get()
    finally:
        _override.reset(token)
        _device_set.reset(token_set)
