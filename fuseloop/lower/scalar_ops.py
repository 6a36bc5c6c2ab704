"""OpenCL code for every elementwise operation, with numpy's semantics.

Each operation on given loop dtypes becomes either a plain pymbolic expression
(where C and numpy agree: float arithmetic, wide-integer add/multiply) or a call
of a small ``static inline`` helper whose body spells out numpy's behaviour
(floor division and modulo signs, division by zero giving 0 for integers,
NaN-propagating minimum/maximum, wrapping small-integer arithmetic, shifts past
the bit width, mixed signed/unsigned comparisons).
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np

from ..dtypes import c_type_name
from ..op_names import (  # (the tables, shared with the front end)
    BITWISE,
    COMPARISONS,
    FLOAT_BINARY,
    FLOAT_UNARY,
    LOGICAL,
    RANDOM_OPS,
)
from .arg_keys import arg_key_body
from .complex_ops import complex_helper_body, complex_preamble, is_complex_loop
from .math_ops import MATH_OPS, math_helper_body
from .random_ops import random_helper_body, random_preamble

_SHORT = {"bool": "b", "int8": "i8", "int16": "i16", "int32": "i32", "int64": "i64",
          "uint8": "u8", "uint16": "u16", "uint32": "u32", "uint64": "u64",
          "float32": "f32", "float64": "f64", "complex64": "c64",
          "complex128": "c128"}


class Helper(NamedTuple):
    """A C function that implements one operation on fixed dtypes."""

    name: str
    result: np.dtype
    source: str


def helper_name(op: str, loop: tuple[np.dtype, ...]) -> str:
    ins = loop[:-1]
    if op == "cast":
        tag = f"{_SHORT[ins[0].name]}_{_SHORT[loop[-1].name]}"
    elif all(d == ins[0] for d in ins) and loop[-1] == ins[0]:
        tag = _SHORT[ins[0].name]
    else:
        tag = "_".join(_SHORT[d.name] for d in loop)
    return f"fl_{op}_{tag}"


def is_direct(op: str, loop: tuple[np.dtype, ...]) -> bool:
    """Whether C's own operator on ``loop`` already matches numpy exactly."""
    out = loop[-1]
    if any(d != out for d in loop):
        return False
    # signed overflow is undefined in OpenCL C: compilers fold -(-x) to x and then
    # disagree with numpy's wrap-around for INT_MIN; signed ints go through unsigned.
    # Unsigned a - b and -a are helpers too: their expressions hold a -1 factor, which
    # Loopy types by numpy's rules (int64 with uint64 is float64), so a sum of them
    # accumulated in double and lost bits
    if op in ("add", "multiply"):
        return out.kind == "f" or (out.kind == "u" and out.itemsize >= 4)
    if op in ("subtract", "negative"):
        return out.kind == "f"
    if op == "true_divide":
        return out.kind == "f"
    return False


def _unsigned_of(dt: np.dtype) -> str:
    return "u" + c_type_name(dt) if dt.kind == "i" else c_type_name(dt)


def _bits(dt: np.dtype) -> int:
    return dt.itemsize * 8


def helper_body(op: str, loop: tuple[np.dtype, ...]) -> str:
    """Body (statements) of the helper for ``op`` on ``loop``; parameters a, b, c."""
    for part in (_selection_body, _arithmetic_body, _division_body, _integer_body,
                 arg_key_body):
        found = part(op, loop)
        if found is not None:
            return found
    raise AssertionError(f"no OpenCL code for {op} on {loop}")


def _selection_body(op: str, loop: tuple[np.dtype, ...]) -> str | None:
    """Casts, selection, float math builtins, comparisons, bitwise and logical operations."""
    ins, out = loop[:-1], loop[-1]
    a = ins[0]
    T = c_type_name(out)
    k = a.kind  # 'b' bool, 'i' signed, 'u' unsigned, 'f' float
    if op == "cast":
        if out.kind == "b":
            return "return (uchar)(a != 0);"
        return f"return ({T})a;"
    if op == "where":
        return "return a ? b : c;"
    if op in FLOAT_UNARY:
        if k == "f":
            return f"return {FLOAT_UNARY[op]}(a);"
        return "return a;"  # floor/ceil/trunc/rint of integers and bools
    if op in FLOAT_BINARY:
        return f"return {FLOAT_BINARY[op]}(a, b);"
    if op in COMPARISONS:
        sym = COMPARISONS[op]
        b = ins[1]
        if a.kind == "i" and b.kind == "u":
            neg = {"<": "1", "<=": "1", ">": "0", ">=": "0", "==": "0", "!=": "1"}[sym]
            return f"return (uchar)(a < 0 ? {neg} : ((ulong)a {sym} b));"
        if a.kind == "u" and b.kind == "i":
            neg = {"<": "0", "<=": "0", ">": "1", ">=": "1", "==": "0", "!=": "1"}[sym]
            return f"return (uchar)(b < 0 ? {neg} : (a {sym} (ulong)b));"
        return f"return (uchar)(a {sym} b);"
    if op in BITWISE:
        return f"return ({T})(a {BITWISE[op]} b);"
    if op in LOGICAL:
        return f"return (uchar)((a != 0) {LOGICAL[op]} (b != 0));"
    if op == "logical_xor":
        return "return (uchar)((a != 0) != (b != 0));"
    if op == "logical_not":
        return "return (uchar)(!a);"
    if op == "invert":
        return "return (uchar)(!a);" if k == "b" else f"return ({T})(~a);"
    return None


def _arithmetic_body(op: str, loop: tuple[np.dtype, ...]) -> str | None:
    """Addition to sign: numpy's wrapping integer arithmetic and bool rules."""
    ins, out = loop[:-1], loop[-1]
    a = ins[0]
    T = c_type_name(out)
    k = a.kind  # 'b' bool, 'i' signed, 'u' unsigned, 'f' float
    if op == "add":
        return "return a | b;" if k == "b" else f"return ({T})(a + b);"
    if op == "subtract":
        return f"return ({T})(({_unsigned_of(a)})a - ({_unsigned_of(a)})b);"
    if op == "multiply":
        if k == "b":
            return "return a & b;"
        if k == "f":
            return "return a * b;"
        wide = "uint" if a.itemsize < 4 else _unsigned_of(a)
        return f"return ({T})(({wide})a * ({wide})b);"
    if op == "true_divide":
        return "return a / b;"
    if op == "negative":
        return f"return ({T})(0 - ({_unsigned_of(a)})a);" if k in "iu" else "return -a;"
    if op == "positive":
        return "return a;"
    if op == "absolute":
        if k == "f":
            return "return fabs(a);"
        if k == "i":
            return f"return ({T})(a < 0 ? 0 - ({_unsigned_of(a)})a : a);"
        return "return a;"
    if op == "square":
        if k == "f":
            return "return a * a;"
        wide = "uint" if a.itemsize < 4 else _unsigned_of(a)
        return f"return ({T})(({wide})a * ({wide})a);"
    if op == "sign":
        if k == "f":
            return f"return a > 0 ? ({T})1 : (a < 0 ? ({T})-1 : (a == 0 ? ({T})0 : a));"
        if k == "i":
            return f"return ({T})((a > 0) - (a < 0));"
        return f"return ({T})(a > 0);"
    return None


def _division_body(op: str, loop: tuple[np.dtype, ...]) -> str | None:
    """floor_divide, remainder and fmod with numpy's signs and zero divisors."""
    ins, out = loop[:-1], loop[-1]
    a = ins[0]
    T = c_type_name(out)
    k = a.kind  # 'b' bool, 'i' signed, 'u' unsigned, 'f' float
    if op == "floor_divide":
        if k == "f":
            return (
                "if (b == 0) return a / b;\n"
                f"  {T} mod = fmod(a, b);\n"
                f"  {T} div = (a - mod) / b;\n"
                "  if (mod != 0 && ((b < 0) != (mod < 0))) div -= 1;\n"
                f"  if (div == 0) return copysign(({T})0, a / b);\n"
                f"  {T} fl = floor(div);\n"
                f"  if (div - fl > ({T})0.5) fl += 1;\n"
                "  return fl;"
            )
        if k == "u":
            return "return b == 0 ? 0 : a / b;"
        if k == "b":
            return "return a & b;"
        return (
            "if (b == 0) return 0;\n"
            f"  if (b == -1) return ({T})(0 - ({_unsigned_of(a)})a);\n"
            f"  {T} q = a / b;\n"
            "  if ((a % b != 0) && ((a < 0) != (b < 0))) q -= 1;\n"
            "  return q;"
        )
    if op == "remainder":
        if k == "f":
            return (
                "if (b == 0) return fmod(a, b);\n"
                f"  {T} mod = fmod(a, b);\n"
                "  if (mod != 0) { if ((b < 0) != (mod < 0)) mod += b; }\n"
                f"  else mod = copysign(({T})0, b);\n"
                "  return mod;"
            )
        if k == "u" or k == "b":
            return "return b == 0 ? 0 : a % b;"
        return (
            "if (b == 0 || b == -1) return 0;\n"
            f"  {T} r = a % b;\n"
            "  if (r != 0 && ((r < 0) != (b < 0))) r += b;\n"
            "  return r;"
        )
    if op == "fmod":
        if k == "f":
            return "return fmod(a, b);"
        if k == "i":
            return "return (b == 0 || b == -1) ? 0 : a % b;"
        return "return b == 0 ? 0 : a % b;"
    return None


def _integer_body(op: str, loop: tuple[np.dtype, ...]) -> str | None:
    """Integer powers and shifts, NaN-aware minimum/maximum, the isnan family."""
    ins, out = loop[:-1], loop[-1]
    a = ins[0]
    T = c_type_name(out)
    k = a.kind  # 'b' bool, 'i' signed, 'u' unsigned, 'f' float
    if op == "power":
        if k == "f":
            return "return pow(a, b);"
        neg = ""
        if k == "i":
            neg = "if (b < 0) return a == 1 ? 1 : (a == -1 ? ((b & 1) ? -1 : 1) : 0);\n  "
        return (
            f"{neg}ulong r = 1, base = (ulong)a, e = (ulong)b;\n"
            "  while (e) { if (e & 1) r *= base; base *= base; e >>= 1; }\n"
            f"  return ({T})r;"
        )
    if op in ("left_shift", "right_shift"):
        bits = _bits(a)
        if op == "left_shift":
            return f"return ((ulong)b < {bits}) ? ({T})(({_unsigned_of(a)})a << b) : 0;"
        fill = "(a < 0 ? -1 : 0)" if k == "i" else "0"
        return f"return ((ulong)b < {bits}) ? ({T})(a >> b) : {fill};"
    # NaN tests are written ``a != a``: PoCL's ``isnan`` is a call per element that
    # kept the loop around it scalar (an argmax's index pass took 5x as long)
    if op in ("minimum", "maximum"):
        sym = "<" if op == "minimum" else ">"
        if k == "f":
            return f"return a != a ? a : (b != b ? b : (a {sym} b ? a : b));"
        return f"return a {sym} b ? a : b;"
    if op in ("fmin", "fmax"):
        if k == "f":
            return f"return {op}(a, b);"
        sym = "<" if op == "fmin" else ">"
        return f"return a {sym} b ? a : b;"
    if op in ("isnan", "isinf", "isfinite"):
        if k == "f":
            return "return (uchar)(a != a);" if op == "isnan" else f"return (uchar)({op}(a));"
        return "return 1;" if op == "isfinite" else "return 0;"
    return None


def make_helper(op: str, loop: tuple[np.dtype, ...]) -> Helper:
    name = helper_name(op, loop)
    params = ", ".join(f"{c_type_name(d)} {p}"
                       for d, p in zip(loop[:-1], "abcde"[:len(loop) - 1], strict=True))
    source = ""
    if is_complex_loop(loop):
        body = complex_helper_body(op, loop)
        source = complex_preamble(op, loop)
    elif op in MATH_OPS:
        body = math_helper_body(op, loop)
    elif op in RANDOM_OPS:
        body = random_helper_body(op, loop)
        source = random_preamble(op)
    else:
        body = helper_body(op, loop)
    source += f"static inline {c_type_name(loop[-1])} {name}({params})\n{{\n  {body}\n}}\n"
    return Helper(name, loop[-1], source)
