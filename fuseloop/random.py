"""Counter-based random numbers, generated inside the kernel that consumes them.

``fl.random.uniform(n, key=7)`` is a lazy array like ``fl.arange``: each element is
a function of its index, the 64-bit ``key`` and the 64-bit ``counter`` (Random123's
Philox4x32-10, or Threefry4x64-20 with ``method="threefry"``), so
``fl.sum(fl.random.uniform(n, key=1) ** 2)`` is one kernel that writes no buffer of
random numbers.  The same key, counter and shape give the same numbers on every
device and runtime: bit for bit for ``bits``, ``integers`` and ``uniform``; ``normal``
goes through ``log`` and ``cospi``, which may differ in the last bits between devices.

Key and counter are kernel arguments: drawing with a new key or counter reuses the
compiled kernel.  A :class:`Generator` keeps a key and advances its counter by one
per draw, so successive draws are independent streams.  The layout of the bits is
described in :mod:`fuseloop.lower.random_ops`.
"""

from __future__ import annotations

import operator
from typing import Any

import numpy as np

from .array import Array
from .creation import _check_device_dtype, _device, _shape, _splits_in_device_set
from .dtypes import as_dtype
from .errors import DTypeError
from .expr.nodes import Apply, Iota, Scalar
from .op_names import RANDOM_METHODS as METHODS

_U64 = np.dtype(np.uint64)
_I64 = np.dtype(np.int64)


def _word(value: Any, what: str) -> np.uint64:
    v = operator.index(value)
    if not 0 <= v < 1 << 64:
        raise ValueError(f"fl.random: {what} must be in [0, 2**64), got {v}")
    return np.uint64(v)


@_splits_in_device_set
def _draw(kind: str, shape: Any, dtype: np.dtype, key: Any, counter: Any, method: str,
          device: Any, extra: tuple[Scalar, ...] = ()) -> Array:
    if method not in METHODS:
        raise ValueError(f"fl.random: method must be one of {METHODS}, got {method!r}")
    dev = _device(device)
    _check_device_dtype(dtype, dev)
    shape = _shape(shape)
    args = (Iota(shape, _I64), Scalar(_word(key, "key")), Scalar(_word(counter, "counter")),
            *extra)
    loop = (*(a.dtype for a in args), dtype)
    return Array._lazy(Apply(f"r123_{kind}_{method}", args, loop, shape), dev)


def _float_dtype(dtype: Any) -> np.dtype:
    dt = as_dtype(dtype)
    if dt.kind != "f":
        raise DTypeError(f"fl.random: a float dtype (float32, float64) is needed, got {dt}")
    return dt


def bits(shape: Any, *, key: Any = 0, counter: Any = 0, method: str = "philox",
         device: Any = None) -> Array:
    """The generator's raw output: uint32 words (Philox) or uint64 words (Threefry).

    Element ``i`` is word ``i % 4`` of the block of counter ``(i // 4, counter)``.
    """
    dtype = np.dtype(np.uint32 if method == "philox" else np.uint64)
    return _draw("bits", shape, dtype, key, counter, method, device)


def uniform(shape: Any = (), low: Any = 0.0, high: Any = 1.0, dtype: Any = np.float64, *,
            key: Any = 0, counter: Any = 0, method: str = "philox",
            device: Any = None) -> Array:
    """Uniform numbers in ``[low, high)``: 53 random bits for float64, 24 for float32,
    then ``low + (high - low) * u`` (rounding may reach ``high`` for some bounds)."""
    u = _draw("uniform", shape, _float_dtype(dtype), key, counter, method, device)
    if low == 0 and high == 1:
        return u
    return low + (high - low) * u


def normal(shape: Any = (), loc: Any = 0.0, scale: Any = 1.0, dtype: Any = np.float64, *,
           key: Any = 0, counter: Any = 0, method: str = "philox",
           device: Any = None) -> Array:
    """Normal numbers (Box-Muller on two uniforms of one block), ``loc + scale * z``.

    The uniforms carry 53 (float64) or 24 (float32) bits, so ``|z|`` stays below 8.6
    (float64) or 5.8 (float32) standard deviations.
    """
    z = _draw("normal", shape, _float_dtype(dtype), key, counter, method, device)
    if loc == 0 and scale == 1:
        return z
    return loc + scale * z


def integers(shape: Any, low: int, high: int | None = None, dtype: Any = np.int64, *,
             key: Any = 0, counter: Any = 0, method: str = "philox",
             device: Any = None) -> Array:
    """Integers in ``[low, high)`` (``[0, low)`` with one bound), as numpy's
    ``Generator.integers``; from 64 random bits (bias below ``(high - low) / 2**64``)."""
    if high is None:
        low, high = 0, low
    low, high = operator.index(low), operator.index(high)
    dt = as_dtype(dtype)
    if dt.kind not in "iu":
        raise DTypeError(f"fl.random.integers: an integer dtype is needed, got {dt}")
    info = np.iinfo(dt)
    if not info.min <= low < high <= int(info.max) + 1:
        raise ValueError(f"fl.random.integers: need {info.min} <= low < high <= "
                         f"{int(info.max) + 1} for {dt}, got low={low}, high={high}")
    extra = (Scalar(np.int64(low) if low < 1 << 63 else np.int64(low - (1 << 64))),
             Scalar(_word(high - low, "high - low")))
    values = _draw("integers", shape, _I64, key, counter, method, device, extra)
    return values if dt == _I64 else values.astype(dt)


class Generator:
    """A key and a counter: each draw uses the counter and advances it by one.

    ``g = fl.random.Generator(key=42); x = g.uniform(size=n); y = g.uniform(size=n)``:
    ``x`` and ``y`` are independent (counters 0 and 1).  Methods follow numpy's
    ``Generator`` (``size`` instead of ``shape``).
    """

    def __init__(self, key: int = 0, counter: int = 0, method: str = "philox",
                 device: Any = None) -> None:
        if method not in METHODS:
            raise ValueError(f"fl.random: method must be one of {METHODS}, got {method!r}")
        self.key = int(_word(key, "key"))
        self.counter = int(_word(counter, "counter"))
        self.method = method
        self.device = device

    def __repr__(self) -> str:
        return (f"fl.random.Generator(key={self.key}, counter={self.counter}, "
                f"method={self.method!r})")

    def _next(self) -> dict[str, Any]:
        kw = {"key": self.key, "counter": self.counter, "method": self.method,
              "device": self.device}
        self.counter = (self.counter + 1) % (1 << 64)
        return kw

    def uniform(self, low: Any = 0.0, high: Any = 1.0, size: Any = (),
                dtype: Any = np.float64) -> Array:
        return uniform(size, low, high, dtype, **self._next())

    def normal(self, loc: Any = 0.0, scale: Any = 1.0, size: Any = (),
               dtype: Any = np.float64) -> Array:
        return normal(size, loc, scale, dtype, **self._next())

    def random(self, size: Any = (), dtype: Any = np.float64) -> Array:
        return uniform(size, 0.0, 1.0, dtype, **self._next())

    def standard_normal(self, size: Any = (), dtype: Any = np.float64) -> Array:
        return normal(size, 0.0, 1.0, dtype, **self._next())

    def integers(self, low: int, high: int | None = None, size: Any = (),
                 dtype: Any = np.int64) -> Array:
        return integers(size, low, high, dtype, **self._next())

    def bits(self, size: Any = ()) -> Array:
        return bits(size, **self._next())


__all__ = ["Generator", "bits", "integers", "normal", "uniform"]
