"""What fuseloop's functions know of split (multi-device) arrays, without importing them.

:mod:`fuseloop.multi` installs its array type and its handler here when it is first
imported (no split array exists before that), so the checks below cost one look-up
of an empty tuple in a process that never splits an array.  Functions that accept a
split array are decorated with :func:`splits`; elementwise operators reach the
handler from :func:`fuseloop.array._apply_general` (their slow path only).
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any, TypeVar, cast

F = TypeVar("F", bound=Callable[..., Any])

#: the split array types (``(fuseloop.multi.MultiArray,)`` once it is imported)
TYPES: tuple[type, ...] = ()
#: ``handler(kind, func, args, kwargs)``: runs ``func`` over the parts of the split arrays
#: among ``args`` (``kind``: ``"map"``, ``"ufunc"`` (an elementwise ufunc of arrays),
#: ``"reduce"``, ``"stencil"``)
_handler: Callable[[str, Callable[..., Any], tuple, dict], Any] | None = None


def install(types: tuple[type, ...], handler: Callable[[str, Callable[..., Any], tuple, dict],
                                                        Any]) -> None:
    """Register the split array types and the function that handles them."""
    global TYPES, _handler
    TYPES = types
    _handler = handler


def any_split(values: tuple) -> bool:
    """True when one of ``values`` is a split array."""
    return any(type(v) in TYPES for v in values)


def is_split(x: Any) -> bool:
    """True for a split (multi-device) array."""
    return type(x) in TYPES


def dispatch(kind: str, func: Callable[..., Any], args: tuple, kwargs: dict) -> Any:
    """Run ``func`` over the parts of the split arrays in ``args`` (``kind`` as above)."""
    assert _handler is not None
    return _handler(kind, func, args, kwargs)


def splits(kind: str = "map") -> Callable[[F], F]:
    """Decorator: a call with a split array among its positional arguments runs over
    the parts (through :func:`dispatch`); any other call runs ``func`` itself."""
    def decorate(func: F) -> F:
        @functools.wraps(func)
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            if TYPES:
                for a in args:
                    if type(a) in TYPES:
                        return dispatch(kind, func, args, kwargs)
            return func(*args, **kwargs)

        return cast(F, wrapper)

    return decorate
