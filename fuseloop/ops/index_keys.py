"""Reading an indexing key without the array's buffers: its items one per axis, the
affine map of its basic part, its index arrays' broadcast shape, and the hashable
forms the caches of :mod:`fuseloop.ops.indexing` are keyed by."""

from __future__ import annotations

import operator
from typing import Any

import numpy as np

from ..array import Array
from ..errors import DTypeError, IndexOutOfBoundsError, InvalidIndexError
from ..trace_hooks import trace_checks


def _is_index_array(k: Any) -> bool:
    return isinstance(k, Array | np.ndarray | list)


def _is_mask(k: Any) -> bool:
    return isinstance(k, Array | np.ndarray) and k.dtype.kind == "b"


def _host_lists(key: Any) -> list[Any]:
    """The key as a list, nested lists as numpy arrays (numpy: a list of bools is a mask)."""
    items = list(key) if isinstance(key, tuple) else [key]
    out = []
    for k in items:
        if isinstance(k, list):
            k = np.asarray(k)
            if k.size == 0 and k.dtype.kind == "f":
                k = k.astype(np.int64)  # numpy's reading of ``x[[]]``
        elif isinstance(k, bool | np.bool_):
            raise InvalidIndexError(
                f"a scalar boolean index (x[{bool(k)}]) is not supported; use a boolean "
                "array or fl.where")
        out.append(k)
    return out


def _expand(key: Any, ndim: int) -> list[Any]:
    """The key as one item per dimension (Ellipsis expanded, None kept, a mask spanning
    as many dimensions as it has)."""
    key = _host_lists(key)
    n_ellipsis = sum(k is Ellipsis for k in key)
    if n_ellipsis > 1:
        raise InvalidIndexError("an index can only have a single ellipsis ('...')")
    used = sum(k.ndim if _is_mask(k) else 1 for k in key if not (k is None or k is Ellipsis))
    if used > ndim:
        raise InvalidIndexError(f"too many indices for array: array is {ndim}-dimensional, "
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
                raise InvalidIndexError(
                    "only integers, slices (`:`), ellipsis (`...`), None, integer arrays "
                    f"and boolean arrays are valid indices, got {type(k).__name__}") from None
            if not -n <= i < n:
                raise IndexOutOfBoundsError(
                    f"index {i} is out of bounds for axis {dim} with size {n}")
            offs.append(i % n)
            rows.append((-1, 0))
        dim += 1
    m = len(out_shape)
    coeffs = [[step if d == r else 0 for d in range(m)] for r, step in rows]
    return tuple(out_shape), offs, coeffs


def _check_index_dtype(dtype: np.dtype) -> None:
    if dtype.kind == "b":
        raise InvalidIndexError("a boolean array is a mask over the axes it indexes, not an "
                                "index along one (fl.take); use fl.nonzero(mask) for positions")
    if dtype.kind not in "iu":
        raise DTypeError(f"arrays used as indices must be of integer type, got {dtype}")


def _index_shape(nodes: list[Any]) -> tuple[int, ...]:
    shapes = [n.shape for n in nodes]
    try:
        return tuple(np.broadcast_shapes(*shapes))
    except ValueError:
        shown = " ".join(str(tuple(s)) for s in shapes)
        raise InvalidIndexError("shape mismatch: indexing arrays could not be broadcast "
                                f"together with shapes {shown}") from None


def _is_identity(old: tuple[int, ...], shape: tuple[int, ...], offs: list[int],
                 coeffs: list[list[int]]) -> bool:
    return shape == old and not any(offs) and all(
        c == [1 if d == k else 0 for d in range(len(shape))] for k, c in enumerate(coeffs))


def _zero_d_mask(key: Any) -> bool | None:
    """The value of ``key`` when it is one 0-d boolean array (read to the host: it
    decides the result's shape), else None."""
    if isinstance(key, Array | np.ndarray) and key.ndim == 0 and key.dtype == np.bool_:
        return bool(key)
    return None


def _basic_key(key: Any) -> tuple | None:
    """``key`` as a hashable tuple when it holds only Python ints, slices of ints and
    None, None and Ellipsis (a slice as its (start, stop, step)), else None."""
    out = []
    for k in (key if type(key) is tuple else (key,)):
        t = type(k)
        if t is slice:
            a, b, c = k.start, k.stop, k.step
            if (a is None or type(a) is int) and (b is None or type(b) is int) and (
                    c is None or type(c) is int):
                out.append((a, b, c))
                continue
            return None
        if t is not int and k is not None and k is not Ellipsis:
            return None
        out.append(k)
    return tuple(out)


# stands for a device index array in a key of :func:`_fancy_statics`
_INDEX_ARRAY = "[]"


def _fancy_statics(arr: Array, key: Any) -> tuple[tuple, list[Array]] | None:
    """``key`` as a hashable tuple (each integer array of ``arr``'s device as
    :data:`_INDEX_ARRAY`, slices as their fields, ints, None and Ellipsis as they are)
    and its index arrays, in order, when it holds at least one such array and nothing
    but these items (no host arrays, lists or masks: their values shape the result or
    are checked on the host); else None."""
    if trace_checks:  # (fl.fuse's trace watches what is built)
        return None
    out: list[Any] = []
    arrays: list[Array] = []
    for k in (key if type(key) is tuple else (key,)):
        t = type(k)
        if t is Array:
            if k.dtype.kind not in "iu" or k.device is not arr.device:
                return None
            out.append(_INDEX_ARRAY)
            arrays.append(k)
        elif t is slice:
            a, b, c = k.start, k.stop, k.step
            if not ((a is None or type(a) is int) and (b is None or type(b) is int)
                    and (c is None or type(c) is int)):
                return None
            out.append((a, b, c))
        elif t is int or k is None or k is Ellipsis:
            out.append(k)
        else:
            return None
    return (tuple(out), arrays) if arrays else None
