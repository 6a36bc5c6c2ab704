"""The compile worker's process: builds programs and returns device binaries.

Started by :mod:`fuseloop.runtime.compile_workers` as ``python <this file> BUILDER...``
(not ``-m``, so that the worker imports nothing of fuseloop).  A builder is a
backend's standalone file (e.g. ``fuseloop/backends/opencl_worker.py``) with a
function ``build(state, address, source, options, kernel_names)``; the files named
on the command line are loaded at start (their driver imports overlap the caller's
work), others when a request names them.  It reads requests from standard input
and answers on the standard output it was started with; anything the compiler
prints goes to standard error.

Messages are pickled tuples, each preceded by its length (8 bytes, little endian):

* the worker first sends ``("ready", python_version)``;
* a request is ``(builder, platform, device, ordinal, source, options, kernel_names,
  hook, binary)`` where ``builder`` is the path of a builder file, ``ordinal`` counts
  earlier devices of the same platform and name and ``binary`` says whether the
  answer brings the program's binary;
* the answer is ``("ok", binary)`` (``("ok", None)`` when no binary was asked for)
  or ``("error", log)``; a request whose source is None only readies the device
  (its context, and the compiler's start: ahead of the first build) and is
  answered ``("ok", b"")``.

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


def _read_exactly(stream: IO[bytes], size: int) -> bytes:
    """``size`` bytes of ``stream`` (an unbuffered pipe may return fewer at a time);
    EOFError when it ends first."""
    data = stream.read(size)
    if not data:
        raise EOFError
    if len(data) == size:
        return data
    parts, got = [data], len(data)  # (a binary: a pipe's buffer at a time)
    while got < size:
        more = stream.read(size - got)
        if not more:
            raise EOFError
        parts.append(more)
        got += len(more)
    return b"".join(parts)


def read_message(stream: IO[bytes]) -> Any:
    """The next message on ``stream``; EOFError when the other side has gone."""
    (size,) = _HEADER.unpack(_read_exactly(stream, _HEADER.size))
    return pickle.loads(_read_exactly(stream, size))


def write_message(stream: IO[bytes], message: Any) -> None:
    body = pickle.dumps(message, protocol=pickle.HIGHEST_PROTOCOL)
    data = memoryview(_HEADER.pack(len(body)) + body)
    while data:  # (an unbuffered pipe may take part of it at a time)
        data = data[stream.write(data) or 0:]
    stream.flush()


def _builder(path: str, builders: dict[str, Any]) -> Any:
    """The ``build`` function of the backend's builder file at ``path``, loaded once."""
    found = builders.get(path)
    if found is None:
        import importlib.util

        spec = importlib.util.spec_from_file_location(
            f"_fuseloop_builder_{len(builders)}", path)
        if spec is None or spec.loader is None:
            raise ImportError(f"the compile worker cannot load the builder {path!r}")
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        found = builders[path] = module.build
    return found


def _build(builders: dict[str, Any], state: dict, request: tuple) -> tuple[str, Any]:
    builder, platform, device, ordinal, source, options, kernel_names, hook, binary = request
    if hook is not None and source is not None and hook[1] in source:
        if hook[0] == "abort":
            os.abort()
        if hook[0] == "hang":
            time.sleep(3600)
    build = _builder(builder, builders)
    return build(state.setdefault(builder, {}), (platform, device, ordinal), source,
                 options, kernel_names, binary)


def main() -> None:
    # answers go to the stdout this process was started with; file descriptor 1
    # becomes stderr, so a compiler that prints cannot corrupt the answers
    answers = os.fdopen(os.dup(1), "wb")
    os.dup2(2, 1)
    requests = sys.stdin.buffer
    builders: dict[str, Any] = {}
    for path in sys.argv[1:]:
        try:
            _builder(path, builders)
        except Exception:
            pass  # (reported when a request needs it)
    write_message(answers, ("ready", sys.version))
    state: dict[str, dict] = {}
    while True:
        try:
            request = read_message(requests)
        except EOFError:
            return
        try:
            answer = _build(builders, state, request)
        except Exception as exc:  # anything but a crash goes back as a build error
            answer = ("error", f"{type(exc).__name__}: {exc}")
        write_message(answers, answer)


if __name__ == "__main__":
    # run as a file: its folder (fuseloop/runtime) must not shadow top-level modules
    if sys.path and os.path.abspath(sys.path[0]) == os.path.dirname(os.path.abspath(__file__)):
        del sys.path[0]
    main()
