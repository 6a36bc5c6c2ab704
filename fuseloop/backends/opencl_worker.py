"""The OpenCL backend's build inside a compile worker (see
:mod:`fuseloop.runtime.compile_worker_main`).

Loaded by the worker from this file's path (when the worker starts), not imported
as part of fuseloop: it imports nothing of fuseloop, only pyopencl.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import pyopencl as cl


def _find_device(platform: str, device: str, ordinal: int) -> Any:
    seen = 0
    for plat in cl.get_platforms():
        if plat.name.strip() != platform:
            continue
        for d in plat.get_devices():
            if d.name.strip() == device:
                if seen == ordinal:
                    return d
                seen += 1
    raise LookupError(f"the compile worker sees no device {device!r} (number {ordinal}) "
                      f"on platform {platform!r}")


#: built when the worker readies a device, ahead of the first build
_WARM_UP = "__kernel void fl_warm_up(__global int *a) { a[0] = 0; }"


def build(state: dict, address: tuple[str, str, int], source: str | None,
          options: Sequence[str], kernel_names: Sequence[str],
          binary: bool = True) -> tuple[str, Any]:
    """``("ok", binary)`` or ``("error", log)``; with ``source`` None only readies the
    device (its context, and a one-line program built where no build came before)
    and answers ``("ok", b"")``.  With ``binary`` False the program is built and
    checked but its binary is not asked for (PoCL compiles every kernel once more
    to make one) and the answer is ``("ok", None)``."""
    fresh = address not in state
    if fresh:
        cl_device = _find_device(*address)
        state[address] = (cl.Context([cl_device]), cl_device)
    context, _ = state[address]
    if source is None:
        if fresh:
            # a driver's first build in a process starts its compiler (PoCL reads its
            # builtin library's bitcode: most of a small kernel's first build), done
            # here while the caller lowers
            try:
                cl.Program(context, _WARM_UP).build()
            except cl.Error:
                pass  # (the first real build reports what is wrong)
        return "ok", b""
    try:
        program = cl.Program(context, source).build(options=list(options))
        for name in kernel_names:  # a kernel the compiler dropped fails here, not later
            cl.Kernel(program, name)
        if not binary:
            return "ok", None
        binaries = program.get_info(cl.program_info.BINARIES)
    except cl.Error as exc:
        return "error", str(exc)
    if len(binaries) != 1 or not binaries[0]:
        return "error", "the OpenCL driver returned no program binary"
    return "ok", bytes(binaries[0])
