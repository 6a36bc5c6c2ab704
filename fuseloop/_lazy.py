"""Modules loaded on first use: Loopy, islpy and pymbolic only on a kernel cache miss.

Importing Loopy costs about a quarter of a second, more than the rest of
``import fuseloop``; a program whose kernels are all in the disk cache never
needs it.  Modules that lower programs or hold recipes therefore refer to these
proxies instead of importing the packages: ``lp.Assignment`` imports Loopy the
first time it is read.  Classes that derive from Loopy's own live in modules
that only code running on a miss imports (``lower/callables.py``,
``recipes/mappers.py``, ``lower/reductions.py``, ``recipes/row_cache.py``).

A process that will generate code for a GPU (its disk cache never saw a device opened
and a GPU's driver is listed, or it opens a GPU: see :mod:`fuseloop.runtime.devices`)
imports Loopy on a thread from then on (:func:`preload_loopy`): the driver's start and
the device's context are made with the GIL released (:mod:`fuseloop.runtime.icd`), so
the import runs beside them instead of at the first cache miss.

Type checkers see the real modules.
"""

from __future__ import annotations

import gc
import importlib
import os
import sys
import threading
from collections.abc import Callable
from types import ModuleType
from typing import TYPE_CHECKING, Any

__all__ = ["LazyModule", "await_preload", "first_call", "isl", "loopy_lock", "lp",
           "preload_loopy", "prim"]

#: objects frozen (``gc.freeze``) before fuseloop was imported: the interpreter's or its
#: site's own (375 on the H200 host's Python at start), not a freeze that code running
#: with fuseloop made (see :func:`fuseloop.lower.codegen.loopy_section`)
FROZEN_AT_IMPORT = gc.get_freeze_count()

#: one Loopy step at a time, in the whole process (Loopy, islpy and pymbolic keep
#: process-wide caches; see :mod:`fuseloop.lower.codegen`); here, so that the kernel
#: cache holds it without importing the lowering
loopy_lock = threading.RLock()


#: what a first kernel's code generation and launch import (for its first code generation
#: Loopy imports modules of its own; pyopencl's invoker comes with the first kernel object),
#: and fuseloop's recipes (with the lowering they import: their parameters are part of
#: the keys, so the first evaluation loads them) and the modules of the first code
#: generation (each imported, beyond those, by code that waits for the thread first: the
#: kernel cache's ``codegen``, a Loopy section); a name missing here is skipped
PRELOADED = ("loopy", "loopy.check", "loopy.codegen.bounds", "loopy.codegen.control",
             "loopy.codegen.instruction", "loopy.codegen.loop", "loopy.codegen.tools",
             "loopy.isl_helpers", "loopy.library.function", "loopy.schedule.device_mapping",
             "loopy.target.c.compyte.dtypes", "colorama", "pyopencl.characterize",
             "pyopencl.invoker", "fuseloop.recipes", "fuseloop.lower.codegen",
             "fuseloop.lower.loopy_classes", "fuseloop.lower.gather_flags",
             "fuseloop.lower.callables", "fuseloop.recipes.mappers")
#: the thread importing Loopy ahead of the first cache miss (see preload_loopy), or None
_preload: threading.Thread | None = None
_preload_lock = threading.Lock()


def preload_loopy() -> None:
    """Import Loopy (with islpy, pymbolic, pytools) and :data:`PRELOADED` on a daemon
    thread, once per process, unless Loopy is loaded: for a process that will generate
    code, called when its devices are being discovered, so that the imports run while
    the driver starts and the device opens (with the GIL released) rather than at the
    first evaluation.  Of fuseloop's modules only the recipes and the lowering (all the
    others they import are loaded with fuseloop); fuseloop's own first imports of those
    (:func:`fuseloop.recipe_state.recipe_for`, a :class:`LazyModule`) wait for the thread
    first, so two threads never import them at once (which could deadlock)."""
    global _preload
    with _preload_lock:
        if _preload is not None or "loopy" in sys.modules:
            return
        _preload = threading.Thread(target=_import_loopy_quietly, name="fuseloop-loopy-import",
                                    daemon=True)
        _preload.start()


def _import_loopy_quietly() -> None:
    # with the collector off, as the first miss's import (fuseloop.lower.codegen): what
    # the import makes stays for the process, so collecting during it frees nothing and
    # holds the GIL.  (For the import's length the main thread's collections wait too:
    # it is discovering and opening a device meanwhile.)
    enabled = gc.isenabled()
    gc.disable()
    try:
        for name in PRELOADED:
            try:
                importlib.import_module(name)
            except Exception:
                pass  # (the first miss imports it again and says what failed)
    finally:
        if enabled:
            gc.enable()


def await_preload() -> None:
    """Wait for :func:`preload_loopy`'s import, if one runs (the first Loopy section
    freezes the objects alive before it, Loopy's among them: see
    :func:`fuseloop.lower.codegen.loopy_section`)."""
    thread = _preload
    if thread is not None and thread is not threading.current_thread():
        thread.join()


def _forget_preload() -> None:
    # (no thread of the parent's here.  A child forked mid-import holds Loopy's modules half
    # made, their import locks owned by that thread: fuseloop refuses the OpenCL runtime
    # in such a child before any Loopy work, see fuseloop.runtime.devices; waiting for the
    # import before a fork deadlocked on logging's lock, which its fork hook holds)
    global _preload, _preload_lock
    _preload, _preload_lock = None, threading.Lock()


os.register_at_fork(after_in_child=_forget_preload)


class LazyModule:
    """A module imported the first time one of its attributes is read (``name`` relative
    to ``package`` when it starts with a dot, as for :func:`importlib.import_module`)."""

    def __init__(self, name: str, package: str | None = None) -> None:
        self._name = name
        self._package = package
        self._module: ModuleType | None = None

    def __getattr__(self, attr: str) -> Any:
        # only reached for names not set in __init__: everything of the module's
        module = self._module
        if module is None:
            await_preload()  # (a module the thread may be importing: see preload_loopy)
            module = self._module = importlib.import_module(self._name, self._package)
        return getattr(module, attr)

    def __repr__(self) -> str:
        state = "loaded" if self._module is not None else "not loaded yet"
        return f"<lazy module {self._name!r}, {state}>"


def first_call(namespace: dict[str, Any], name: str, module: str,
               attr: str) -> Callable[..., Any]:
    """A stand-in for the function ``attr`` of ``module`` (relative to ``namespace``'s
    package when it starts with a dot), bound as ``name`` in ``namespace`` (a module's
    globals): its first call imports the module and binds ``name`` to the function
    itself, so later calls through that global cost nothing more.  For a module whose
    functions run only when a feature is used (``x[i]``: :mod:`fuseloop.ops.indexing`
    and what it imports), so that ``import fuseloop`` does not load it."""
    found: list[Callable[..., Any]] = []

    def stand_in(*args: Any, **kwargs: Any) -> Any:
        if not found:  # (a caller holding the stand-in itself finds the function here)
            real = getattr(importlib.import_module(module, namespace["__package__"]), attr)
            found.append(real)
            namespace[name] = real
        return found[0](*args, **kwargs)

    stand_in.__name__ = stand_in.__qualname__ = name
    return stand_in


if TYPE_CHECKING:
    import islpy as isl
    import loopy as lp
    import pymbolic.primitives as prim
else:
    lp = LazyModule("loopy")
    isl = LazyModule("islpy")
    prim = LazyModule("pymbolic.primitives")
