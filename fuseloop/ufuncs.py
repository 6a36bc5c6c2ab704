"""numpy-named elementwise functions that build lazy expressions."""

from __future__ import annotations

from typing import Any

import numpy as np

from .array import Array, Constant, _coerce, _common_device, _operand_kind, _operand_node
from .dtypes import BOOL, as_dtype, result_type
from .errors import DTypeError
from .expr.nodes import Apply, Scalar, broadcast_shapes
from .multi_hooks import splits
from .op_names import NOT_NUMPY, NUMPY_UNARY, UFUNC_OPS

UNARY = ("negative", "positive", "absolute", "sign", "square", "invert", "logical_not",
         "isnan", "isinf", "isfinite", "sin", "cos", "tan", "arcsin", "arccos", "arctan",
         "sinh", "cosh", "tanh", "arcsinh", "arccosh", "arctanh", "exp", "exp2", "expm1",
         "log", "log2", "log10", "log1p", "sqrt", "cbrt", "floor", "ceil", "trunc", "rint",
         *NUMPY_UNARY)
# (the math builtins numpy has no ufunc for are fuseloop.mathfuncs')
BINARY = tuple(sorted(UFUNC_OPS - set(UNARY) - NOT_NUMPY))

ALIASES = {
    "divide": "true_divide", "mod": "remainder", "abs": "absolute",
    "bitwise_not": "invert", "pow": "power", "acos": "arccos", "asin": "arcsin",
    "atan": "arctan", "acosh": "arccosh", "asinh": "arcsinh", "atanh": "arctanh",
    "atan2": "arctan2", "bitwise_left_shift": "left_shift",
    "bitwise_right_shift": "right_shift", "bitwise_invert": "invert",
    "conj": "conjugate",
}


def _out_arg(args: tuple, out: Any, name: str) -> Any:
    if len(args) > 1 or (args and out is not None):
        raise TypeError(f"{name}() takes one output array (out=), got "
                        f"{len(args) + (out is not None)}")
    out = args[0] if args else out
    if isinstance(out, tuple) and len(out) == 1:  # (numpy's out=(arr,))
        out = out[0]
    if not isinstance(out, Array):
        raise TypeError(f"{name}: out= must be a fuseloop array, not {type(out).__name__}")
    return out


def _into(result: Any, out: Array, name: str) -> Array:
    """numpy's ``out=`` of an elementwise function: ``result`` written into ``out``
    (numpy's default casting, 'same_kind'), which is returned."""
    dtype = result.dtype if isinstance(result, Array) else np.asarray(result).dtype
    if not np.can_cast(dtype, out.dtype, "same_kind"):
        raise DTypeError(f"{name}: cannot cast the result from {dtype} to out's {out.dtype} "
                         "with casting rule 'same_kind' (numpy's rule for out=)")
    out[...] = result
    return out


def _make_unary(name: str) -> Any:
    from .array import _lean_unary

    lean = _lean_unary(name)  # (called directly: one Python call fewer than apply_op)

    def f(x: Any, /, *args: Any, out: Any = None) -> Any:
        if args or out is not None:  # (numpy's out=, positional too: np.logical_not(I, I))
            return _into(lean(x), _out_arg(args, out, name), name)
        return lean(x)

    f.__name__ = name
    f.__qualname__ = name
    f.__doc__ = f"Elementwise ``numpy.{name}``, lazily fused into the kernel."
    f.__module__ = __name__
    return f


def _make_binary(name: str) -> Any:
    from .array import _lean_binary
    from .host_eager import HostArray, binary

    lean = _lean_binary(name)

    def f(x1: Any, x2: Any, /, *args: Any, out: Any = None) -> Any:
        t1, t2 = type(x1), type(x2)
        if (t1 is HostArray or t2 is HostArray) and not args and out is None and (
                got := binary(name, x1, x2)) is not None:
            return got  # (small, on the CPU: numpy's now, without the operator's detour)
        if t1 in _NUMPY_SCALARS and t2 is Array:  # (np.float64(a) * x: a scalar node)
            x1 = _scalar_array(x1, x2.device)
        elif t2 in _NUMPY_SCALARS and t1 is Array:
            x2 = _scalar_array(x2, x1.device)
        if args or out is not None:  # (numpy's out=, positional too: np.multiply(Z, Z, Z))
            return _into(lean(x1, x2), _out_arg(args, out, name), name)
        return lean(x1, x2)

    f.__name__ = name
    f.__qualname__ = name
    f.__doc__ = f"Elementwise ``numpy.{name}``, lazily fused into the kernel."
    return f


# numpy's real scalar types: ``np.float64(a) * x`` (numpy hands ``np.multiply`` to
# fuseloop, a scalar being no weak Python number) takes the operators' lean path with
# the scalar as a 0-d array holding its value (its dtype promotes as numpy's does);
# build_node's general path cost a loop of such statements (deriche) a third of its time
_NUMPY_SCALARS = frozenset(np.dtype(c).type for c in "?bBhHiIlLqQfd")


def _scalar_array(value: Any, device: Any) -> Array:
    out = object.__new__(Array)
    out._storage, out._node, out._shape = None, Scalar(value), ()
    out.device, out.dtype = device, value.dtype
    return out


FUNCTIONS: dict[str, Any] = {}
for _n in UNARY:
    FUNCTIONS[_n] = _make_unary(_n)
for _n in BINARY:
    FUNCTIONS[_n] = _make_binary(_n)
for _alias, _target in ALIASES.items():
    FUNCTIONS[_alias] = FUNCTIONS[_target]
globals().update(FUNCTIONS)


@splits()
def where(condition: Any, x: Any, y: Any, /) -> Any:
    """``numpy.where(condition, x, y)``: elements of x where condition holds, else y."""
    operands = (_coerce(condition), _coerce(x), _coerce(y))
    arrays = [o for o in operands if isinstance(o, Array)]
    if not arrays:
        return np.where(*[o.value if isinstance(o, Constant) else o for o in operands])
    value_dt = result_type(_operand_kind(operands[1]), _operand_kind(operands[2]))
    loop = (BOOL, value_dt, value_dt, value_dt)
    device = _common_device(arrays)
    shape = broadcast_shapes(*(a.shape for a in arrays))
    nodes = (_operand_node(operands[0], BOOL) if isinstance(operands[0], Array | Constant)
             else _operand_node(bool(operands[0]), BOOL),
             _operand_node(operands[1], value_dt), _operand_node(operands[2], value_dt))
    return Array._lazy(Apply("where", nodes, loop, shape), device)


@splits()
def clip(a: Any, a_min: Any, a_max: Any, /) -> Any:
    """``numpy.clip``: ``minimum(maximum(a, a_min), a_max)``, NaN propagating.

    As numpy: with both bounds, all three operands meet in one dtype first (numpy's clip
    loop); a Python integer bound beyond an integer array's range is dropped.
    """
    a, a_min, a_max = _coerce(a), _coerce(a_min), _coerce(a_max)
    if isinstance(a, Array) and a.dtype.kind in "iu":
        info = np.iinfo(a.dtype)

        def weak_int(v: Any) -> Any:  # a Python int, or a weak fl.constant of one
            v = v.value if isinstance(v, Constant) and v.dtype is None else v
            return v if type(v) is int else None

        lo, hi = weak_int(a_min), weak_int(a_max)
        if lo is not None and lo <= info.min:
            a_min = None
        if hi is not None and hi >= info.max:
            a_max = None
    if a_min is None and a_max is None:
        return FUNCTIONS["positive"](a)
    if a_min is None:
        return FUNCTIONS["minimum"](a, a_max)
    if a_max is None:
        return FUNCTIONS["maximum"](a, a_min)
    dt = result_type(*(_operand_kind(o) for o in (a, a_min, a_max)))
    a, a_min, a_max = (o.astype(dt) if isinstance(o, Array) and o.dtype != dt else o
                       for o in (a, a_min, a_max))
    return FUNCTIONS["minimum"](FUNCTIONS["maximum"](a, a_min), a_max)


def astype(x: Any, dtype: Any, /, *, copy: bool = True) -> Any:
    """Convert ``x`` to ``dtype`` (array API spelling of ``x.astype``)."""
    if not isinstance(x, Array):
        return np.asarray(x).astype(as_dtype(dtype))
    return x.astype(dtype, copy=copy)


__all__ = ["FUNCTIONS", "astype", "clip", "where", *FUNCTIONS]
