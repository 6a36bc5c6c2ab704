"""Math functions beyond numpy's basic ufuncs (issue 28): scipy.special's names for
OpenCL builtins, ``fma``, two-output ``frexp``/``modf``, and numpy's ``round``,
``isclose``, ``nan_to_num``, ``real``/``imag``/``conj`` built from fused operations.

The OpenCL C of each operation is in :mod:`fuseloop.lower.math_ops`; their accuracy
(OpenCL's ULP bounds, as tested) is tabled in docs/api.md.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from . import multi_hooks
from .array import Array, Constant, _coerce, apply_op
from .dtypes import FLOAT64, result_type
from .op_names import SPECIAL_UNARY


def _as_arrays(operands: tuple[Any, ...]) -> tuple[Any, ...]:
    """The operands, as 0-d device arrays if none is an array (numpy has no function
    to compute these on the host); otherwise unchanged (Python scalars stay weak)."""
    operands = tuple(_coerce(o) for o in operands)
    if any(isinstance(o, Array) or type(o) in multi_hooks.TYPES for o in operands):
        return operands  # (a split array's parts are arrays: apply_op maps over them)
    from .creation import asarray

    return tuple(asarray(np.asarray(o.value if isinstance(o, Constant) else o, o.dtype
                                    if isinstance(o, Constant) else None))
                 for o in operands)


def _make_special(name: str, builtin: str) -> Any:
    def f(x: Any, /) -> Any:
        return apply_op(name, *_as_arrays((x,)))

    f.__name__ = f.__qualname__ = name
    f.__doc__ = (f"Elementwise ``{name}`` (OpenCL's ``{builtin}``), lazily fused into the "
                 "kernel.\n\nfloat32 stays float32; integers and bools compute in float64 "
                 "(scipy.special's rule).")
    return f


def fma(a: Any, b: Any, c: Any, /) -> Any:
    """``a * b + c`` rounded once (OpenCL's ``fma``, correctly rounded).

    The dtype is the operands' common dtype; integers and bools compute in float64.
    """
    return apply_op("fma", *_as_arrays((a, b, c)))


def mad(a: Any, b: Any, c: Any, /) -> Any:
    """``a * b + c`` as fast as the device does it (OpenCL's ``mad``).

    OpenCL lets ``mad`` round the product or not and compute it with reduced accuracy;
    use :func:`fma` where the rounding matters.
    """
    return apply_op("mad", *_as_arrays((a, b, c)))


def frexp(x: Any, /) -> tuple[Any, Any]:
    """``numpy.frexp``: mantissa (in [0.5, 1) in magnitude) and int32 exponent.

    Two lazy arrays that read ``x``; ``fl.compute(*fl.frexp(x))`` makes both in one kernel.
    """
    x = _coerce(x)
    if not isinstance(x, Array):
        return np.frexp(x)
    return apply_op("frexp_mantissa", x), apply_op("frexp_exponent", x)


def modf(x: Any, /) -> tuple[Any, Any]:
    """``numpy.modf``: fractional and integral parts, both with ``x``'s sign."""
    x = _coerce(x)
    if not isinstance(x, Array):
        return np.modf(x)
    return apply_op("modf_fractional", x), apply_op("modf_integral", x)


def round(x: Any, /, decimals: int = 0) -> Any:
    """``numpy.round``: to ``decimals`` digits, halves to even.

    As numpy: floats are scaled by ``10**decimals``, rounded (``rint``) and scaled
    back; integers are unchanged for ``decimals >= 0``, and otherwise rounded through
    float64 and converted back; bools give float32 (numpy's float16).
    """
    from .ufuncs import FUNCTIONS

    x = _coerce(x)
    if not isinstance(x, Array):
        return np.round(x, decimals)
    rint = FUNCTIONS["rint"]
    if x.dtype.kind in "iu":
        if decimals >= 0:
            return x.copy()
        f = 10.0 ** -decimals
        return (rint(x.astype(FLOAT64) / f) * f).astype(x.dtype)
    if decimals == 0:
        return rint(x)
    if x.dtype.kind == "c":
        return _round_parts(x, decimals)
    if decimals > 0:
        f = 10.0 ** decimals
        return rint(x * f) / f
    f = 10.0 ** -decimals
    return rint(x / f) * f


def _round_parts(x: Array, decimals: int) -> Array:
    """numpy's complex round: each part scaled and rounded as a real (scaling the complex
    value would make a NaN or infinite part of the product's other part NaN too)."""
    from .expr.nodes import Apply, Literal

    real = np.float32 if x.dtype == np.complex64 else np.float64
    op = "round_parts_up" if decimals > 0 else "round_parts_down"
    scale = Literal(real(10.0 ** abs(decimals)))
    part = np.dtype(real)
    return Array._lazy(Apply(op, (x._node, scale), (x.dtype, part, x.dtype), x.shape),
                       x.device)


def isclose(a: Any, b: Any, rtol: float = 1e-05, atol: float = 1e-08,
            equal_nan: bool = False) -> Any:
    """``numpy.isclose``: ``|a - b| <= atol + rtol * |b|``, or equal (infinities).

    As numpy, ``b`` is taken as at least a float (``result_type(b, 1.0)``).
    """
    from .ufuncs import FUNCTIONS as F

    a, b = _coerce(a), _coerce(b)
    if not isinstance(a, Array) and not isinstance(b, Array):
        return np.isclose(a, b, rtol=rtol, atol=atol, equal_nan=equal_nan)
    if isinstance(b, Array):
        dt = result_type(b.dtype, float)
        b = b if b.dtype == dt else b.astype(dt)
    elif type(b) is int:
        b = float(b)
    close = F["less_equal"](F["absolute"](a - b), atol + rtol * F["absolute"](b))
    result = (close & F["isfinite"](b)) | F["equal"](a, b)
    if equal_nan:
        result = result | (F["isnan"](a) & F["isnan"](b))
    return result


def nan_to_num(x: Any, /, copy: bool = True, nan: float = 0.0, posinf: float | None = None,
               neginf: float | None = None) -> Any:
    """``numpy.nan_to_num``: NaN to ``nan``, infinities to ``posinf``/``neginf`` (by
    default the dtype's largest and smallest finite values); other dtypes unchanged.

    ``copy=False`` writes the result into ``x`` and returns it.
    """
    from .ufuncs import FUNCTIONS as F
    from .ufuncs import where

    x = _coerce(x)
    if not isinstance(x, Array):
        return np.nan_to_num(x, copy=copy, nan=nan, posinf=posinf, neginf=neginf)
    if x.dtype.kind != "f":
        return x.copy() if copy else x
    info = np.finfo(x.dtype)
    hi = float(info.max) if posinf is None else posinf
    lo = float(info.min) if neginf is None else neginf
    fixed = where(F["isnan"](x), x.dtype.type(nan),
                  where(x == np.inf, x.dtype.type(hi), where(x == -np.inf, x.dtype.type(lo), x)))
    if copy:
        return fixed
    x[...] = fixed
    return x


def _part(op: str, x: Array) -> Array:
    """The real or imaginary part of a complex array (a real array of its precision)."""
    from .expr.nodes import Apply

    dt = np.dtype(np.float32 if x.dtype == np.complex64 else np.float64)
    return Array._lazy(Apply(op, (x._node,), (x.dtype, dt), x.shape), x.device)


def real(x: Any, /) -> Any:
    """``numpy.real``: the real part of a complex array; a real array itself."""
    x = _coerce(x)
    if not isinstance(x, Array):
        return np.real(x)
    return _part("real_part", x) if x.dtype.kind == "c" else x


def imag(x: Any, /) -> Any:
    """``numpy.imag``: the imaginary part of a complex array; zeros for a real array."""
    from .creation import zeros_like

    x = _coerce(x)
    if not isinstance(x, Array):
        return np.imag(x)
    return _part("imag_part", x) if x.dtype.kind == "c" else zeros_like(x)


def angle(z: Any, /, deg: bool = False) -> Any:
    """``numpy.angle``: the argument of complex ``z`` (radians, or degrees with ``deg``)."""
    from .ufuncs import FUNCTIONS

    z = _coerce(z)
    if not isinstance(z, Array):
        return np.angle(z, deg=deg)
    a = FUNCTIONS["arctan2"](imag(z), real(z))
    return FUNCTIONS["rad2deg"](a) if deg else a


MATH_FUNCTIONS: dict[str, Any] = {
    name: _make_special(name, builtin) for name, builtin in SPECIAL_UNARY.items()}
MATH_FUNCTIONS.update({
    "tgamma": MATH_FUNCTIONS["gamma"], "lgamma": MATH_FUNCTIONS["gammaln"],
    "fma": fma, "mad": mad, "frexp": frexp, "modf": modf, "round": round, "around": round,
    "isclose": isclose, "nan_to_num": nan_to_num, "real": real, "imag": imag,
    "angle": angle,
})
globals().update(MATH_FUNCTIONS)

__all__ = ["MATH_FUNCTIONS", *MATH_FUNCTIONS]
