"""OpenCL C of elementwise operations on complex64/complex128 (issue 27).

Complex values are pyopencl's ``cfloat_t``/``cdouble_t`` (``pyopencl/cl/pyopencl-complex.h``:
a union of two reals, so C's operators do not apply).  Every operation touching a
complex dtype is a helper calling that header's functions.  Kernels holding complex
values are generated with Loopy's ``PyOpenCLTarget`` (whose dtype registry knows the
complex types and which spells ``+``/``*`` of complex reductions as ``cfloat_add``/
``cfloat_mul``); the ``#include <pyopencl-complex.h>`` it emits is replaced by the
header's text (:func:`inline_complex_header`), so the source is complete for the disk
cache and the compile workers, as Random123's headers are in ``random_ops``.

Special values follow pyopencl's functions, which differ from numpy at the edges:
division by a complex zero gives NaNs (numpy: infinities or NaNs by C99 Annex G),
``abs`` is ``hypot(re, im)`` as numpy's, ``exp``/``log``/``sqrt`` of infinities and
signed zeros are not always Annex G's.  ``power`` is numpy's rule around ``pow``
(:func:`_power_body`).
"""

from __future__ import annotations

import os
import re
from functools import cache

import numpy as np

from ..dtypes import c_type_name
from ..errors import DTypeError
from .complex_special import SPECIAL_OPS, special_body, special_preamble

#: complex operations with no numpy ufunc of that name (``fl.real``/``fl.imag``, and
#: ``fl.round(z, decimals)``'s, whose second operand is the real scale)
PART_OPS = ("real_part", "imag_part", "round_parts_up", "round_parts_down")

_FUNCS = {"exp": "exp", "log": "log", "sqrt": "sqrt", "sin": "sin", "cos": "cos",
          "tan": "tan", "sinh": "sinh", "cosh": "cosh", "tanh": "tanh"}
_ARITH = {"add": "add", "subtract": "sub", "multiply": "mul", "true_divide": "divide"}
_INCLUDE = re.compile(r"^[ \t]*#[ \t]*include[ \t]*<pyopencl-complex\.h>[ \t]*$", re.M)


def is_complex_loop(loop: tuple[np.dtype, ...]) -> bool:
    return any(d.kind == "c" for d in loop)


@cache
def complex_header() -> str:
    """pyopencl-complex.h's text, its ``#pragma once`` (which compilers warn about in
    a main file) an include guard instead."""
    import pyopencl

    path = os.path.join(os.path.dirname(pyopencl.__file__), "cl", "pyopencl-complex.h")
    with open(path, encoding="utf-8") as f:
        text = f.read()
    text = re.sub(r"^[ \t]*#[ \t]*pragma[ \t]+once[ \t]*$", "", text, count=1, flags=re.M)
    return f"#ifndef FL_PYOPENCL_COMPLEX_H\n#define FL_PYOPENCL_COMPLEX_H\n{text}\n#endif\n"


def inline_complex_header(source: str) -> str:
    """``source`` with its ``#include <pyopencl-complex.h>`` replaced by the header."""
    return _INCLUDE.sub(lambda _m: complex_header(), source, count=1)


def _prefix(dt: np.dtype) -> str:
    return "cfloat" if dt == np.complex64 else "cdouble"


def _cast_body(a: np.dtype, out: np.dtype) -> str:
    T = c_type_name(out)
    if a.kind == "c" and out.kind == "c":
        return f"return {_prefix(out)}_new(({T[1:-2]})a.real, ({T[1:-2]})a.imag);"
    if out.kind == "c":
        real = "float" if out == np.complex64 else "double"
        return f"return {_prefix(out)}_fromreal(({real})a);"
    if out.kind == "b":
        return "return (uchar)(a.real != 0 || a.imag != 0);"
    return f"return ({T})a.real;"  # numpy's ComplexWarning is given when the cast is built


def complex_preamble(op: str, loop: tuple[np.dtype, ...]) -> str:
    """Functions the helper of ``op`` calls, defined before it (guarded: once per kernel)."""
    if op in SPECIAL_OPS and len(loop) == 2 and loop[0] == loop[1]:
        return special_preamble(op, loop[0])
    return ""


def _power_body(P: str, T: str) -> str:
    """numpy's complex power: ``z ** 0`` is 1, ``0 ** w`` is 0 where ``w``'s real part is
    positive and NaN otherwise, whole exponents below 100 in magnitude by products (so
    ``0j ** 3`` is 0 and ``z ** 3`` exact where pyopencl's ``pow``, through logarithms,
    gives NaN or rounding), other real exponents through ``powr`` (``pow`` multiplies
    the logarithm's infinite real part by the exponent's zero imaginary part: NaN),
    the rest through ``pow``."""
    return (f"if (b.real == 0 && b.imag == 0) return {P}_fromreal(1);\n"
            f"  if (a.real == 0 && a.imag == 0)\n"
            f"    return b.real > 0 ? {P}_fromreal(0) "
            f": {P}_new(({T})NAN, ({T})NAN);\n"
            f"  if (b.imag == 0 && b.real == floor(b.real) && fabs(b.real) < 100) {{\n"
            f"    int n = (int)b.real;\n"
            f"    if (n == 1) return a;\n"
            f"    if (n == 2) return {P}_mul(a, a);\n"
            f"    if (n == 3) return {P}_mul(a, {P}_mul(a, a));\n"
            f"    n = n < 0 ? -n : n;\n"
            f"    {P}_t r = {P}_fromreal(1), p = a;\n"
            f"    for (;;) {{\n"
            f"      if (n & 1) r = {P}_mul(r, p);\n"
            f"      n >>= 1;\n"
            f"      if (!n) break;\n"
            f"      p = {P}_mul(p, p);\n"
            f"    }}\n"
            f"    return b.real < 0 ? {P}_rdivide(1, r) : r;\n"
            f"  }}\n"
            f"  return b.imag == 0 ? {P}_powr(a, b.real) : {P}_pow(a, b);")


# numpy's complex maximum/minimum/fmax/fmin: the lexicographic order, where a NaN part
# makes ``>``/``<`` false; maximum/minimum keep a first argument holding a NaN (so pass
# NaNs on), fmax/fmin keep the first unless the second is a number that wins
_EXTREMA = {"maximum": ">", "minimum": "<", "fmax": ">", "fmin": "<"}


def _extremum_body(op: str) -> str:
    c = _EXTREMA[op]
    wins = (f"((a.real {c} b.real && !isnan(a.imag) && !isnan(b.imag)) || "
            f"(a.real == b.real && a.imag {c}= b.imag))")
    if op in ("maximum", "minimum"):
        return f"return (isnan(a.real) || isnan(a.imag) || {wins}) ? a : b;"
    return f"return (isnan(b.real) || isnan(b.imag) || {wins}) ? a : b;"


def complex_helper_body(op: str, loop: tuple[np.dtype, ...]) -> str:
    """Body of the helper for ``op`` on ``loop`` (some dtype complex); parameters a, b, c."""
    ins, out = loop[:-1], loop[-1]
    if op == "cast":
        return _cast_body(ins[0], out)
    if op == "where":
        return "return a ? b : c;"
    a = ins[0]
    P = _prefix(a if a.kind == "c" else out)
    if op in SPECIAL_OPS and len(ins) == 1 and a == out:
        return special_body(op, a)
    if op in _ARITH:
        return f"return {P}_{_ARITH[op]}(a, b);"
    if op == "power" and ins[0] == ins[1] == out:
        return _power_body(P, "float" if P == "cfloat" else "double")
    if op == "power":
        return f"return {P}_pow(a, b);"
    if op in _FUNCS:
        return f"return {P}_{_FUNCS[op]}(a);"
    simple = {
        "negative": f"return {P}_neg(a);", "positive": "return a;",
        "conjugate": f"return {P}_conj(a);", "absolute": f"return {P}_abs(a);",
        "square": f"return {P}_mul(a, a);",
        "reciprocal": f"return {P}_rdivide(1, a);",
        "real_part": "return a.real;", "imag_part": "return a.imag;",
        "isnan": "return (uchar)(isnan(a.real) || isnan(a.imag));",
        "isinf": "return (uchar)(isinf(a.real) || isinf(a.imag));",
        "isfinite": "return (uchar)(isfinite(a.real) && isfinite(a.imag));",
        "equal": "return (uchar)(a.real == b.real && a.imag == b.imag);",
        "not_equal": "return (uchar)(a.real != b.real || a.imag != b.imag);",
        "logical_not": "return (uchar)(a.real == 0 && a.imag == 0);",
        # numpy 2: z / |z|, and 0 for 0
        "sign": (f"{c_type_name(a)[1:-2]} m = {P}_abs(a);\n"
                 f"  return m == 0 ? {P}_fromreal(0) : {P}_divider(a, m);"),
    }
    if op in simple:
        return simple[op]
    if op == "rint":  # numpy rounds each part
        return f"return {P}_new(rint(a.real), rint(a.imag));"
    if op in ("round_parts_up", "round_parts_down"):  # numpy's round(z, decimals)
        if op == "round_parts_up":
            return f"return {P}_new(rint(a.real * b) / b, rint(a.imag * b) / b);"
        return f"return {P}_new(rint(a.real / b) * b, rint(a.imag / b) * b);"
    if op == "exp2":  # numpy's: exp(z ln 2)
        return f"return {P}_exp({P}_mulr(a, M_LN2));"
    nonzero = "(a.real != 0 || a.imag != 0)", "(b.real != 0 || b.imag != 0)"
    logical = {"logical_and": "&&", "logical_or": "||", "logical_xor": "!="}
    if op in logical:
        return f"return (uchar)({nonzero[0]} {logical[op]} {nonzero[1]});"
    if op in _EXTREMA:
        return _extremum_body(op)
    # numpy orders complex numbers lexicographically: real parts, then imaginary parts
    order = {"less": "<", "less_equal": "<=", "greater": ">", "greater_equal": ">="}
    if op in order:
        strict = order[op][0]
        return (f"return (uchar)(a.real {strict} b.real || "
                f"(a.real == b.real && a.imag {order[op]} b.imag));")
    raise DTypeError(f"fuseloop has no complex version of {op} (loop {loop}); "
                     "take .real/.imag parts or compute it on the host")
