"""The backend interface: what fuseloop asks of a compute API (OpenCL, CUDA, ...).

A :class:`Backend` discovers devices, allocates and copies buffers, builds
programs from source or from a binary (and hands the binary back for the disk
cache), makes kernel objects, launches and waits.  The records here are small and
backend-neutral; what they wrap (``handle``) is the backend's own object.

The launch hot path does not call the backend per launch: once per launch plan,
:meth:`Backend.make_launcher` turns a :class:`LaunchSpec` (which argument
positions are outputs, inputs, scalars and constants, and the grid) into a
closure, and :mod:`fuseloop.launching` calls that closure for every launch.  The
closure's signature (:data:`Launcher`) is the contract: it binds the arguments
that changed since the last launch on the same per-thread kernel object and
enqueues on the queue it is given.

The per-device runtime (:mod:`fuseloop.runtime.devices`, ``memory``, ``transfer``)
calls a backend only where a device is opened: :meth:`Backend.open` (context and
queue), :meth:`Backend.buffer_pool` (the raw buffers that
:class:`~fuseloop.runtime.memory.DeviceMemory` counts) and the queue and event
primitives (:meth:`~Backend.submit`, :meth:`~Backend.event_status`, ...), which the
runtime binds once per device and calls without looking the backend up again.  The
code generator asks :meth:`Backend.loopy_target` for its Loopy target.

The test of this interface: a CUDA backend (Loopy's CUDA target, built with
NVRTC) is one new module implementing these methods, registered in
:mod:`fuseloop.backends`, and nothing else changes.
"""

from __future__ import annotations

import functools
from abc import ABC, abstractmethod
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from typing import Any, ClassVar

import numpy as np

from ..errors import OutOfMemoryError

#: ``go(outs, storages, scalars, kernel, last, queue)``: bind the changed arguments of
#: ``kernel`` (this thread's kernel object of the plan; ``last`` records what its
#: arguments hold) from ``outs`` (one output storage, or a sequence of them),
#: ``storages`` (input storages) and ``scalars``, and enqueue it on ``queue``.
Launcher = Callable[[Any, list[Any], list[Any], Any, list[Any], Any], None]
#: a launch's constant arguments: ``(position, numpy scalar)`` pairs
Consts = tuple[tuple[int, Any], ...]


@dataclass(frozen=True)
class DeviceInfo:
    """What discovery reports about one device, before fuseloop numbers it."""

    backend: str
    name: str
    type: str  # "gpu", "cpu", "accelerator" or "other"
    platform: str
    vendor: str
    driver_version: str
    global_mem_size: int
    max_alloc_size: int
    has_fp64: bool
    compute_units: int
    max_work_group_size: int
    #: the runtime and its version, e.g. 'PoCL 3.0-rc2 (LLVM 14.0.6)'
    runtime: str = ""
    #: why this device's compiler cannot build kernels, when that is known
    problem: str | None = None
    #: the backend's own device object
    handle: Any = field(default=None, repr=False, compare=False)
    #: the largest buffer readable as constant memory (OpenCL's minimum: 64 KiB)
    max_constant_buffer_size: int = 65536


@dataclass(frozen=True, eq=False)
class BuiltProgram:
    """A program built for one device: the backend's program object and the names
    of the kernels it was checked to hold."""

    backend: str
    handle: Any = field(repr=False)
    kernel_names: tuple[str, ...] = ()


@dataclass(frozen=True)
class LaunchSpec:
    """How one kernel is launched with one set of sizes: all but the data.

    Positions are the kernel's argument positions.  ``outputs`` and ``inputs`` are
    ``(position, index)`` pairs into the launch's output and input storages;
    ``scalars`` are ``(position, index, numpy scalar type)`` into its scalars (each
    converted to the kernel's declared type); ``consts`` are ``(position, value)``
    set when the kernel object last ran another plan's (one object per compiled
    kernel and thread serves all its plans).  ``global_size`` and ``local_size`` are in
    work-items.  ``one_output``: the launcher takes the output storage itself,
    not a sequence.
    """

    outputs: tuple[tuple[int, int], ...]
    inputs: tuple[tuple[int, int], ...]
    scalars: tuple[tuple[int, int, type], ...]
    consts: tuple[tuple[int, np.generic], ...]
    global_size: tuple[int, ...]
    local_size: tuple[int, ...]
    one_output: bool = False
    #: the position of a gather's error flag (set by the caller per launch), or None
    error_arg: int | None = None

    @property
    def n_args(self) -> int:
        """How many arguments the kernel takes."""
        positions: list[int] = [p for p, _ in self.outputs]
        positions += [p for p, _ in self.inputs]
        positions += [p for p, _, _ in self.scalars]
        positions += [p for p, _ in self.consts]
        if self.error_arg is not None:
            positions.append(self.error_arg)
        return max(positions, default=-1) + 1


class BufferPool(ABC):
    """A device's buffers as the backend makes them (:meth:`Backend.buffer_pool`):
    pooled ones, and ones outside the pool.  :class:`~fuseloop.runtime.memory.DeviceMemory`
    counts them against the device's memory and turns :attr:`refused` into the
    backend's :attr:`Backend.OutOfMemory`."""

    #: ``allocate(nbytes)``: a pooled buffer of at least ``nbytes`` (> 0) bytes; an
    #: attribute, so a driver's own pool method can be it (no Python frame per call)
    allocate: Callable[[int], Any]
    #: the driver's exceptions for a refused allocation
    refused: tuple[type[BaseException], ...] = ()
    #: the least size (bytes) of a pooled buffer that :meth:`advise` should see when it is
    #: new from the driver (None: never; see :mod:`fuseloop.runtime.huge_pages`)
    huge_from: int | None = None

    def advise(self, buffer: Any) -> None:
        """Ask for huge pages under ``buffer``, a block new from the driver that nothing
        has written yet (only where :attr:`huge_from` is set)."""
        return None

    @property
    @abstractmethod
    def managed_bytes(self) -> int:
        """Bytes the pool holds from the driver: blocks in use and kept for reuse."""

    @abstractmethod
    def free_held(self) -> None:
        """Give the blocks kept for reuse back to the driver."""

    @abstractmethod
    def buffer(self, nbytes: int, host: np.ndarray | None,
               on_release: Callable[[int], None]) -> Any:
        """A buffer outside the pool of ``nbytes`` bytes, holding a copy of ``host``'s
        bytes when given (no queue command); ``on_release(nbytes)`` is called once
        the buffer dies."""


class Backend(ABC):
    """One compute API.  Stateless apart from caches of its own: a device's context,
    queue and buffer pool live in :mod:`fuseloop.runtime.devices`; methods that need
    them take the :class:`~fuseloop.runtime.devices.Device`."""

    #: short label naming the backend (``FUSELOOP_DEVICE`` specs, cache keys, errors)
    name: ClassVar[str]
    #: the language the code generator must target for this backend
    language: ClassVar[str]
    #: the path of a standalone file whose ``build(state, address, source, options,
    #: kernel_names)`` a compile worker loads (see
    #: :mod:`fuseloop.runtime.compile_worker_main`); None: builds run in this process
    worker_builder: ClassVar[str | None] = None
    #: what this backend's buffer pools raise when the driver refuses an allocation
    #: (a subclass of :class:`~fuseloop.errors.OutOfMemoryError`, which callers catch)
    OutOfMemory: ClassVar[type[OutOfMemoryError]] = OutOfMemoryError
    #: whether :meth:`capture` records launches as a graph that :meth:`launch_graph`
    #: replays for less host time than the launches (``fl.fuse`` uses it: see
    #: :mod:`fuseloop.fuse_graphs`)
    graphs: ClassVar[bool] = False
    #: whether :meth:`copy_from` copies between two devices of this backend without the
    #: host (split arrays then combine partial results on a device, not on the host)
    direct_copies: ClassVar[bool] = False

    # {{{ devices

    @abstractmethod
    def discover(self) -> list[DeviceInfo]:
        """Every device this backend's runtime offers, in its own order."""

    @abstractmethod
    def open(self, device: Any) -> tuple[Any, Any]:
        """A new ``(context, queue)`` for ``device`` (its ``handle`` from discovery is
        ``device.cl_device``): the queue in order, launches and copies run in the order
        they are enqueued.  Called once per device and process."""

    @abstractmethod
    def buffer_pool(self, device: Any, context: Any, queue: Any) -> BufferPool:
        """The pool of buffers of an opened device (see :class:`BufferPool`)."""

    @abstractmethod
    def loopy_target(self) -> Any:
        """A new Loopy target of :attr:`language` for the code generator
        (``loopy.OpenCLTarget()``; CUDA: ``loopy.CudaTarget()``)."""

    def build_options(self, device: Any) -> list[str]:
        """Compiler options every generated kernel for ``device`` is built with (what
        numpy's semantics need of the compiler; none by default)."""
        return []

    # }}}

    # {{{ queues and events (bound once per device by the runtime)

    @abstractmethod
    def submit(self, queue: Any) -> None:
        """Hand what is enqueued on ``queue`` to the device, without waiting."""

    @abstractmethod
    def marker(self, queue: Any) -> Any:
        """An event that completes once everything enqueued before it has."""

    @abstractmethod
    def finish_queue(self, queue: Any) -> None:
        """Wait until everything enqueued on ``queue`` has finished."""

    def finisher(self, queue: Any) -> Callable[[], None]:
        """:meth:`finish_queue` of ``queue`` as a call of no argument (the driver's own
        method where it has one: the CPU's eager path finishes the queue per statement)."""
        return functools.partial(self.finish_queue, queue)

    @abstractmethod
    def event_status(self, event: Any) -> int:
        """0 once ``event`` completed, > 0 while it is queued or running, < 0 when its
        command failed.  Cheap and non-blocking: waits poll it."""

    @abstractmethod
    def wait_event(self, event: Any) -> None:
        """Sleep until ``event`` completed; raise the driver's error if it failed."""

    def hold(self, context: Any, queue: Any) -> Callable[[], None] | None:
        """Hold back every command enqueued on ``queue`` from now on until the
        returned function is called (a batch is then released at once), or None when
        the backend cannot (the batch then runs as it is enqueued).  OpenCL: a marker
        waiting on a user event."""
        return None

    # }}}

    # {{{ buffers and copies

    @abstractmethod
    def allocate(self, device: Any, nbytes: int) -> Any:
        """A device buffer of at least ``nbytes`` bytes (from the device's pool)."""

    @abstractmethod
    def buffer_from_host(self, device: Any, host: np.ndarray) -> Any:
        """A new device buffer holding a copy of ``host``'s bytes."""

    @abstractmethod
    def free(self, buffer: Any) -> None:
        """Give ``buffer`` back now rather than when it is collected."""

    def upload(self, device: Any, buffer: Any, host: np.ndarray,
               wait_for: Sequence[Any] | None = None, blocking: bool = False) -> Any:
        """Copy ``host`` into ``buffer`` on ``device``'s queue; returns the event (with
        ``blocking``, possibly None: the copy is done).  Without ``blocking`` it does not
        wait (``host`` must then stay unchanged until the event completed)."""
        return self.enqueue_write(device.queue, buffer, host, wait_for, blocking)

    def download(self, device: Any, host: np.ndarray, buffer: Any,
                 wait_for: Sequence[Any] | None = None, blocking: bool = False) -> Any:
        """Copy ``buffer``'s first ``host.nbytes`` bytes into ``host`` on ``device``'s
        queue; returns the event (without ``blocking``, wait for it before reading
        ``host``; with it, possibly None)."""
        return self.enqueue_read(device.queue, host, buffer, wait_for, blocking)

    def read_staging(self, nbytes: int) -> np.ndarray | None:
        """A host buffer of ``nbytes`` bytes that a read without ``blocking`` fills
        without holding the calling thread (CUDA: page-locked memory; a read into
        ordinary memory returns only once the copy is done), or None where ordinary
        memory serves as well.  Split arrays read their parts' small results through it,
        so that every device's read is under way before the host waits for any."""
        return None

    def staging_slot(self, device: Any, nbytes: int) -> Any | None:
        """A reusable slot of page-locked host memory for a read of ``nbytes`` from
        ``device`` (``.host``: its bytes; set ``.event`` to the read's, ``.release()`` it
        once copied out), or None (see :meth:`read_staging`; OpenCL:
        :mod:`fuseloop.backends.opencl_staging`)."""
        return None

    @abstractmethod
    def enqueue_write(self, queue: Any, buffer: Any, host: np.ndarray,
                      wait_for: Sequence[Any] | None, blocking: bool) -> Any:
        """:meth:`upload` on an opened device's ``queue`` (the runtime binds it once)."""

    @abstractmethod
    def enqueue_read(self, queue: Any, host: np.ndarray, buffer: Any,
                     wait_for: Sequence[Any] | None, blocking: bool, offset: int = 0) -> Any:
        """:meth:`download` on an opened device's ``queue`` (the runtime binds it once),
        from byte ``offset`` of ``buffer`` (a split array's halo rows, read in place)."""

    @abstractmethod
    def copy(self, device: Any, dst: Any, src: Any, nbytes: int, src_offset: int = 0,
             wait_for: Sequence[Any] | None = None) -> Any:
        """Copy ``nbytes`` bytes from buffer ``src`` (from byte ``src_offset``) to the
        start of buffer ``dst``; returns the event."""

    def copy_from(self, device: Any, dst: Any, src_device: Any, src: Any, nbytes: int,
                  src_offset: int = 0) -> bool:
        """Copy ``nbytes`` bytes of buffer ``src`` on ``src_device`` (another device of
        this backend; from byte ``src_offset``) to the start of ``dst`` on ``device``
        without the host, after what either device's queue holds, and before what is
        enqueued on either after it; False where the backend has no direct way (the
        caller then copies through the host)."""
        return False

    def copies_between(self, device: Any, other: Any) -> bool:
        """Whether :meth:`copy_from` copies from ``other`` (a device of any backend) to
        ``device`` without the host: :attr:`direct_copies` for two devices of this
        backend; OpenCL: devices of one context."""
        return device is other or (self.direct_copies and other.backend == self.name)

    @abstractmethod
    def fill(self, device: Any, buffer: Any, pattern: np.ndarray, nbytes: int) -> Any:
        """Fill ``buffer``'s first ``nbytes`` bytes with repeats of ``pattern``'s bytes
        (``nbytes`` a multiple of its size); returns the event."""

    # }}}

    # {{{ programs

    @abstractmethod
    def build_source(self, device: Any, source: str, options: Sequence[str],
                     kernel_names: Sequence[str], built_before: bool = False) -> BuiltProgram:
        """``source`` built for ``device``, every one of ``kernel_names`` checked to
        exist.  Raises :class:`~fuseloop.errors.KernelBuildError` when the compiler
        rejects it or crashes (builds may run in another process).  ``built_before``:
        the source is a disk-cache entry's, which this compiler built before, so a
        driver that caches its builds (see :meth:`stores_binaries`) finds it there."""

    @abstractmethod
    def build_binary(self, device: Any, binary: bytes, options: Sequence[str],
                     kernel_names: Sequence[str]) -> BuiltProgram | None:
        """The program of a binary :meth:`binary_of` once returned, or None when the
        driver refuses it (the caller then builds the source)."""

    @abstractmethod
    def binary_of(self, program: BuiltProgram) -> bytes | None:
        """The device binary of ``program`` (for the disk cache), None when there is none."""

    def stores_binaries(self, device: Any) -> bool:
        """Whether fuseloop's disk cache should hold ``device``'s program binaries.
        False where the driver caches builds from source itself and making a binary
        costs more than that cache's hit: the disk entry then holds the source only,
        and a later process builds it again (a hit of the driver's cache)."""
        return True

    def joins_kernels(self, device: Any) -> bool:
        """Whether kernels built together (:mod:`fuseloop.batch_build`) go into one
        program: where the driver's build has a large part that does not depend on the
        kernels.  False (the default): one program each, built in parallel, for a
        driver whose cost is per kernel (NVIDIA's OpenCL on an H200: eight small kernels
        as one program took longer than as eight programs in two compile workers)."""
        return False

    # }}}

    # {{{ kernels, launches, events

    @abstractmethod
    def kernel(self, program: BuiltProgram, name: str,
               consts: Sequence[tuple[int, Any]] = ()) -> Any:
        """A new kernel object for ``name`` with the constant arguments set.  One per
        compiled kernel and thread: a kernel object holds its arguments between
        launches, and the launcher re-sets a plan's constants when they changed."""

    @abstractmethod
    def make_launcher(self, spec: LaunchSpec) -> Launcher:
        """The closure launching kernels of this spec (see :data:`Launcher`)."""

    def launcher_family(self, spec: LaunchSpec) -> Callable[[Consts], Launcher]:
        """``bind(consts)``: the launcher of ``spec`` with these constants instead of
        ``spec.consts`` (a statement's new offsets, the same kernel and grid).  Backends
        whose launchers cost more than a closure to make override it."""
        return lambda consts: self.make_launcher(replace(spec, consts=consts))

    @abstractmethod
    def set_buffer_arg(self, kernel: Any, position: int, buffer: Any) -> None:
        """Set one buffer argument of ``kernel`` (a launch's own buffers, e.g. an error flag)."""

    @abstractmethod
    def launch(self, device: Any, kernel: Any, global_size: Sequence[int],
               local_size: Sequence[int] | None, args: Sequence[Any],
               wait_for: Sequence[Any] | None = None) -> Any:
        """Set every argument of ``kernel`` (buffers, and numpy scalars of the declared
        types) and enqueue it on ``device``'s queue now; returns the event.  Unplanned:
        for one-off launches; repeated launches go through :meth:`make_launcher`."""

    def capture(self, device: Any, enqueue: Callable[[Any], None]) -> Any:
        """A graph of the launches ``enqueue(queue)`` makes on the queue it is given,
        recorded and not run (arguments fixed as they were enqueued).  Raises the
        driver's error when it refuses; backends with :attr:`graphs` only."""
        raise NotImplementedError(f"the {self.name} backend has no graphs")

    def launch_graph(self, device: Any, graph: Any, queue: Any) -> None:
        """Enqueue a graph :meth:`capture` made on ``queue`` (of ``device``)."""
        raise NotImplementedError(f"the {self.name} backend has no graphs")

    def buffer_address(self, buffer: Any) -> int:
        """What identifies ``buffer``'s memory in a captured graph (its device address)."""
        raise NotImplementedError(f"the {self.name} backend has no graphs")

    def wait(self, device: Any, event: Any) -> None:
        """Return once ``event`` has completed (raising if its command failed): polled
        on CPU devices, through the primitives above (:func:`fuseloop.runtime.transfer.wait`)."""
        from ..runtime import transfer

        transfer.wait(event, device)

    def finish(self, device: Any) -> None:
        """Wait until everything enqueued on ``device`` has finished (deferred launches
        included)."""
        from ..runtime import transfer

        transfer.finish(device)

    # }}}


__all__ = ["Backend", "BufferPool", "BuiltProgram", "Consts", "DeviceInfo", "LaunchSpec",
           "Launcher"]
