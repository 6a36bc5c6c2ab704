"""The names of the elementwise operations, shared by the front end and the lowering.

The ufuncs (:mod:`fuseloop.ufuncs`), the math builtins (:mod:`fuseloop.mathfuncs`)
and the random numbers (:mod:`fuseloop.random`) name their operations from these
tables at import; the lowering (:mod:`fuseloop.lower.scalar_ops`,
:mod:`~fuseloop.lower.math_ops`, :mod:`~fuseloop.lower.random_ops`) turns the same
names into OpenCL, and is imported only when a kernel is generated.
"""

from __future__ import annotations

# {{{ the math builtins beyond the basic ufuncs (lowered by lower/math_ops.py)

NUMPY_UNARY = ("fabs", "signbit", "reciprocal", "deg2rad", "rad2deg", "radians", "degrees",
               "conjugate")
NUMPY_BINARY = ("logaddexp", "logaddexp2", "nextafter", "heaviside", "ldexp")
#: fuseloop's name -> the OpenCL builtin, for float-only unary builtins numpy lacks
SPECIAL_UNARY = {
    "erf": "erf", "erfc": "erfc", "gamma": "tgamma", "gammaln": "lgamma", "exp10": "exp10",
    "sinpi": "sinpi", "cospi": "cospi", "tanpi": "tanpi", "rsqrt": "rsqrt",
}
TERNARY = ("fma", "mad")
#: one output of numpy's frexp / modf each
PARTS = ("frexp_mantissa", "frexp_exponent", "modf_fractional", "modf_integral")
#: the operations numpy has no ufunc of that name for
NOT_NUMPY = frozenset({*SPECIAL_UNARY, *TERNARY, *PARTS})
MATH_OPS = frozenset({*NUMPY_UNARY, *NUMPY_BINARY, *NOT_NUMPY})

# }}}

# {{{ the ufuncs (lowered by lower/scalar_ops.py)

# numpy name -> OpenCL builtin for float-only unary math
FLOAT_UNARY = {
    "sin": "sin", "cos": "cos", "tan": "tan", "arcsin": "asin", "arccos": "acos",
    "arctan": "atan", "sinh": "sinh", "cosh": "cosh", "tanh": "tanh", "arcsinh": "asinh",
    "arccosh": "acosh", "arctanh": "atanh", "exp": "exp", "exp2": "exp2", "expm1": "expm1",
    "log": "log", "log2": "log2", "log10": "log10", "log1p": "log1p", "sqrt": "sqrt",
    "cbrt": "cbrt", "floor": "floor", "ceil": "ceil", "trunc": "trunc", "rint": "rint",
}
FLOAT_BINARY = {"copysign": "copysign", "hypot": "hypot", "arctan2": "atan2"}
COMPARISONS = {"equal": "==", "not_equal": "!=", "less": "<", "less_equal": "<=",
               "greater": ">", "greater_equal": ">="}
BITWISE = {"bitwise_and": "&", "bitwise_or": "|", "bitwise_xor": "^"}
LOGICAL = {"logical_and": "&&", "logical_or": "||"}

# every operation name the IR may carry (numpy ufunc names plus cast/where)
UFUNC_OPS = frozenset({
    *FLOAT_UNARY, *FLOAT_BINARY, *COMPARISONS, *BITWISE, *LOGICAL,
    "add", "subtract", "multiply", "true_divide", "floor_divide", "remainder", "fmod",
    "power", "negative", "positive", "absolute", "sign", "square", "invert",
    "left_shift", "right_shift", "logical_xor", "logical_not", "minimum", "maximum",
    "fmin", "fmax", "isnan", "isinf", "isfinite", *MATH_OPS,
})

# }}}

# {{{ counter-based random numbers (lowered by lower/random_ops.py)

RANDOM_METHODS = ("philox", "threefry")
RANDOM_KINDS = ("bits", "uniform", "normal", "integers")
RANDOM_OPS = frozenset(f"r123_{k}_{m}" for k in RANDOM_KINDS for m in RANDOM_METHODS)

# }}}
