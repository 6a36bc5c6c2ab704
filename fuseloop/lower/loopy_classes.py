"""One dataclass per definition in Loopy's code generator, not one per call.

Loopy 2025.2's ``loopy.codegen.control.build_loop_nest`` defines a frozen dataclass
(``ScheduleIndexInfo``: four annotated fields, no methods) in its body, so every call
builds the class again; ``dataclasses`` writes and ``exec``-compiles its ``__init__``,
``__eq__``, ``__hash__``, ``__repr__`` and ``__setattr__`` each time (about 1 ms of
CPU).  Code generation calls it once per loop level and once per unrolled copy of a
loop's body, and those class builds were an eighth of Loopy's code generation time
for every kind of kernel fuseloop makes (a sampling profile over elementwise, row,
column, contraction and stencil kernels).

:func:`install` makes that module's ``dataclass`` decorator return the class it made
for the first definition of the same qualified name, fields and options: the class
body holds annotations only, so every definition's class is the same class.  It
applies to the Loopy version whose code was read for this (``LOOPY_VERSION``) and
leaves any other as it is.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

#: the Loopy release whose ``build_loop_nest`` was read (its one nested dataclass)
LOOPY_VERSION = (2025, 2)

_made: dict[tuple, type] = {}


def _once_per_definition(cls: Any = None, /, **options: Any) -> Any:
    """``dataclasses.dataclass``, returning one class per (qualified name, fields,
    options) for classes whose bodies hold only annotated fields."""

    def wrap(c: type) -> type:
        own = {k for k in vars(c) if not (k.startswith("__") and k.endswith("__"))}
        if own:  # (methods or defaults: not a plain record; made as written)
            return dataclasses.dataclass(**options)(c)
        key = (c.__module__, c.__qualname__, tuple(c.__annotations__.items()),
               tuple(sorted(options.items())))
        made = _made.get(key)
        if made is None:
            made = _made[key] = dataclasses.dataclass(**options)(c)
        return made

    return wrap if cls is None else wrap(cls)


def install() -> bool:
    """Use :func:`_once_per_definition` in Loopy's loop-nest code generator, if this is
    the Loopy release it was written for; True if it is in place."""
    import loopy
    from loopy.codegen import control

    current: Callable[..., Any] = control.dataclass
    if current is _once_per_definition:
        return True
    if tuple(loopy.VERSION[:2]) != LOOPY_VERSION or current is not dataclasses.dataclass:
        return False
    control.dataclass = _once_per_definition
    return True
