"""The OpenCL backend, over pyopencl: the first implementation of :class:`Backend`.

Discovery (with the probe of PoCL devices whose compiler cannot target this CPU),
a device's context (its own, or one shared by the devices of a platform and type when
asked, so split arrays copy between them: :meth:`OpenCLBackend.copy_from`) and
in-order queue, its buffer pool (pyopencl's ``MemoryPool``), builds (in compile workers, see
:mod:`fuseloop.runtime.compile_workers`, or inline), kernel objects and the
launchers that bind and enqueue them, copies, fills, events and the user-event gate
of deferred batches.  :mod:`fuseloop.runtime.devices` keeps the opened device
(``Device.context``, ``Device.queue``, ``Device.allocator``).
"""

from __future__ import annotations

import os
import platform
import threading
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any
from weakref import ref as _weakref

import numpy as np
import pyopencl as cl
import pyopencl.tools

from ..errors import KernelBuildError, OutOfMemoryError
from ..runtime import compile_workers
from . import opencl_staging as _staging
from .base import (
    Backend,
    BufferPool,
    BuiltProgram,
    Consts,
    DeviceInfo,
    Launcher,
    LaunchSpec,
)

# pyopencl's public enqueue (in pyopencl 2026.1 the same function object as the
# private ``cl._cl.enqueue_nd_range_kernel`` its invoker calls: no reason to use that;
# benchmarks/probes/enqueue_cost.py measures both).  Read when a launcher is made.
_enqueue_nd_range = cl.enqueue_nd_range_kernel

# the buffer <-> host copies ``cl.enqueue_copy`` dispatches to by its arguments' types
# (its Python dispatch cost 3.4 us of a 4.3 us non-blocking read on PoCL: a split sum
# reads a partial per part, a stencil step a halo per piece); the dispatch where absent
_read_buffer = getattr(cl._cl, "_enqueue_read_buffer", None)
_write_buffer = getattr(cl._cl, "_enqueue_write_buffer", None)

# How a scalar argument is set: from its bytes where pyopencl offers it.  Its
# public ``Kernel.set_arg`` tries the other kinds of argument first and took
# 10-15 us for a numpy scalar on PoCL (0.1 us for a buffer); ``_set_arg_buf``,
# which pyopencl's own invokers use for declared scalar types, takes 0.1-0.2 us
# (re-measured by benchmarks/probes/enqueue_cost.py).
SET_SCALAR_ARG = "_set_arg_buf" if hasattr(cl.Kernel, "_set_arg_buf") else "set_arg"
_set_scalar = getattr(cl.Kernel, SET_SCALAR_ARG)
_set_arg = cl.Kernel.set_arg

_TYPE_NAMES = {
    cl.device_type.GPU: "gpu",
    cl.device_type.CPU: "cpu",
    cl.device_type.ACCELERATOR: "accelerator",
}
_BUILDER = str(Path(__file__).with_name("opencl_worker.py"))


_COMPLETE = cl.command_execution_status.COMPLETE

#: ``1``/``on``/``yes``/``true``: OpenCL devices of one platform and type share one context
#: (read when the first device of a platform is opened).  Off by default: on two H100s
#: it gave split sums no more speed-up than host combines (1.73x vs 1.74x one GPU) and
#: made split stencils slower (0.71x vs 0.99x), and it makes every program of pyopencl's
#: own (scans, sorts) build for all the platform's devices.
SHARED_CONTEXT_ENV = "FUSELOOP_OPENCL_SHARED_CONTEXT"


def shared_contexts() -> bool:
    """Whether devices of one platform and type share one context (opt-in)."""
    value = os.environ.get(SHARED_CONTEXT_ENV, "0").strip().lower()
    return value in ("1", "on", "yes", "true")


class OpenCLOutOfMemory(OutOfMemoryError, cl.MemoryError):
    """The OpenCL driver refused an allocation (``CL_MEM_OBJECT_ALLOCATION_FAILURE``,
    ``CL_OUT_OF_RESOURCES``).  Also a ``pyopencl.MemoryError``, so code written
    against pyopencl's pool still catches it."""


class _Buffer(cl.Buffer):
    """A buffer made outside the pool; tells its pool when it dies."""

    __slots__ = ("_on_release",)
    _on_release: Callable[[int], None]

    def __del__(self) -> None:
        on_release = getattr(self, "_on_release", None)
        if on_release is not None:
            on_release(self.size)


class OpenCLBufferPool(BufferPool):
    """pyopencl's ``MemoryPool`` over an immediate allocator, and ``cl.Buffer``s outside it.

    ``huge_from``: see :attr:`BufferPool.huge_from`; buffers made outside the pool from that
    size get their huge pages advised here too (:mod:`fuseloop.runtime.huge_pages`)."""

    refused = (cl.MemoryError,)

    def __init__(self, context: Any, queue: Any, huge_from: int | None = None) -> None:
        self.context = context
        # pooled buffers make the per-evaluation output allocation nearly free
        self.pool = cl.tools.MemoryPool(cl.tools.ImmediateAllocator(queue))
        self.allocate = self.pool.allocate
        self.huge_from = huge_from
        self._queue = queue
        self._advising: Any = None  # (the queue that maps buffers to advise: see _advised)

    @property
    def managed_bytes(self) -> int:
        return int(self.pool.managed_bytes)

    def free_held(self) -> None:
        self.pool.free_held()

    def buffer(self, nbytes: int, host: np.ndarray | None,
               on_release: Callable[[int], None]) -> Any:
        huge = self.huge_from is not None and nbytes >= self.huge_from
        if host is None or huge:
            made = _Buffer(self.context, cl.mem_flags.READ_WRITE, nbytes)
            if huge:  # (COPY_HOST_PTR would write the driver's pages before any advice)
                self._advised(made, host)
        else:
            made = _Buffer(self.context, cl.mem_flags.READ_WRITE | cl.mem_flags.COPY_HOST_PTR,
                           0, hostbuf=host)
        made._on_release = on_release
        return made

    def advise(self, buffer: Any) -> None:
        self._advised(buffer, None)

    def _advised(self, buffer: Any, host: np.ndarray | None) -> None:
        """Advise huge pages under a new ``buffer`` (all of its block), then copy ``host``'s
        bytes in when given.  Its memory is found by mapping it on a queue of its own: a new
        buffer has no command to wait for there, while the device's queue may be busy; the
        device's queue waits for the unmap before its next command (a barrier: no wait here)."""
        from ..runtime import huge_pages

        queue = self._advising
        if queue is None:
            queue = self._advising = cl.CommandQueue(self.context, self._queue.device)
        size = buffer.get_info(cl.mem_info.SIZE)
        flags = cl.map_flags.WRITE_INVALIDATE_REGION
        mapped, _ = cl.enqueue_map_buffer(queue, buffer, flags, 0, (size,), np.dtype(np.uint8))
        try:
            huge_pages.advise(mapped.ctypes.data, size, self.huge_from or size)
            if host is not None:
                mapped[:host.nbytes] = host.ravel(order="K").view(np.uint8)
        finally:
            unmapped = mapped.base.release(queue)
            queue.flush()
        cl.enqueue_barrier(self._queue, wait_for=[unmapped])


def _rejected(device: Any, what: str, kernel_names: Sequence[str], source: str,
              exc: Exception) -> KernelBuildError:
    return KernelBuildError(f"{what} for {device.name} rejected kernel "
                            f"{', '.join(kernel_names)}", source=source, build_log=str(exc))


class OpenCLBackend(Backend):
    """OpenCL through pyopencl; programs built from OpenCL C."""

    name = "opencl"
    language = "opencl"
    OutOfMemory = OpenCLOutOfMemory
    #: the compile worker's builder file (see :mod:`fuseloop.runtime.compile_worker_main`)
    worker_builder = _BUILDER

    # {{{ devices

    def discover(self) -> list[DeviceInfo]:
        from ..runtime import icd

        found: list[DeviceInfo] = []
        icd.start_drivers()  # (without the GIL: a thread may be importing Loopy)
        try:
            platforms = cl.get_platforms()
        except cl.Error:
            platforms = []
        for plat in platforms:
            try:
                cl_devices = plat.get_devices()
            except cl.Error:
                continue
            pname = plat.name.strip()
            for d in cl_devices:
                found.append(DeviceInfo(
                    backend=self.name, name=d.name.strip(),
                    type=next((n for t, n in _TYPE_NAMES.items() if d.type & t), "other"),
                    platform=pname, vendor=d.vendor.strip(),
                    driver_version=d.driver_version.strip(),
                    global_mem_size=int(d.global_mem_size),
                    max_alloc_size=int(d.max_mem_alloc_size),
                    has_fp64=bool(d.double_fp_config) or "cl_khr_fp64" in d.extensions,
                    compute_units=int(d.max_compute_units),
                    max_work_group_size=int(d.max_work_group_size),
                    runtime=icd.runtime_label(pname, plat.version.strip(),
                                              d.driver_version.strip()),
                    problem=_compiler_problem(d), handle=d,
                    max_constant_buffer_size=int(d.max_constant_buffer_size)))
        icd.check_discovered([p.name.strip() for p in platforms])
        return found

    def open(self, device: Any) -> tuple[Any, Any]:
        cl_device = device.cl_device
        context = self._context_for(cl_device)
        return context, cl.CommandQueue(context, cl_device)

    def _context_for(self, cl_device: Any) -> Any:
        """One context for every device of ``cl_device``'s platform and type (made when
        the first of them is opened; :func:`shared_contexts`), else its own.  In one
        context the devices' queues copy between their buffers and wait for each
        other's events, so split arrays combine partial results and exchange halos
        without the host (:meth:`copy_from`); each device still has its own queue and
        buffer pool, and programs are built for it alone."""
        from ..runtime.icd import new_context  # (without the GIL, as discovery's call)

        if not shared_contexts():
            return new_context([cl_device])
        try:
            siblings = [d for d in cl_device.platform.get_devices()
                        if d.type == cl_device.type]
        except cl.Error:
            siblings = []
        if len(siblings) < 2 or cl_device not in siblings:
            return new_context([cl_device])
        key = (cl_device.platform.int_ptr, int(cl_device.type))
        with _shared_lock:
            context = _shared.get(key)
            if context is None:
                context = _shared[key] = new_context(siblings)
        return context

    def copies_between(self, device: Any, other: Any) -> bool:
        return device is other or (other.backend == self.name
                                   and device.context is other.context)

    def buffer_pool(self, device: Any, context: Any, queue: Any) -> BufferPool:
        from ..runtime.huge_pages import advise_from

        return OpenCLBufferPool(context, queue, advise_from(device.type))

    def loopy_target(self) -> Any:
        import loopy as lp

        return lp.OpenCLTarget()

    def build_options(self, device: Any) -> list[str]:
        # numpy's float32 division and sqrt are correctly rounded; OpenCL allows 2.5 and
        # 3 ulp unless asked (NVIDIA's driver uses the approximations: 1/x off by one
        # ulp in 13% of values, so round(x, 2) missed numpy's result)
        config = device.cl_device.single_fp_config
        if config & cl.device_fp_config.CORRECTLY_ROUNDED_DIVIDE_SQRT:
            return ["-cl-fp32-correctly-rounded-divide-sqrt"]
        return []

    # }}}

    # {{{ queues and events

    def submit(self, queue: Any) -> None:
        queue.flush()

    def marker(self, queue: Any) -> Any:
        return cl.enqueue_marker(queue)

    def finish_queue(self, queue: Any) -> None:
        queue.finish()

    def finisher(self, queue: Any) -> Callable[[], None]:
        return queue.finish  # (pyopencl's method: no Python frame per finish)

    def event_status(self, event: Any) -> int:
        # (OpenCL's own numbering: CL_COMPLETE is 0, queued/submitted/running > 0,
        # a failed command's error code < 0)
        return int(event.command_execution_status)

    def wait_event(self, event: Any) -> None:
        event.wait()

    def hold(self, context: Any, queue: Any) -> Callable[[], None] | None:
        gate = cl.UserEvent(context)
        try:
            cl.enqueue_marker(queue, wait_for=[gate])
        except BaseException:
            gate.set_status(_COMPLETE)
            raise

        def release() -> None:
            gate.set_status(_COMPLETE)
        return release

    # }}}

    # {{{ buffers and copies

    def allocate(self, device: Any, nbytes: int) -> Any:
        return device.allocator.allocate(nbytes)

    def buffer_from_host(self, device: Any, host: np.ndarray) -> Any:
        return device.allocator.host_buffer(host)

    def free(self, buffer: Any) -> None:
        buffer.release()

    def enqueue_write(self, queue: Any, buffer: Any, host: np.ndarray,
                      wait_for: Sequence[Any] | None, blocking: bool) -> Any:
        if _write_buffer is not None:
            return _write_buffer(queue, buffer, host, 0, wait_for, blocking)
        return cl.enqueue_copy(queue, buffer, host, is_blocking=blocking, wait_for=wait_for)

    def enqueue_read(self, queue: Any, host: np.ndarray, buffer: Any,
                     wait_for: Sequence[Any] | None, blocking: bool, offset: int = 0) -> Any:
        if _read_buffer is not None:
            return _read_buffer(queue, buffer, host, offset, wait_for, blocking)
        return cl.enqueue_copy(queue, host, buffer, is_blocking=blocking, wait_for=wait_for,
                               src_offset=offset)

    def staging_slot(self, device: Any, nbytes: int) -> Any | None:
        return _staging.slot_for(device, nbytes)

    def copy(self, device: Any, dst: Any, src: Any, nbytes: int, src_offset: int = 0,
             wait_for: Sequence[Any] | None = None) -> Any:
        return cl.enqueue_copy(device.queue, dst, src, byte_count=nbytes,
                               src_offset=src_offset, wait_for=wait_for)

    def copy_from(self, device: Any, dst: Any, src_device: Any, src: Any, nbytes: int,
                  src_offset: int = 0) -> bool:
        """Between devices of one context (see :meth:`_context_for`): the copy runs on
        the source's queue, so the source's buffer (a whole part) stays on its device
        and only the destination (halo rows, a partial result) may move; it waits for
        what the destination's queue holds (its pool may have handed ``dst`` out while
        earlier commands there still use it), and the destination's queue waits for it."""
        if not self.copies_between(device, src_device):
            return False
        if nbytes:
            dst_queue, src_queue = device.queue, src_device.queue
            before = cl.enqueue_marker(dst_queue)
            dst_queue.flush()
            done = cl.enqueue_copy(src_queue, dst, src, byte_count=nbytes,
                                   src_offset=src_offset, wait_for=[before])
            src_queue.flush()
            cl.enqueue_barrier(dst_queue, wait_for=[done])
        return True

    def fill(self, device: Any, buffer: Any, pattern: np.ndarray, nbytes: int) -> Any:
        return cl.enqueue_fill_buffer(device.queue, buffer, pattern, 0, nbytes)

    # }}}

    # {{{ programs

    def build_source(self, device: Any, source: str, options: Sequence[str],
                     kernel_names: Sequence[str], built_before: bool = False) -> BuiltProgram:
        """In a compile worker, which hands back the binary, loaded here; in this
        process with ``FUSELOOP_COMPILE=inline``, and a GPU's builds before a worker is
        ready for it (see ``compile_workers.build_here``).  For a device whose driver caches
        its builds (:meth:`stores_binaries` False) the worker hands back no binary
        and the program is built here again, from that cache; a source that was
        ``built_before`` (a disk-cache entry's) is built here at once."""
        keep = self.stores_binaries(device)
        with compile_workers.build_here(device) as here:  # (inline; a GPU's first build)
            if here:
                return self._build_here(device, source, options, kernel_names, check=True)
        if built_before and not keep:
            return self._build_here(device, source, options, kernel_names)
        binary = compile_workers.compile_binary(device, _BUILDER, source, options,
                                                kernel_names, binary=keep)
        if binary is None:  # built and checked by the worker: the driver's cache has it
            return self._build_here(device, source, options, kernel_names)
        try:
            program = _load_binary(device, binary, options)
        except cl.Error as exc:
            raise KernelBuildError(
                f"{device.name} did not load the binary its compiler made for kernel "
                f"{', '.join(kernel_names)}", source=source, build_log=str(exc)) from None
        return BuiltProgram(self.name, program, tuple(kernel_names))

    def _build_here(self, device: Any, source: str, options: Sequence[str],
                    kernel_names: Sequence[str], check: bool = False) -> BuiltProgram:
        """The program built in this process; ``check``: its kernels made once too, as
        a compile worker does (a source built before, or by a worker, needs no check,
        and a kernel object made here would be one more than launches share)."""
        try:
            # (for this device only: its context may hold others)
            program = cl.Program(device.context, source).build(
                options=list(options), devices=[device.cl_device])
            for name in kernel_names if check else ():
                cl.Kernel(program, name)
        except cl.Error as exc:
            raise _rejected(device, "the OpenCL compiler", kernel_names, source,
                            exc) from None
        return BuiltProgram(self.name, program, tuple(kernel_names))

    def stores_binaries(self, device: Any) -> bool:
        """False for PoCL's CPU device while its kernel cache is on: PoCL makes a
        program's binary by compiling every kernel once more (0.9 CPU s for a chain
        of 200 operations, 1.3-1.5 for D=40 of issue 26: more than the build), which
        no launch uses, while a later build of the same source hits its own cache."""
        return not (device.type == "cpu" and _is_pocl(device) and pocl_kernel_cache_on())

    def joins_kernels(self, device: Any) -> bool:
        """PoCL's CPU device: eight small kernels took 2.1 CPU s as eight programs and
        0.47 as one (a 2-core VM, PoCL 3.0; ``probes/build_batch_cost.py``)."""
        return device.type == "cpu" and _is_pocl(device)

    def build_binary(self, device: Any, binary: bytes, options: Sequence[str],
                     kernel_names: Sequence[str]) -> BuiltProgram | None:
        try:
            program = _load_binary(device, binary, options)
            for name in kernel_names:
                cl.Kernel(program, name)
        except (cl.Error, ValueError, TypeError):
            return None
        return BuiltProgram(self.name, program, tuple(kernel_names))

    def binary_of(self, program: BuiltProgram) -> bytes | None:
        try:
            binaries = program.handle.binaries
        except (cl.Error, ValueError):
            return None
        if len(binaries) != 1 or not binaries[0]:
            return None
        return bytes(binaries[0])

    # }}}

    # {{{ kernels, launches, events

    def kernel(self, program: BuiltProgram, name: str,
               consts: Sequence[tuple[int, Any]] = ()) -> Any:
        kernel = cl.Kernel(program.handle, name)
        for i, value in consts:
            kernel.set_arg(i, value)
        return kernel

    def set_buffer_arg(self, kernel: Any, position: int, buffer: Any) -> None:
        _set_arg(kernel, position, buffer)

    def make_launcher(self, spec: LaunchSpec) -> Launcher:
        return make_launcher(spec)

    def launcher_family(self, spec: LaunchSpec) -> Callable[[Consts], Launcher]:
        return launcher_family(spec)

    def launch(self, device: Any, kernel: Any, global_size: Sequence[int],
               local_size: Sequence[int] | None, args: Sequence[Any],
               wait_for: Sequence[Any] | None = None) -> Any:
        for i, a in enumerate(args):
            if isinstance(a, np.generic):
                _set_scalar(kernel, i, a)
            else:
                _set_arg(kernel, i, a)
        return _enqueue_nd_range(device.queue, kernel, tuple(global_size),
                                 None if local_size is None else tuple(local_size), None,
                                 wait_for)

    # }}}


def _is_pocl(device: Any) -> bool:
    return device.platform.strip() == "Portable Computing Language" \
        or device.runtime.startswith("PoCL")


def pocl_cache_dir() -> Path:
    """Where PoCL keeps its kernel cache, chosen from the environment as PoCL does."""
    explicit = os.environ.get("POCL_CACHE_DIR")
    if explicit:
        return Path(explicit)
    xdg = os.environ.get("XDG_CACHE_HOME")
    if xdg:
        return Path(xdg) / "pocl" / "kcache"
    home = os.environ.get("HOME")
    return Path(home) / ".cache" / "pocl" / "kcache" if home else Path("/tmp/pocl/kcache")


def pocl_kernel_cache_on() -> bool:
    """Whether PoCL caches builds: ``POCL_KERNEL_CACHE`` unset or 1 (its default) and
    its cache folder writable, or creatable (PoCL makes it).  Anything else counts
    as off, so that the binary is kept where in doubt."""
    setting = os.environ.get("POCL_KERNEL_CACHE")
    if setting is not None and setting.strip() != "1":
        return False
    folder = pocl_cache_dir()
    while not folder.exists():
        if folder.parent == folder:
            return False
        folder = folder.parent
    return folder.is_dir() and os.access(folder, os.W_OK | os.X_OK)


def _load_binary(device: Any, binary: bytes, options: Sequence[str]) -> Any:
    """A program of ``device``'s ``binary``, built for that device by name: NVIDIA's
    driver answers INVALID_BINARY when a binary program of a context holding several
    devices is built without naming the device (measured on two H200s)."""
    program = cl.Program(device.context, [device.cl_device], [binary])
    return program.build(options=list(options), devices=[device.cl_device])


_shared: dict[tuple[int, int], Any] = {}  # (platform, device type): the shared context
_shared_lock = threading.Lock()

_PROBE_SOURCE = "__kernel void fuseloop_probe(__global int *a) { a[get_global_id(0)] = 1; }"
INSTALL_POCL_HINT = (
    "install a CPU runtime that can target this CPU and fuseloop picks it as the CPU "
    "device: from pip, Intel's ('pip install \"fuseloop[intel-cpu]\"'), or the system's "
    "PoCL (Debian 12: 'apt install pocl-opencl-icd', PoCL 3.1, which chooses its target "
    "from the CPU's features); or select another device with FUSELOOP_DEVICE"
)


def _compiler_problem(cl_device: Any) -> str | None:
    """Why ``cl_device``'s compiler rejects every kernel, or None when not known to.

    PoCL names its LLVM target CPU at the end of the device version; 'generic' on
    an x86-64 host means the LLVM it was built with does not know this CPU (pip's
    PoCL 3.0 has LLVM 14, which does not know AMD Zen 5), and its clang then
    rejects every kernel.  Only such a device is probed with a one-line build, so
    other devices cost nothing here.
    """
    try:
        version = cl_device.version.strip()
    except cl.Error:
        return None
    if "PoCL" not in version or not version.endswith("-generic") or "x86_64" not in version:
        return None
    try:
        cl.Program(cl.Context([cl_device]), _PROBE_SOURCE).build()
    except cl.Error as exc:
        log = str(exc)
        reason = next((line.strip() for line in log.splitlines() if "error:" in line),
                      log.strip().splitlines()[0] if log.strip() else "build failed")
        return (f"its OpenCL compiler rejects every kernel ({reason}): {version} on "
                f"this {platform.machine()} CPU; {INSTALL_POCL_HINT}")
    return None


def make_launcher(spec: LaunchSpec) -> Launcher:
    """The OpenCL :data:`~fuseloop.backends.base.Launcher` of ``spec``.

    A closure specialised to the kernel's arguments.  The kernel object is the
    compiled kernel's own per thread, shared by its plans, so what its arguments were
    last set to is known: the constants (sizes, offsets) when the object last ran
    another plan's (``last[-1]`` names the plan's constants it holds), an input buffer
    again only when it is another storage (remembered by weak reference, so no buffer
    is kept alive), a scalar only when it is another object (numpy scalars are
    immutable; the operators reuse one object per value), the outputs every time.
    pyopencl's invoker sets every argument on every call, which costs PoCL about
    2 us more per launch.  Scalars are converted to the kernel's declared type and
    set from their bytes (:data:`SET_SCALAR_ARG`).  Before an argument is set its
    record is cleared, so an interruption cannot leave a record that claims an
    argument it does not hold.

    The commonest launches (one output, one or two inputs, at most two scalars: the
    flat path of ``.eval()`` and ``fl.fuse``) get a closure with those checks written
    out (:func:`_one_output_short`): looping over the positions cost a launch 1.2k
    more instructions (callgrind, ``benchmarks/probes/callgrind_hit_path.py``).
    """
    return launcher_family(spec)(spec.consts)


def launcher_family(spec: LaunchSpec) -> Callable[[Consts], Launcher]:
    """The launchers of ``spec`` with other constants (see
    :meth:`~fuseloop.backends.base.Backend.launcher_family`): what a launcher needs
    from the spec is worked out once, and each call only closes over its constants,
    so a plan for a statement's new offsets costs one closure."""
    if spec.one_output:
        if 1 <= len(spec.inputs) <= 2 and len(spec.scalars) <= 2:
            return _one_output_short(spec)
        return _one_output(spec)
    return _many_outputs(spec)


def _one_output_short(spec: LaunchSpec) -> Callable[[Consts], Launcher]:
    """:func:`launcher_family` for one output, one or two inputs and at most two
    scalars; a second input or scalar that the kernel lacks repeats the first (its
    check then finds it set)."""
    ((out_i, _),) = spec.outputs
    (i0, j0), (i1, j1) = (*spec.inputs, spec.inputs[0])[:2]
    set_arg, set_scalar, wr = _set_arg, _set_scalar, _weakref
    enqueue: Any = _enqueue_nd_range  # (positional, as pyopencl's own invoker calls it)
    g, l = spec.global_size, spec.local_size  # noqa: E741

    if not spec.scalars:
        def bind(consts: Consts) -> Launcher:
            def go(o: Any, s: list[Any], c: list[Any], k: Any, last: list[Any],
                   queue: Any) -> None:
                if last[-1] is not consts:
                    _set_consts(k, last, consts)
                set_arg(k, out_i, o.buffer)
                last[out_i] = None  # (_many_outputs keeps its outputs by record)
                x = s[j0]
                r = last[i0]
                if r is None or r() is not x:
                    last[i0] = None
                    set_arg(k, i0, x.buffer)
                    last[i0] = wr(x)
                x = s[j1]
                r = last[i1]
                if r is None or r() is not x:
                    last[i1] = None
                    set_arg(k, i1, x.buffer)
                    last[i1] = wr(x)
                enqueue(queue, k, g, l, None, None, False, False)
            return go
        return bind

    (p0, k0, t0), (p1, k1, t1) = (*spec.scalars, spec.scalars[0])[:2]

    def bind_scalars(consts: Consts) -> Launcher:
        def go_scalars(o: Any, s: list[Any], c: list[Any], k: Any, last: list[Any],
                       queue: Any) -> None:
            if last[-1] is not consts:
                _set_consts(k, last, consts)
            set_arg(k, out_i, o.buffer)
            last[out_i] = None  # (_many_outputs keeps its outputs by record)
            x = s[j0]
            r = last[i0]
            if r is None or r() is not x:
                last[i0] = None
                set_arg(k, i0, x.buffer)
                last[i0] = wr(x)
            x = s[j1]
            r = last[i1]
            if r is None or r() is not x:
                last[i1] = None
                set_arg(k, i1, x.buffer)
                last[i1] = wr(x)
            v = c[k0]
            if v is not last[p0]:
                last[p0] = None
                set_scalar(k, p0, t0(v))
                last[p0] = v
            v = c[k1]
            if v is not last[p1]:
                last[p1] = None
                set_scalar(k, p1, t1(v))
                last[p1] = v
            enqueue(queue, k, g, l, None, None, False, False)
        return go_scalars
    return bind_scalars


def _set_consts(k: Any, last: list[Any], consts: Consts) -> None:
    """Set a plan's constants (numpy scalars) on a kernel object that last ran another
    plan's, from their bytes: pyopencl's ``set_arg`` takes about 25 us for a numpy
    scalar (it tries the argument as a memory object first), which loops of small
    statements (one kernel object, other offsets each statement) paid per constant."""
    last[-1] = None
    for i, v in consts:
        _set_scalar(k, i, v)
        last[i] = None  # (a plan taking this argument per launch sets it again)
    last[-1] = consts


def _one_output(spec: LaunchSpec) -> Callable[[Consts], Launcher]:
    """:func:`launcher_family` for one output (the storage itself), any other arguments."""
    ((out_i, _),) = spec.outputs
    buf_pos = spec.inputs
    scalar_pos = spec.scalars
    set_arg, set_scalar, wr = _set_arg, _set_scalar, _weakref
    enqueue: Any = _enqueue_nd_range
    g, l = spec.global_size, spec.local_size  # noqa: E741

    # (the input loops are written out here and in _many_outputs: a shared helper
    # would cost every launch one more Python call)
    def bind(consts: Consts) -> Launcher:
        def go(o: Any, s: list[Any], c: list[Any], k: Any, last: list[Any],
               queue: Any) -> None:
            if last[-1] is not consts:
                _set_consts(k, last, consts)
            set_arg(k, out_i, o.buffer)
            last[out_i] = None  # (_many_outputs keeps its outputs by record)
            for i, j in buf_pos:
                x = s[j]
                r = last[i]
                if r is None or r() is not x:
                    last[i] = None
                    set_arg(k, i, x.buffer)
                    last[i] = wr(x)
            for i, j, T in scalar_pos:
                v = c[j]
                if v is not last[i]:
                    last[i] = None
                    set_scalar(k, i, T(v))
                    last[i] = v
            enqueue(queue, k, g, l, None, None, False, False)
        return go
    return bind


def _many_outputs(spec: LaunchSpec) -> Callable[[Consts], Launcher]:
    """:func:`launcher_family` for a sequence of outputs."""
    out_pos = spec.outputs
    buf_pos = spec.inputs
    scalar_pos = spec.scalars
    set_arg, set_scalar, wr = _set_arg, _set_scalar, _weakref
    enqueue: Any = _enqueue_nd_range
    g, l = spec.global_size, spec.local_size  # noqa: E741

    def bind(consts: Consts) -> Launcher:
        def go_many(o: Any, s: list[Any], c: list[Any], k: Any, last: list[Any],
                    queue: Any) -> None:
            if last[-1] is not consts:
                _set_consts(k, last, consts)
            for i, j in out_pos:  # (a target, as a loop's statement writes, is set once)
                x = o[j]
                r = last[i]
                if r is None or r() is not x:
                    last[i] = None
                    set_arg(k, i, x.buffer)
                    last[i] = wr(x)
            for i, j in buf_pos:
                x = s[j]
                r = last[i]
                if r is None or r() is not x:
                    last[i] = None
                    set_arg(k, i, x.buffer)
                    last[i] = wr(x)
            for i, j, T in scalar_pos:
                v = c[j]
                if v is not last[i]:
                    last[i] = None
                    set_scalar(k, i, T(v))
                    last[i] = v
            enqueue(queue, k, g, l, None, None, False, False)
        return go_many
    return bind


__all__ = ["SET_SCALAR_ARG", "OpenCLBackend", "OpenCLBufferPool", "OpenCLOutOfMemory",
           "launcher_family", "make_launcher"]
