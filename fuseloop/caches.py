"""Every in-memory cache of fuseloop, in one list: ``fl.cache_info()``, ``fl.clear_caches()``.

Each module that keeps a cache registers it here when it is imported, with a
function that clears it, one that tells its size, and its bound (the most
entries it holds), or, for one without a bound, the reason it cannot grow
without bound.  Registries that are not caches (registered recipes, devices
and their runtimes, the queue of recent lazy arrays) are not listed:
clearing them would change what fuseloop does, not only how fast.

:func:`clear` empties them all, in memory only: the kernel cache on disk stays
(``python -m fuseloop.cli cache --clear`` empties it), so evaluating again
rebuilds kernels from their disk entries.  Caches that hold compiled kernels
(run plans, cached launches) are cleared before the kernel cache itself, whose
clearing marks every kernel it held as no longer cached
(``CompiledKernel.in_cache``), so that no launch plan goes on using a kernel the
kernel cache dropped.  Call it while no other thread evaluates.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any, NamedTuple

__all__ = ["CacheRecord", "clear", "info", "records", "register", "register_function"]


class CacheRecord(NamedTuple):
    """One registered cache (see the module's docstring)."""

    name: str
    clear: Callable[[], object]
    size: Callable[[], int]
    bound: int | Callable[[], int] | None  # (a function: a bound read when asked)
    why_bounded: str | None  # for ``bound`` None: why it cannot grow without bound
    order: int  # cleared in increasing order: kernel holders (0) before kernels (1)


_records: dict[str, CacheRecord] = {}
_lock = threading.Lock()


def register(name: str, clear: Callable[[], object], size: Callable[[], int],
             bound: int | Callable[[], int] | None = None, why: str | None = None,
             order: int = 0) -> None:
    """List the cache ``name``; one without a ``bound`` says ``why`` it stays small."""
    if bound is None and not why:
        raise ValueError(f"cache {name!r}: give a bound, or why it cannot grow without one")
    with _lock:
        _records[name] = CacheRecord(name, clear, size, bound, why, order)


def register_function(name: str, function: Any, why: str | None = None) -> None:
    """List a ``functools.cache`` or ``lru_cache`` function (its ``maxsize`` is its bound)."""
    maxsize = function.cache_info().maxsize
    register(name, function.cache_clear, lambda: function.cache_info().currsize,
             maxsize, why)


def records() -> list[CacheRecord]:
    """The registered caches, in the order :func:`clear` clears them."""
    with _lock:
        return sorted(_records.values(), key=lambda r: r.order)


def info() -> list[dict[str, object]]:
    """Each cache's name, current size, bound, and (unbounded ones) why it stays small."""
    _import_all()
    return [{"name": r.name, "size": r.size(),
             "bound": r.bound() if callable(r.bound) else r.bound,
             **({"why_bounded": r.why_bounded} if r.bound is None else {})}
            for r in records()]


def clear() -> None:
    """Empty every in-memory cache (the disk cache stays)."""
    # (only the registered ones: a module not imported yet has nothing to clear, and
    # importing it here would load the recipes and the lowering into a process that
    # never generates code)
    for r in records():
        r.clear()


def _import_all() -> None:
    # modules imported lazily register their caches when first imported: a cache
    # not yet imported is empty, but listing it makes the list the same every time
    from . import array, cache, dtypes, fft, run_plans  # noqa: F401
    from .ops import compaction, reductions, scan, segmented, sorting, stencil  # noqa: F401
    from .recipes import rows  # noqa: F401
