"""Dtypes fuseloop supports, their OpenCL spellings, and numpy's promotion rules.

Type resolution is delegated to numpy (``ufunc.resolve_dtypes``), which applies
NEP 50: Python ``int``/``float`` scalars are "weak" and take the array's dtype.
The only deviation: numpy picks float16 for some integer inputs (``sin`` of
int8); OpenCL devices rarely support half precision, so fuseloop computes and
returns float32 there.
"""

from __future__ import annotations

from functools import lru_cache

import numpy as np

from . import caches as _caches
from .errors import DTypeError

SUPPORTED_DTYPES: tuple[np.dtype, ...] = tuple(
    np.dtype(c)
    for c in ("bool", "int8", "int16", "int32", "int64", "uint8", "uint16", "uint32",
              "uint64", "float32", "float64", "complex64", "complex128")
)
_SUPPORTED = frozenset(SUPPORTED_DTYPES)

# bool is stored as one byte (uchar) in kernels: OpenCL forbids bool buffers.
C_TYPE_NAMES: dict[np.dtype, str] = {
    np.dtype("bool"): "uchar",
    np.dtype("int8"): "char",
    np.dtype("int16"): "short",
    np.dtype("int32"): "int",
    np.dtype("int64"): "long",
    np.dtype("uint8"): "uchar",
    np.dtype("uint16"): "ushort",
    np.dtype("uint32"): "uint",
    np.dtype("uint64"): "ulong",
    np.dtype("float32"): "float",
    np.dtype("float64"): "double",
    # pyopencl-complex.h's types (a struct of two reals), inlined by lower/complex_ops.py
    np.dtype("complex64"): "cfloat_t",
    np.dtype("complex128"): "cdouble_t",
}

_C_NAME_TO_DTYPE: dict[str, np.dtype] = {
    "bool": np.dtype("bool"),
    "char": np.dtype("int8"), "short": np.dtype("int16"), "int": np.dtype("int32"),
    "long": np.dtype("int64"), "uchar": np.dtype("uint8"), "ushort": np.dtype("uint16"),
    "uint": np.dtype("uint32"), "ulong": np.dtype("uint64"), "float": np.dtype("float32"),
    "double": np.dtype("float64"), "unsigned char": np.dtype("uint8"),
    "unsigned short": np.dtype("uint16"), "unsigned int": np.dtype("uint32"),
    "unsigned long": np.dtype("uint64"), "cfloat_t": np.dtype("complex64"),
    "cdouble_t": np.dtype("complex128"),
}

FLOAT64 = np.dtype("float64")
BOOL = np.dtype("bool")


def as_dtype(dtype: object) -> np.dtype:
    """Normalise ``dtype`` and check fuseloop supports it."""
    try:
        dt = np.dtype(dtype)  # type: ignore[call-overload]
    except TypeError as exc:
        raise DTypeError(f"{dtype!r} is not a dtype") from exc
    if not dt.isnative:
        # device buffers hold native byte order: '>f4' means float32 here
        dt = dt.newbyteorder("=")
    if dt not in _SUPPORTED:
        names = ", ".join(str(d) for d in SUPPORTED_DTYPES)
        raise DTypeError(f"dtype {dt} is not supported by fuseloop; use one of: {names}")
    return _CANONICAL[dt]


_BOOL = np.dtype("bool")
_UINT8 = np.dtype("uint8")


def kernel_dtype(dtype: np.dtype) -> np.dtype:
    """The dtype a value has inside a kernel (bool travels as uchar)."""
    return _UINT8 if dtype == _BOOL else dtype


def c_type_name(dtype: np.dtype) -> str:
    return C_TYPE_NAMES[dtype]


def dtype_from_c_name(name: str) -> np.dtype:
    try:
        return _C_NAME_TO_DTYPE[" ".join(name.split())]
    except KeyError:
        known = ", ".join(sorted(_C_NAME_TO_DTYPE))
        raise DTypeError(f"unknown OpenCL scalar type {name!r}; known: {known}") from None


# numpy has two equal int64 (and uint64) dtypes with different characters ('l' and 'q');
# loops like equal(uint64, int8) use 'q'. fuseloop keys kernels and bounds by one of each.
_CANONICAL = {d: d for d in SUPPORTED_DTYPES}


def _fix_half(dt: np.dtype) -> np.dtype:
    return np.dtype("float32") if dt == np.dtype("float16") else _CANONICAL.get(dt, dt)


# An operand descriptor is either a dtype (arrays, numpy scalars) or one of the
# Python types int/float/complex standing for a weak scalar of that kind.
Operand = np.dtype | type


@lru_cache(maxsize=4096)
def resolve_loop(ufunc_name: str, operands: tuple[Operand, ...]) -> tuple[np.dtype, ...]:
    """Return numpy's loop dtypes ``(in_0, ..., in_k, out)`` for ``ufunc_name``."""
    if ufunc_name.startswith(("frexp_", "modf_")):  # one output of a two-output ufunc
        both = resolve_loop(ufunc_name.partition("_")[0], operands)
        return (*both[:-2], both[-1] if ufunc_name == "frexp_exponent" else both[-2])
    ufunc = getattr(np, ufunc_name, None)
    if ufunc is None:
        # an OpenCL builtin numpy lacks (erf, fma, ...): scipy.special's loops, where
        # float32 stays float32 and every other input computes in float64
        dt = result_type(*operands)
        if dt.kind == "c":  # (a cast to float64 would drop the imaginary parts silently)
            hint = "; write a * b + c" if ufunc_name in ("fma", "mad") else ""
            raise DTypeError(f"fuseloop has no complex version of {ufunc_name} (an OpenCL "
                             f"builtin for real numbers; operands of {dt}){hint}")
        return (dt if dt.kind == "f" else FLOAT64,) * (len(operands) + 1)
    try:
        loop = ufunc.resolve_dtypes((*operands, *(None,) * ufunc.nout))
    except (TypeError, np._core._exceptions._UFuncNoLoopError) as exc:  # type: ignore[attr-defined]
        shown = ", ".join(o.__name__ if isinstance(o, type) else str(o) for o in operands)
        raise DTypeError(f"numpy's {ufunc_name} has no loop for ({shown}): {exc}") from exc
    return tuple(_fix_half(d) for d in loop)


@lru_cache(maxsize=4096)
def result_type(*operands: Operand) -> np.dtype:
    """numpy.result_type with NEP 50 weak Python scalars."""
    args = [0 if o is int else 0.0 if o is float else 0j if o is complex else o
            for o in operands]
    return _fix_half(np.result_type(*args))


def scalar_kind(value: object) -> Operand:
    """Describe a Python or numpy scalar for type resolution."""
    if isinstance(value, bool | np.bool_):
        return BOOL
    if isinstance(value, np.generic):
        return as_dtype(value.dtype)
    if isinstance(value, int):
        return int
    if isinstance(value, float):
        return float
    if isinstance(value, complex):
        return complex
    raise DTypeError(
        f"scalar {value!r} of type {type(value).__name__} is not supported "
        "(fuseloop handles bool, int, float and complex scalars)"
    )


def scalar_to(value: object, dtype: np.dtype) -> np.generic:
    """Convert a scalar to ``dtype`` as numpy does for a ufunc operand."""
    if dtype.kind in "iu" and type(value) is int:
        lo, hi = _INT_BOUNDS[dtype.char]
        if not lo <= value <= hi:
            raise OverflowError(f"Python integer {value} out of bounds for {dtype}")
    return dtype.type(value)


_INT_BOUNDS = {d.char: (int(np.iinfo(d).min), int(np.iinfo(d).max))
               for d in SUPPORTED_DTYPES if d.kind in "iu"}


_caches.register_function("dtypes.resolve_loop", resolve_loop)
_caches.register_function("dtypes.result_type", result_type)
