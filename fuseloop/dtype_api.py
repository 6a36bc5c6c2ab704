"""The Array API's data type functions: ``finfo``, ``iinfo``, ``result_type``, ``can_cast``,
``isdtype``.

They answer for fuseloop's dtypes only (no float16, no complex yet) and follow numpy's
promotion rules (NEP 50: Python scalars are weak), as the rest of fuseloop does.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from .dtypes import as_dtype
from .dtypes import result_type as _result_type
from .errors import DTypeError


def _dtype_of(x: Any, what: str) -> np.dtype:
    """The dtype of an array or of a dtype-like ``x``, checked to be a fuseloop dtype."""
    from .array import Array

    if isinstance(x, Array | np.ndarray):
        return as_dtype(x.dtype)
    if isinstance(x, np.dtype) or (isinstance(x, type) and issubclass(x, np.generic)):
        return as_dtype(x)
    if isinstance(x, str):
        return as_dtype(x)
    raise TypeError(f"{what} takes a dtype or an array, not {type(x).__name__} {x!r}")


@dataclass(frozen=True)
class finfo_object:
    """Machine limits of a floating-point dtype (the Array API's ``finfo_object``)."""

    bits: int
    eps: float
    max: float
    min: float
    smallest_normal: float
    dtype: np.dtype

    @property
    def tiny(self) -> float:
        """numpy's name for ``smallest_normal``."""
        return self.smallest_normal

    @property
    def resolution(self) -> float:
        return float(np.finfo(self.dtype).resolution)


@dataclass(frozen=True)
class iinfo_object:
    """Machine limits of an integer dtype (the Array API's ``iinfo_object``)."""

    bits: int
    max: int
    min: int
    dtype: np.dtype


def finfo(type: Any, /) -> finfo_object:
    """Limits of a floating-point dtype (or of an array's dtype), as Python numbers; of
    a complex dtype, those of its real and imaginary parts (``dtype`` is the real one,
    as numpy and the standard give)."""
    dt = _dtype_of(type, "finfo")
    if dt.kind not in "fc":
        raise DTypeError(f"finfo takes a floating-point dtype, not {dt}; use iinfo for "
                         "integers")
    info = np.finfo(dt)
    dt = np.dtype(info.dtype)
    return finfo_object(bits=int(info.bits), eps=float(info.eps), max=float(info.max),
                        min=float(info.min), smallest_normal=float(info.smallest_normal),
                        dtype=dt)


def iinfo(type: Any, /) -> iinfo_object:
    """Limits of an integer dtype (or of an array's dtype), as Python ints."""
    dt = _dtype_of(type, "iinfo")
    if dt.kind not in "iu":
        raise DTypeError(f"iinfo takes an integer dtype, not {dt}; use finfo for "
                         "floating-point dtypes")
    info = np.iinfo(dt)
    return iinfo_object(bits=int(info.bits), max=int(info.max), min=int(info.min), dtype=dt)


def result_type(*arrays_and_dtypes: Any) -> np.dtype:
    """The dtype numpy's promotion gives for arrays, dtypes and Python scalars (NEP 50:
    a Python ``bool``/``int``/``float`` is weak and takes the other operands' kind)."""
    if not arrays_and_dtypes:
        raise ValueError("at least one array or dtype is required")
    kinds: list[Any] = []
    for x in arrays_and_dtypes:
        if isinstance(x, bool):
            kinds.append(np.dtype(np.bool_))
        elif isinstance(x, int | float):
            kinds.append(type(x))
        elif isinstance(x, complex):
            raise DTypeError("fuseloop has no complex dtypes yet; result_type cannot take "
                             f"the complex scalar {x!r}")
        else:
            kinds.append(_dtype_of(x, "result_type"))
    if all(isinstance(k, type) for k in kinds):
        raise ValueError("result_type needs at least one array or dtype besides Python "
                         "scalars")
    return _result_type(*kinds)


def can_cast(from_: Any, to: Any, /) -> bool:
    """Whether ``from_`` (a dtype or an array) casts to ``to`` by numpy's "safe" rule."""
    return bool(np.can_cast(_dtype_of(from_, "can_cast"), _dtype_of(to, "can_cast"),
                            casting="safe"))


_KINDS = ("bool", "signed integer", "unsigned integer", "integral", "real floating",
          "complex floating", "numeric")


def isdtype(dtype: Any, kind: Any) -> bool:
    """Whether ``dtype`` is of ``kind``: a dtype, a kind name (``"integral"``,
    ``"real floating"``, ...) or a tuple of these."""
    if not isinstance(dtype, np.dtype | type) or (isinstance(dtype, type) and not issubclass(
            dtype, np.generic)):
        raise TypeError(f"isdtype takes a dtype, not {type(dtype).__name__} {dtype!r}")
    dt = as_dtype(dtype)
    if isinstance(kind, tuple):
        return any(isdtype(dt, k) for k in kind)
    if isinstance(kind, str):
        if kind not in _KINDS:
            raise ValueError(f"unknown dtype kind {kind!r}; known: {', '.join(_KINDS)}")
        return bool(np.isdtype(dt, kind))
    return dt == _dtype_of(kind, "isdtype")


__all__ = ["can_cast", "finfo", "finfo_object", "iinfo", "iinfo_object", "isdtype",
           "result_type"]
