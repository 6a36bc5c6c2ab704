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

from .. import caches as _caches
from .. import multi_hooks
from ..array import Array
from ..errors import ShapeError
from ..expr.nodes import Gather

BOUNDARIES = ("clamp", "wrap", "constant")
_INT64 = np.dtype(np.int64)

#: (axis length, offset, boundary, trailing axes, device index) -> (device, the shifted
#: positions, their validity or None): lazy index arithmetic without buffers, the same
#: for every stencil over that axis, so it is built once (``clip`` alone cost a stencil
#: term more host time than the rest of the term)
_POSITIONS: dict[tuple, tuple[Any, Array, Array | None]] = {}
POSITIONS_MAX = 256
_caches.register("stencil.positions", _POSITIONS.clear, lambda: len(_POSITIONS),
                 POSITIONS_MAX)


def _positions(n: int, s: int, boundary: str, trailing: int, device: Any
               ) -> tuple[Array, Array | None]:
    """The index an axis of length ``n`` is read at when shifted by ``s`` (the boundary
    rule applied), and for ``"constant"`` where it is inside (shaped to broadcast over
    ``trailing`` axes after it)."""
    from .. import ufuncs
    from ..array import Constant
    from ..creation import arange
    from .shape import reshape

    key = (n, s, boundary, trailing, device.index)
    hit = _POSITIONS.get(key)
    if hit is not None and hit[0] is device:
        return hit[1], hit[2]
    # the shift and the bounds are compiled in (constants, not kernel arguments), so a
    # recipe reads the neighbourhood and its boundary off the kernel (recipes.stencil_tiles)
    at = arange(n, dtype=_INT64, device=device) + Constant(s, _INT64)
    if boundary == "wrap":
        index = at % Constant(n, _INT64)  # (numpy's %: never negative for positive n)
    else:
        index = ufuncs.clip(at, Constant(0, _INT64), Constant(n - 1, _INT64))
    inside = reshape((at >= Constant(0, _INT64)) & (at < Constant(n, _INT64)),
                     (n,) + (1,) * trailing) if boundary == "constant" else None
    if len(_POSITIONS) >= POSITIONS_MAX:
        _POSITIONS.clear()
    _POSITIONS[key] = (device, index, inside)
    return index, inside


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

    node = x._node
    valid: Any = None
    for d, s in enumerate(offsets):
        if s == 0:
            continue
        index, inside = _positions(x.shape[d], s, boundary, x.ndim - d - 1, x.device)
        node = Gather(node, index._node, d, checked=False)
        if inside is not None:
            valid = inside if valid is None else valid & inside
    out = Array._lazy(node, x.device) if node is not x._node else x
    if valid is not None:
        out = ufuncs.where(valid, out, cval)
    return out


def _split_neighbours(window: Callable[[int], Array], cen: Sequence[int], boundary: str,
                      cval: Any) -> Callable[[Sequence[int]], Array]:
    """Neighbour ``k`` of a split array's part: its row window at ``k[0] - cen[0]`` (the
    halo rows and the boundary rule along the split axis are the window's), shifted
    along the other axes by the boundary rule."""
    def neighbour(k: Sequence[int]) -> Array:
        rest = [a - c for a, c in zip(k[1:], cen[1:])]
        return shifted(window(k[0] - cen[0]), [0, *rest], boundary, cval)

    return neighbour


def _weighted(neighbour: Callable[[Sequence[int]], Array], w: np.ndarray, dtype: np.dtype,
              like: Array) -> Array:
    """``sum_k w[k] * neighbour(k)`` as ``dtype`` (zeros shaped as ``like`` if none)."""
    from ..creation import zeros

    total: Any = None
    for k in np.ndindex(*w.shape):
        if w[k] == 0:
            continue
        term = neighbour(k)
        if term.dtype == dtype and w.dtype.kind in "iuf":
            # (the product has the term's dtype either way: a Python scalar takes the
            # operator's short path, and a weight of 1 needs no product at all)
            if w[k] != 1:
                term = term * w[k].item()
        else:
            term = term * w.dtype.type(w[k])
        total = term if total is None else total + term
    if total is None:
        return zeros(like.shape, dtype=dtype, device=like.device)
    return total.astype(dtype, copy=False) if total.dtype != dtype else total


def stencil(x: Any, weights: Any, center: Any = None, boundary: str = "clamp",
            cval: Any = 0) -> Array:
    """``y[p] = sum_k weights[k] * x[p + k - center]`` (a correlation, as VexCL's
    ``stencil``), with ``x``'s rank of ``weights``; lazy, fused with its consumer.

    ``center``: the position in ``weights`` aligned with the output element (default
    the middle, ``w // 2`` per axis).  ``boundary``: ``"clamp"``, ``"wrap"`` or
    ``"constant"`` (``cval`` outside).  The result's dtype is numpy's promotion of
    ``x``'s and the weights' (a float64 list of weights gives float64).
    """
    from ..creation import asarray

    w = np.asarray(weights)
    if w.dtype.kind not in "biuf":
        raise TypeError(f"fl.stencil: weights must be real numbers, got dtype {w.dtype}")
    if multi_hooks.is_split(x):  # split over devices: per part, with halo rows
        # (a part extended by cval rows may have a wider dtype: the result's is x's)
        dt = np.result_type(x.dtype, w.dtype)

        def part(window: Callable[[int], Array], cen: Sequence[int]) -> Array:
            return _weighted(_split_neighbours(window, cen, boundary, cval), w, dt, window(0))

        return multi_hooks.dispatch("stencil", part, (x, w.shape, center, boundary, cval,
                                                      "fl.stencil"), {})
    x = x if isinstance(x, Array) else asarray(x)
    cen = _check(x, w.shape, center, boundary, "fl.stencil")
    dtype = np.result_type(x.dtype, w.dtype)
    return _weighted(lambda k: shifted(x, [a - c for a, c in zip(k, cen)], boundary, cval),
                     w, dtype, x)


def _body_result(body: Callable[..., Any], neighbours: list[Array], shape: tuple[int, ...]
                 ) -> Array:
    out = body(*neighbours)
    if not isinstance(out, Array):
        raise TypeError("fl.stencil_function: body must return a fuseloop expression, "
                        f"got {type(out).__name__}")
    if out.shape != shape:
        raise ShapeError(f"fl.stencil_function: body returned shape {out.shape}, not "
                         f"the array's {shape}")
    return out


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
            def part(window: Callable[[int], Array], cen: Sequence[int]) -> Array:
                neighbour = _split_neighbours(window, cen, boundary, cval)
                return _body_result(body, [neighbour(k) for k in np.ndindex(*wid)],
                                    window(0).shape)

            return multi_hooks.dispatch("stencil", part, (x, wid, center, boundary, cval,
                                                          "fl.stencil_function"), {})
        x = x if isinstance(x, Array) else asarray(x)
        cen = _check(x, wid, center, boundary, "fl.stencil_function")
        neighbours = [shifted(x, [a - c for a, c in zip(k, cen)], boundary, cval)
                      for k in np.ndindex(*wid)]
        return _body_result(body, neighbours, x.shape)

    apply.__doc__ = f"The stencil {getattr(body, '__name__', 'body')} of width {wid}."
    apply.width = wid  # type: ignore[attr-defined]
    apply.size = math.prod(wid)  # type: ignore[attr-defined]
    return apply
