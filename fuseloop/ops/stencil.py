"""Stencils (VexCL's ``stencil`` and ``StencilOperator``), fused with what reads them.

A stencil is a sum over neighbours: each neighbour is ``x`` shifted by a constant
offset per axis, read through an unchecked gather of computed positions (as
``fl.roll`` is), with the boundary rule applied to the shifted index:
``"clamp"`` (the nearest element: numpy's ``pad`` mode ``"edge"``), ``"wrap"``
(periodic) or ``"constant"`` (``cval`` outside).  Nothing is allocated; the consuming
kernel reads every neighbour, so ``2 * fl.stencil(x, w) + x`` is one kernel.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from .. import multi_hooks
from ..array import Array
from ..errors import ShapeError
from ..expr.nodes import Gather

BOUNDARIES = ("clamp", "wrap", "constant")
_INT64 = np.dtype(np.int64)


def _check(x: Array, width: tuple[int, ...], center: Any, boundary: str,
           what: str) -> tuple[int, ...]:
    """The centre per axis, after numpy-style checks of the stencil against ``x``."""
    if boundary not in BOUNDARIES:
        raise ValueError(f"{what}: unknown boundary {boundary!r}; use one of "
                         f"{', '.join(repr(b) for b in BOUNDARIES)}")
    if len(width) != x.ndim or x.ndim == 0:
        raise ShapeError(f"{what}: a stencil of rank {len(width)} (shape {width}) does not "
                         f"fit an array of rank {x.ndim} (shape {x.shape}); give one "
                         "stencil axis per array axis")
    if any(w < 1 for w in width):
        raise ShapeError(f"{what}: the stencil has an empty axis (shape {width})")
    if any(w > n for w, n in zip(width, x.shape)):
        raise ShapeError(f"{what}: the stencil (shape {width}) is wider than the array "
                         f"(shape {x.shape}) along some axis")
    if center is None:
        cen = tuple(w // 2 for w in width)
    else:
        cen = (int(center),) if np.ndim(center) == 0 else tuple(int(c) for c in center)
    if len(cen) != len(width) or any(not 0 <= c < w for c, w in zip(cen, width)):
        raise ValueError(f"{what}: center {center} is not a position in the stencil "
                         f"(shape {width})")
    return cen


def shifted(x: Array, offsets: Sequence[int], boundary: str = "clamp",
            cval: Any = 0) -> Array:
    """``x`` read at ``index + offsets``, the boundary rule applied per axis (lazy)."""
    from .. import ufuncs
    from ..array import Constant
    from ..creation import arange
    from .shape import reshape

    node = x._node
    valid: Any = None
    for d, s in enumerate(offsets):
        if s == 0:
            continue
        n = x.shape[d]
        # the shift and the bounds are compiled in (fl.constant), so a recipe reads the
        # neighbourhood and its boundary off the kernel (recipes.stencil_tiles)
        at = arange(n, dtype=_INT64, device=x.device) + Constant(s, _INT64)
        if boundary == "wrap":
            index = at % Constant(n, _INT64)  # (numpy's %: never negative for positive n)
        else:
            index = ufuncs.clip(at, Constant(0, _INT64), Constant(n - 1, _INT64))
        node = Gather(node, index._node, d, checked=False)
        if boundary == "constant":
            inside = (at >= Constant(0, _INT64)) & (at < Constant(n, _INT64))
            inside = reshape(inside, (n,) + (1,) * (x.ndim - d - 1))
            valid = inside if valid is None else valid & inside
    out = Array._lazy(node, x.device) if node is not x._node else x
    if valid is not None:
        out = ufuncs.where(valid, out, cval)
    return out


def stencil(x: Any, weights: Any, center: Any = None, boundary: str = "clamp",
            cval: Any = 0) -> Array:
    """``y[p] = sum_k weights[k] * x[p + k - center]`` (a correlation, as VexCL's
    ``stencil``), with ``x``'s rank of ``weights``; lazy, fused with its consumer.

    ``center``: the position in ``weights`` aligned with the output element (default
    the middle, ``w // 2`` per axis).  ``boundary``: ``"clamp"``, ``"wrap"`` or
    ``"constant"`` (``cval`` outside).  The result's dtype is numpy's promotion of
    ``x``'s and the weights' (a float64 list of weights gives float64).
    """
    from ..creation import asarray, zeros

    if multi_hooks.is_split(x):  # split over devices: per part, with halo rows
        # (a part extended by cval rows may have a wider dtype: the result's is x's)
        dt = np.result_type(x.dtype, np.asarray(weights).dtype)
        return multi_hooks.dispatch(
            "stencil",
            lambda part: stencil(part, weights, center, boundary, cval).astype(dt, copy=False),
            (x, np.shape(weights), center, boundary, cval, "fl.stencil"), {})
    x = x if isinstance(x, Array) else asarray(x)
    w = np.asarray(weights)
    if w.dtype.kind not in "biuf":
        raise TypeError(f"fl.stencil: weights must be real numbers, got dtype {w.dtype}")
    cen = _check(x, w.shape, center, boundary, "fl.stencil")
    dtype = np.result_type(x.dtype, w.dtype)
    total: Any = None
    for k in np.ndindex(*w.shape):
        if w[k] == 0:
            continue
        term = shifted(x, [a - c for a, c in zip(k, cen)], boundary, cval) * w.dtype.type(w[k])
        total = term if total is None else total + term
    if total is None:
        return zeros(x.shape, dtype=dtype, device=x.device)
    return total.astype(dtype, copy=False) if total.dtype != dtype else total


def stencil_function(body: Callable[..., Any], width: int | Sequence[int],
                     center: Any = None) -> Callable[..., Array]:
    """VexCL's ``StencilOperator``: a stencil computing ``body`` of the neighbours.

    ``op = fl.stencil_function(lambda l, c, r: fl.maximum(l, r) - c, 3, 1)``;
    ``op(x, boundary="clamp", cval=0)`` calls ``body`` with the ``prod(width)``
    neighbours of each element (``x[p + k - center]`` for ``k`` over the stencil's
    positions in C order) as lazy arrays and returns what it returns, fused with its
    consumer.  ``width`` and ``center`` give one value per axis of ``x`` (an int for a
    1-D array).
    """
    wid = (int(width),) if isinstance(width, int | np.integer) else tuple(int(n) for n in width)
    if not callable(body):
        raise TypeError("fl.stencil_function: body must be callable")

    def apply(x: Any, boundary: str = "clamp", cval: Any = 0) -> Array:
        from ..creation import asarray

        if multi_hooks.is_split(x):  # split over devices: per part, with halo rows
            return multi_hooks.dispatch("stencil", lambda part: apply(part, boundary, cval),
                                        (x, wid, center, boundary, cval, "fl.stencil_function"), {})
        x = x if isinstance(x, Array) else asarray(x)
        cen = _check(x, wid, center, boundary, "fl.stencil_function")
        parts = [shifted(x, [a - c for a, c in zip(k, cen)], boundary, cval)
                 for k in np.ndindex(*wid)]
        out = body(*parts)
        if not isinstance(out, Array):
            raise TypeError("fl.stencil_function: body must return a fuseloop expression, "
                            f"got {type(out).__name__}")
        if out.shape != x.shape:
            raise ShapeError(f"fl.stencil_function: body returned shape {out.shape}, not "
                             f"the array's {x.shape}")
        return out

    apply.__doc__ = f"The stencil {getattr(body, '__name__', 'body')} of width {wid}."
    apply.width = wid  # type: ignore[attr-defined]
    apply.size = math.prod(wid)  # type: ignore[attr-defined]
    return apply
