"""Sorting, searching and set functions: ``sort``, ``argsort``, ``searchsorted``,
``unique_*`` and ``isin``.

``sort`` and ``argsort`` run fuseloop's radix sort (:mod:`fuseloop.ops.radix_sort`) on
OpenCL devices, CuPy's on CUDA ones: the sorted axis is moved last and made contiguous,
and all rows sort at once, stably by value, then by row.  Where fuseloop's sort cannot
run (2^32 elements or more, a tiny local memory) pyopencl's ``RadixSort`` does, with keys
from :func:`_key_expr`.  Both are stable, so ``stable=True`` and ``descending=True``
keep equal elements in their original order.  ``searchsorted`` is a branch-free binary
search fused into the consumer's kernel (one gather per halving, O(n log m)); ``isin``
sorts its second argument and searches it the same way; the ``unique_*`` functions sort
once and compact with the boolean-mask machinery.
"""

from __future__ import annotations

import threading
from typing import Any, NamedTuple

import numpy as np

from .. import caches as _caches
from ..array import Array, _coerce
from ..backends import require_backend
from ..dtypes import c_type_name
from ..errors import DTypeError, ShapeError
from ..expr.nodes import Gather, Iota
from ..runtime.devices import Device
from . import radix_sort
from .shape import concatenate, moveaxis, normalize_axis, ravel, reshape

_INT64 = np.dtype(np.int64)
# (device, dtype, descending, pass) -> a RadixSort; a few per dtype and device
_SORTERS: dict[tuple, Any] = {}
_lock = threading.Lock()
_caches.register("ops.sorting.sorters", _SORTERS.clear, lambda: len(_SORTERS),
                 why="one per device, dtype and direction")


def _key_expr(dt: np.dtype, descending: bool) -> tuple[str, str, int]:
    """(key C expression of ``v[i]``, key C type, key bits): unsigned keys in the values'
    order, NaN (any sign) the largest, -0.0 as 0.0; inverted (NaN kept last) descending."""
    bits = dt.itemsize * 8
    kt = "ulong" if bits == 64 else "uint"
    wide = {8: "uchar", 16: "ushort", 32: "uint", 64: "ulong"}[bits]
    sign = f"(({wide})1 << {bits - 1})"
    if dt.kind == "f":
        bits_of = f"as_{wide}(v[i])"
        key = (f"(v[i] == 0 ? {sign} : (({bits_of} & {sign}) ? ~{bits_of} "
               f": ({bits_of} | {sign})))")
        key = f"(~{key})" if descending else key
        return f"(v[i] != v[i] ? ~(({kt})0) : ({kt}){key})", kt, bits
    key = f"(({wide})v[i] ^ {sign})" if dt.kind == "i" else f"(({wide})v[i])"
    key = f"({kt}){key}"
    return (f"(~{key})" if descending else key), kt, bits


def _sorter(device: Device, dt: np.dtype, descending: bool, by_row: bool) -> Any:
    key = (device, dt, descending, by_row)
    with _lock:
        sorter = _SORTERS.get(key)
        if sorter is None:
            from pyopencl.algorithm import RadixSort

            expr, kt, _ = _key_expr(dt, descending)
            if by_row:
                expr, kt = "(ulong)(idx[i] / row)", "ulong"
            sorter = _SORTERS[key] = RadixSort(
                device.context,
                f"__global {c_type_name(dt)} *v, __global long *idx, long row",
                key_expr=expr, sort_arg_names=["v", "idx"], bits_at_a_time=4,
                key_dtype=np.dtype(np.uint64 if kt == "ulong" else np.uint32))
    return sorter


class _Sorted(NamedTuple):
    values: Array  # the rows sorted, shape (rows, n)
    order: Array  # int64 positions within each row


def _sort_rows(x: Array, descending: bool, values: bool = True,
               order: bool = True) -> _Sorted:
    """Sort each row (last axis) of ``x``, stably (fuseloop's radix sort on OpenCL
    devices, CuPy's sort on CUDA devices); ``values`` / ``order``: whether the sorted
    values / the positions are wanted (the other field is then a placeholder)."""
    if x.dtype.kind == "c":
        return _complex_sort_rows(x, descending, values)
    if x.dtype.kind not in "biuf":
        raise DTypeError(f"cannot sort an array of {x.dtype}")
    n = x.shape[-1] if x.ndim else 1
    src = x if x.dtype != np.bool_ else x.astype(np.uint8)
    src = src.copy().eval() if src.is_lazy or not src.is_contiguous else src
    if x.size <= 1:
        idx = Array._lazy(Iota((x.size,), _INT64), x.device).eval()
        return _Sorted(x.copy(), reshape(idx, x.shape))
    if x.device.backend == "cuda":
        from .cupy_ops import sort_rows

        v, i = sort_rows(src, x.size // n, n, descending)
        if x.dtype == np.bool_:
            v = v.astype(np.bool_)
        return _Sorted(reshape(v, x.shape), reshape(i, x.shape))
    require_backend(x.device, "sorting")
    layout = radix_sort.layout_for(x.device, max(src.dtype.itemsize, 4),
                                   order or x.size > n, x.size)
    if layout is None:  # (2^32 elements or more, or a tiny local memory)
        return _pyopencl_sort_rows(x, src, n, descending)
    return _radix_sort_rows(x, src, n, descending, values, order, layout)


def _complex_sort_rows(x: Array, descending: bool, values: bool) -> _Sorted:
    """:func:`_sort_rows` of complex ``x`` in numpy's order: numbers by real part, then
    imaginary part; then ``R+nanj`` by real part, ``nan+Rj`` by imaginary part, and
    ``nan+nanj`` (NaN parts last whatever the direction).  Three stable sorts of real
    keys, the least significant first: imaginary part, the main part, NaN class."""
    from ..ufuncs import FUNCTIONS, where
    from .manipulation import take_along_axis

    isnan = FUNCTIONS["isnan"]
    re, im = x.real, x.imag
    re_nan, im_nan = isnan(re), isnan(im)
    nan_class = re_nan.astype(np.uint8) * np.uint8(2) + im_nan.astype(np.uint8)
    zero = re.dtype.type(0)
    main = where(re_nan, where(im_nan, zero, im), re)
    minor = where(re_nan | im_nan, zero, im)
    order: Array | None = None
    for key, down in ((minor, descending), (main, descending), (nan_class, False)):
        if order is not None:
            key = take_along_axis(key, order, axis=-1)
        step = _sort_rows(key, down, values=False).order
        order = step if order is None else take_along_axis(order, step, axis=-1)
    assert order is not None
    order = order.eval()
    return _Sorted(take_along_axis(x, order, axis=-1) if values else order, order)


def _radix_sort_rows(x: Array, src: Array, n: int, descending: bool, values: bool,
                     order: bool, layout: radix_sort.Layout) -> _Sorted:
    """:func:`_sort_rows` through :mod:`fuseloop.ops.radix_sort`: the values from the
    keys when only they are wanted, else sorted positions (ties by position, -0.0 as
    0.0) and the values gathered through them."""
    dev, size = x.device, x.size
    done = radix_sort.sort_keys(src, n, descending, order, order, layout, not order)
    if not order:
        got = done.values
        if got is None:
            assert done.keys is not None
            got = radix_sort.values_of(done.keys, src.dtype, size, descending, layout, dev)
        got = got.astype(np.bool_) if x.dtype == np.bool_ else got
        return _Sorted(reshape(got, x.shape), got)
    assert done.positions is not None
    flat = Array._concrete(done.positions, np.dtype(np.uint32), (size,)).astype(_INT64)
    got = flat
    if values:
        got = reshape(src, (size,))[flat]
        got = got.astype(np.bool_) if x.dtype == np.bool_ else got
    within = flat % n if size > n else flat  # (the position in its row)
    return _Sorted(reshape(got, x.shape), reshape(within, x.shape))


def _pyopencl_sort_rows(x: Array, src: Array, n: int, descending: bool) -> _Sorted:
    """:func:`_sort_rows` through pyopencl's radix sort (45 times slower than fuseloop's
    on an H100): where fuseloop's cannot run."""
    import pyopencl.array as cla

    from ..creation import asarray

    idx = Array._lazy(Iota((x.size,), _INT64), x.device).eval()
    dev, queue = x.device, x.device.queue
    v = cla.Array(queue, (x.size,), src.dtype, data=src._storage.buffer)  # type: ignore[union-attr]
    i = cla.Array(queue, (x.size,), _INT64, data=idx._storage.buffer)  # type: ignore[union-attr]
    key_bits = _key_expr(src.dtype, descending)[2]
    (v, i), _ = _sorter(dev, src.dtype, descending, False)(v, i, np.int64(n),
                                                            key_bits=key_bits, queue=queue)
    rows = x.size // n
    if rows > 1:
        (v, i), _ = _sorter(dev, src.dtype, descending, True)(
            v, i, np.int64(n), key_bits=(rows - 1).bit_length(), queue=queue)
    values, order = asarray(v, device=dev), asarray(i, device=dev)
    if x.dtype == np.bool_:
        values = values.astype(np.bool_)
    return _Sorted(reshape(values, x.shape), reshape(order % n, x.shape))


def _along(x: Any, axis: int, descending: bool, values: bool) -> tuple[_Sorted, int]:
    x = _coerce(x)
    if x.ndim == 0:
        raise ShapeError("sort and argsort need an array of at least one dimension")
    ax = normalize_axis(axis, x.ndim)
    return _sort_rows(moveaxis(x, ax, -1), descending, values, not values), ax


def sort(x: Any, /, *, axis: int = -1, descending: bool = False,
         stable: bool = True) -> Array:
    """``x`` sorted along ``axis`` (NaNs last; a stable radix sort on the device)."""
    done, ax = _along(x, axis, descending, True)
    return moveaxis(done.values, -1, ax)


def argsort(x: Any, /, *, axis: int = -1, descending: bool = False,
            stable: bool = True) -> Array:
    """The positions that sort ``x`` along ``axis`` (int64; stable: ties keep their order)."""
    done, ax = _along(x, axis, descending, False)
    return moveaxis(done.order, -1, ax)


def _nan_aware_less(a: Array, v: Array, or_equal: bool, v_nan: Array | None) -> Array:
    """``a < v`` (``a <= v``) in sort order, where NaN is larger than every number;
    ``v_nan``: ``isnan(v)`` (None where neither is a float)."""
    from ..ufuncs import FUNCTIONS

    if v_nan is None:
        return a <= v if or_equal else a < v
    if or_equal:
        return (a <= v) | v_nan
    return (a < v) | (v_nan & ~FUNCTIONS["isnan"](a))


def _rank_in_sorted(s: Array, v: Array, or_equal: bool) -> Array:
    """How many of the sorted 1-D ``s`` are below ``v`` (``<= v`` with ``or_equal``) in
    sort order (NaN last), for each element of ``v``: a branch-free binary search in
    the consumer's kernel, one unchecked gather per halving of the step (its position
    clamped into range), so O(v.size * log2(len(s))) work.  Its ~15 operations a step
    are built once per structure of ``s`` and ``v`` and then copied
    (:func:`~fuseloop.expr.templates.composite_of`)."""
    from ..expr.templates import composite_of

    return composite_of("rank_in_sorted", (s, v), lambda: _search(s, v, or_equal),
                        or_equal)


def _search(s: Array, v: Array, or_equal: bool) -> Array:
    """:func:`_rank_in_sorted`'s expression, built."""
    from ..ufuncs import FUNCTIONS, astype, where

    m = s.shape[0]
    found: Any = astype(v < v, _INT64)  # (zeros of v's shape: NaN < NaN too)
    floats = s.dtype.kind == "f" or v.dtype.kind == "f"
    v_nan = FUNCTIONS["isnan"](v) if floats else None
    step = 1 << (m.bit_length() - 1) if m else 0
    while step:
        # the predicate is true on a prefix of s: grow the prefix by step where it holds
        # for the step's last element
        pos = FUNCTIONS["minimum"](found + (step - 1), m - 1)
        a = Array._lazy(Gather(s._node, pos._node, 0, checked=False), v.device)
        grown = found + step
        found = where((grown <= m) & _nan_aware_less(a, v, or_equal, v_nan), grown, found)
        step >>= 1
    return found


def searchsorted(x1: Any, x2: Any, /, *, side: str = "left", sorter: Any = None) -> Array:
    """Insertion positions of ``x2`` in the sorted 1-D ``x1`` (``numpy.searchsorted``;
    NaN sorts last): a binary search per value, fused into the consumer's kernel
    (O(x2.size * log2(len(x1))))."""
    from ..creation import asarray
    from ..dtypes import result_type

    x1, x2 = _coerce(x1), _coerce(x2)
    if not isinstance(x1, Array):  # (host data: as numpy takes it)
        x1 = asarray(np.asarray(x1), device=x2.device if isinstance(x2, Array) else None)
    if not isinstance(x2, Array):
        x2 = asarray(np.asarray(x2), device=x1.device)
    if x1.ndim != 1:
        raise ShapeError(f"searchsorted: x1 must be 1-D, got shape {x1.shape}")
    if side not in ("left", "right"):
        raise ValueError(f"searchsorted: side must be 'left' or 'right', not {side!r}")
    if sorter is not None:
        # (gathered once: each step of the search would gather through it again)
        x1 = x1[_coerce(sorter)].eval()
    dt = result_type(x1.dtype, x2.dtype)
    if x1.dtype.kind == "c" or x2.dtype.kind == "c":
        raise DTypeError(f"searchsorted: complex values ({x1.dtype}, {x2.dtype}) are not "
                         "supported; search the real parts (fl.real)")
    s = x1.astype(dt, copy=False)
    if s.is_lazy:  # (computed once, not at each step's gather)
        s = s.eval()
    return _rank_in_sorted(s, x2.astype(dt, copy=False), side == "right")


def isin(x1: Any, x2: Any, /, *, invert: bool = False) -> Array:
    """Whether each element of ``x1`` is in ``x2`` (``numpy.isin``; NaN is in nothing):
    ``x2`` sorted once, then a binary search per element of ``x1``
    (O((x1.size + x2.size) * log2(x2.size)))."""
    from ..dtypes import result_type
    from ..ufuncs import FUNCTIONS

    x1, x2 = _coerce(x1), _coerce(x2)
    if not isinstance(x1, Array):
        raise TypeError("isin: x1 must be an array")
    if not isinstance(x2, Array):
        from ..creation import asarray

        x2 = asarray(np.asarray(x2), device=x1.device)
    dt = result_type(x1.dtype, x2.dtype)
    if dt.kind == "c":
        raise DTypeError(f"isin: complex values ({x1.dtype}, {x2.dtype}) are not supported")
    n = x2.size
    if n == 0:
        from ..creation import full

        return full(x1.shape, invert, dtype=np.bool_, device=x1.device)
    s = sort(ravel(x2).astype(dt, copy=False))
    v = x1.astype(dt, copy=False)
    pos = FUNCTIONS["minimum"](_rank_in_sorted(s, v, False), n - 1)
    found = Array._lazy(Gather(s._node, pos._node, 0, checked=False), x1.device)
    hit = found == v  # (the first element not below v: equal when v is in x2)
    return ~hit if invert else hit


class UniqueAll(NamedTuple):
    values: Array
    indices: Array
    inverse_indices: Array
    counts: Array


class UniqueCounts(NamedTuple):
    values: Array
    counts: Array


class UniqueInverse(NamedTuple):
    values: Array
    inverse_indices: Array


def _unique(x: Any) -> tuple[Array, _Sorted, Array, Array]:
    """(flattened x, its sort, the first-of-a-run mask, the runs' starts) of ``x``:
    each NaN is a value of its own (NaN != NaN), as the Array API asks."""
    from .masks import flatnonzero

    x = _coerce(x)
    flat = ravel(x)
    done = _sort_rows(flat, False)
    s = done.values
    if s.size == 0:
        return flat, done, s != s, Array._lazy(Iota((0,), _INT64), x.device)
    first = concatenate([reshape(s[:1] == s[:1], (1,)), s[1:] != s[:-1]])
    first = first.eval()
    return flat, done, first, flatnonzero(first)


def unique_values(x: Any, /) -> Array:
    """The distinct values of ``x``, sorted (1-D)."""
    _, done, first, _ = _unique(x)
    return done.values[first]


def unique_counts(x: Any, /) -> UniqueCounts:
    """The distinct values of ``x`` and how often each occurs."""
    flat, done, first, starts = _unique(x)
    return UniqueCounts(done.values[first], _counts(starts, flat.size))


def _counts(starts: Array, n: int) -> Array:
    from .manipulation import diff

    end = Array._lazy(Iota((1,), _INT64, None, n), starts.device)
    return diff(starts, append=end).astype(_INT64)


def _inverse(x: Any, done: _Sorted, first: Array) -> Array:
    """Each element's position among the distinct values, in ``x``'s shape."""
    from ..creation import empty
    from .scan import cumulative_sum

    x = _coerce(x)
    rank = cumulative_sum(first, dtype=_INT64) - 1
    inverse = empty(x.size, dtype=_INT64, device=x.device)
    if x.size:
        inverse[done.order] = rank
    return reshape(inverse, x.shape)


def unique_inverse(x: Any, /) -> UniqueInverse:
    """The distinct values of ``x`` and, for each element, the position of its value."""
    _, done, first, _ = _unique(x)
    return UniqueInverse(done.values[first], _inverse(x, done, first))


def unique_all(x: Any, /) -> UniqueAll:
    """Distinct values, the index of each one's first occurrence, each element's position
    among them, and the counts."""
    flat, done, first, starts = _unique(x)
    return UniqueAll(done.values[first], done.order[starts], _inverse(x, done, first),
                     _counts(starts, flat.size))


__all__ = ["argsort", "isin", "searchsorted", "sort", "unique_all", "unique_counts",
           "unique_inverse", "unique_values"]
