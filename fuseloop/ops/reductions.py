"""Reductions with numpy's names, dtypes and NaN rules, fused with their producers.

``fl.sum(x * y)`` computes ``x * y`` inside the reduction loop (no temporary);
``x - x.mean(axis=-1, keepdims=True)`` computes the mean once per row inside the
consuming kernel; several reductions of one input evaluated together with
:func:`fuseloop.compute` share one pass.
"""

from __future__ import annotations

import builtins
import math
import os
from typing import Any

import numpy as np

from .. import caches as _caches
from ..array import Array, _coerce
from ..evaluate import cast_node
from ..expr.nodes import Apply, Iota, Leaf, Reduce
from ..expr.templates import array_key, by_call, call_key, composite, note_call, watch_settings
from ..expr.views import reshape_view
from ..host_eager import HostArray as _HostArray
from ..host_path import host_device as _host_device
from ..host_products import arg_reduce as _eager_arg
from ..host_products import reduce as _eager_reduce
from ..multi_hooks import splits
from .shape import normalize_axes, normalize_axis, ravel, reshape, transpose

_BOOL = np.dtype(np.bool_)
_UINT8 = np.dtype(np.uint8)
_INT64 = np.dtype(np.int64)
_INT32 = np.dtype(np.int32)


def _merged(node: Any, axes: tuple[int, ...]) -> tuple[Any, tuple[int, ...]]:
    """Merge runs of neighbouring reduced axes when the data allow.

    A full reduction of a contiguous 2-D array becomes one flat loop, which
    vectorises, instead of two nested index computations.
    """
    shape = node.shape
    if len(shape) <= 1:
        return node, axes
    groups: list[list[int]] = []
    for d in range(len(shape)):
        if groups and d in axes and groups[-1][-1] in axes:
            groups[-1].append(d)
        else:
            groups.append([d])
    if len(groups) == len(shape):
        return node, axes
    new_shape = tuple(math.prod(shape[d] for d in g) for g in groups)
    merged = reshape_view(node, new_shape)
    if merged is None:
        return node, axes
    return merged, tuple(k for k, g in enumerate(groups) if g[0] in axes)


#: the fewest elements for which a CPU reduction over a trailing run and other axes is
#: split in two steps (see _reduce): below, a second kernel's launch costs more
ROWS_FIRST_MIN = 1 << 16
#: the least extent of the one other reduced axis for which a two-step CPU reduction
#: reduces it first, keeping the trailing run (see :func:`_split_steps`)
COLUMNS_FIRST_MIN = 16
# (composites record what they built: a new value forgets those records)
watch_settings(__name__, frozenset({"ROWS_FIRST_MIN", "COLUMNS_FIRST_MIN"}))


def _rows_first(x: Array, child: Any, red: tuple[int, ...]) -> bool:
    """Whether to reduce ``child`` over ``red`` in two steps: the trailing axis and
    other reduced axes ``red`` (not neighbours of it: :func:`_merged` joined those), on
    CPU devices, for arrays of :data:`ROWS_FIRST_MIN` elements or more."""
    return (len(red) > 1 and red[-1] == len(child.shape) - 1 and child.shape[-1] > 1
            and math.prod(child.shape) >= ROWS_FIRST_MIN
            and getattr(x.device, "type", None) == "cpu")


def _split_steps(op: str, child: Any, red: tuple[int, ...],
                 dtype: np.dtype) -> tuple[Any, tuple[int, ...]]:
    """The first step of a two-step reduction (:func:`_rows_first`) and the axes left
    for the second.  One loop over both took an integer division and modulo per
    element.  Where one other axis is reduced and it shrinks the array
    :data:`COLUMNS_FIRST_MIN` times or more, it goes first: a column walk over the
    contiguous trailing run, whose loads vectorise across neighbouring outputs, then
    short rows over a result that many times smaller.  Else the trailing run goes
    first (a rows kernel), then the rest: with few other rows to sum, the columns'
    result is nearly the input again, and several other axes would be one loop."""
    lead = red[:-1]
    if len(lead) == 1 and child.shape[lead[0]] >= COLUMNS_FIRST_MIN:
        first = Reduce(op, child, lead, dtype)
        return first, (len(first.shape) - 1,)
    return Reduce(op, child, (red[-1],), dtype), lead


#: the most elements a reduction called on a concrete array (``x.sum(axis=0)``, not
#: one inside a composite or of an expression) on a CPU device reads when numpy computes
#: it at once (:func:`fuseloop.host_products.reduce`): numpy's one single-threaded pass
#: against a launch.  On a 2-core EPYC (PoCL 3.0; benchmarks/probes/reduce_now_crossover.py)
#: numpy took 0.15-0.45 of the kernels' CPU time at 2^18 float32 or int32 (sums and maxima
#: of rows, columns, all, two axes), so less wall time even with both cores the kernels';
#: at 2^20 0.4-0.9 of it (a sum over axes 0 and 2: 1.3), about their wall time, at 2^22
#: 0.6-0.9 (columns 0.3-0.4), more wall time: the crossover
REDUCE_NOW_MAX = 1 << 20


def _now(op: str, x: Any, axis: Any, keepdims: bool, dtype: Any) -> Array | None:
    """``x.sum`` (``op`` ``"sum"``, ``dtype`` as requested), ``x.max`` or ``x.min``
    of the concrete array ``x`` computed now by numpy (:data:`REDUCE_NOW_MAX`), or
    None.  Called first by the public functions only: a composite building on a
    reduction (a mean, a variance) keeps it lazy, fused where it is used; so does a
    ``keepdims`` one, made to broadcast against its input (``x - x.max(axis=1,
    keepdims=True)``: fused, it costs its consumer's kernel nothing; computed now, numpy's
    pass and a buffer for it: a row softmax and logsumexp of 2^16 took 1.5x the time)."""
    if keepdims or type(x) is not Array or x._storage is None \
            or not 0 < math.prod(x._shape) <= REDUCE_NOW_MAX or not _host_device(x.device):
        return None
    acc = _sum_dtype(x.dtype, dtype) if op == "sum" else x.dtype
    return _eager_reduce(op, x, axis, keepdims, acc)


def _reduce(op: str, x: Array, axis: Any, keepdims: bool, dtype: np.dtype,
            call: tuple | None = None) -> Array:
    """``op`` over ``axis`` (as the caller wrote it); ``call``: the caller's
    :func:`call_key` of ``x``, under which the template is entered too."""
    if type(x) is _HostArray and (got := _eager_reduce(op, x, axis, keepdims, dtype)) \
            is not None:
        return got  # (small, on the CPU: numpy's now, fuseloop.host_products)
    axes = normalize_axes(axis, x.ndim)
    key = array_key("reduce", x, op, axes, keepdims, dtype)
    out = composite(key, x, lambda: _reduce_built(op, x, axes, keepdims, dtype))
    note_call(call, key)
    return out


def _reduce_built(op: str, x: Array, axes: tuple[int, ...], keepdims: bool,
                  dtype: np.dtype) -> Array:
    if op in ("max", "min") and x.dtype.kind == "c":
        return _complex_extreme(x, axes, keepdims, op == "max")
    node = cast_node(x._node, dtype) if op in ("sum", "prod") else x._node
    if node.dtype != dtype:
        node = cast_node(node, dtype)
    kept_shape = tuple(n for d, n in enumerate(x.shape) if d not in axes)
    child, red = _merged(node, axes)
    if _rows_first(x, child, red):
        child, red = _split_steps(op, child, red, dtype)
    if keepdims:
        full = tuple(1 if d in axes else n for d, n in enumerate(x.shape))
        return Array._lazy(Reduce(op, child, red, dtype, full), x.device)
    out = Reduce(op, child, red, dtype)
    assert out.shape == kept_shape
    return Array._lazy(out, x.device)


_SUM_DTYPES: dict[np.dtype, np.dtype] = {}
_caches.register("ops.reductions.sum_dtypes", _SUM_DTYPES.clear, lambda: len(_SUM_DTYPES),
                 why="one per dtype")


def _sum_dtype(dtype: np.dtype, requested: Any) -> np.dtype:
    if requested is not None:
        return np.dtype(requested)
    out = _SUM_DTYPES.get(dtype)
    if out is None:  # numpy's own rule (int32 -> int64, ...)
        out = _SUM_DTYPES[dtype] = np.sum(np.zeros(1, dtype)).dtype
    return out


def _check_identity(x: Array, axes: tuple[int, ...], name: str) -> None:
    # (most shapes have no empty axis: no generator made for them)
    if 0 in x._shape and builtins.any(x._shape[d] == 0 for d in axes):
        raise ValueError(f"zero-size array to reduction operation {name} which has no "
                         f"identity (shape {x.shape})")


def _call(name: str, x: Any, axis: Any, *rest: Any) -> tuple | None:
    """:func:`call_key` of a reduction called so (its template, if recorded, is copied
    at once); None for axes that are not Python ints (``1.0`` and ``True`` hash as 1)."""
    t = type(axis)
    # (a tuple's items checked in C: a generator's frame resumed per axis cost more)
    if axis is None or t is int or (t is tuple and _INT_ONLY.issuperset(map(type, axis))):
        return call_key(name, x, axis, *rest)
    return None


_INT_ONLY = frozenset((int,))


@splits("reduce")
def sum(x: Any, axis: Any = None, dtype: Any = None, keepdims: bool = False) -> Array:
    """Sum over ``axis`` (all by default), with numpy's result dtype."""
    if (got := _now("sum", x, axis, keepdims, dtype)) is not None:
        return got
    call = _call("sum", x, axis, dtype, keepdims)
    if (got := by_call(call, x)) is not None:
        return got
    x = _coerce(x)
    return _reduce("sum", x, axis, keepdims, _sum_dtype(x.dtype, dtype), call)


@splits("reduce")
def prod(x: Any, axis: Any = None, dtype: Any = None, keepdims: bool = False) -> Array:
    x = _coerce(x)
    dt = np.dtype(dtype) if dtype is not None else np.prod(np.ones(1, x.dtype)).dtype
    return _reduce("prod", x, axis, keepdims, dt)


@splits("reduce")
def max(x: Any, axis: Any = None, keepdims: bool = False) -> Array:
    """Largest element; NaN if any element is NaN (as ``numpy.max``)."""
    if (got := _now("max", x, axis, keepdims, None)) is not None:
        return got
    call = _call("max", x, axis, keepdims)
    if (got := by_call(call, x)) is not None:
        return got
    x = _coerce(x)
    _check_identity(x, normalize_axes(axis, x.ndim), "maximum")
    if x.dtype == _BOOL:
        return _reduce("max", x.astype(_UINT8), axis, keepdims, _UINT8).astype(_BOOL)
    return _reduce("max", x, axis, keepdims, x.dtype, call)


@splits("reduce")
def min(x: Any, axis: Any = None, keepdims: bool = False) -> Array:
    """Smallest element; NaN if any element is NaN (as ``numpy.min``)."""
    if (got := _now("min", x, axis, keepdims, None)) is not None:
        return got
    call = _call("min", x, axis, keepdims)
    if (got := by_call(call, x)) is not None:
        return got
    x = _coerce(x)
    _check_identity(x, normalize_axes(axis, x.ndim), "minimum")
    if x.dtype == _BOOL:
        return _reduce("min", x.astype(_UINT8), axis, keepdims, _UINT8).astype(_BOOL)
    return _reduce("min", x, axis, keepdims, x.dtype, call)


amax, amin = max, min


@splits("reduce")
def any(x: Any, axis: Any = None, keepdims: bool = False) -> Array:
    x = _coerce(x)
    return _reduce("max", x.astype(_BOOL).astype(_UINT8), axis, keepdims, _UINT8).astype(_BOOL)


@splits("reduce")
def all(x: Any, axis: Any = None, keepdims: bool = False) -> Array:
    x = _coerce(x)
    return _reduce("min", x.astype(_BOOL).astype(_UINT8), axis, keepdims, _UINT8).astype(_BOOL)


def _mean_dtypes(dtype: np.dtype, requested: Any) -> tuple[np.dtype, np.dtype]:
    """(accumulator, result) dtypes of ``numpy.mean``."""
    if requested is not None:
        dt = np.dtype(requested)
        return dt, dt
    if dtype.kind in "biu":
        return np.dtype(np.float64), np.dtype(np.float64)
    if dtype == np.float16:
        return np.dtype(np.float32), dtype
    return dtype, dtype


@splits("reduce")
def mean(x: Any, axis: Any = None, dtype: Any = None, keepdims: bool = False) -> Array:
    """Arithmetic mean; integers average in float64 (numpy's rule)."""
    call = _call("mean", x, axis, dtype, keepdims)
    if (got := by_call(call, x)) is not None:
        return got
    x = _coerce(x)
    axes = normalize_axes(axis, x.ndim)
    key = array_key("mean", x, axes, dtype, keepdims)
    out = composite(key, x, lambda: _mean_built(x, axes, dtype, keepdims))
    note_call(call, key)
    return out


def _mean_built(x: Array, axes: tuple[int, ...], dtype: Any, keepdims: bool) -> Array:
    acc, res = _mean_dtypes(x.dtype, dtype)
    count = math.prod(x.shape[d] for d in axes)
    total = _reduce("sum", x, axes, keepdims, acc)
    out = total / _divisor(count, acc) if count else total * acc.type(np.nan)
    return out.astype(res) if out.dtype != res else out


def _divisor(count: int, acc: np.dtype) -> Any:
    """``count`` as the divisor of a sum accumulated in ``acc``: a Python float for a
    float ``acc`` (a weak scalar: the quotient stays ``acc``, as with ``acc.type(count)``,
    and takes the operators' lean path), else ``acc.type(count)``."""
    return float(count) if acc.kind == "f" else acc.type(count)


def _ddof(ddof: Any, correction: Any) -> Any:
    """The degrees of freedom removed: numpy's ``ddof`` or the Array API's ``correction``."""
    if correction is None:
        return ddof
    if ddof != 0 and ddof != correction:
        raise ValueError(f"ddof={ddof} and correction={correction} disagree; pass one")
    return correction


@splits("reduce")
def var(x: Any, axis: Any = None, dtype: Any = None, ddof: Any = 0,
        keepdims: bool = False, *, correction: Any = None) -> Array:
    """Variance about the mean, computed in two passes (as numpy does); ``correction``
    is the Array API's name for ``ddof``.  Of complex values: the mean of
    ``|x - mean(x)|**2``, a real result (numpy's)."""
    ddof = _ddof(ddof, correction)
    x = _coerce(x)
    axes = normalize_axes(axis, x.ndim)
    return composite(array_key("var", x, axes, dtype, ddof, keepdims), x,
                     lambda: _var_built(x, axes, dtype, ddof, keepdims))


def _var_built(x: Array, axes: tuple[int, ...], dtype: Any, ddof: Any,
               keepdims: bool) -> Array:
    acc, res = _mean_dtypes(x.dtype, dtype)
    xa = x.astype(acc) if x.dtype != acc else x
    m = mean(xa, axis=axes, keepdims=True)
    d = xa - m
    n = math.prod(x.shape[k] for k in axes) - ddof
    if xa.dtype.kind == "c" and x.dtype.kind == "c":
        # (numpy: |d|^2, summed in the real type of the same precision; a real input
        # asked to average in a complex type keeps numpy's complex d * d)
        acc, res = _real_of(acc), _real_of(res)
        d = d.real * d.real + d.imag * d.imag
    else:
        d = d * d
    total = _reduce("sum", d, axes, keepdims, acc)
    # numpy divides by max(n - ddof, 0): a positive sum over no degrees of freedom is inf
    out = total / _divisor(builtins.max(n, 0), acc)
    return out.astype(res) if out.dtype != res else out


def _real_of(dtype: np.dtype) -> np.dtype:
    return np.empty(0, dtype).real.dtype if dtype.kind == "c" else dtype


@splits("reduce")
def std(x: Any, axis: Any = None, dtype: Any = None, ddof: Any = 0,
        keepdims: bool = False, *, correction: Any = None) -> Array:
    ddof = _ddof(ddof, correction)
    x = _coerce(x)
    axes = normalize_axes(axis, x.ndim)
    return composite(array_key("std", x, axes, dtype, ddof, keepdims), x,
                     lambda: _sqrt(var(x, axis=axes, dtype=dtype, ddof=ddof,
                                       keepdims=keepdims)))


def _sqrt(x: Array) -> Array:
    from ..ufuncs import FUNCTIONS

    return FUNCTIONS["sqrt"](x)


def _arg_extreme(x: Any, axis: Any, keepdims: bool, largest: bool,
                 call: tuple | None = None) -> Array:
    """argmax (``largest``) or argmin; ``call``: the caller's :func:`call_key` of ``x``,
    under which the template is entered too."""
    x = _coerce(x)
    if (got := _eager_arg(x, axis, keepdims, largest)) is not None:
        return got  # (a concrete array on the CPU: numpy's now, fuseloop.host_products)
    # (the mode is in the key: a changed setting builds afresh)
    one = _one_pass_arg(x, axis)
    key = array_key("argmax" if largest else "argmin", x, axis, keepdims, one)
    out = composite(key, x, lambda: _arg_extreme_built(x, axis, keepdims, largest, one))
    note_call(call, key)
    return out


def _arg_by_call(name: str, x: Any, axis: Any, keepdims: bool) -> tuple[Any, tuple | None]:
    """(the lazy arg-reduction copied from the template of an earlier call written so,
    or None; the call's key): the lazy call's build in a look-up, as for ``fl.sum``.  Not
    where numpy may compute it now (a concrete array on a host device: its answer wins)."""
    call = _call(name, x, axis, keepdims, ARG_ONE_PASS)  # (the mode decides the build)
    if call is None or (x._storage is not None and x.device.type == "cpu"
                        and _host_device(x.device)):
        return None, call
    return by_call(call, x), call


#: values of these dtypes fit the high half of a 64-bit (value, position) key
_KEYED = frozenset(np.dtype(t) for t in (np.float32, np.int8, np.int16, np.int32, np.uint8,
                                         np.uint16, np.uint32, np.bool_))
_UINT64 = np.dtype(np.uint64)


def arg_one_pass_setting(text: str) -> str:
    """``FUSELOOP_ARG_ONE_PASS``'s value as :data:`ARG_ONE_PASS` holds it: ``"0"``
    (``0``, ``off``, ``no``, ``false``), ``"1"`` (``1``, ``on``, ``yes``, ``true``) or
    ``"auto"`` (anything else)."""
    value = text.strip().lower()
    if value in ("0", "off", "no", "false"):
        return "0"
    return "1" if value in ("1", "on", "yes", "true") else "auto"


#: which arg-reductions take (value, position) keys in one pass: ``"auto"`` (GPUs),
#: ``"1"`` (every device) or ``"0"`` (never; see :func:`_one_pass_arg`).  Read from
#: ``FUSELOOP_ARG_ONE_PASS`` at import; assign ``"auto"``, ``"1"`` or ``"0"`` to change
#: it (the mode is part of a composite's template key, so nothing recorded goes stale;
#: an ``fl.fuse`` function keeps what it traced)
ARG_ONE_PASS = arg_one_pass_setting(os.environ.get("FUSELOOP_ARG_ONE_PASS", "auto"))
_INT32_MAX = int(np.iinfo(np.int32).max)


def _one_pass_arg(x: Array, axis: Any) -> bool:
    """Whether argmin/argmax of ``x`` along ``axis`` reduce (value, position) keys in
    one pass (:mod:`fuseloop.lower.arg_keys`) rather than in two (the extreme, then
    the first position holding it).  By :data:`ARG_ONE_PASS`.  ``auto`` takes GPUs,
    any axis: the two passes read the data twice (a whole array in four launches), and
    along the last axis, where the row kernel holds both passes in one launch over a
    cached row, the keys were still faster on an H100 (argmax over the rows of 4096 x
    4096 float32 under ``fl.fuse``: 0.046 against 0.052 ms).  On CPUs PoCL vectorises the
    float min and the int32 min of positions, where a CPU has no vector min of 64-bit
    keys before AVX-512 (2^22 float32 on PoCL: 2-5x slower)."""
    if x.dtype not in _KEYED or math.prod(x.shape) >= _INT32_MAX:
        return False
    mode = ARG_ONE_PASS
    if mode != "auto":
        return mode == "1"
    if getattr(x.device, "type", None) == "cpu":
        return False
    if axis is None or x.ndim <= 1:
        return True
    if not isinstance(axis, int | np.integer):
        return False
    return bool(-x.ndim <= axis < x.ndim)  # (out of range: the two-pass path raises numpy's error)


def _arg_extreme_built(x: Array, axis: Any, keepdims: bool, largest: bool,
                       one_pass: bool) -> Array:
    name = "argmax" if largest else "argmin"
    if axis is None:
        flat = ravel(x)
        out = _arg_extreme(flat, 0, False, largest)
        return reshape(out, (1,) * x.ndim) if keepdims else out
    ax = normalize_axis(axis, x.ndim)
    if x.shape[ax] == 0:
        raise ValueError(f"attempt to get {name} of an empty sequence")
    if x.dtype.kind == "c":
        return _complex_arg_extreme(x, ax, keepdims, largest)
    if one_pass:
        return _keyed_arg_extreme(x, ax, keepdims, largest)
    pieces = _arg_pieces(x, ax)
    if pieces > 1:
        return _arg_extreme_by_pieces(x, pieces, keepdims, largest)
    out = _first_extreme(x, ax, keepdims, largest)
    return out if out.dtype == _INT64 else out.astype(_INT64)


def _first_extreme(x: Array, ax: int, keepdims: bool, largest: bool) -> Array:
    """The first position of the extreme along ``ax`` in two passes (the extreme, then
    the least position holding it), int32 where the axis allows, else int64."""
    from ..ufuncs import FUNCTIONS, where

    best = (max if largest else min)(x, axis=ax, keepdims=True)
    if x.dtype.kind == "f":
        # numpy returns the first NaN when there is one, and then best is NaN and no
        # compare with it holds; else no element is NaN and only best is >= best (two
        # tests an element, not ==, two NaN tests and an and: CPU index pass -10%)
        hit = (x >= best if largest else x <= best) | FUNCTIONS["isnan"](x)
    else:
        hit = x == best
    strides = tuple(1 if d == ax else 0 for d in range(x.ndim))
    # The index pass carries 32-bit positions where they fit: a 64-bit one doubled the
    # local memory and compare-select work of the group combination on GPUs; the result
    # is widened to numpy's int64 in the same kernel.
    idx = _INT32 if x.shape[ax] < _INT32_MAX else _INT64
    position = Array._lazy(Iota(x.shape, idx, strides, 0), x.device)
    candidate = where(hit, position, idx.type(x.shape[ax]))
    return _reduce("min", candidate, ax, keepdims, idx)


def _arg_pieces(x: Array, ax: int) -> int:
    """Pieces to cut each row of a CPU arg-reduction along ``ax`` into (1: none).

    Few long contiguous rows (the last axis, as many rows and as long as the two-stage
    split of a sum wants: :func:`fuseloop.splits.two_stage_split`) of values a
    (value, position) key holds: the two passes would each read the whole array from
    memory (a launch each, the first split in pieces anyway).  The rows must be read
    contiguously (:func:`_reads_rows_contiguously`).  Cut into pieces, both
    passes run per piece in one rows kernel, the second over the piece just read (in
    cache), and only the pieces' results are keyed (:mod:`fuseloop.lower.arg_keys`),
    so no element pays for a 64-bit key.  The pieces are the split's count, or more
    where its pieces would be long enough to be split again, up to twice as many,
    dividing the row exactly (a reshape); else 1.
    """
    from ..splits import TWO_STAGE_MAX_ROWS, TWO_STAGE_MIN_LENGTH, piece_count

    length = x.shape[ax]
    if (getattr(x.device, "type", None) != "cpu" or ax != x.ndim - 1 or x.dtype not in _KEYED
            or length < TWO_STAGE_MIN_LENGTH or length >= _INT32_MAX
            or math.prod(x.shape) // length >= TWO_STAGE_MAX_ROWS
            or not _reads_rows_contiguously(x._node)):
        return 1
    least = builtins.max(2, piece_count(length, x.device),
                         -(-length // (TWO_STAGE_MIN_LENGTH - 1)))
    return next((p for p in range(least, 2 * least + 1) if length % p == 0), 1)


def _reads_rows_contiguously(node: Any) -> bool:
    """Whether every array ``node`` reads through elementwise operations steps by +1
    element along its last axis (or broadcasts along it).  Pieces of other rows
    (``x[::2]``, ``x[::-1]``) took the rows kernel's strided layout: over twice the CPU
    time of the two whole passes (PoCL, 2^20 float32)."""
    seen: set[int] = set()
    stack = [node]
    while stack:
        n = stack.pop()
        if id(n) in seen:
            continue
        seen.add(id(n))
        cls = type(n)
        if cls is Apply:
            stack.extend(n.args)
        elif cls is Leaf:
            if n.shape and n.shape[-1] != 1 and n.view_strides()[-1] != 1:
                return False
        elif cls is not Iota:
            return False
    return True


def _arg_extreme_by_pieces(x: Array, pieces: int, keepdims: bool, largest: bool) -> Array:
    """argmax/argmin along the last axis of ``x`` (see :func:`_arg_pieces`): each piece's
    extreme and first position in one rows pass, then the least of the pieces'
    (value, position) keys; its position, read back as int64, is numpy's answer (the
    first extreme; the first NaN where there is one: both keys order NaN first)."""
    lead, length = x.shape[:-1], x.shape[-1]
    chunk = length // pieces
    rows = reshape(x, (*lead, pieces, chunk))
    best = (max if largest else min)(rows, axis=-1)
    first = _first_extreme(rows, rows.ndim - 1, False, largest)
    strides = (*(0 for _ in lead), chunk)
    position = first + Array._lazy(Iota(best.shape, _INT32, strides, 0), x.device)
    op = "argmax_key" if largest else "argmin_key"
    keys = Array._lazy(Apply(op, (best._node, position._node), (x.dtype, _INT32, _UINT64),
                             best.shape), x.device)
    low = _reduce("min", keys, (keys.ndim - 1,), keepdims, _UINT64)._node
    return Array._lazy(Apply("arg_key_index", (low,), (_UINT64, _INT64), low.shape),
                       x.device)


def _keyed_arg_extreme(x: Array, ax: int, keepdims: bool, largest: bool) -> Array:
    """argmax/argmin of ``x`` along ``ax`` in one pass: the smallest of the elements'
    (value, position) keys (:mod:`fuseloop.lower.arg_keys`), its position read back
    as int64 in the kernel that combines the keys."""
    strides = tuple(1 if d == ax else 0 for d in range(x.ndim))
    position = Iota(x.shape, _INT32, strides, 0)
    op = "argmax_key" if largest else "argmin_key"
    keys = Array._lazy(Apply(op, (x._node, position), (x.dtype, _INT32, _UINT64), x.shape),
                       x.device)
    best = _reduce("min", keys, ax, keepdims, _UINT64)
    node = best._node
    return Array._lazy(Apply("arg_key_index", (node,), (_UINT64, _INT64), node.shape),
                       x.device)


def _complex_arg_extreme(x: Array, ax: int, keepdims: bool, largest: bool) -> Array:
    """argmax/argmin of complex ``x`` along ``ax`` in numpy's order: real parts, then
    imaginary parts; the first element with a NaN part wins where there is one."""
    from ..ufuncs import FUNCTIONS, where

    isnan, extreme = FUNCTIONS["isnan"], max if largest else min
    re, im = x.real, x.imag
    nan = isnan(re) | isnan(im)
    fill = -np.inf if largest else np.inf
    # the extreme real part among the numbers, then the extreme imaginary part among
    # the numbers that have it
    best_re = extreme(where(nan, fill, re), axis=ax, keepdims=True)
    best_im = extreme(where(nan | (re != best_re), fill, im), axis=ax, keepdims=True)
    hit = where(any(nan, axis=ax, keepdims=True), nan,
                (re == best_re) & (im == best_im) & ~nan)
    strides = tuple(1 if d == ax else 0 for d in range(x.ndim))
    position = Array._lazy(Iota(x.shape, _INT64, strides, 0), x.device)
    return _reduce("min", where(hit, position, np.int64(x.shape[ax])), ax, keepdims,
                   _INT64)


def _complex_extreme(x: Array, axes: tuple[int, ...], keepdims: bool,
                     largest: bool) -> Array:
    """max/min of complex ``x`` over ``axes`` (numpy's order, see
    :func:`_complex_arg_extreme`): the element at the arg-extreme of the reduced axes
    moved last and merged."""
    from .manipulation import take_along_axis

    kept = [d for d in range(x.ndim) if d not in axes]
    rows = reshape(transpose(x, (*kept, *axes)),
                   (*(x.shape[d] for d in kept), math.prod(x.shape[d] for d in axes)))
    at = _complex_arg_extreme(rows, rows.ndim - 1, True, largest)
    out = take_along_axis(rows, at, axis=-1)
    shape = (tuple(1 if d in axes else n for d, n in enumerate(x.shape)) if keepdims
             else tuple(x.shape[d] for d in kept))
    return reshape(out, shape)


def argmax(x: Any, axis: Any = None, keepdims: bool = False) -> Array:
    """Index of the first largest element (the first NaN, if any)."""
    got, call = _arg_by_call("argmax", x, axis, keepdims)
    return got if got is not None else _arg_extreme(x, axis, keepdims, True, call)


def argmin(x: Any, axis: Any = None, keepdims: bool = False) -> Array:
    """Index of the first smallest element (the first NaN, if any)."""
    got, call = _arg_by_call("argmin", x, axis, keepdims)
    return got if got is not None else _arg_extreme(x, axis, keepdims, False, call)


@splits("reduce")
def count_nonzero(x: Any, axis: Any = None, keepdims: bool = False) -> Array:
    x = _coerce(x)
    return _reduce("sum", (x != 0).astype(_INT64), axis, keepdims, _INT64)


__all__ = ["all", "amax", "amin", "any", "argmax", "argmin", "count_nonzero", "max", "mean",
           "min", "prod", "std", "sum", "var"]
