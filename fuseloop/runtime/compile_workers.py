"""Programs built in compile workers, so a compiler crash cannot end the caller.

Backend-neutral: a backend (:mod:`fuseloop.backends`) names a standalone builder
file (``Backend.worker_builder``) that the worker loads, and calls
:func:`compile_binary` from its ``build_source``.

OpenCL CPU runtimes (PoCL, Intel's) run LLVM inside the calling process; when it
aborts (``LLVM ERROR: ...``) or segfaults, the user's interpreter dies with it.  So
every program is built from source by a worker process (a small pool, kept for the
next builds), which hands back the device binary; the calling process loads the
binary.  The first worker starts with device discovery where the disk cache never saw
the device opened (else at the first cache miss), and readies the device (a context,
the compiler's start) while the caller opens it, copies and lowers; until a worker is
ready, a GPU's builds run in the calling process (:func:`build_here`).  For a driver
that caches its builds itself (PoCL's kernel cache) the worker hands back no binary
(making one costs PoCL a second compilation) and the caller builds the source again,
a hit of that cache.
What a worker does not cover there: PoCL's CPU device compiles each kernel's
work-group function (its barriers, the machine code) when the kernel first runs,
in the caller, so a crash of that part still ends it (asking the worker for the
binary compiles a work-group function there too, but the launch compiles its own
again, each more than the build itself).
A worker that dies mid-build becomes a
:class:`~fuseloop.errors.KernelBuildError` naming the device, the kernel and the
signal, and the next build gets a new worker.  Ctrl-C during a build kills that
worker at once.

``FUSELOOP_COMPILE=inline`` builds in the calling process instead (no workers;
a compiler crash then ends the process).  ``FUSELOOP_COMPILE_WORKERS`` sets the
pool's size (default 2).
"""

from __future__ import annotations

import atexit
import contextlib
import os
import select
import signal
import subprocess
import sys
import tempfile
import threading
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import IO, Any

from ..errors import KernelBuildError
from .compile_worker_main import read_message, write_message

_WORKER_SCRIPT = str(Path(__file__).with_name("compile_worker_main.py"))
#: how much of a crashed worker's standard error goes into the error message
_STDERR_TAIL = 4000
#: (action, marker) passed to workers, for tests only (see compile_worker_main)
test_hook: tuple[str, str] | None = None


def mode() -> str:
    """``"process"`` (build in compile workers) or ``"inline"`` (``FUSELOOP_COMPILE``)."""
    value = os.environ.get("FUSELOOP_COMPILE", "process").strip().lower()
    return "inline" if value == "inline" else "process"


def pool_size() -> int:
    try:
        return max(1, int(os.environ.get("FUSELOOP_COMPILE_WORKERS", "2")))
    except ValueError:
        return 2


class WorkerDied(Exception):
    """The worker process ended before it answered."""

    def __init__(self, returncode: int | None, stderr_tail: str) -> None:
        super().__init__(returncode, stderr_tail)
        self.returncode = returncode
        self.stderr_tail = stderr_tail

    def describe(self) -> str:
        code = self.returncode
        if code is not None and code < 0:
            try:
                how = f"killed by {signal.Signals(-code).name}"
            except ValueError:
                how = f"killed by signal {-code}"
        else:
            how = f"exit status {code}"
        return how


class _Worker:
    """One compile worker process and the file its standard error goes to."""

    def __init__(self) -> None:
        from ..backends import worker_builders

        self.stderr: IO[bytes] = tempfile.TemporaryFile()
        try:
            # (unbuffered: no answer waits in a buffer where select cannot see it,
            # see caught_up)
            self.process = subprocess.Popen(
                [sys.executable, _WORKER_SCRIPT, *worker_builders()], stdin=subprocess.PIPE,
                stdout=subprocess.PIPE, stderr=self.stderr, close_fds=True, bufsize=0,
                # the terminal's Ctrl-C goes to the caller, which kills the worker
                # it waits for; other workers finish their builds
                start_new_session=True)
        except OSError as exc:
            self.stderr.close()
            raise KernelBuildError(
                f"could not start a compile worker ({sys.executable}): {exc}; "
                "set FUSELOOP_COMPILE=inline to build kernels in this process "
                "(a compiler crash then ends it)") from None
        self.ready = False
        self.unread = 0  # answers to requests sent without waiting (see send)
        # (builder, platform, device, ordinal) of devices whose context it made
        self.warmed: set[tuple[str, str, str, int]] = set()

    def _stderr_since(self, offset: int) -> str:
        try:
            self.stderr.seek(offset)
            text = self.stderr.read().decode(errors="replace")
        except (OSError, ValueError):
            return ""
        return text[-_STDERR_TAIL:].strip()

    def send(self, message: tuple) -> None:
        """Send ``message`` without waiting: its answer is read, and dropped, by the
        next :meth:`request` (the worker works on it meanwhile)."""
        assert self.process.stdin is not None
        try:
            write_message(self.process.stdin, message)
        except (BrokenPipeError, OSError, ValueError):
            return  # the next request finds the worker gone
        self.unread += 1

    def caught_up(self) -> bool:
        """Whether the worker has sent every answer it owes (its ready message, the
        answers to requests sent without waiting), reading those that came, never
        waiting: an idle worker that is caught up builds at once."""
        stdout = self.process.stdout
        assert stdout is not None
        while not self.ready or self.unread:
            try:
                waiting = select.poll()  # (not select(): no limit on the descriptor)
                waiting.register(stdout, select.POLLIN)
                if not waiting.poll(0):
                    return False
                read_message(stdout)  # (a whole message: each is one small write)
            except (EOFError, OSError, ValueError):
                return False  # (gone: the next request says how)
            if self.ready:
                self.unread -= 1
            else:
                self.ready = True
        return True

    def request(self, message: tuple) -> Any:
        """Send ``message``, return the answer; WorkerDied if the process ended."""
        offset = self.stderr.seek(0, os.SEEK_END)
        stdin, stdout = self.process.stdin, self.process.stdout
        assert stdin is not None and stdout is not None
        try:
            if not self.ready:
                read_message(stdout)  # ("ready", version)
                self.ready = True
            for _ in range(self.unread):
                read_message(stdout)
            self.unread = 0
            write_message(stdin, message)
            return read_message(stdout)
        except (EOFError, BrokenPipeError, OSError, ValueError):
            self.process.wait()
            raise WorkerDied(self.process.returncode, self._stderr_since(offset)) from None

    def kill(self) -> None:
        try:
            self.process.kill()
            self.process.wait()
        except OSError:
            pass
        self.close()

    def close(self) -> None:
        for stream in (self.process.stdin, self.process.stdout):
            if stream is not None:
                try:
                    stream.close()
                except OSError:
                    pass
        self.stderr.close()


class _Pool:
    """Up to :func:`pool_size` workers; a build takes an idle one or starts one."""

    def __init__(self) -> None:
        self.idle: list[_Worker] = []
        self.started = 0
        self.condition = threading.Condition()
        # devices (addresses) an idle worker was found ready for (see build_here)
        self.ready_for: set[tuple[str, str, str, int]] = set()
        self.building_here = False  # a build of build_here runs in this process

    def acquire(self) -> _Worker:
        with self.condition:
            while not self.idle and self.started >= pool_size():
                self.condition.wait()
            if self.idle:
                return self.idle.pop()
            self.started += 1
        try:
            return _Worker()
        except BaseException:
            self._forget()
            raise

    def release(self, worker: _Worker) -> None:
        with self.condition:
            self.idle.append(worker)
            self.condition.notify()

    def discard(self, worker: _Worker) -> None:
        worker.kill()
        self._forget()

    def _forget(self) -> None:
        with self.condition:
            self.started -= 1
            self.condition.notify()

    def prestart(self, address: tuple[str, str, str, int] | None = None) -> None:
        """Start a worker ahead of the first build if none runs, and with ``address``
        have an idle worker make that device's context, so that both overlap the
        caller's work (making arrays, lowering)."""
        with self.condition:
            fresh = self.started == 0
            if fresh:
                self.started += 1
            else:
                if address is not None:
                    for worker in self.idle:  # idle: no other thread writes to it
                        if address not in worker.warmed:
                            worker.warmed.add(address)
                            worker.send((*address, None, (), (), None, False))
                            break
                return
        try:
            worker = _Worker()
        except KernelBuildError:
            self._forget()
            return
        if address is not None:
            worker.warmed.add(address)
            worker.send((*address, None, (), (), None, False))
        self.release(worker)

    def claim_here(self, address: tuple[str, str, str, int]) -> bool:
        """Whether this process builds for ``address`` now (then ``building_here`` is
        set: release it with :meth:`release_here`): no worker was ready for it yet,
        none is now, and no other build runs here."""
        with self.condition:
            if address in self.ready_for or self.building_here:
                return False
            if any(address in w.warmed and w.caught_up() for w in self.idle):
                self.ready_for.add(address)
                return False
            self.building_here = True
            return True

    def release_here(self) -> None:
        with self.condition:
            self.building_here = False

    def shutdown(self) -> None:
        with self.condition:
            workers, self.idle = self.idle, []
            self.started -= len(workers)
        for worker in workers:
            worker.kill()


_pool = _Pool()
atexit.register(_pool.shutdown)


def _forget_parents_workers() -> None:
    # a forked child must not talk to its parent's workers (or kill them)
    global _pool
    _pool = _Pool()


os.register_at_fork(after_in_child=_forget_parents_workers)


def prestart(device: Any = None) -> None:
    """Start a compile worker now if none runs, and have it make ``device``'s context
    (no-op when building inline).  Called when a device is first used (the worker's
    start overlaps the caller's work) and at a kernel cache miss (the context's
    creation overlaps lowering)."""
    if mode() == "process":
        if device is None:
            _pool.prestart(None)
            return
        builder = _builder_of(device)
        if builder is not None:
            _pool.prestart((builder, *_device_address(device)))


@contextlib.contextmanager
def build_here(device: Any) -> Iterator[bool]:
    """Whether the build made in this block runs in this process (True) or in a compile
    worker (False): in this process with ``FUSELOOP_COMPILE=inline``, and for a device
    whose compiler is not one of the CPU runtimes' LLVMs (their aborts are why workers
    build: a GPU driver's compiler) while no worker has readied it yet, one build at a
    time: a first build then does not wait for the worker's start (Python, the driver,
    a context), longer than a small kernel's build.  The worker goes on readying the
    device for the builds after."""
    if mode() == "inline":
        yield True
        return
    builder = _builder_of(device)
    if device.type == "cpu" or builder is None:
        yield False
        return
    address = (builder, *_device_address(device))
    here = _pool.claim_here(address)
    if not here:
        yield False
        return
    try:
        _pool.prestart(address)  # (a worker readies the device meanwhile)
        yield True
    finally:
        _pool.release_here()


def _builder_of(device: Any) -> str | None:
    from ..backends import backend_for

    return backend_for(device).worker_builder


def _device_address(device: Any) -> tuple[str, str, int]:
    from .devices import known_devices

    ordinal = sum(1 for d in known_devices() if d.index < device.index
                  and d.platform == device.platform and d.name == device.name)
    return device.platform, device.name, ordinal


def compile_binary(device: Any, builder: str, source: str, options: Sequence[str] = (),
                   kernel_names: Sequence[str] = (), language: str = "OpenCL",
                   binary: bool = True) -> bytes | None:
    """The device binary of ``source``, built for ``device`` by a compile worker with
    the backend's ``builder`` file; with ``binary`` False the worker only builds and
    checks the program and None comes back (for drivers that cache source builds
    themselves, where asking for the binary costs more than building again here).
    Raises KernelBuildError when the compiler rejects the source or the worker dies
    (naming the device, the kernels and the signal)."""
    request = (builder, *_device_address(device), source, tuple(options),
               tuple(kernel_names), test_hook, binary)
    worker = _pool.acquire()
    try:
        answer = worker.request(request)
    except WorkerDied as died:
        _pool.discard(worker)
        names = ", ".join(kernel_names) or "a kernel"
        raise KernelBuildError(
            f"the {language} compiler for {device.name} ({device.platform}) crashed building "
            f"{names} (compile worker {died.describe()}); this process and its arrays are "
            "unaffected and nothing was cached. Select another device or CPU runtime "
            "(FUSELOOP_DEVICE, see `fuseloop devices`), and please report the kernel "
            "source below", source=source, build_log=died.stderr_tail) from None
    except BaseException:  # Ctrl-C: do not wait for the build
        _pool.discard(worker)
        raise
    _pool.ready_for.add(request[:4])  # (it built there: builds go to workers now)
    _pool.release(worker)
    status, payload = answer
    if status != "ok":
        raise KernelBuildError(
            f"the {language} compiler for {device.name} rejected kernel "
            f"{', '.join(kernel_names)}", source=source, build_log=payload)
    return payload
