"""The OpenCL backend, over pyopencl: the first implementation of :class:`Backend`.

A device's context, queue and buffer pool are made by
:mod:`fuseloop.runtime.devices` (``Device.context``, ``Device.queue``,
``Device.allocator``); this module builds programs (in compile workers, see
:mod:`fuseloop.runtime.compile_workers`, or inline), makes kernel objects and the
launchers that bind and enqueue them, and copies and waits through
:mod:`fuseloop.runtime.transfer`.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any
from weakref import ref as _weakref

import numpy as np
import pyopencl as cl

from ..errors import KernelBuildError
from ..runtime import compile_workers, transfer
from .base import Backend, BuiltProgram, DeviceInfo, Launcher, LaunchSpec

# pyopencl's public enqueue (in pyopencl 2026.1 the same function object as the
# private ``cl._cl.enqueue_nd_range_kernel`` its invoker calls: no reason to use that;
# benchmarks/probes/enqueue_cost.py measures both).  Read when a launcher is made.
_enqueue_nd_range = cl.enqueue_nd_range_kernel

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


def _rejected(device: Any, what: str, kernel_names: Sequence[str], source: str,
              exc: Exception) -> KernelBuildError:
    return KernelBuildError(f"{what} for {device.name} rejected kernel "
                            f"{', '.join(kernel_names)}", source=source, build_log=str(exc))


class OpenCLBackend(Backend):
    """OpenCL through pyopencl; programs built from OpenCL C."""

    name = "opencl"
    language = "opencl"
    #: the compile worker's builder file (see :mod:`fuseloop.runtime.compile_worker_main`)
    worker_builder = _BUILDER

    # {{{ devices

    def discover(self) -> list[DeviceInfo]:
        from ..runtime import icd
        from ..runtime.devices import _compiler_problem

        found: list[DeviceInfo] = []
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
                    problem=_compiler_problem(d), handle=d))
        icd.check_discovered([p.name.strip() for p in platforms])
        return found

    # }}}

    # {{{ buffers and copies

    def allocate(self, device: Any, nbytes: int) -> Any:
        return device.allocator.allocate(nbytes)

    def buffer_from_host(self, device: Any, host: np.ndarray) -> Any:
        return device.allocator.host_buffer(host)

    def free(self, buffer: Any) -> None:
        buffer.release()

    def upload(self, device: Any, buffer: Any, host: np.ndarray,
               wait_for: Sequence[Any] | None = None) -> Any:
        return cl.enqueue_copy(device.queue, buffer, host, is_blocking=False,
                               wait_for=wait_for)

    def download(self, device: Any, host: np.ndarray, buffer: Any,
                 wait_for: Sequence[Any] | None = None) -> Any:
        return cl.enqueue_copy(device.queue, host, buffer, is_blocking=False,
                               wait_for=wait_for)

    def copy(self, device: Any, dst: Any, src: Any, nbytes: int) -> Any:
        return cl.enqueue_copy(device.queue, dst, src, byte_count=nbytes)

    # }}}

    # {{{ programs

    def build_source(self, device: Any, source: str, options: Sequence[str],
                     kernel_names: Sequence[str]) -> BuiltProgram:
        """In a compile worker, which hands back the binary, loaded here; in this
        process with ``FUSELOOP_COMPILE=inline``."""
        if compile_workers.mode() == "inline":
            try:
                program = cl.Program(device.context, source).build(options=list(options))
                for name in kernel_names:
                    cl.Kernel(program, name)
            except cl.Error as exc:
                raise _rejected(device, "the OpenCL compiler", kernel_names, source,
                                exc) from None
            return BuiltProgram(self.name, program, tuple(kernel_names))
        binary = compile_workers.compile_binary(device, _BUILDER, source, options,
                                                kernel_names)
        try:
            program = cl.Program(device.context, [device.cl_device], [binary]).build(
                options=list(options))
        except cl.Error as exc:
            raise KernelBuildError(
                f"{device.name} did not load the binary its compiler made for kernel "
                f"{', '.join(kernel_names)}", source=source, build_log=str(exc)) from None
        return BuiltProgram(self.name, program, tuple(kernel_names))

    def build_binary(self, device: Any, binary: bytes, options: Sequence[str],
                     kernel_names: Sequence[str]) -> BuiltProgram | None:
        try:
            program = cl.Program(device.context, [device.cl_device], [binary]).build(
                options=list(options))
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

    def wait(self, device: Any, event: Any) -> None:
        transfer.wait(event, device)

    def finish(self, device: Any) -> None:
        transfer.finish(device)

    # }}}


def make_launcher(spec: LaunchSpec) -> Launcher:
    """The OpenCL :data:`~fuseloop.backends.base.Launcher` of ``spec``.

    A closure specialised to the kernel's arguments (tuples of positions consumed
    by tight loops).  The kernel object is the compiled kernel's own per thread,
    shared by its plans, so what its arguments were last set to is known: the
    constants (sizes, offsets) when the object last ran another plan's (``last[-1]``
    names the plan's constants it holds), an input buffer again only when it is
    another storage (remembered by weak
    reference, so no buffer is kept alive), a scalar only when it is another object
    (numpy scalars are immutable; the operators reuse one object per value), the
    outputs every time.  pyopencl's invoker sets every argument on every call, which
    costs PoCL about 2 us more per launch.  Scalars are converted to the kernel's
    declared type and set from their bytes (:data:`SET_SCALAR_ARG`).  Before an
    argument is set its record is cleared, so an interruption cannot leave a record
    that claims an argument it does not hold.
    """
    out_pos = spec.outputs
    buf_pos = spec.inputs
    scalar_pos = spec.scalars
    set_arg, set_scalar, wr = _set_arg, _set_scalar, _weakref
    # (positional, as pyopencl's own invoker calls it: its stub names the last two
    # keyword-only)
    enqueue: Any = _enqueue_nd_range
    g, l = spec.global_size, spec.local_size  # noqa: E741
    consts = spec.consts

    # (the input loops are written out in both forms: a shared helper would cost
    # every launch one more Python call)
    if spec.one_output:
        out_i = out_pos[0][0]

        def go(o: Any, s: list[Any], c: list[Any], k: Any, last: list[Any],
               queue: Any) -> None:
            if last[-1] is not consts:
                last[-1] = None
                for i, v in consts:
                    set_arg(k, i, v)
                last[-1] = consts
            set_arg(k, out_i, o.buffer)
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

    def go_many(o: Any, s: list[Any], c: list[Any], k: Any, last: list[Any],
                queue: Any) -> None:
        if last[-1] is not consts:
            last[-1] = None
            for i, v in consts:
                set_arg(k, i, v)
            last[-1] = consts
        for i, j in out_pos:
            set_arg(k, i, o[j].buffer)
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


__all__ = ["SET_SCALAR_ARG", "OpenCLBackend", "make_launcher"]
