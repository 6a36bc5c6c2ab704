"""The recipes' expression mappers (Loopy's classes, so this module loads on a cache miss only)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import pymbolic.primitives as prim
from loopy.symbolic import IdentityMapper, get_dependencies

from ..lower.user_calls import POINTER_MARK

if TYPE_CHECKING:
    from .cpu_vector import _Vectoriser

#: elementwise recipes: the temporaries holding hoisted loads are ``_fl_ld<n>``
LOAD_PREFIX = "_fl_ld"


class CallHoister(IdentityMapper):
    """Replace vectorisable calls by reads of their lane in a result array,
    recording for each the instructions that compute it for the whole block."""

    def __init__(self, owner: _Vectoriser, depends_on: frozenset[str]) -> None:
        super().__init__()
        self.owner = owner
        self.depends_on = depends_on
        self.call_ids: set[str] = set()  # the block instructions the expression reads

    def map_call(self, expr: prim.Call, *args: Any, **kwargs: Any) -> Any:
        params = tuple(self.rec(p, *args, **kwargs) for p in expr.parameters)
        name = getattr(expr.function, "name", None)
        call = self.owner.vectorisable(name, params)
        if call is None:
            return type(expr)(expr.function, params)
        return self.owner.hoist(name, call, params, self)  # type: ignore[arg-type]

    # calls under a condition keep their place (their arguments may be invalid
    # where the condition is false); so do reductions
    def map_if(self, expr: Any, *args: Any, **kwargs: Any) -> Any:
        return expr

    def map_logical_and(self, expr: Any, *args: Any, **kwargs: Any) -> Any:
        return expr

    def map_logical_or(self, expr: Any, *args: Any, **kwargs: Any) -> Any:
        return expr

    def map_reduction(self, expr: Any, *args: Any, **kwargs: Any) -> Any:
        return expr


class ReductionFinder(IdentityMapper):
    found = False

    def map_reduction(self, expr: Any, *args: Any, **kwargs: Any) -> Any:
        self.found = True
        return expr


class LoadExtractor(IdentityMapper):
    """Replace reads of global inputs by scalar temporaries (one per array and index).

    Only reads whose index depends on nothing but ``i`` and kernel parameters are
    taken (so the read is valid wherever the instruction runs), and nothing under a
    conditional or a reduction is touched.
    """

    def __init__(self, inputs: frozenset[str], allowed: frozenset[str], loads: dict) -> None:
        super().__init__()
        self.inputs = inputs
        self.allowed = allowed  # variables an index may depend on
        self.loads = loads  # (array, index) -> temporary name
        self.used: set[str] = set()  # temporaries referred to since the last reset

    def map_subscript(self, expr, *args, **kwargs):
        if hoistable(expr, self.inputs, self.allowed):
            key = (expr.aggregate.name, expr.index)
            if key not in self.loads:
                self.loads[key] = f"{LOAD_PREFIX}{len(self.loads)}"
            self.used.add(self.loads[key])
            return prim.Variable(self.loads[key])
        return super().map_subscript(expr, *args, **kwargs)

    def map_call(self, expr, *args, **kwargs):
        # a user function with pointer arguments (lower.kernel.POINTER_MARK) is passed
        # arrays as ``in<k>[offset]``: their addresses, never values to load early
        if POINTER_MARK in getattr(expr.function, "name", ""):
            return expr
        return super().map_call(expr, *args, **kwargs)

    def map_if(self, expr, *args, **kwargs):
        return expr

    def map_reduction(self, expr, *args, **kwargs):
        return expr


def hoistable(expr: Any, inputs: frozenset[str], allowed: frozenset[str]) -> bool:
    """Whether ``expr`` reads an input at an index that depends on ``allowed`` alone."""
    return (isinstance(expr, prim.Subscript) and isinstance(expr.aggregate, prim.Variable)
            and expr.aggregate.name in inputs
            and get_dependencies(expr.index) <= allowed)
