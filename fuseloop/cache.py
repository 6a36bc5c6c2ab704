"""Compiled-kernel cache: structural key -> launchable kernel, in memory and on disk.

The key is computed from fuseloop's own IR (a linearised program), never from
Loopy objects, so a cache hit neither imports nor touches Loopy.  The cache
only looks kernels up, stores them, has the driver build them and keeps its
bounds: what a kernel is (lowering, the recipe, code generation) is decided by
:mod:`fuseloop.lower.codegen`, which a miss calls (see :mod:`fuseloop.stages`
for the same steps one at a time).  On disk each
entry is a JSON file holding the generated source, its launch plan and
the device binary the driver produced, written atomically and verified (key
and checksum) when read: a truncated, corrupt or foreign entry is ignored and
rebuilt, and a binary the driver no longer accepts falls back to the source.

Key parts (see :func:`disk_key`): schema version, library versions, a
fingerprint of fuseloop's code-generating modules, device identity, recipe
name and version, the recipe's size class, index dtype, and the program.

Concurrency: the memory cache is shared by all threads; a kernel missing from
it is built once, by the first thread that asks, while the others wait for it
(one lock per key).  Loopy's steps are serialised (one lock per process,
:data:`fuseloop.lower.codegen.loopy_lock`).  Programs are built, loaded from
binaries and asked for their binaries through the device's backend
(:mod:`fuseloop.backends`); a device whose driver caches its own builds (PoCL
with its kernel cache on) gets entries without a binary, and a later process
builds the entry's source again, a hit of that driver cache with no Loopy work.
Kernels written by hand (the mask compaction's) are
cached here too, keyed by their plan (:class:`SourceKernel`).  Processes share the
disk cache without locks: entries are replaced atomically, so a reader sees a whole
old entry, a whole new one, or none.

Bounds: the memory cache holds at most :func:`memory_cache_size` kernels
(``FUSELOOP_MEMORY_CACHE_SIZE``), the least recently used going first (see
:func:`_store`); the disk cache is trimmed to :func:`disk_cache_max_bytes`
(``FUSELOOP_DISK_CACHE_MAX_BYTES``) by file modification time, which a read
refreshes (see :func:`trim_disk_cache`).
"""

from __future__ import annotations

import ast
import hashlib
import itertools
import json
import operator
import os
import sys
import threading
import weakref
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from . import _dists
from . import caches as _caches
from ._lazy import LazyModule, loopy_lock
from .backends import Backend, BuiltProgram, backend_for
from .cache_disk import (  # noqa: F401  (the disk layer's API, as it was here)
    DEFAULT_DISK_CACHE_MAX_BYTES,
    DISABLED_VALUES,
    DISK_TRIM_TO,
    MAX_BINARY_BYTES,
    SCHEMA_VERSION,
    DiskEntry,
    KernelPlan,
    _env_int,
    _read_disk,
    _write_disk,
    cache_dir,
    clear_disk_cache,
    disk_cache_info,
    disk_cache_max_bytes,
    disk_entries,
    entry_path,
    read_entry,
    trim_disk_cache,
)
from .errors import KernelBuildError
from .expr.program import Program
from .runtime.devices import Device
from .stats import increment as _increment

if TYPE_CHECKING:
    from .recipes import Recipe

# lowering, the recipe and code generation; compile workers: imported on the first miss
codegen = LazyModule(".lower.codegen", __package__)
_workers = LazyModule(".runtime.compile_workers", __package__)
_batch = LazyModule(".batch_build", __package__)

# (program, index dtype, device, recipe, user functions, size class) -> the kernel's plan
MakePlan = Callable[[Program, np.dtype, Device, "Recipe", Any, str], KernelPlan]

#: kernels the memory cache holds unless ``FUSELOOP_MEMORY_CACHE_SIZE`` says otherwise
#: (a built kernel costs about 1 MB of the process's memory on PoCL)
DEFAULT_MEMORY_CACHE_SIZE = 512

# the modules whose code decides what source a program becomes (passes: lower/kernel.py
# reads its output layout rules)
_CODEGEN_PATHS = ("lower", "passes", "recipes", "expr", "backends", "cache.py", "dtypes.py",
                  "functions.py", "op_names.py")


# {{{ key

def _dist_version(dist: str) -> str:
    found = _dists.version(dist)  # (the metadata file itself: importlib.metadata costs ~10 ms)
    if found is not None:
        return found
    from importlib import metadata

    try:
        d = metadata.distribution(dist)
    except metadata.PackageNotFoundError:
        return "unknown"
    # the header's Version field, without the email parser behind
    # ``Distribution.version`` (a few ms per package, on every new process)
    text = d.read_text("METADATA") or d.read_text("PKG-INFO") or ""
    for line in text.partition("\n\n")[0].splitlines():
        if line.startswith("Version:"):
            return line[len("Version:"):].strip()
    return d.version


@cache
def library_versions() -> tuple[tuple[str, str], ...]:
    return tuple((dist, _dist_version(dist))
                 for dist in ("fuseloop", "loopy", "pyopencl", "islpy", "pymbolic"))


@cache
def code_fingerprint() -> str:
    """A hash of fuseloop's code-generating modules.

    Part of the disk key, so that kernels generated by an edited checkout (an
    editable install whose version number did not change) are not reused.
    """
    root = Path(__file__).parent
    files: list[Path] = []
    for name in _CODEGEN_PATHS:
        path = root / name
        files.extend(sorted(path.rglob("*.py")) if path.is_dir() else [path])
    h = hashlib.sha256()
    for f in files:
        try:
            data = f.read_bytes()
        except OSError:
            data = b"?"
        h.update(f"{f.relative_to(root).as_posix()}\0{len(data)}\0".encode())
        h.update(data)
    return h.hexdigest()[:16]


def disk_key(program: Program, index_dtype: np.dtype, device: Device, recipe: Recipe,
             sizes: str = "") -> str:
    return repr((
        ("schema", SCHEMA_VERSION),
        ("libraries", library_versions()),
        ("fuseloop_code", code_fingerprint()),
        ("device", device.identity),
        ("recipe", recipe.cache_id),
        ("sizes", sizes),
        ("index_dtype", index_dtype.name),
        ("program", program),
    ))


# }}}


def _size_term(expr: str) -> Callable[[int, int, Sequence[int]], int]:
    """One grid-size expression of a kernel plan as a function of ``(N, NE, p)``.

    The expressions are Python over ``N``, ``NE``, ``p[k]``, integers, ``+ - * //``,
    ``max`` and ``min`` (see :mod:`fuseloop.lower.codegen`); parsed once, here, into
    nested closures rather than evaluated as generated code.
    """
    return _size_node(ast.parse(expr, mode="eval").body, expr)


_BINOPS: dict[type, Callable[[int, int], int]] = {
    ast.Add: operator.add, ast.Sub: operator.sub, ast.Mult: operator.mul,
    ast.FloorDiv: operator.floordiv, ast.Mod: operator.mod}


def _size_node(node: ast.expr, expr: str) -> Callable[[int, int, Sequence[int]], int]:
    if isinstance(node, ast.Constant) and type(node.value) is int:
        value = node.value
        return lambda N, NE, p: value
    if isinstance(node, ast.Name) and node.id in ("N", "NE"):
        return (lambda N, NE, p: N) if node.id == "N" else (lambda N, NE, p: NE)
    if isinstance(node, ast.Subscript) and isinstance(node.value, ast.Name) \
            and node.value.id == "p" and isinstance(node.slice, ast.Constant) \
            and type(node.slice.value) is int:
        k = node.slice.value
        return lambda N, NE, p: p[k]
    if isinstance(node, ast.BinOp) and type(node.op) in _BINOPS:
        op = _BINOPS[type(node.op)]
        a, b = _size_node(node.left, expr), _size_node(node.right, expr)
        return lambda N, NE, p: op(a(N, NE, p), b(N, NE, p))
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub):
        a = _size_node(node.operand, expr)
        return lambda N, NE, p: -a(N, NE, p)
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) \
            and node.func.id in ("max", "min") and not node.keywords:
        f = max if node.func.id == "max" else min
        terms = [_size_node(a, expr) for a in node.args]
        return lambda N, NE, p: f(t(N, NE, p) for t in terms)
    raise ValueError(f"unexpected grid-size expression {expr!r} in a kernel plan")


def _compile_sizes(exprs: list[str]) -> Callable[[int, int, Sequence[int]], tuple[int, ...]]:
    """The grid sizes of a kernel plan as one function ``(N, NE, p) -> tuple``."""
    terms = tuple(_size_term(e) for e in exprs)
    return lambda N, NE, p: tuple([t(N, NE, p) for t in terms])


class CompiledKernel:
    """A built program plus the recipe for its arguments and grid.

    ``kernel`` is a kernel object of the calling thread's own: a kernel object
    holds its arguments between setting them and a launch, so two threads sharing
    one could launch each other's arguments.  (Launches use their plans' own
    kernel objects: see :func:`fuseloop.launching.thread_kernel`.)
    """

    __slots__ = (
        "_local",
        "arg_layout",
        "arg_plan",
        "backend",
        "gsize",
        "in_cache",
        "launch_plans",
        "launchers",
        "lsize",
        "plan",
        "plan_threads",
        "program",
        "ticket",
    )

    def __init__(self, plan: KernelPlan, program: BuiltProgram, backend: Backend,
                 device: Device | None = None) -> None:
        #: True while the memory cache's ``_memory`` holds this kernel: a launch plan
        #: keeping it is valid only then (see ``_store``)
        self.in_cache = False
        self.plan = plan
        self.program = program
        self.backend = backend
        self._local = threading.local()
        #: ``.state``: this thread's (kernel object, record of its arguments), as
        #: ``fuseloop.launching.thread_kernel`` keeps it for all of the kernel's plans
        self.plan_threads = threading.local()
        self.gsize = _compile_sizes(plan.gsize)
        self.lsize = _compile_sizes(plan.lsize)
        # (kind, index): 0 output, 1 input buffer, 2 scalar, 3 integer parameter,
        # 4 total size N, 5 row length NE, 6 gather error flag, 7 the ticket counter of
        # two stages in one launch (``lower.one_launch``: zero, set on each kernel object)
        arg_plan = []
        self.ticket = None
        for a in plan.arg_names:
            if a in ("N", "NE", "err", "fl_ticket"):
                arg_plan.append(({"N": 4, "NE": 5, "err": 6, "fl_ticket": 7}[a], 0))
                if a == "fl_ticket":
                    assert device is not None
                    self.ticket = backend.buffer_from_host(device, np.zeros(1, np.int32))
            else:
                kind = {"out": 0, "in": 1, "s": 2, "p": 3}[a.rstrip("0123456789")]
                arg_plan.append((kind, int(a.lstrip("outinsp"))))
        self.arg_plan = tuple(arg_plan)
        # (params, rows, row length, one output) -> fuseloop.launching.LaunchPlan
        self.launch_plans: dict[tuple, Any] = {}
        #: the arguments sorted for launchers (``fuseloop.launching.arg_layout``), made
        #: on first use: once per kernel, not per plan
        self.arg_layout: Any = None
        #: (global size, local size, one output) -> the backend's launcher family, so
        #: that a plan for new offsets on the same grid only binds its constants
        self.launchers: dict[tuple, Any] = {}

    def new_kernel(self, consts: Sequence[tuple[int, Any]] = ()) -> Any:
        """A new kernel object with ``consts`` set (under :data:`kernel_objects_lock`)."""
        with kernel_objects_lock:
            kernel = self.backend.kernel(self.program, self.plan.name, consts)
            if self.ticket is not None:
                self.backend.set_buffer_arg(kernel, self.plan.arg_names.index("fl_ticket"),
                                            self.ticket)
            return kernel

    @property
    def kernel(self) -> Any:
        """The kernel object of this thread."""
        try:
            return self._local.kernel
        except AttributeError:
            kernel = self._local.kernel = self.new_kernel()
            return kernel

    def thread_state(self) -> tuple[Any, list[Any]]:
        """This thread's kernel object and the record of the arguments set on it (see
        the backend's launcher): one slot per argument, and a last one naming the
        launch plan whose constants (sizes, offsets) it holds."""
        local = self._local
        try:
            return local.kernel, local.last
        except AttributeError:
            if not hasattr(local, "kernel"):
                local.kernel = self.new_kernel()
            local.last = [None] * (len(self.arg_plan) + 1)
            return local.kernel, local.last


# The memory cache.  ``_memory`` is what a look-up reads (a plain dict: a hit is one
# ``dict.get``, with no bookkeeping).  It is bounded without knowing which kernels
# a hit used (see _store): when it fills up, its oldest kernels are moved to
# ``_retired``; a kernel asked for again before the next round moves back (a miss
# that costs a second dict look-up, not a rebuild) and the rest are dropped then.
_memory: dict[tuple, CompiledKernel] = {}
_retired: dict[tuple, CompiledKernel] = {}
# Counts the memory cache's rounds: clear_memory_cache() and every eviction round.
# A launch plan checks its own kernel's ``in_cache`` instead (one attribute, no
# look-up): a round retires only the oldest kernels, so the plans of the others
# stay valid, and a retired kernel asked for again is valid again.  (A plan keeps
# its kernel alive in any case: a kernel is never freed under a plan.)
memory_generation = [0]
# Held to add, move or drop memory-cache entries (never by a cache hit)
_memory_lock = threading.Lock()
_memory_evictions = [0]
# Held while a thread makes its own kernel object and sets its first arguments
# (rare: once per kernel and thread).  Eight threads doing it at once crashed the
# process on the H200 (a segfault; the threads' stacks were in pyopencl's invoker
# cache, a pytools sqlite file, and in clSetKernelArg); one at a time they do not.
kernel_objects_lock = threading.RLock()


class _KeyLock:
    """A lock for one memory-cache key, dropped when nobody holds or awaits it."""

    __slots__ = ("lock", "users")

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.users = 0


_build_locks: dict[tuple, _KeyLock] = {}
_global_lock = threading.Lock()
# one Loopy step at a time (see fuseloop.lower.codegen)
_loopy_lock = loopy_lock


# {{{ building

#: seconds a kernel build takes before it says so on standard error, once
#: (``FUSELOOP_PROGRESS=0`` silences it)
PROGRESS_AFTER_S = 1.0


def _progress_wanted() -> bool:
    return os.environ.get("FUSELOOP_PROGRESS", "1").strip().lower() not in DISABLED_VALUES


@contextmanager
def _progress(what: str, device: Device) -> Iterator[None]:
    """A line on standard error if the build inside takes more than :data:`PROGRESS_AFTER_S`:
    the first evaluation of a large expression can take seconds, which should not
    look like a hang."""
    if not _progress_wanted():
        yield
        return

    def say() -> None:
        print(f"fuseloop: building {what} for "
              f"{device.name} (the first evaluation of this expression; later ones, and "
              "later processes, use the cached kernel) ...", file=sys.stderr, flush=True)

    timer = threading.Timer(PROGRESS_AFTER_S, say)
    timer.daemon = True
    timer.start()
    try:
        yield
    finally:
        timer.cancel()
        timer.join()  # (a line being written is finished before the build returns)


# builds from source running now in this process's threads (see fuseloop.prebuild)
_builds_running = [0]
_builds_lock = threading.Lock()


def _build_source(plan: KernelPlan, device: Device, built_before: bool = False,
                  kernel_names: Sequence[str] | None = None) -> BuiltProgram:
    """``plan``'s source built for ``device``; ``kernel_names``: the kernels it holds
    (default: ``plan``'s own), each checked."""
    names = (plan.name,) if kernel_names is None else tuple(kernel_names)
    with _builds_lock:
        _builds_running[0] += 1
        overlapped = _builds_running[0] > 1
    if overlapped:
        _increment("builds_overlapped")
    try:
        program = backend_for(device).build_source(device, plan.source, plan.build_options,
                                                   names, built_before=built_before)
    except KernelBuildError as exc:
        if device.problem:
            exc.args = (f"{exc.args[0]}: {device.problem}",)
        raise
    finally:
        with _builds_lock:
            _builds_running[0] -= 1
    _increment("kernels_compiled")
    _increment("programs_built")
    return program


def _build_binary(plan: KernelPlan, binary: bytes, device: Device) -> BuiltProgram | None:
    """The program built from a stored binary, or None when the driver refuses it."""
    program = backend_for(device).build_binary(device, binary, plan.build_options,
                                               (plan.name,))
    if program is not None:
        _increment("kernels_compiled")
    return program


def _binary_of(program: BuiltProgram) -> bytes | None:
    from .backends import get_backend

    binary = get_backend(program.backend).binary_of(program)
    if binary is None or len(binary) > MAX_BINARY_BYTES:
        return None
    return binary


def _binary_to_store(program: BuiltProgram, device: Device) -> bytes | None:
    """The binary a disk entry gets: none where the driver caches its builds itself
    (PoCL: asking for it compiles every kernel again; see ``stores_binaries``)."""
    if not backend_for(device).stores_binaries(device):
        return None
    return _binary_of(program)


# }}}


# Programs built from a disk entry's source or binary, by (device, digest of the source,
# build options): the kernels of one program built together (fuseloop.batch_build) each
# have an entry holding the whole program; the first one found builds it, the others
# share it while it lives
_shared: weakref.WeakValueDictionary[tuple, BuiltProgram] = weakref.WeakValueDictionary()


def _shared_key(plan: KernelPlan, device: Device) -> tuple:
    return (device.index, hashlib.sha256(plan.source.encode()).digest(),
            tuple(plan.build_options))


def _from_disk(entry: DiskEntry, path: Path, device: Device) -> CompiledKernel | None:
    """The kernel of a verified disk entry, or None if it no longer builds."""
    shared_key = _shared_key(entry.plan, device)
    program = _shared.get(shared_key)
    # (a kernel built with others: its entry holds their program, shown as its own kernel)
    shown = _batch.shown_alone(entry.plan)
    if program is not None:
        return CompiledKernel(shown, program, backend_for(device), device)
    if entry.binary is not None:
        program = _build_binary(entry.plan, entry.binary, device)
    if program is None:
        try:
            program = _build_source(entry.plan, device, built_before=True)
        except KernelBuildError:
            return None  # rebuilt from scratch by the caller
        binary = _binary_to_store(program, device)
        if binary is not None or entry.binary is not None:
            # the binary the driver now produces, or none instead of a refused one
            _write_disk(path, entry.key, entry.plan, binary)
    _shared[shared_key] = program
    return CompiledKernel(shown, program, backend_for(device), device)


@dataclass(frozen=True)
class Request:
    """A kernel to build: its memory-cache key, its disk key and its plan (both made on
    demand: the plan is Loopy's work) and how a slow build names it."""

    mem_key: tuple
    disk_key: Callable[[], str]
    plan: Callable[[], KernelPlan]
    what: str = "a kernel"


# Plans made before their kernels' build, by memory key (see plan_ahead); taken by the
# kernel's build, dropped all at once past PLANNED_MAX (a recording that stopped early)
_planned: dict[tuple, KernelPlan] = {}
PLANNED_MAX = 64


def kernel_request(program: Program, index_dtype: np.dtype, device: Device, recipe: Recipe,
                   user_functions: Mapping[str, Any], sizes: str = "",
                   make_plan: MakePlan | None = None) -> Request:
    """What :func:`get_kernel` builds on a miss (see there)."""
    mem_key = (program, index_dtype.char, device.index, recipe.cache_id, sizes)

    def make() -> KernelPlan:
        planned = _planned.pop(mem_key, None)
        if planned is not None:
            return planned
        return (make_plan or codegen.kernel_plan)(program, index_dtype, device, recipe,
                                                  user_functions, sizes)

    return Request(mem_key,
                   lambda: disk_key(program, index_dtype, device, recipe, sizes), make,
                   f"a kernel of {len(program.entries)} operations")


def get_kernel(program: Program, index_dtype: np.dtype, device: Device, recipe: Recipe,
               user_functions: Mapping[str, Any], sizes: str = "",
               make_plan: MakePlan | None = None) -> CompiledKernel:
    """The compiled kernel for ``program``: memory cache, then disk, then the stages.

    ``sizes`` is the launch's size class (Loopy assumptions; see
    :mod:`fuseloop.recipes`), part of both keys.  On a miss of both caches the
    kernel's plan comes from ``make_plan`` (called as
    :func:`fuseloop.lower.codegen.kernel_plan`, its default: lowering, the recipe
    and code generation), and the driver builds its source.

    Nothing is registered unless the kernel was built: a failed build or an
    interruption (``KeyboardInterrupt``) leaves neither a memory entry nor a
    disk entry behind, and releases the key's lock.
    """
    hit = _memory.get((program, index_dtype.char, device.index, recipe.cache_id, sizes))
    if hit is not None:
        _increment("memory_cache_hits")
        return hit
    request = kernel_request(program, index_dtype, device, recipe, user_functions, sizes,
                             make_plan)
    return _get_or_build(request.mem_key, request.disk_key, request.plan, device,
                         request.what)


def source_disk_key(plan: KernelPlan, device: Device) -> str:
    """The disk key of a kernel written by hand: its whole plan (source, arguments,
    grid, build options), the device and the libraries (no fuseloop code hash: the
    plan is the code)."""
    return repr((
        ("schema", SCHEMA_VERSION),
        ("libraries", library_versions()),
        ("device", device.identity),
        ("source_kernel", json.dumps(plan.to_json(), sort_keys=True)),
    ))


class SourceKernel:
    """A kernel written by hand (not generated from a program), compiled through the
    kernel cache: the memory and disk caches, the build path and ``fl.stats()``'s
    counts, keyed by its whole plan.  Made once (a module's constant, or one per
    layout); :meth:`get` is then one dictionary look-up on a hit."""

    __slots__ = ("digest", "plan")

    def __init__(self, plan: KernelPlan) -> None:
        self.plan = plan
        text = json.dumps(plan.to_json(), sort_keys=True)
        self.digest = hashlib.sha256(text.encode()).hexdigest()

    def get(self, device: Device) -> CompiledKernel:
        """The compiled kernel for ``device`` (counted as a memory-cache hit or miss)."""
        mem_key = ("source", self.digest, device.index)
        hit = _memory.get(mem_key)
        if hit is not None:
            _increment("memory_cache_hits")
            return hit
        plan = self.plan
        return _get_or_build(mem_key, lambda: source_disk_key(plan, device), lambda: plan,
                             device)


def _enter(mem_key: tuple) -> _KeyLock:
    """The lock of ``mem_key``, counted as used until :func:`_leave`."""
    with _global_lock:
        key_lock = _build_locks.get(mem_key)
        if key_lock is None:
            key_lock = _build_locks[mem_key] = _KeyLock()
        key_lock.users += 1
    return key_lock


def _leave(mem_key: tuple, key_lock: _KeyLock) -> None:
    with _global_lock:
        key_lock.users -= 1
        if key_lock.users == 0:
            del _build_locks[mem_key]


def _cached(mem_key: tuple) -> CompiledKernel | None:
    """The memory cache's kernel of ``mem_key`` (brought back if retired; counted as a
    hit), or None; the caller holds the key's lock."""
    hit = _memory.get(mem_key)
    if hit is None:
        hit = _retired.get(mem_key)
        if hit is not None:  # asked for again before its round ended: keep it
            _store(mem_key, hit)
    if hit is not None:
        _increment("memory_cache_hits")
    return hit


def _get_or_build(mem_key: tuple, make_disk_key: Callable[[], str],
                  make_plan: Callable[[], KernelPlan], device: Device,
                  what: str = "a kernel") -> CompiledKernel:
    """The kernel of ``mem_key`` after a memory-cache miss: built once however many
    threads ask (one lock per key), from the disk cache or ``make_plan()``; ``what``
    names it in the line a slow build prints."""
    key_lock = _enter(mem_key)
    try:
        with key_lock.lock:  # two threads asking for one kernel build it once
            hit = _cached(mem_key)
            if hit is not None:
                return hit
            compiled = _get_uncached(make_disk_key, make_plan, device, what)
            _store(mem_key, compiled)
            return compiled
    finally:
        _leave(mem_key, key_lock)


def _disk_hit(key: str, device: Device) -> CompiledKernel | None:
    """The kernel of disk key ``key`` from the disk cache (counted as a hit or miss)."""
    directory = cache_dir()
    if directory is None:
        return None
    path = entry_path(directory, key)
    entry = _read_disk(path, key)
    _increment("disk_cache_misses" if entry is None else "disk_cache_hits")
    return None if entry is None else _from_disk(entry, path, device)


def _get_uncached(make_disk_key: Callable[[], str], make_plan: Callable[[], KernelPlan],
                  device: Device, what: str) -> CompiledKernel:
    _increment("memory_cache_misses")
    key = make_disk_key() if cache_dir() is not None else None
    if key is not None:
        compiled = _disk_hit(key, device)
        if compiled is not None:
            return compiled
    _workers.prestart(device)  # a compile worker starts while Loopy loads and lowers
    with _progress(what, device):
        plan = make_plan()
        built = _build_source(plan, device)  # raises before anything is cached
    compiled = CompiledKernel(plan, built, backend_for(device), device)
    _write_entry(key, compiled, device)
    return compiled


def _write_entry(key: str | None, compiled: CompiledKernel, device: Device) -> None:
    directory = cache_dir()
    if key is not None and directory is not None:
        _write_disk(entry_path(directory, key), key, compiled.plan,
                    _binary_to_store(compiled.program, device))


# {{{ kernels built together (fuseloop.batch_build)

def claim(mem_keys: Sequence[tuple]) -> dict[tuple, _KeyLock]:
    """The locks of those of ``mem_keys`` that no other thread is building now, held
    (never waited for: two batches claiming in other orders cannot deadlock); release
    them with :func:`release`."""
    claimed: dict[tuple, _KeyLock] = {}
    for mem_key in mem_keys:
        if mem_key in claimed:
            continue
        key_lock = _enter(mem_key)
        if key_lock.lock.acquire(blocking=False):
            claimed[mem_key] = key_lock
        else:
            _leave(mem_key, key_lock)
    return claimed


def release(claimed: dict[tuple, _KeyLock]) -> None:
    for mem_key, key_lock in claimed.items():
        key_lock.lock.release()
        _leave(mem_key, key_lock)


def compile_plans(plans: Sequence[KernelPlan], device: Device) -> list[CompiledKernel]:
    """The kernels of ``plans``, which share one source and its build options, from one
    build of that source; raises :class:`KernelBuildError`."""
    names = tuple(plan.name for plan in plans)
    built = _build_source(plans[0], device, kernel_names=names)
    if len(plans) > 1:
        _increment("kernels_compiled", len(plans) - 1)
        _shared[_shared_key(plans[0], device)] = built
    backend = backend_for(device)
    return [CompiledKernel(plan, built, backend, device) for plan in plans]


def plan_ahead(request: Request) -> None:
    """Make ``request``'s plan now, raising what making it raises, and keep it for the
    kernel's build; nothing when the kernel is cached in memory or has a disk entry.
    (A two-stage reduction's joined kernel: whether its stages can share a launch is
    known from its plan, while a run plan records; the replay then builds it with the
    plan's other kernels.)"""
    mem_key = request.mem_key
    if mem_key in _memory or mem_key in _planned:
        return
    directory = cache_dir()
    if directory is not None and entry_path(directory, request.disk_key()).is_file():
        return
    plan = request.plan()
    with _memory_lock:
        if len(_planned) >= PLANNED_MAX:
            _planned.clear()
        _planned[mem_key] = plan


# }}}


def memory_cache_size() -> int:
    """How many compiled kernels the memory cache holds at most.

    ``FUSELOOP_MEMORY_CACHE_SIZE`` (at least 1), else
    :data:`DEFAULT_MEMORY_CACHE_SIZE`; read whenever a kernel is added.
    """
    return _env_int("FUSELOOP_MEMORY_CACHE_SIZE", DEFAULT_MEMORY_CACHE_SIZE, 1)


def _store(mem_key: tuple, compiled: CompiledKernel) -> None:
    """Add a kernel to the memory cache (as the most recently used one), keeping the bound.

    Eviction goes in rounds of ``batch`` kernels (an eighth of the bound), so that
    cache hits need no bookkeeping: a round drops the kernels retired in the
    previous round (not asked for since) and retires the oldest ``batch`` of
    ``_memory``, and starts a new generation so that launch plans look their
    kernels up again, bringing back retired kernels still in use.  ``_memory`` is
    in order of addition; a kernel brought back counts as added then, so what is
    dropped is what went unused longest, to within a round (an LRU approximation).
    Afterwards ``_memory`` holds at most ``size - batch`` kernels and ``_retired``
    at most ``batch``.
    """
    with _memory_lock:
        _retired.pop(mem_key, None)
        _memory[mem_key] = compiled
        compiled.in_cache = True
        size = memory_cache_size()
        batch = max(1, size // 8)
        if len(_memory) <= size - batch and len(_memory) + len(_retired) <= size:
            return
        _memory_evictions[0] += len(_retired)
        _retired.clear()
        for key in list(itertools.islice(_memory, max(0, len(_memory) - size))):
            _memory.pop(key).in_cache = False  # the bound was lowered: over it, drop at once
            _memory_evictions[0] += 1
        for key in list(itertools.islice(_memory, batch)):
            retired = _retired[key] = _memory.pop(key)
            retired.in_cache = False
        memory_generation[0] += 1


def memory_cache_info() -> dict[str, int]:
    """This process's memory cache: its bound, kernels held, kernels dropped so far."""
    return {"max_entries": memory_cache_size(), "entries": len(_memory) + len(_retired),
            "evictions": _memory_evictions[0]}


def clear_memory_cache() -> None:
    """Forget compiled kernels held in memory (the disk cache stays)."""
    with _memory_lock:
        for compiled in _memory.values():
            compiled.in_cache = False
        _memory.clear()
        _retired.clear()
        _planned.clear()
        _shared.clear()
        memory_generation[0] += 1


_caches.register("cache.kernels", clear_memory_cache, lambda: len(_memory) + len(_retired),
                 memory_cache_size, order=1)
_caches.register_function("cache.library_versions", library_versions, "no arguments: one value")
_caches.register_function("cache.code_fingerprint", code_fingerprint, "no arguments: one value")
