"""OpenCL C of the math builtins beyond the basic ufuncs (issue 28).

Three groups, all with numpy's (or scipy.special's) special values:

* numpy ufuncs: ``fabs``, ``signbit``, ``reciprocal``, ``deg2rad``/``radians``,
  ``rad2deg``/``degrees``, ``logaddexp``, ``logaddexp2``, ``nextafter``,
  ``heaviside``, ``ldexp``; their loop dtypes are numpy's;
* OpenCL builtins numpy has no ufunc for (scipy.special names where it has one):
  ``erf``, ``erfc``, ``gamma`` (``tgamma``), ``gammaln`` (``lgamma``), ``exp10``,
  ``sinpi``, ``cospi``, ``tanpi``, ``rsqrt``, and the three-operand ``fma``/``mad``;
  their loops follow scipy.special (float32 stays, everything else is float64: see
  :func:`fuseloop.dtypes.resolve_loop`);
* one output each of numpy's two-output ``frexp`` and ``modf``.
"""

from __future__ import annotations

import numpy as np

from ..dtypes import c_type_name
from ..op_names import (  # (the tables, shared with the front end)
    MATH_OPS,
    NOT_NUMPY,
    NUMPY_BINARY,
    NUMPY_UNARY,
    PARTS,
    SPECIAL_UNARY,
    TERNARY,
)

__all__ = ["MATH_OPS", "NOT_NUMPY", "NUMPY_BINARY", "NUMPY_UNARY", "PARTS", "SPECIAL_UNARY",
           "TERNARY", "math_helper_body"]

# numpy's factors: pi / 180 and 180 / pi, divided in the loop's type (float32: of
# float32 pi, so not float32(pi / 180))
_DEG = {"deg2rad": (np.pi, 180.0), "radians": (np.pi, 180.0),
        "rad2deg": (180.0, np.pi), "degrees": (180.0, np.pi)}


def _literal(value: float, dt: np.dtype) -> str:
    """``value`` rounded to ``dt`` as an exact hexadecimal C literal."""
    return float(dt.type(value)).hex() + ("f" if dt == np.float32 else "")


def math_helper_body(op: str, loop: tuple[np.dtype, ...]) -> str:
    """Body of the helper for ``op`` (in :data:`MATH_OPS`) on ``loop``; parameters a, b, c."""
    a, out = loop[0], loop[-1]
    T = c_type_name(out)
    if op in SPECIAL_UNARY:
        return f"return {SPECIAL_UNARY[op]}(a);"
    if op in ("fma", "mad", "nextafter"):
        return f"return {op}({', '.join('abc'[:len(loop) - 1])});"
    if op == "fabs":
        return "return fabs(a);"
    if op == "conjugate":
        return "return a;"  # of a real number
    if op in _DEG:
        num, den = _DEG[op]
        return f"return a * {_literal(out.type(num) / out.type(den), out)};"
    if op == "signbit":
        if a.kind == "f":
            return "return (uchar)(signbit(a) != 0);"
        return "return (uchar)(a < 0);" if a.kind == "i" else "return 0;"
    if op == "reciprocal":
        if a.kind == "f":
            return f"return ({T})1 / a;"
        # numpy computes 1.0 / a and converts: 1 / 0 = inf, which x86 converts to the
        # smallest value of a 32- or 64-bit signed type, and to 0 for smaller or
        # unsigned types (numpy on x86-64; other hosts may differ)
        big = a.kind == "i" and out.itemsize >= 4
        zero = f"({T})((u{T})1 << {8 * out.itemsize - 1})" if big else "0"
        neg = f"a == ({T})-1 ? ({T})-1 : " if a.kind == "i" else ""
        return f"return a == 0 ? {zero} : (a == 1 ? ({T})1 : ({neg}({T})0));"
    if op in ("logaddexp", "logaddexp2"):
        # numpy's: equal arguments (infinities included) give a + log(2); otherwise
        # the larger plus log1p of the exponential of the (negative) difference
        if op == "logaddexp":
            same, tail = f"a + {_literal(np.log(2), out)}", "log1p(exp({d}))"
        else:
            same, tail = f"a + ({T})1", f"log1p(exp2({{d}})) * {_literal(1 / np.log(2), out)}"
        return (f"if (a == b) return {same};\n"
                f"  {T} d = a - b;\n"
                f"  if (d > 0) return a + {tail.format(d='-d')};\n"
                f"  if (d <= 0) return b + {tail.format(d='d')};\n"
                "  return d;")
    if op == "heaviside":
        return f"return isnan(a) ? a : (a < 0 ? ({T})0 : (a > 0 ? ({T})1 : b));"
    if op == "ldexp":
        # OpenCL's exponent is an int; beyond +-2^20 every finite result saturates
        return ("return ldexp(a, (int)(b < -1048576 ? -1048576 : "
                "(b > 1048576 ? 1048576 : b)));")
    if op == "frexp_mantissa":
        return "int e;\n  return frexp(a, &e);"
    if op == "frexp_exponent":
        # numpy: 0 for infinities and NaN (C leaves it unspecified)
        return "if (!isfinite(a)) return 0;\n  int e;\n  frexp(a, &e);\n  return e;"
    if op == "modf_fractional":
        return (f"if (isinf(a)) return copysign(({T})0, a);\n"
                f"  {T} whole;\n  return modf(a, &whole);")
    if op == "modf_integral":
        return "return trunc(a);"
    raise AssertionError(f"no OpenCL code for {op} on {loop}")
