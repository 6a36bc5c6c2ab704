"""Modules loaded on first use: Loopy, islpy and pymbolic only on a kernel cache miss.

Importing Loopy costs about a quarter of a second, more than the rest of
``import fuseloop``; a program whose kernels are all in the disk cache never
needs it.  Modules that lower programs or hold recipes therefore refer to these
proxies instead of importing the packages: ``lp.Assignment`` imports Loopy the
first time it is read.  Classes that derive from Loopy's own live in modules
that only code running on a miss imports (``lower/callables.py``,
``recipes/mappers.py``, ``lower/reductions.py``, ``recipes/row_cache.py``).

Type checkers see the real modules.
"""

from __future__ import annotations

import importlib
import threading
from collections.abc import Callable
from types import ModuleType
from typing import TYPE_CHECKING, Any

__all__ = ["LazyModule", "first_call", "isl", "loopy_lock", "lp", "prim"]

#: one Loopy step at a time, in the whole process (Loopy, islpy and pymbolic keep
#: process-wide caches; see :mod:`fuseloop.lower.codegen`); here, so that the kernel
#: cache holds it without importing the lowering
loopy_lock = threading.RLock()


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
