"""The recipes' expression mappers (Loopy's classes, so this module loads on a cache miss only)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np
import pymbolic.primitives as prim
from loopy.symbolic import IdentityMapper, get_dependencies

from ..lower.user_calls import POINTER_MARK

if TYPE_CHECKING:
    from .cpu_vector import _Vectoriser

#: elementwise recipes: the temporaries holding hoisted loads are ``_fl_ld<n>``
LOAD_PREFIX = "_fl_ld"


class KeepsGuarded:
    """A mapper mixin: conditionals, logical operations and reductions are left as they
    are (a value computed where its condition is false may be invalid; a reduction's
    body runs per reduced index)."""

    def map_if(self, expr: Any, *args: Any, **kwargs: Any) -> Any:
        return expr

    def map_logical_and(self, expr: Any, *args: Any, **kwargs: Any) -> Any:
        return expr

    def map_logical_or(self, expr: Any, *args: Any, **kwargs: Any) -> Any:
        return expr

    def map_reduction(self, expr: Any, *args: Any, **kwargs: Any) -> Any:
        return expr


class CallHoister(KeepsGuarded, IdentityMapper):
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


#: elementwise recipes: the temporaries holding values no element index changes
INVARIANT_PREFIX = "_fl_inv"
#: the expressions :class:`InvariantExtractor` takes out (a bare name or constant stays)
_TAKEN = (prim.Call, prim.Subscript, prim.Sum, prim.Product, prim.Quotient, prim.Power)


class InvariantExtractor(KeepsGuarded, IdentityMapper):
    """Replace the largest subexpressions that no loop index changes (reads of inputs at
    fixed places, parameters, the operations on them) by scalar temporaries, one per
    distinct subexpression.  Nothing under a conditional, a comparison or a reduction is
    taken (a value computed where its condition is false may be invalid).
    ``variant``: the names whose values change within the loops (inames, temporaries) or
    may (outputs: another work-item may write them)."""

    def __init__(self, variant: frozenset[str], found: dict) -> None:
        super().__init__()
        self.variant = variant
        self.found = found  # subexpression -> temporary name
        self.used: set[str] = set()  # temporaries referred to since the last reset
        self._memo: dict[int, bool] = {}  # id(subexpression) -> invariant (each once)

    def rec(self, expr: Any, *args: Any, **kwargs: Any) -> Any:
        if isinstance(expr, _TAKEN) and self.invariant(expr):
            if expr not in self.found:
                self.found[expr] = f"{INVARIANT_PREFIX}{len(self.found)}"
            self.used.add(self.found[expr])
            return prim.Variable(self.found[expr])
        return super().rec(expr, *args, **kwargs)

    __call__ = rec

    def invariant(self, expr: Any) -> bool:
        """Whether ``expr`` reads no variant name through operations alone."""
        known = self._memo.get(id(expr))
        if known is not None:
            return known
        if isinstance(expr, prim.Variable):
            out = expr.name not in self.variant
        elif isinstance(expr, int | float | complex | np.generic):
            out = True
        elif isinstance(expr, prim.Call):
            out = POINTER_MARK not in getattr(expr.function, "name", "") and all(
                self.invariant(p) for p in expr.parameters)
        elif isinstance(expr, prim.Subscript):
            out = self.invariant(expr.aggregate) and self.invariant(expr.index)
        elif isinstance(expr, prim.Sum | prim.Product | tuple):
            out = all(self.invariant(c) for c in (
                expr if isinstance(expr, tuple) else expr.children))
        elif isinstance(expr, prim.Quotient):
            out = self.invariant(expr.numerator) and self.invariant(expr.denominator)
        elif isinstance(expr, prim.Power):
            out = self.invariant(expr.base) and self.invariant(expr.exponent)
        else:  # (conditionals, comparisons, reductions, anything else: left in place)
            out = False
        self._memo[id(expr)] = out
        return out

    def map_call(self, expr: Any, *args: Any, **kwargs: Any) -> Any:
        if POINTER_MARK in getattr(expr.function, "name", ""):
            return expr  # (see LoadExtractor.map_call)
        return super().map_call(expr, *args, **kwargs)

