"""The compile worker's process: builds OpenCL programs and returns device binaries.

Started by :mod:`fuseloop.runtime.compile_workers` as ``python <this file>`` (not
``-m``, so that the worker imports pyopencl and nothing of fuseloop).  It reads
requests from standard input and answers on the standard output it was started
with; anything the OpenCL compiler prints goes to standard error.

Messages are pickled tuples, each preceded by its length (8 bytes, little endian):

* the worker first sends ``("ready", pyopencl_version)``;
* a request is ``(platform, device, ordinal, source, options, kernel_names, hook)``
  where ``ordinal`` counts earlier devices of the same platform and name;
* the answer is ``("ok", binary)`` or ``("error", log)``; a request whose source is
  None warms the worker up for that device ahead of its first build (the device's
  context, and one small program built, see :func:`_warm_up`) and is answered
  ``("ok", b"")``.

``hook`` is for tests: ``None``, or ``(action, marker)``; when ``marker`` is in
the source the worker calls ``os.abort()`` (action ``"abort"``) or sleeps
(``"hang"``) instead of building, so a crashing or slow compiler can be tested.
"""

from __future__ import annotations

import os
import pickle
import struct
import sys
import time
from typing import IO, Any

_HEADER = struct.Struct("<Q")


def read_message(stream: IO[bytes]) -> Any:
    """The next message on ``stream``; EOFError when the other side has gone."""
    header = stream.read(_HEADER.size)
    if len(header) < _HEADER.size:
        raise EOFError
    (size,) = _HEADER.unpack(header)
    body = stream.read(size)
    if len(body) < size:
        raise EOFError
    return pickle.loads(body)


def write_message(stream: IO[bytes], message: Any) -> None:
    body = pickle.dumps(message, protocol=pickle.HIGHEST_PROTOCOL)
    stream.write(_HEADER.pack(len(body)) + body)
    stream.flush()


def _find_device(cl: Any, platform: str, device: str, ordinal: int) -> Any:
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


#: a program built once per device when the worker warms up (see _warm_up)
_WARM_UP_SOURCE = "__kernel void fl_warm_up(__global float *a) { a[get_global_id(0)] *= 2.0f; }"
#: the devices (platform, name, ordinal) this worker has warmed up for
_warmed: set[tuple[str, str, int]] = set()


def _warm_up(cl: Any, context: Any) -> bool:
    """Build a small program (and its binary) on ``context``: a compiler's first build
    in a process costs its own start (PoCL: LLVM and its kernel library, about 0.35 s
    of CPU of the 0.5 s a first small kernel takes); done at the caller's cache miss,
    that overlaps the caller's code generation instead of delaying its build.  A
    failure is left for the real build to report."""
    try:
        cl.Program(context, _WARM_UP_SOURCE).build().get_info(cl.program_info.BINARIES)
    except Exception:
        return False
    return True


def _build(cl: Any, contexts: dict, request: tuple) -> tuple[str, Any]:
    platform, device, ordinal, source, options, kernel_names, hook = request
    if hook is not None and source is not None and hook[1] in source:
        if hook[0] == "abort":
            os.abort()
        if hook[0] == "hang":
            time.sleep(3600)
    key = (platform, device, ordinal)
    if key not in contexts:
        cl_device = _find_device(cl, platform, device, ordinal)
        contexts[key] = (cl.Context([cl_device]), cl_device)
    context, cl_device = contexts[key]
    if source is None:
        if key not in _warmed:
            _warmed.add(key)
            _warm_up(cl, context)
        return "ok", b""
    try:
        program = cl.Program(context, source).build(options=list(options))
        for name in kernel_names:  # a kernel the compiler dropped fails here, not later
            cl.Kernel(program, name)
        binaries = program.get_info(cl.program_info.BINARIES)
    except cl.Error as exc:
        return "error", str(exc)
    if len(binaries) != 1 or not binaries[0]:
        return "error", "the OpenCL driver returned no program binary"
    return "ok", bytes(binaries[0])


def main() -> None:
    # answers go to the stdout this process was started with; file descriptor 1
    # becomes stderr, so a compiler that prints cannot corrupt the answers
    answers = os.fdopen(os.dup(1), "wb")
    os.dup2(2, 1)
    requests = sys.stdin.buffer
    import pyopencl as cl

    write_message(answers, ("ready", cl.VERSION_TEXT))
    contexts: dict = {}
    while True:
        try:
            request = read_message(requests)
        except EOFError:
            return
        try:
            answer = _build(cl, contexts, request)
        except Exception as exc:  # anything but a crash goes back as a build error
            answer = ("error", f"{type(exc).__name__}: {exc}")
        write_message(answers, answer)


if __name__ == "__main__":
    # run as a file: its folder (fuseloop/runtime) must not shadow top-level modules
    if sys.path and os.path.abspath(sys.path[0]) == os.path.dirname(os.path.abspath(__file__)):
        del sys.path[0]
    main()
