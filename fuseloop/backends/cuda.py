"""The CUDA backend, over CuPy: Loopy's CUDA target built with NVRTC.

CuPy is the driver layer (chosen over cuda-python because the GPU hosts fuseloop
is used on have it already, as the peer library users compare with, and it
bundles what this backend needs behind one import): device properties and the
primary context (``cupy.cuda.runtime``), a memory pool, streams and events,
NVRTC (``cupy.cuda.nvrtc``), ``cuModuleLoadData`` (``cupy.cuda.function.Module``)
and ``cuLaunchKernel`` (``Function.__call__``, whose arguments are numpy scalars
passed by value: a buffer argument is its device address as a ``uint64``).

Programs are compiled to a cubin for the device's own architecture, which the
disk cache keeps (where this NVRTC cannot emit cubins, PTX, which the driver
compiles when it is loaded).  Each device gets one non-blocking stream, the
in-order queue fuseloop's runtime expects.  Every source is built after
:data:`PRELUDE`, the OpenCL C that fuseloop's helper functions and hand-written
kernels use spelled for CUDA (type names, ``mad``, ``popcount``, ``__kernel``,
``__local``, ``barrier``, ``get_local_id`` ...), and NVRTC treats functions
without an execution space as device functions: one source of each helper and
hand-written kernel serves both backends.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Sequence
from typing import Any
from weakref import ref as _weakref

import cupy
import numpy as np
from cupy.cuda import function as _function
from cupy.cuda import nvrtc as _nvrtc
from cupy.cuda import runtime as _rt

from ..errors import KernelBuildError, OutOfMemoryError
from .base import Backend, BufferPool, BuiltProgram, DeviceInfo, Launcher, LaunchSpec

#: what a generated kernel source starts with on CUDA (see the module docstring)
PRELUDE = r"""// fuseloop's CUDA prelude: the OpenCL C its helpers and hand-written kernels use
#define __kernel extern "C" __global__
#define __global
#define __local __shared__
#define __constant const
#define FL_LOCAL_ARG
#define restrict __restrict__
#define reqd_work_group_size(x, y, z)
#define CLK_LOCAL_MEM_FENCE 1
#define CLK_GLOBAL_MEM_FENCE 2
#define barrier(fence) __syncthreads()
#define mem_fence(fence) __threadfence()
#define __ENDIAN_LITTLE__ 1
#define FL_AXIS(v, d) ((long) ((d) == 0 ? v.x : (d) == 1 ? v.y : v.z))
#define get_local_id(d) FL_AXIS(threadIdx, d)
#define get_group_id(d) FL_AXIS(blockIdx, d)
#define get_local_size(d) FL_AXIS(blockDim, d)
#define get_num_groups(d) FL_AXIS(gridDim, d)
#define get_global_id(d) (get_group_id(d) * get_local_size(d) + get_local_id(d))
#define get_global_size(d) (get_num_groups(d) * get_local_size(d))
typedef unsigned char uchar;
typedef unsigned short ushort;
typedef unsigned int uint;
typedef unsigned long ulong;
#ifndef INFINITY
#define INFINITY __int_as_float(0x7f800000)
#endif
#ifndef NAN
#define NAN __int_as_float(0x7fffffff)
#endif
#ifndef INT_MIN
#define INT_MIN (-2147483647 - 1)
#endif
__device__ inline float mad(float a, float b, float c) { return a * b + c; }
__device__ inline double mad(double a, double b, double c) { return a * b + c; }
__device__ inline int popcount(uint a) { return __popc(a); }
__device__ inline int popcount(int a) { return __popc((uint) a); }
__device__ inline long popcount(ulong a) { return __popcll(a); }
__device__ inline long popcount(long a) { return __popcll((ulong) a); }
__device__ inline int popcount(uchar a) { return __popc(a); }
__device__ inline int popcount(char a) { return __popc((uchar) a); }
__device__ inline int popcount(ushort a) { return __popc(a); }
__device__ inline int popcount(short a) { return __popc((ushort) a); }
__device__ inline long mul_hi(long a, long b) { return __mul64hi(a, b); }
__device__ inline ulong mul_hi(ulong a, ulong b) { return __umul64hi(a, b); }
__device__ inline int mul_hi(int a, int b) { return __mulhi(a, b); }
__device__ inline uint mul_hi(uint a, uint b) { return __umulhi(a, b); }
__device__ inline float tanpi(float a) { return sinpif(a) / cospif(a); }
__device__ inline double tanpi(double a) { return sinpi(a) / cospi(a); }
// pyopencl's complex header (OpenCL C) read as C++: OpenCL's sincos returns the sine
#ifndef FLT_MAX
#define FLT_MAX 3.402823466e+38F
#endif
#ifndef DBL_MAX
#define DBL_MAX 1.7976931348623157e+308
#endif
__device__ inline float sincos(float a, float *c) { float s; sincosf(a, &s, c); return s; }
__device__ inline double sincos(double a, double *c)
{ double s; ::sincos(a, &s, c); return s; }
// Random123's headers (pyopencl's copy, written for OpenCL C) read as C++
#define R123_ULONG_LONG unsigned long long
#define R123_THROW(exception) ((void) 0)
// CUDA's atomics take 'long long', a type distinct from 'long' (int64 in the kernels)
__device__ inline long atomicAdd(long *p, long v)
{ return (long) atomicAdd((unsigned long long *) p, (unsigned long long) v); }
__device__ inline ulong atomicAdd(ulong *p, ulong v)
{ return (ulong) atomicAdd((unsigned long long *) p, (unsigned long long) v); }
__device__ inline long atomicCAS(long *p, long expected, long v)
{ return (long) atomicCAS((unsigned long long *) p, (unsigned long long) expected,
                         (unsigned long long) v); }
__device__ inline long atomicMax(long *p, long v) { return atomicMax((long long *) p, v); }
__device__ inline long atomicMin(long *p, long v) { return atomicMin((long long *) p, v); }
__device__ inline ulong atomicMax(ulong *p, ulong v)
{ return atomicMax((unsigned long long *) p, (unsigned long long) v); }
__device__ inline ulong atomicMin(ulong *p, ulong v)
{ return atomicMin((unsigned long long *) p, (unsigned long long) v); }
// OpenCL's atomic_inc (32-bit, local or global) and atom_add (64-bit)
__device__ inline int atomic_inc(int *p) { return atomicAdd(p, 1); }
__device__ inline long atom_add(long *p, long v) { return atomicAdd(p, v); }
"""

# OpenCL's math constants (double; the _F ones float), which pyopencl's complex header
# and fuseloop's complex functions use
_MATH_CONSTANTS = {
    "M_E": "2.718281828459045", "M_LOG2E": "1.4426950408889634",
    "M_LOG10E": "0.4342944819032518", "M_LN2": "0.6931471805599453",
    "M_LN10": "2.302585092994046", "M_PI": "3.141592653589793", "M_PI_2": "1.5707963267948966",
    "M_PI_4": "0.7853981633974483", "M_1_PI": "0.3183098861837907",
    "M_2_PI": "0.6366197723675814", "M_2_SQRTPI": "1.1283791670955126",
    "M_SQRT2": "1.4142135623730951", "M_SQRT1_2": "0.7071067811865476"}
PRELUDE += "".join(f"#ifndef {name}{f}\n#define {name}{f} {value}{f[1:].lower()}\n#endif\n"
                   for name, value in _MATH_CONSTANTS.items() for f in ("", "_F"))

# Loopy's integer min/max helpers, for kernels whose recipe calls them after Loopy chose
# the preamble (a template: Loopy's own definition, where it emits one, is preferred)
PRELUDE += "".join(
    f"template <typename T> __device__ inline T lpy_{op}_{t}(T a, T b) "
    f"{{ return a {cmp} b ? a : b; }}\n"
    for op, cmp in (("min", "<"), ("max", ">"))
    for t in ("int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64"))

_H2D, _D2H, _D2D = 1, 2, 3


class CudaOutOfMemory(OutOfMemoryError, cupy.cuda.memory.OutOfMemoryError):
    """The CUDA driver refused an allocation."""

    def __init__(self, *args: Any) -> None:  # (CuPy's own takes (size, total, limit))
        Exception.__init__(self, *args)


class _Buffer:
    """Device memory outside the pool: ``ptr`` and ``size``, freed when collected."""

    __slots__ = ("__weakref__", "_on_release", "memory", "ptr", "size")

    def __init__(self, memory: Any, size: int, on_release: Callable[[int], None]) -> None:
        self.memory = memory
        self.ptr = memory.ptr
        self.size = size
        self._on_release = on_release

    def __del__(self) -> None:
        on_release = getattr(self, "_on_release", None)
        if on_release is not None:
            on_release(self.size)


class CudaDevice:
    """The context half of an opened CUDA device: its ordinal and compute capability."""

    __slots__ = ("arch", "ordinal")

    def __init__(self, ordinal: int, arch: str) -> None:
        self.ordinal = ordinal
        self.arch = arch


class CudaBufferPool(BufferPool):
    """CuPy's ``MemoryPool`` (device memory, stream-ordered reuse) and unpooled memory."""

    refused = (cupy.cuda.memory.OutOfMemoryError,)

    def __init__(self, ordinal: int) -> None:
        self.ordinal = ordinal
        self.pool = cupy.cuda.MemoryPool()
        if ordinal == 0 and _rt.getDevice() == 0:
            self.allocate = self.pool.malloc
        else:
            def allocate(nbytes: int) -> Any:
                with cupy.cuda.Device(ordinal):
                    return self.pool.malloc(nbytes)
            self.allocate = allocate

    @property
    def managed_bytes(self) -> int:
        return int(self.pool.total_bytes())

    def free_held(self) -> None:
        self.pool.free_all_blocks()

    def buffer(self, nbytes: int, host: np.ndarray | None,
               on_release: Callable[[int], None]) -> Any:
        with cupy.cuda.Device(self.ordinal):
            made = _Buffer(cupy.cuda.memory.Memory(max(nbytes, 1)), nbytes, on_release)
            if host is not None and host.nbytes:
                _rt.memcpy(made.ptr, host.ctypes.data, host.nbytes, _H2D)
        return made


class CudaKernel:
    """A kernel object: the loaded function and the argument values of its next launch."""

    __slots__ = ("args", "function", "ordinal")

    def __init__(self, function: Any, ordinal: int) -> None:
        self.function = function
        self.ordinal = ordinal
        self.args: list[Any] = []

    def set(self, position: int, value: Any) -> None:
        args = self.args
        if len(args) <= position:
            args.extend([None] * (position + 1 - len(args)))
        args[position] = value


#: per device ordinal, the stream graphs are captured on (see CudaBackend.capture)
_CAPTURE_STREAMS: dict[int, Any] = {}
#: a stream's address -> the ordinal of its device (CuPy's streams do not say)
STREAM_DEVICES: dict[int, int] = {}


def on_device_of(queue: Any) -> Any:
    """A context making ``queue``'s device the current one (a stream, and events and
    copies on it, belong to its device's context)."""
    if _single_device():  # (the only device is always the current one)
        return _NO_SWITCH
    ordinal = STREAM_DEVICES.get(queue.ptr, -1)
    if ordinal < 0 or ordinal == _rt.getDevice():
        return _NO_SWITCH
    return cupy.cuda.Device(ordinal)


_NO_SWITCH = contextlib.nullcontext()


def current_device(device: Any) -> Any:
    """A context making ``device`` (a fuseloop device of this backend) the current one
    for a run of launches and allocations on it (a split array's part): each then finds
    it current instead of switching to it and back (two ``cudaSetDevice`` and CuPy's
    device stack per launch and per allocation); the previous device is current again
    after."""
    if _single_device():
        return _NO_SWITCH
    return cupy.cuda.Device(device.cl_device.ordinal)


def event_on(queue: Any) -> Any:
    """A new event recorded on ``queue``."""
    with on_device_of(queue):
        event = cupy.cuda.Event(disable_timing=True)
        event.record(queue)
    return event


try:  # CuPy passes its own argument objects to cuLaunchKernel as they are
    from cupy.cuda.function import CIntptr as _CIntptr
    from cupy.cuda.function import CNumpyArray as _CNumpyArray
except ImportError:  # (an older CuPy: numpy scalars, converted by CuPy per launch)
    _CIntptr = np.uint64
    _CNumpyArray = None


def _address(buffer: Any) -> Any:
    """A buffer argument: its device address, in the object CuPy passes unconverted."""
    return _CIntptr(buffer.ptr)


def by_value(value: np.generic) -> Any:
    """A scalar argument of the kernel's declared type, converted once: CuPy converts
    a numpy scalar on every launch (``_scalar.CScalar``, a dtype look-up and a view),
    but passes its own argument objects as they are.  Up to 8 bytes: a ``CIntptr`` of
    the value's bits (the kernel reads its parameter's size from the start of the 8
    bytes: the low bytes on the little-endian hosts CUDA runs on); larger (complex128):
    a ``CNumpyArray``, the bytes of a 0-d array."""
    if _CNumpyArray is None:
        return value
    raw = value.tobytes()
    if len(raw) <= 8:
        return _CIntptr(int.from_bytes(raw, "little", signed=True))
    return _CNumpyArray(np.array(value))


#: id(scalar) -> (the scalar, its kernel type, its argument object): a scalar that
#: comes again (fuseloop keeps one numpy scalar per Python value it converted) is not
#: converted again; the scalar is kept, so its id names it while it is here
_SCALAR_ARGS: dict[int, tuple[Any, type, Any]] = {}
SCALAR_ARGS_MAX = 4096


def scalar_arg(value: Any, kind: type) -> Any:
    """:func:`by_value` of ``kind(value)``, remembered per scalar object."""
    hit = _SCALAR_ARGS.get(id(value))
    if hit is not None and hit[0] is value and hit[1] is kind:
        return hit[2]
    arg = by_value(kind(value))
    if len(_SCALAR_ARGS) >= SCALAR_ARGS_MAX:
        _SCALAR_ARGS.clear()
    _SCALAR_ARGS[id(value)] = (value, kind, arg)
    return arg


def _stream_of(queue: Any) -> Any:
    return queue


class CudaBackend(Backend):
    """CUDA through CuPy; programs are Loopy's CUDA C built by NVRTC."""

    name = "cuda"
    language = "cuda"
    OutOfMemory = CudaOutOfMemory
    graphs = True
    direct_copies = True  # (copy_from: cudaMemcpyPeerAsync, ordered by events)

    # {{{ devices

    def discover(self) -> list[DeviceInfo]:
        try:
            count = _rt.getDeviceCount()
            driver = _rt.driverGetVersion()
        except Exception:  # (no driver or no device: CuPy's CUDARuntimeError)
            return []
        found = []
        for ordinal in range(count):
            props = _rt.getDeviceProperties(ordinal)
            name = props["name"]
            name = name.decode() if isinstance(name, bytes) else str(name)
            arch = f"{props['major']}{props['minor']}"
            found.append(DeviceInfo(
                backend=self.name, name=name.strip(), type="gpu", platform="CUDA",
                vendor="NVIDIA Corporation",
                driver_version=f"{driver // 1000}.{driver % 1000 // 10}",
                global_mem_size=int(props["totalGlobalMem"]),
                max_alloc_size=int(props["totalGlobalMem"]), has_fp64=True,
                compute_units=int(props["multiProcessorCount"]),
                max_work_group_size=int(props["maxThreadsPerBlock"]),
                runtime=f"CUDA {driver // 1000}.{driver % 1000 // 10} (CuPy {cupy.__version__})",
                handle=CudaDevice(ordinal, arch)))
        return found

    def open(self, device: Any) -> tuple[Any, Any]:
        handle = device.cl_device
        with cupy.cuda.Device(handle.ordinal):
            stream = cupy.cuda.Stream(non_blocking=True)
        STREAM_DEVICES[stream.ptr] = handle.ordinal
        return handle, stream

    def buffer_pool(self, device: Any, context: Any, queue: Any) -> BufferPool:
        return CudaBufferPool(context.ordinal)

    def loopy_target(self) -> Any:
        import loopy as lp

        return lp.CudaTarget()


    # }}}

    # {{{ queues and events

    def submit(self, queue: Any) -> None:
        pass  # (CUDA submits as it is enqueued)

    def marker(self, queue: Any) -> Any:
        return event_on(queue)

    def finish_queue(self, queue: Any) -> None:
        queue.synchronize()

    def finisher(self, queue: Any) -> Callable[[], None]:
        return queue.synchronize

    def event_status(self, event: Any) -> int:
        if event is None:
            return 0
        return 0 if event.done else 1

    def wait_event(self, event: Any) -> None:
        if event is not None:
            event.synchronize()

    # }}}

    # {{{ buffers and copies

    def allocate(self, device: Any, nbytes: int) -> Any:
        return device.allocator.allocate(nbytes)

    def buffer_from_host(self, device: Any, host: np.ndarray) -> Any:
        return device.allocator.host_buffer(host)

    def free(self, buffer: Any) -> None:
        pass  # (memory goes back to the pool when the last reference dies)

    def read_staging(self, nbytes: int) -> np.ndarray | None:
        # (from CuPy's pool of page-locked blocks: a cudaMemcpyAsync into pageable
        # memory returns only when the copy is done, one device after the other)
        memory = cupy.cuda.alloc_pinned_memory(max(nbytes, 1))
        return np.frombuffer(memory, np.uint8, nbytes)

    @staticmethod
    def _wait_for(queue: Any, wait_for: Sequence[Any] | None) -> None:
        for event in wait_for or ():
            if event is not None:
                queue.wait_event(event)

    def enqueue_write(self, queue: Any, buffer: Any, host: np.ndarray,
                      wait_for: Sequence[Any] | None, blocking: bool) -> Any:
        self._wait_for(queue, wait_for)
        host = np.ascontiguousarray(host)
        if host.nbytes:
            with on_device_of(queue):
                _rt.memcpyAsync(buffer.ptr, host.ctypes.data, host.nbytes, _H2D, queue.ptr)
        if blocking:  # (no event to make and record: the stream itself is waited for)
            with on_device_of(queue):
                queue.synchronize()
            return None
        return self.marker(queue)

    def enqueue_read(self, queue: Any, host: np.ndarray, buffer: Any,
                     wait_for: Sequence[Any] | None, blocking: bool, offset: int = 0) -> Any:
        self._wait_for(queue, wait_for)
        if host.nbytes:
            with on_device_of(queue):
                _rt.memcpyAsync(host.ctypes.data, buffer.ptr + offset, host.nbytes, _D2H,
                                queue.ptr)
        if blocking:  # (no event to make and record: the stream itself is waited for)
            with on_device_of(queue):
                queue.synchronize()
            return None
        return self.marker(queue)

    def copy(self, device: Any, dst: Any, src: Any, nbytes: int, src_offset: int = 0,
             wait_for: Sequence[Any] | None = None) -> Any:
        queue = device.queue
        self._wait_for(queue, wait_for)
        if nbytes:
            with on_device_of(queue):
                _rt.memcpyAsync(dst.ptr, src.ptr + src_offset, nbytes, _D2D, queue.ptr)
        return self.marker(queue)

    def copy_from(self, device: Any, dst: Any, src_device: Any, src: Any, nbytes: int,
                  src_offset: int = 0) -> bool:
        # a peer copy on the destination's stream, after the source's work (an event);
        # the source's stream waits for it, so its memory is reused only afterwards
        dst_queue, src_queue = device.queue, src_device.queue
        ordinal, src_ordinal = device.cl_device.ordinal, src_device.cl_device.ordinal
        if nbytes:
            ready = event_on(src_queue)
            with cupy.cuda.Device(ordinal):
                dst_queue.wait_event(ready)
                _rt.memcpyPeerAsync(dst.ptr, ordinal, src.ptr + src_offset, src_ordinal,
                                    nbytes, dst_queue.ptr)
            done = event_on(dst_queue)
            with on_device_of(src_queue):
                src_queue.wait_event(done)
        return True

    def fill(self, device: Any, buffer: Any, pattern: np.ndarray, nbytes: int) -> Any:
        queue = device.queue
        raw = pattern.tobytes()
        if nbytes and raw == raw[:1] * len(raw):
            with on_device_of(queue):
                _rt.memsetAsync(buffer.ptr, raw[0], nbytes, queue.ptr)
        elif nbytes:
            # (a repeated pattern of several bytes: CuPy's own fill kernel over a view)
            unit = pattern.dtype if pattern.size == 1 else np.dtype(f"V{pattern.nbytes}")
            with cupy.cuda.Device(device.cl_device.ordinal), queue:
                memory = cupy.cuda.UnownedMemory(buffer.ptr, nbytes, buffer)
                view = cupy.ndarray((nbytes // unit.itemsize,), unit,
                                    cupy.cuda.MemoryPointer(memory, 0))
                view.fill(pattern.reshape(()).item() if pattern.size == 1 else pattern)
        return self.marker(queue)

    # }}}

    # {{{ programs

    def _compile(self, device: Any, source: str, options: Sequence[str],
                 kernel_names: Sequence[str]) -> tuple[bytes, bool]:
        arch = device.cl_device.arch
        has_cubin = hasattr(_nvrtc, "getCUBIN")
        # fuseloop's helpers, Loopy's own (``lpy_min_int32``) and the hand-written
        # kernels' functions are plain C functions: NVRTC is told they are device code
        flags = [f"--gpu-architecture={'sm' if has_cubin else 'compute'}_{arch}",
                 "--device-as-default-execution-space", *options]
        program = _nvrtc.createProgram(PRELUDE + source, "fuseloop.cu", (), ())
        try:
            try:
                _nvrtc.compileProgram(program, flags)
            except _nvrtc.NVRTCError as exc:
                raise KernelBuildError(
                    f"NVRTC for {device.name} rejected kernel {', '.join(kernel_names)}",
                    source=source, build_log=f"{exc}\n{_nvrtc.getProgramLog(program)}",
                ) from None
            if has_cubin:
                return bytes(_nvrtc.getCUBIN(program)), True
            return _nvrtc.getPTX(program).encode(), False
        finally:
            _nvrtc.destroyProgram(program)

    def _load(self, device: Any, binary: bytes, kernel_names: Sequence[str]) -> BuiltProgram:
        with cupy.cuda.Device(device.cl_device.ordinal):
            module = _function.Module()
            module.load(binary)
            for name in kernel_names:
                module.get_function(name)
        return BuiltProgram(self.name, (module, device.cl_device.ordinal, binary),
                            tuple(kernel_names))

    def build_source(self, device: Any, source: str, options: Sequence[str],
                     kernel_names: Sequence[str], built_before: bool = False) -> BuiltProgram:
        binary, _ = self._compile(device, source, options, kernel_names)
        try:
            return self._load(device, binary, kernel_names)
        except Exception as exc:
            raise KernelBuildError(
                f"{device.name} did not load the program NVRTC made for kernel "
                f"{', '.join(kernel_names)}", source=source, build_log=str(exc)) from None

    def build_binary(self, device: Any, binary: bytes, options: Sequence[str],
                     kernel_names: Sequence[str]) -> BuiltProgram | None:
        try:
            return self._load(device, binary, kernel_names)
        except Exception:
            return None

    def binary_of(self, program: BuiltProgram) -> bytes | None:
        return bytes(program.handle[2])

    # }}}

    # {{{ kernels, launches

    def kernel(self, program: BuiltProgram, name: str,
               consts: Sequence[tuple[int, Any]] = ()) -> Any:
        module, ordinal, _ = program.handle
        kernel = CudaKernel(module.get_function(name), ordinal)
        for i, value in consts:
            kernel.set(i, by_value(value))
        return kernel

    def set_buffer_arg(self, kernel: Any, position: int, buffer: Any) -> None:
        kernel.set(position, _address(buffer))

    def make_launcher(self, spec: LaunchSpec) -> Launcher:
        return make_launcher(spec)

    def capture(self, device: Any, enqueue: Callable[[Any], None]) -> Any:
        # (on a stream of its own, used for nothing else: another thread's work on the
        # device's queue meanwhile is not recorded into the graph)
        ordinal = device.cl_device.ordinal
        with cupy.cuda.Device(ordinal):
            stream = _CAPTURE_STREAMS.get(ordinal)
            if stream is None:
                stream = _CAPTURE_STREAMS[ordinal] = cupy.cuda.Stream(non_blocking=True)
                STREAM_DEVICES[stream.ptr] = ordinal
            stream.begin_capture()
            try:
                enqueue(stream)
            except BaseException:
                with contextlib.suppress(Exception):  # (the launch's error is the one)
                    stream.end_capture()
                raise
            return stream.end_capture()

    def launch_graph(self, device: Any, graph: Any, queue: Any) -> None:
        ordinal = device.cl_device.ordinal
        if _single_device() or ordinal == _rt.getDevice():
            graph.launch(queue)
        else:
            with cupy.cuda.Device(ordinal):
                graph.launch(queue)

    def buffer_address(self, buffer: Any) -> int:
        return int(buffer.ptr)

    def launch(self, device: Any, kernel: Any, global_size: Sequence[int],
               local_size: Sequence[int] | None, args: Sequence[Any],
               wait_for: Sequence[Any] | None = None) -> Any:
        queue = device.queue
        self._wait_for(queue, wait_for)
        for i, a in enumerate(args):
            kernel.set(i, by_value(a) if isinstance(a, np.generic) else _address(a))
        local = tuple(local_size) if local_size is not None else (1,) * len(global_size)
        grid, block = _grid(tuple(global_size), local)
        _run(kernel, grid, block, queue)
        return self.marker(queue)

    # }}}


def _grid(global_size: tuple[int, ...], local_size: tuple[int, ...]
          ) -> tuple[tuple[int, ...], tuple[int, ...]]:
    """CUDA's (grid in blocks, block) from OpenCL's (global, local) work-item counts."""
    local = (*local_size, 1, 1, 1)[:3]
    glob = (*global_size, 1, 1, 1)[:3]
    if len(global_size) > 3:
        raise KernelBuildError(f"a CUDA grid has at most 3 axes, not {len(global_size)}")
    return tuple(-(-g // w) for g, w in zip(glob, local)), local


def _run(kernel: CudaKernel, grid: tuple[int, ...], block: tuple[int, ...], queue: Any) -> None:
    if kernel.ordinal == _rt.getDevice():
        kernel.function(grid, block, kernel.args, 0, queue)
    else:
        with cupy.cuda.Device(kernel.ordinal):
            kernel.function(grid, block, kernel.args, 0, queue)


def make_launcher(spec: LaunchSpec) -> Launcher:
    """The CUDA :data:`~fuseloop.backends.base.Launcher` of ``spec``: as OpenCL's
    (``fuseloop.backends.opencl.make_launcher``), the kernel object remembers its
    arguments, so an input buffer or scalar is converted again only when it changed.

    Per launch it does only what changes: every argument is held in the form CuPy
    hands to ``cuLaunchKernel`` unconverted (:func:`_address`, :func:`by_value`:
    converted when set, not per launch, as CuPy does numpy scalars), the output's
    address is the one object made per launch, and the current device is not asked
    for on a host with one CUDA device (the only one is always current).
    """
    out_pos = spec.outputs
    buf_pos = spec.inputs
    scalar_pos = spec.scalars
    consts = [(i, by_value(v)) for i, v in spec.consts]
    n_args = spec.n_args
    one_output = spec.one_output
    out1 = out_pos[0][0] if one_output else -1
    grid, block = _grid(spec.global_size, spec.local_size)
    wr, address, get_device, scalar = _weakref, _CIntptr, _rt.getDevice, scalar_arg
    single = _single_device()

    def go(o: Any, s: list[Any], c: list[Any], k: Any, last: list[Any], queue: Any) -> None:
        args = k.args
        if len(args) < n_args:
            args.extend([None] * (n_args - len(args)))
        if last[-1] is not consts:
            last[-1] = None
            for i, v in consts:
                args[i] = v
                last[i] = None  # (a plan taking this argument per launch sets it again)
            last[-1] = consts
        if one_output:
            args[out1] = address(o.buffer.ptr)
            last[out1] = None  # (several outputs are kept by record)
        else:
            for i, j in out_pos:  # (a target, as a loop's statement writes, is set once)
                x = o[j]
                r = last[i]
                if r is None or r() is not x:
                    last[i] = None
                    args[i] = address(x.buffer.ptr)
                    last[i] = wr(x)
        for i, j in buf_pos:
            x = s[j]
            r = last[i]
            if r is None or r() is not x:
                last[i] = None
                args[i] = address(x.buffer.ptr)
                last[i] = wr(x)
        for i, j, T in scalar_pos:
            v = c[j]
            if v is not last[i]:
                last[i] = None
                args[i] = scalar(v, T)
                last[i] = v
        if single or k.ordinal == get_device():
            k.function(grid, block, args, 0, queue)
        else:
            with cupy.cuda.Device(k.ordinal):
                k.function(grid, block, args, 0, queue)
    return go


_DEVICE_COUNT: list[int] = []


def _single_device() -> bool:
    """Whether this host has one CUDA device (then it is always the current one)."""
    if not _DEVICE_COUNT:
        try:
            _DEVICE_COUNT.append(_rt.getDeviceCount())
        except Exception:  # (no driver: launchers are made only where one is)
            return False
    return _DEVICE_COUNT[0] == 1


__all__ = ["PRELUDE", "CudaBackend", "CudaBufferPool", "CudaOutOfMemory", "current_device",
           "make_launcher"]
