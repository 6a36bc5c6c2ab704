"""User functions in a lowered kernel: their calls (pointer arguments included) and
the inputs read from constant memory (see :mod:`fuseloop.functions`,
:mod:`fuseloop.constant_memory`)."""

from __future__ import annotations

from typing import Any

import numpy as np

from .._lazy import lp, prim
from ..expr.program import Program

#: in the name of a user function's callable with pointer arguments, before each array
#: (the recipes leave such a call's arguments alone: see recipes/mappers.py)
POINTER_MARK = "__ptr_"


def call_args(low: Any, refs: tuple[int, ...], loop: tuple[np.dtype, ...]) -> list[Any]:
    """The arguments of an elementwise entry: each cast to its loop dtype, but a
    pointer argument (a ``ptr`` entry: ``in<k>[offset]``) passed as it is."""
    entries = low.program.entries
    return [low.exprs[r] if entries[r].kind == "ptr" else low.cast_expr(r, loop[k])
            for k, r in enumerate(refs)]


def user_call(low: Any, fn: Any, loop: tuple[np.dtype, ...], args: list[Any],
              refs: tuple[int, ...]) -> Any:
    """The call of user function ``fn``, its callable registered on ``low``.  A call
    with pointer arguments is a callable of its own per set of arrays (its name says
    which), since the callable writes the arrays' names into the call."""
    pointers = tuple((k, f"in{low.program.entries[refs[k]].slot}")
                     for k in getattr(fn, "pointers", ()))
    name = fn.c_name + "".join(f"{POINTER_MARK}{a}" for _, a in pointers)
    if name not in low.callables:
        from .callables import UserCallable  # (Loopy's class: loaded on a cache miss only)

        low.callables[name] = UserCallable(name, loop[:-1], loop[-1], fn.source,
                                           preambles=tuple(fn.preambles()),
                                           pointers=pointers, c_name=fn.c_name)
    return prim.Variable(name)(*args)


def input_arg(program: Program, slot: int, dtype: np.dtype, target: Any = None) -> Any:
    """The kernel argument of input ``slot``: ``__constant`` for an ``fl.constant``
    array (the program marks it with a ``cmem`` entry), else a global array.  (CUDA has
    no constant-space pointers: there it is a global, read-only one.)"""
    cuda = type(target).__name__ == "CudaTarget"
    if not cuda and any(e[0] == "cmem" and e[1] == slot for e in program.entries):
        return lp.ConstantArg(f"in{slot}", dtype, shape=None)
    return lp.GlobalArg(f"in{slot}", dtype, shape=None, is_output=False, is_input=True)
