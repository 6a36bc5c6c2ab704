"""Indexing: basic slicing as views, integer-array indices as gathers and scatters."""

from __future__ import annotations

import operator
from typing import Any

import numpy as np

from ..array import Array, _coerce
from ..errors import DTypeError, IndexOutOfBoundsError
from ..expr.nodes import Gather, Node
from ..expr.program import Target
from .shape import normalize_axis, ravel, view


def _is_index_array(k: Any) -> bool:
    return isinstance(k, Array | np.ndarray | list)


def _expand(key: Any, ndim: int) -> list[Any]:
    """The key as one item per dimension (Ellipsis expanded, None kept)."""
    key = list(key) if isinstance(key, tuple) else [key]
    n_ellipsis = sum(k is Ellipsis for k in key)
    if n_ellipsis > 1:
        raise IndexError("an index can only have a single ellipsis ('...')")
    used = sum(1 for k in key if not (k is None or k is Ellipsis))
    if used > ndim:
        raise IndexError(f"too many indices for array: array is {ndim}-dimensional, "
                         f"but {used} were indexed")
    if n_ellipsis:
        i = next(p for p, k in enumerate(key) if k is Ellipsis)
        key[i:i + 1] = [slice(None)] * (ndim - used)
    else:
        key += [slice(None)] * (ndim - used)
    return key


def basic_map(shape: tuple[int, ...], items: list[Any]) -> tuple[tuple[int, ...], list[int],
                                                                  list[list[int]]]:
    """Result shape and affine map of slices, integers and None over ``shape``."""
    out_shape: list[int] = []
    offs: list[int] = []
    rows: list[tuple[int, int]] = []  # per source dim: (result dim or -1, step)
    dim = 0
    for k in items:
        if k is None:
            out_shape.append(1)
            continue
        n = shape[dim]
        if isinstance(k, slice):
            if k.step == 0:
                raise ValueError("slice step cannot be zero")
            start, stop, step = k.indices(n)
            length = len(range(start, stop, step))
            offs.append(start if length else 0)
            rows.append((len(out_shape), step))
            out_shape.append(length)
        else:
            try:
                i = operator.index(k)
            except TypeError:
                raise IndexError(
                    "only integers, slices (`:`), ellipsis (`...`), None and integer "
                    f"arrays are valid indices, got {type(k).__name__}") from None
            if not -n <= i < n:
                raise IndexOutOfBoundsError(
                    f"index {i} is out of bounds for axis {dim} with size {n}")
            offs.append(i % n)
            rows.append((-1, 0))
        dim += 1
    m = len(out_shape)
    coeffs = [[step if d == r else 0 for d in range(m)] for r, step in rows]
    return tuple(out_shape), offs, coeffs


def _index_node(idx: Any, device: Any) -> Node:
    from ..creation import asarray

    if isinstance(idx, list):
        idx = np.asarray(idx)
        if idx.size == 0:
            idx = idx.astype(np.int64)
    if isinstance(idx, np.ndarray):
        idx = asarray(idx, device=device)
    if idx.dtype.kind == "b":
        raise IndexError("boolean mask indexing has a data-dependent shape and is not "
                         "supported; use fl.where(mask, x, other) or a reduction instead")
    if idx.dtype.kind not in "iu":
        raise DTypeError(f"arrays used as indices must be of integer type, got {idx.dtype}")
    return idx._node


def _split_advanced(arr: Array, key: Any) -> tuple[list[Any], int | None, Any]:
    items = _expand(key, arr.ndim)
    adv = [p for p, k in enumerate(items) if _is_index_array(k)]
    if len(adv) > 1:
        raise IndexError("only one integer-array index per indexing operation is supported; "
                         "index one axis at a time or use fl.take")
    if not adv:
        return items, None, None
    p = adv[0]
    index = items[p]
    items[p] = slice(None)
    # the array's dimension number in the result of the basic part
    result_dim = sum(1 for k in items[:p] if k is None or isinstance(k, slice))
    return items, result_dim, index


def getitem(arr: Array, key: Any) -> Array:
    items, adv_dim, index = _split_advanced(arr, key)
    shape, offs, coeffs = basic_map(arr.shape, items)
    out = arr if (shape == arr.shape and not any(offs) and all(
        c == [1 if d == k else 0 for d in range(len(shape))] for k, c in enumerate(coeffs))) \
        else view(arr, shape, offs, coeffs)
    if adv_dim is None:
        return out
    node = _index_node(index, arr.device)
    return Array._lazy(Gather(out._node, node, adv_dim), arr.device)


def take(a: Any, indices: Any, axis: int | None = None) -> Array:
    """``numpy.take``: elements of ``a`` at integer ``indices`` along ``axis``."""
    a = _coerce(a)
    if axis is None:
        a, axis = ravel(a), 0
    ax = normalize_axis(axis, a.ndim)
    if isinstance(indices, int | np.integer):
        key = (slice(None),) * ax + (int(indices),)
        return getitem(a, key)
    node = _index_node(indices, a.device)
    return Array._lazy(Gather(a._node, node, ax), a.device)


def _same_view(value: Any, target: Array) -> bool:
    if not isinstance(value, Array) or value.is_lazy or value.shape != target.shape:
        return False
    a, b = value._node, target._node
    return (a.storage is b.storage and a.offset == b.offset  # type: ignore[attr-defined]
            and a.view_strides() == b.view_strides())  # type: ignore[attr-defined]


def setitem(arr: Array, key: Any, value: Any, held: bool) -> None:
    from ..array import assign

    items, adv_dim, index = _split_advanced(arr, key)
    shape, offs, coeffs = basic_map(arr.shape, items)
    if arr.is_lazy:
        arr.eval()
    target = view(arr, shape, offs, coeffs) if shape != arr.shape or any(offs) else arr
    if adv_dim is None:
        if _same_view(value, target):
            return  # a[k] += b: the in-place operator already wrote through the view
        assign(target, value, cast="unsafe", value_is_held=held)
        return
    node = _index_node(index, arr.device)
    leaf = target._node
    strides = leaf.view_strides()  # type: ignore[attr-defined]
    result_shape = shape[:adv_dim] + node.shape + shape[adv_dim + 1:]
    dest = Target(leaf.storage, strides, leaf.offset,  # type: ignore[attr-defined]
                  scatter=(adv_dim, node, shape[adv_dim]))
    assign(target, value, cast="unsafe", value_is_held=held, scatter=(dest, result_shape))


__all__ = ["take"]
