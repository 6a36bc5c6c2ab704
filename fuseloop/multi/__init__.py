"""Several devices, one array (VexCL's multi-device vectors; issue 29).

In ``with fl.device([dev0, dev1, ...]):`` new arrays are :class:`MultiArray` s, split
along axis 0 over the devices (``DeviceSet``'s weights decide the rows per device).
fuseloop's functions take them through :mod:`fuseloop.multi_hooks`: elementwise
work runs per part (``array.py``), reductions combine partial results
(``reduce.py``), stencils and misaligned operands copy the rows a part lacks
(``exchange.py``), creation functions split (``create.py``).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from .. import multi_hooks
from .array import MultiArray, is_multi, map_elementwise, map_parts
from .create import create
from .devset import DeviceSet
from .exchange import EXCHANGED

_reduce: list[Callable[..., Any]] = []  # (multi.reduce.reduce, imported at first use)


def _handle(kind: str, func: Callable[..., Any], args: tuple, kwargs: dict) -> Any:
    if kind == "reduce":
        if not _reduce:  # (an import statement per call costs a split sum a microsecond)
            from .reduce import reduce

            _reduce.append(reduce)
        return _reduce[0](func, args[0], args[1:], kwargs)
    if kind == "ufunc":
        return map_elementwise(func, args)
    if kind == "stencil":
        from .exchange import stencil

        return stencil(func, *args)
    return map_parts(func, args, kwargs)


multi_hooks.install((MultiArray,), _handle)

__all__ = ["EXCHANGED", "DeviceSet", "MultiArray", "create", "is_multi", "map_parts"]
