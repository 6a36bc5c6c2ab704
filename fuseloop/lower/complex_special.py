"""OpenCL C of the complex functions with the standard's special values (C99 Annex G).

``exp``, ``expm1``, ``sinh``, ``cosh``, ``tanh``, ``log1p``, ``arcsinh``, ``arccosh``,
``arctanh``, ``arccos`` (and ``arcsin``, ``arctan``, ``log2``, ``log10`` through
identities) on complex64/complex128, for :mod:`fuseloop.lower.complex_ops`.  Each body
first settles zeros, infinities and NaNs by the Array API's tables (which are C99's),
reduced to one quadrant by the functions' symmetries (``f(conj z) = conj f(z)``, and for
the odd ones ``f(-z) = -f(z)``), then computes finite values from real functions:

* ``log1p(z)``: ``log|1 + z|`` by ``log1p`` near zero and ``hypot`` elsewhere;
* ``arcsinh(z) = log(z + sqrt(z^2 + 1))`` on the right half-plane (no cancellation),
  ``log(2z)`` where ``z^2`` would overflow, ``z (1 - z^2/6)`` near zero;
* ``arccosh(z) = log(z + sqrt(z + 1) sqrt(z - 1))`` (the principal branch);
* ``arctanh``: real part ``log1p(4a / ((1 - a)^2 + b^2)) / 4``, imaginary part
  ``atan2(2b, (1 - a)(1 + a) - b^2) / 2``;
* ``arccos(z) = pi/2 - arcsin(z)``, ``arcsin(z) = -i arcsinh(iz)``,
  ``arctan(z) = -i arctanh(iz)``.

``sinh``, ``cosh``, ``tanh`` and ``exp`` keep pyopencl's functions for finite values.
"""

from __future__ import annotations

import re

import numpy as np

#: the numpy names of the functions given here
SPECIAL_OPS = ("exp", "expm1", "sinh", "cosh", "tanh", "log1p", "arcsinh", "arccosh",
               "arctanh", "arccos", "arcsin", "arctan", "log2", "log10")

# bodies over R (the real type), P (pyopencl's prefix: cfloat or cdouble), C (the
# complex type); the argument is a, re/im its parts; N(x, y) makes a value
_COMMON = """const R re = a.real, im = a.imag;
  const R inf = INFINITY, nan = NAN, pi = M_PI;
"""

_EXP = """if (isnan(re)) return N(nan, im == 0 ? im : nan);
  if (isinf(re)) {
    if (im == 0) return N(re > 0 ? inf : (R)0, im);
    if (isfinite(im)) return re > 0 ? N(inf * cos(im), inf * sin(im))
                                    : N((R)0 * cos(im), (R)0 * sin(im));
    return re > 0 ? N(inf, nan) : N((R)0, (R)0);
  }
  if (!isfinite(im)) return N(nan, nan);
  if (im == 0) return N(exp(re), im);
  return P_exp(a);"""

_EXPM1 = """if (isnan(re)) return N(nan, im == 0 ? im : nan);
  if (isinf(re)) {
    if (re > 0) {
      if (im == 0) return N(inf, im);
      return isfinite(im) ? N(inf * cos(im) - 1, inf * sin(im)) : N(inf, nan);
    }
    return isfinite(im) ? N((R)0 * cos(im) - 1, (R)0 * sin(im)) : N((R)-1, (R)0);
  }
  if (!isfinite(im)) return N(nan, nan);
  if (im == 0) return N(re == 0 ? (R)0 : expm1(re), im);  /* the standard: 0 + 0j */
  const R h = sin(im / 2);
  return N(expm1(re) * cos(im) - 2 * h * h, exp(re) * sin(im));"""

_SINH = """if (im == 0) return N(sinh(re), im);
  if (!isfinite(im) && (re == 0 || isinf(re))) return N(re, nan);
  return P_sinh(a);"""

_COSH = """if (im == 0) return N(cosh(re), re < 0 ? -im : im);
  if (!isfinite(im) && re == 0) return N(nan, (R)0);
  if (!isfinite(im) && isinf(re)) return N(inf, nan);
  return P_cosh(a);"""

_TANH = """if (isnan(re)) return N(nan, im == 0 ? im : nan);
  if (isinf(re)) return N(copysign((R)1, re), copysign((R)0, im));
  if (!isfinite(im)) return re == 0 ? N(re, nan) : N(nan, nan);
  if (im == 0) return N(tanh(re), im);
  if (fabs(re) > (R)22) {  /* cosh(2 re) would overflow; tanh is 1 to the last bit */
    const R e = exp(-2 * fabs(re));
    return N(copysign((R)1, re), 4 * sin(im) * cos(im) * e);
  }
  return P_tanh(a);"""

# log1p over b >= 0 (conj symmetry restores the sign of the imaginary part)
_LOG1P = """const R b = fabs(im);
  C r;
  if (isnan(re)) r = N(isinf(b) ? inf : nan, nan);
  else if (isinf(re)) r = N(inf, isnan(b) ? nan : isinf(b) ? (re > 0 ? pi / 4 : 3 * pi / 4)
                                               : (re > 0 ? (R)0 : pi));
  else if (isinf(b)) r = N(inf, pi / 2);
  else if (isnan(b)) r = N(nan, nan);
  else if (re == -1 && b == 0) r = N(-inf, (R)0);
  else {
    const R u = (fabs(re) < (R)0.5 && b < (R)0.5) ? log1p(re * (2 + re) + b * b) / 2
                                                   : log(hypot(1 + re, b));
    r = N(u, atan2(b, 1 + re));
  }
  return N(r.real, copysign(r.imag, im));"""

# asinh on the first quadrant (odd and conj-symmetric)
_ASINH_Q = """static inline C asinh_q(R x, R y)
{
  const R inf = INFINITY, nan = NAN, pi = M_PI;
  if (isnan(x)) return N(isinf(y) ? inf : nan, y == 0 ? y : nan);
  if (isinf(x)) return N(inf, isnan(y) ? nan : isinf(y) ? pi / 4 : (R)0);
  if (isinf(y)) return N(inf, pi / 2);
  if (isnan(y)) return N(nan, nan);
  const C z = N(x, y);
  const R m = hypot(x, y);
  if (m > BIG) return P_add(P_log(z), P_fromreal((R)M_LN2));
  if (m < SMALL) return P_mul(z, P_sub(P_fromreal(1), P_divider(P_mul(z, z), 6)));
  return P_log(P_add(z, P_sqrt(P_add(P_mul(z, z), P_fromreal(1)))));
}
"""

_ASINH = """const C r = NAME_asinh_q(fabs(re), fabs(im));
  return N(copysign(r.real, re), copysign(r.imag, im));"""

# atanh on the first quadrant (odd and conj-symmetric)
_ATANH_Q = """static inline C atanh_q(R x, R y)
{
  const R inf = INFINITY, nan = NAN, pi = M_PI;
  if (isnan(x)) return isinf(y) ? N((R)0, pi / 2) : N(nan, nan);
  if (isinf(x)) return N((R)0, isnan(y) ? nan : pi / 2);
  if (isinf(y)) return N((R)0, pi / 2);
  if (isnan(y)) return x == 0 ? N((R)0, nan) : N(nan, nan);
  if (x == 1 && y == 0) return N(inf, (R)0);
  const R m = hypot(x, y);
  if (m > BIG) return N((x / m) / m, pi / 2);
  const R d = (1 - x) * (1 - x) + y * y;
  return N(log1p(4 * x / d) / 4, atan2(2 * y, (1 - x) * (1 + x) - y * y) / 2);
}
"""

_ATANH = """const C r = NAME_atanh_q(fabs(re), fabs(im));
  return N(copysign(r.real, re), copysign(r.imag, im));"""

# acosh over b >= 0
_ACOSH = """const R b = fabs(im);
  C r;
  if (isnan(re)) r = N(isinf(b) ? inf : nan, nan);
  else if (isinf(re)) r = N(inf, isnan(b) ? nan : isinf(b) ? (re > 0 ? pi / 4 : 3 * pi / 4)
                                               : (re > 0 ? (R)0 : pi));
  else if (isinf(b)) r = N(inf, pi / 2);
  else if (isnan(b)) r = re == 0 ? N(nan, pi / 2) : N(nan, nan);
  else if (re == 0 && b == 0) r = N((R)0, pi / 2);
  else {
    const C z = N(re, b);
    if (hypot(re, b) > BIG)
      r = P_add(P_log(z), P_fromreal((R)M_LN2));
    else
      r = P_log(P_add(z, P_mul(P_sqrt(P_add(z, P_fromreal(1))),
                               P_sqrt(P_sub(z, P_fromreal(1))))));
    r = N(fabs(r.real), r.imag);
  }
  return N(r.real, copysign(r.imag, im));"""

# acos over b >= 0: pi/2 - asin(z), asin(z) = -i asinh(iz) (iz = -b + i re)
_ACOS = """const R b = fabs(im);
  C r;
  if (isnan(re)) r = isinf(b) ? N(nan, -inf) : N(nan, nan);
  else if (isinf(re)) r = isnan(b) ? N(nan, inf)
      : N(isinf(b) ? (re > 0 ? pi / 4 : 3 * pi / 4) : (re > 0 ? (R)0 : pi), -inf);
  else if (isinf(b)) r = N(pi / 2, -inf);
  else if (isnan(b)) r = re == 0 ? N(pi / 2, nan) : N(nan, nan);
  else if (re == 0 && b == 0) r = N(pi / 2, (R)-0.0);
  else {
    const C s = NAME_asinh_q(b, fabs(re));  /* asinh(|iz|'s quadrant) */
    /* asinh(-b + i re) = (-s.real, copysign(s.imag, re)); acos = (pi/2 - im, re) */
    r = N(pi / 2 - copysign(s.imag, re), -s.real);
  }
  return N(r.real, signbit(im) ? -r.imag : r.imag);"""

# asin(z) = -i asinh(iz), atan(z) = -i atanh(iz): iz = (-im, re)
_ASIN = """const C s = NAME_asinh_q(fabs(im), fabs(re));
  const C t = N(copysign(s.real, -im), copysign(s.imag, re));
  return N(t.imag, -t.real);"""

_ATAN = """const C s = NAME_atanh_q(fabs(im), fabs(re));
  const C t = N(copysign(s.real, -im), copysign(s.imag, re));
  return N(t.imag, -t.real);"""

_LOGB = """const C r = P_log(a);
  return N(r.real / (R)LN, r.imag / (R)LN);"""

_BODIES = {"exp": _EXP, "expm1": _EXPM1, "sinh": _SINH, "cosh": _COSH, "tanh": _TANH,
           "log1p": _LOG1P, "arcsinh": _ASINH, "arctanh": _ATANH, "arccosh": _ACOSH,
           "arccos": _ACOS, "arcsin": _ASIN, "arctan": _ATAN,
           "log2": _LOGB.replace("LN", "M_LN2"), "log10": _LOGB.replace("LN", "M_LN10")}


def _fill(text: str, dt: np.dtype) -> str:
    single = dt == np.complex64
    prefix = "cfloat" if single else "cdouble"
    real = "float" if single else "double"
    # |z| past which z^2 overflows (log(2z) is exact there), and below which z^2/6 is
    # below an ulp's worth of the series
    big, small = ("1e18f", "1e-4f") if single else ("1e150", "1e-8")
    text = text.replace("NAME_", f"fl_{prefix}_")
    text = text.replace("P_", f"{prefix}_").replace("N(", f"{prefix}_new(")
    text = text.replace("BIG", big).replace("SMALL", small)
    if single:  # (OpenCL's float constants: a double literal needs fp64)
        for c in ("M_PI", "M_LN2", "M_LN10"):
            text = re.sub(rf"\b{c}\b", f"{c}_F", text)
    # whole-word R and C (the real and the complex type)
    text = re.sub(r"\bR\b", real, text)
    return re.sub(r"\bC\b", f"{prefix}_t", text)


def special_preamble(op: str, dt: np.dtype) -> str:
    """The shared first-quadrant functions the body of ``op`` calls (or '')."""
    parts = []
    if op in ("arcsinh", "arccos", "arcsin"):
        parts.append(("ASINH", _ASINH_Q.replace("asinh_q", "NAME_asinh_q")))
    if op in ("arctanh", "arctan"):
        parts.append(("ATANH", _ATANH_Q.replace("atanh_q", "NAME_atanh_q")))
    # guarded: several helpers of one kernel may share a function
    return "".join(f"#ifndef FL_{dt.name.upper()}_{g}_Q\n#define FL_{dt.name.upper()}_{g}_Q\n"
                   f"{_fill(p, dt)}#endif\n" for g, p in parts)


def special_body(op: str, dt: np.dtype) -> str:
    """The helper body of ``op`` on ``dt`` (complex64 or complex128), argument ``a``."""
    return _fill(_COMMON + "  " + _BODIES[op], dt)


__all__ = ["SPECIAL_OPS", "special_body", "special_preamble"]
