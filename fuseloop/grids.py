"""numpy's index-grid objects and array constructor: ``fl.mgrid``, ``fl.ogrid`` and
``fl.ndarray`` (code written for numpy or CuPy uses them; NPBench's kernels do).

Grids are lazy index expressions (``start + i * step`` along each axis, numpy's own
arithmetic and dtype rule), broadcast and stacked on the device: nothing is computed
on the host.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from .array import Array
from .creation import arange, empty
from .ops.shape import broadcast_to, reshape, stack


def _axis(key: slice) -> tuple[int, Any, Any]:
    """(points, start, step) of one slice of a grid, as ``numpy.mgrid`` reads it: a
    complex step is a number of points with the stop included."""
    start = 0 if key.start is None else key.start
    step = 1 if key.step is None else key.step
    stop = key.stop
    if stop is None:
        raise TypeError(f"a grid slice needs a stop, got {key!r}")
    if isinstance(step, complex):
        points = int(abs(step))
        return points, start, (stop - start) / float(points - 1) if points > 1 else 0.0
    return max(0, math.ceil((stop - start) / step)), start, step


def _grid_dtype(keys: tuple[slice, ...]) -> type:
    floating = any(isinstance(v, float | complex) for k in keys
                   for v in (k.start, k.stop, k.step))
    return float if floating else int


class _Grid:
    """``mgrid[...]`` (dense: one array of shape ``(ndim, *sizes)``) or ``ogrid[...]``
    (open: a list of arrays that broadcast to the grid)."""

    def __init__(self, dense: bool) -> None:
        self.dense = dense

    def __getitem__(self, key: Any) -> Any:
        keys = key if isinstance(key, tuple) else (key,)
        if not all(isinstance(k, slice) for k in keys):
            raise TypeError(f"{'mgrid' if self.dense else 'ogrid'}[...] takes slices "
                            f"(start:stop:step), got {key!r}")
        dtype = np.dtype(_grid_dtype(keys))
        axes = [_axis(k) for k in keys]
        # numpy computes ``indices(sizes, dtype) * step + start``
        vectors = [arange(points, dtype=dtype) * step + start if (step, start) != (1, 0)
                   else arange(points, dtype=dtype) for points, start, step in axes]
        vectors = [v.astype(dtype) if v.dtype != dtype else v for v in vectors]
        if not isinstance(key, tuple):
            return vectors[0]
        sizes = tuple(points for points, _, _ in axes)
        shaped = [reshape(v, tuple(n if a == k else 1 for a, n in enumerate(sizes)))
                  for k, v in enumerate(vectors)]
        if not self.dense:
            return shaped
        return stack([broadcast_to(v, sizes) for v in shaped])


mgrid = _Grid(dense=True)
ogrid = _Grid(dense=False)


class _NdarrayType(type):
    def __instancecheck__(cls, obj: Any) -> bool:
        return isinstance(obj, Array)


class ndarray(metaclass=_NdarrayType):
    """numpy's and CuPy's constructor: ``ndarray(shape, dtype=float)`` is a new array
    whose values are not set (as :func:`fuseloop.empty`); every fuseloop array is an
    instance.  ``buffer``, ``offset`` and ``strides`` (views of other memory) are not
    supported: use ``fl.asarray`` or slicing."""

    def __new__(cls, shape: Any, dtype: Any = float, buffer: Any = None, offset: int = 0,
                strides: Any = None, order: str = "C") -> Any:
        if buffer is not None or offset or strides is not None or order not in ("C", None):
            raise TypeError("fl.ndarray(shape, dtype) makes a new C-ordered array; "
                            "buffer=, offset=, strides= and order='F' are not supported "
                            "(use fl.asarray, slicing or transpose)")
        return empty(shape, dtype=np.dtype(dtype))
