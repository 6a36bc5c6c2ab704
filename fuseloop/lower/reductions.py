"""Reduction operations with numpy's semantics, as Loopy reduction operations.

Loopy realises reductions (sequential loops, and local-memory trees over
work-items when a reduction iname is parallel); these classes supply numpy's
meaning where Loopy's built-ins differ: ``max``/``min`` of floats propagate
NaN (numpy's ``np.max``), where C's ``fmax`` would drop it.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pymbolic.primitives as prim
from loopy.library.reduction import (
    ProductReductionOperation,
    ScalarReductionOperation,
    SumReductionOperation,
)


def _is_float(dtypes: Any) -> bool:
    return np.dtype(dtypes[0].numpy_dtype).kind == "f"


def _neutral(op: str, dtypes: Any) -> Any:
    return neutral_value(op, np.dtype(dtypes[0].numpy_dtype))


class NanMaxReductionOperation(ScalarReductionOperation):
    """``max`` that returns NaN as soon as one operand is NaN (plain max for integers)."""

    def neutral_element(self, *dtypes: Any, callables_table: Any, target: Any) -> Any:
        return _neutral("max", dtypes), callables_table

    def __call__(self, dtypes: Any, operand1: Any, operand2: Any, callables_table: Any,
                 target: Any) -> Any:
        a, b = operand1, operand2
        keep: prim.Expression = prim.Comparison(a, ">=", b)
        if _is_float(dtypes):
            # a NaN in ``a`` is kept; one in ``b`` fails the comparison and is taken
            keep = prim.LogicalOr((keep, prim.Comparison(a, "!=", a)))
        return prim.If(keep, a, b), callables_table


class NanMinReductionOperation(ScalarReductionOperation):
    """``min`` that returns NaN as soon as one operand is NaN (plain min for integers)."""

    def neutral_element(self, *dtypes: Any, callables_table: Any, target: Any) -> Any:
        return _neutral("min", dtypes), callables_table

    def __call__(self, dtypes: Any, operand1: Any, operand2: Any, callables_table: Any,
                 target: Any) -> Any:
        a, b = operand1, operand2
        keep: prim.Expression = prim.Comparison(a, "<=", b)
        if _is_float(dtypes):
            # a NaN in ``a`` is kept; one in ``b`` fails the comparison and is taken
            keep = prim.LogicalOr((keep, prim.Comparison(a, "!=", a)))
        return prim.If(keep, a, b), callables_table


def reduction_operation(op: str, dtype: np.dtype) -> Any:
    """The Loopy operation for fuseloop reduction ``op`` accumulating in ``dtype``."""
    if op == "sum":
        return SumReductionOperation()
    if op == "prod":
        return ProductReductionOperation()
    if op in ("max", "any"):
        return NanMaxReductionOperation()
    if op in ("min", "all"):
        return NanMinReductionOperation()
    raise AssertionError(f"unknown reduction {op}")


def neutral_value(op: str, dtype: np.dtype) -> Any:
    """The identity of ``op`` on ``dtype``, as a numpy scalar or a constant expression
    of one (for padded chunks)."""
    if op == "sum":
        return dtype.type(0)
    if op == "prod":
        return dtype.type(1)
    if op in ("max", "any"):
        if dtype.kind == "f":
            return dtype.type(-np.inf)
        if dtype.kind == "i" and dtype.itemsize == 8:
            # C has no literal of INT64_MIN: '-9223372036854775808l' is the negation of an
            # unsigned constant, which turned comparisons with it unsigned (NVRTC)
            return prim.Sum((dtype.type(np.iinfo(dtype).min + 1), dtype.type(-1)))
        return dtype.type(np.iinfo(dtype).min) if dtype.kind in "iu" else dtype.type(0)
    if op in ("min", "all"):
        if dtype.kind == "f":
            return dtype.type(np.inf)
        return dtype.type(np.iinfo(dtype).max) if dtype.kind in "iu" else dtype.type(1)
    raise AssertionError(f"unknown reduction {op}")
