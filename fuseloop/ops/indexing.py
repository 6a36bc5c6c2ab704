"""Indexing: basic slicing as views; integer-array indices and boolean masks as
gathers and scatters, with numpy's advanced-indexing rules.

Several index arrays broadcast together to one index shape; each indexed axis is
a :class:`Gather` of its own (so each component is normalised and bounds-checked
against its own axis), chained one after the other, and a diagonal view of the
chain reads them all at the same broadcast position.  A boolean mask becomes the
integer positions of its true elements (:mod:`fuseloop.ops.masks`, computed
eagerly: their number decides the result's shape).

Index arrays on the host are checked (and wrapped) on the host when the key is
applied, as numpy raises there; their gathers read no error flag back.  Device
index arrays are checked by the gather kernel that reads them.  A scatter
(``a[idx] = v``) checks every index value before it writes anything, so an
out-of-range index leaves the target as it was (numpy): device indices are
checked by a small kernel of their own first (:func:`_positions`).
"""

from __future__ import annotations

import math
from typing import Any, NamedTuple

import numpy as np

from .. import caches as _caches
from .. import host_path as _host_path
from ..array import Array, _coerce, _new_array
from ..assignment import assign
from ..creation import asarray
from ..errors import InvalidIndexError, index_value_out_of_bounds
from ..evaluate import run
from ..expr.nodes import Apply, Gather, Iota, Leaf, Node, c_strides, fills, intern_sig
from ..expr.program import Target
from ..expr.templates import composite_of
from ..expr.views import affine_view
from ..host_masks import assign as host_masked_assign
from ..host_masks import select as host_select
from ..host_path import host_device
from ..host_statements import assign as host_assign
from ..host_statements import scalar as host_scalar
from ..host_writes import scatter as host_scatter
from ..trace_hooks import trace_checks
from . import host_mirror as _host_mirror
from . import scatter_kernel
from .index_keys import (
    _basic_key,
    _check_index_dtype,
    _expand,
    _fancy_statics,
    _index_shape,
    _is_identity,
    _is_index_array,
    _is_mask,
    _zero_d_mask,
    basic_map,
)
from .masks import masked_fill
from .settle import settle_gathered, settled_view
from .shape import broadcast_to, normalize_axis, ravel, transpose, view

_new = object.__new__


def _index_node(idx: Any, device: Any) -> Node:
    if isinstance(idx, list):
        idx = np.asarray(idx)
        if idx.size == 0:
            idx = idx.astype(np.int64)
    if isinstance(idx, np.ndarray):
        idx = asarray(idx, device=device)
    _check_index_dtype(idx.dtype)
    return idx._node


def _without_masks(arr: Array, items: list[Any]) -> tuple[list[Any], frozenset[int]]:
    """``items`` with each boolean mask replaced by the integer positions of its true
    elements, one index array per axis it spans (numpy's definition of a mask), and
    the ids of those position arrays (in range by construction)."""
    if not any(_is_mask(k) for k in items):
        return items, frozenset()
    from .masks import mask_positions

    out: list[Any] = []
    in_range: set[int] = set()
    dim = 0
    for k in items:
        if not _is_mask(k):
            out.append(k)
            dim += k is not None
            continue
        if k.ndim == 0:
            raise InvalidIndexError("a 0-d boolean index is not supported; use a boolean "
                                    "array with the indexed axes' shape or fl.where")
        want = arr.shape[dim:dim + k.ndim]
        for t, (n, b) in enumerate(zip(want, k.shape)):
            if n != b:
                raise InvalidIndexError(
                    f"boolean index did not match indexed array along axis {dim + t}; size "
                    f"of axis is {n} but size of corresponding boolean axis is {b} (mask "
                    f"shape {k.shape}, array shape {arr.shape})")
        positions = mask_positions(k, arr.device)
        in_range.update(id(p) for p in positions)
        out.extend(positions)
        dim += k.ndim
    return out, frozenset(in_range)


class _Split(NamedTuple):
    basic: list[Any]  # the key with every index array replaced by ``:``
    arrays: list[tuple[int, int, Any]]  # (axis in the basic view, source axis, index)
    adjacent: bool  # numpy: adjacent advanced indices keep their place, else they go first
    in_range: frozenset[int]  # ids of index arrays known to be in range (a mask's positions)


def _split(arr: Array, key: Any) -> _Split:
    items, in_range = _without_masks(arr, _expand(key, arr.ndim))
    basic: list[Any] = []
    arrays: list[tuple[int, int, Any]] = []
    advanced: list[int] = []  # positions of index arrays and (numpy) integers among them
    vdim = src = 0
    for p, k in enumerate(items):
        if k is None:
            basic.append(None)
            vdim += 1
            continue
        if _is_index_array(k):
            arrays.append((vdim, src, k))
            advanced.append(p)
            basic.append(slice(None))
            vdim += 1
        elif isinstance(k, slice):
            basic.append(k)
            vdim += 1
        else:
            basic.append(k)
            advanced.append(p)
        src += 1
    adjacent = not arrays or advanced[-1] - advanced[0] + 1 == len(advanced)
    return _Split(basic, arrays, adjacent, in_range)


def _basic_view(arr: Array, items: list[Any]) -> Array:
    shape, offs, coeffs = basic_map(arr.shape, items)
    if _is_identity(arr.shape, shape, offs, coeffs):
        return arr
    return view(arr, shape, offs, coeffs)


def _advanced_axes(base: Array, split: _Split) -> tuple[Array, int]:
    """``base`` (the basic view) with the indexed axes consecutive, and the first's place."""
    vdims = [v for v, _, _ in split.arrays]
    if split.adjacent:
        return base, vdims[0]  # only integers (no axes) can lie between them
    others = [d for d in range(base.ndim) if d not in vdims]
    return transpose(base, vdims + others), 0


# shape -> its C-order strides: a loop's views are of a few shapes, and computing
# them (twice per view) cost a fifth of a view's host time
_c_strides_of: dict[tuple[int, ...], tuple[int, ...]] = {}
C_STRIDES_MAX = 4096


def _c_strides(shape: tuple[int, ...]) -> tuple[int, ...]:
    got = _c_strides_of.get(shape)
    if got is None:
        if len(_c_strides_of) >= C_STRIDES_MAX:
            _c_strides_of.clear()
        got = _c_strides_of[shape] = c_strides(shape)
    return got


# a leaf's views remembered (Leaf.views) at most: a leaf viewed at more keys has moving
# views (a loop's ``a[i, :j]``), whose keys cost more than they find (_MOVING)
VIEWS_MAX = 32
_SAME = object()  # (remembered for a key that views the whole array: the array itself)
_MOVING: Any = object()  # (Leaf.views of a leaf whose views are walked, not remembered)


def _plain_view(arr: Array, key: Any) -> Array | None:
    """``arr[key]`` in one step for the commonest keys (an int, a slice, ``None``, a
    tuple of them) on a concrete array or a view of one, or None for any other key or
    array: what :func:`_basic_view` makes (the same strides and offset, so the same
    structure key) without its item lists and affine map; its leaf shares the buffer's
    tuple and set of the array's leaf (a loop's statement makes 3-5 views).

    From a leaf's second view on, its views are remembered by key (``Leaf.views``):
    the same key again (a stencil's slices, ``x[None, :]``, every call) gives the same
    leaf node, nodes being immutable, so neither the view nor its signature is worked
    out again; until :data:`VIEWS_MAX` keys are remembered: the leaf's views move (a
    loop's ``a[i, :j]``), and a key costs almost half a walk, so they are walked."""
    node: Any = arr._node
    if arr._storage is None or type(node) is not Leaf:
        return None
    views = node.views
    if views is None:  # (most leaves are viewed once, if at all: nothing remembered)
        node.views = {}
        return _walk_view(arr, node, key)
    if views is _MOVING:
        return _walk_view(arr, node, key)
    hk = _view_key(key)
    if hk is None:
        return _walk_view(arr, node, key)
    leaf = views.get(hk)
    if leaf is None:
        view = _walk_view(arr, node, key)
        if view is not None:
            if len(views) >= VIEWS_MAX:
                node.views = _MOVING
            else:
                views[hk] = _SAME if view is arr else view._node
        return view
    if leaf is _SAME:
        return arr
    view = _new_array(Array)
    view._storage, view._node, view.device = node.storage, leaf, arr.device
    view.dtype, view._shape = leaf.dtype, leaf.shape
    return view


def _view_key(key: Any) -> tuple | None:
    """``key`` as a key of ``Leaf.views``: a tuple of its ints, Nones and slices (each
    as its (start, stop, step), which hash); None for any other item (:func:`_walk_view`
    refuses those: nothing is kept)."""
    if type(key) is slice:  # (``x[a:b]``, the commonest: no loop)
        a, b, c = key.start, key.stop, key.step
        if (a is None or type(a) is int) and (b is None or type(b) is int) \
                and (c is None or type(c) is int):
            return ((a, b, c),)
        return None
    out = []
    for k in (key if type(key) is tuple else (key,)):
        t = type(k)
        if t is slice:
            a, b, c = k.start, k.stop, k.step
            if (a is not None and type(a) is not int) or (b is not None and type(b) is not int) \
                    or (c is not None and type(c) is not int):
                return None
            out.append((a, b, c))
        elif t is int or k is None:
            out.append(k)
        else:
            return None
    return tuple(out)


Place = tuple[int, tuple[int, ...], tuple[int, ...]]  # a view's (offset, shape, strides)


def _walk_view(arr: Array, node: Leaf, key: Any) -> Array | None:
    """:func:`_plain_view` worked out (``node``: the array's leaf): the view's place
    (a matrix's ``a[i, j]`` and ``a[i, start:stop]`` here, any other key by
    :func:`_walk_place`), its leaf and array made here; None for a key refused there
    (the general path raises numpy's error)."""
    shape = node.shape
    strides = node.strides
    if strides is None:
        strides = _c_strides(shape)
    got: Place | None = None
    if type(key) is tuple and len(key) == 2 and len(shape) == 2:
        # ``a[i, j]``, ``a[i, start:stop]``: a loop's row statement, without the walk's loop
        i, k = key
        n = shape[0]
        if type(i) is int and -n <= i < n:
            at = node.offset + strides[0] * (i if i >= 0 else i + n)
            m = shape[1]
            if type(k) is int:
                if -m <= k < m:
                    got = at + strides[1] * (k if k >= 0 else k + m), (), ()
            elif type(k) is slice and k.step is None:
                start, stop, _ = k.indices(m)
                got = (at, (0,), (strides[1],)) if stop <= start else \
                    (at + strides[1] * start, (stop - start,), (strides[1],))
    elif type(key) is int and len(shape) == 1:  # (``x[i]``: a vector's element)
        n = shape[0]
        if -n <= key < n:
            got = node.offset + strides[0] * (key if key >= 0 else key + n), (), ()
    elif type(key) is slice and len(shape) == 1 and key.step is None:  # (``x[a:b]``)
        n = shape[0]
        start, stop, _ = key.indices(n)
        if stop - start >= n:
            return arr  # (all of it: the array itself, as the walk finds)
        got = (node.offset, (0,), strides) if stop <= start else \
            (node.offset + strides[0] * start, (stop - start,), strides)
    if got is None:
        got = _walk_place(shape, strides, node.offset, key)
        if got is None:
            return None
        if got is _SAME:
            return arr
    offset, shape_t, strides_v = got
    storage = node.storage
    dtype = node.dtype
    # (the leaf and array made here: no frame of their own)
    leaf = _new(Leaf)
    if not offset and fills(storage, dtype, shape_t, strides_v):  # (the whole buffer: Leaf)
        leaf.sig, leaf.strides = 0, None
    else:  # (its signature now, as nodes.signature_of makes it: every operator asks for it)
        leaf.sig = intern_sig(("V", "LC" if storage.constant else "L", dtype.char, shape_t,
                               strides_v))
        leaf.strides, leaf.offs = strides_v, (offset,)
    leaf.operands, leaf.storage, leaf.dtype, leaf.shape = node.operands, storage, dtype, shape_t
    leaf.offset, leaf.storages, leaf.token, leaf.views = offset, node.storages, None, None
    view = _new_array(Array)
    view._storage, view._node, view.device = storage, leaf, arr.device
    view.dtype, view._shape = dtype, shape_t
    return view


def _walk_place(shape: tuple[int, ...], strides: tuple[int, ...], offset: int,
                key: Any) -> Place | Any:
    """The place of a view of ``key`` in one pass over it: an int moves the offset, a
    slice makes an axis, None a unit axis; :data:`_SAME` for a key of whole axes only
    (the array itself); None for anything else or an int out of range."""
    nd = len(shape)
    new_shape: list[int] = []
    new_strides: list[int] = []
    same = True  # (only whole axes so far: the view is the array)
    d = 0  # the next axis
    for k in (key if type(key) is tuple else (key,)):
        tk = type(k)
        if tk is int:
            if d == nd:
                return None  # too many indices
            n = shape[d]
            if not -n <= k < n:
                return None
            offset += strides[d] * (k if k >= 0 else k + n)
            d += 1
            same = False
        elif tk is slice:
            if d == nd:
                return None
            n = shape[d]
            st = strides[d]
            d += 1
            step = k.step
            if step is None:  # (the common slice: no range object to measure)
                start, stop, _ = k.indices(n)
                length = stop - start if stop > start else 0
                if length != n:
                    same = False
                    if length:
                        offset += st * start
            else:
                if step == 0:
                    return None
                start, stop, step = k.indices(n)
                length = len(range(start, stop, step))
                if length:
                    offset += st * start
                if step != 1 or length != n or start:
                    same = False
                st *= step
            new_shape.append(length)
            new_strides.append(st)
        elif k is None:  # a new axis of length 1 (stride 0, as the general path makes it)
            new_shape.append(1)
            new_strides.append(0)
            same = False
        else:
            return None
    if same:
        return _SAME
    if d < nd:
        return offset, (*new_shape, *shape[d:]), (*new_strides, *strides[d:])
    return offset, tuple(new_shape), tuple(new_strides)


def _element_offset(arr: Array, key: Any) -> int | None:
    """The offset of the element ``arr[key]`` for a tuple of ints, one per axis, of a
    concrete array; None for any other key (or an index out of range)."""
    node: Any = arr._node
    shape = node.shape
    if type(key) is int:
        key = (key,)
    if type(key) is not tuple or len(key) != len(shape) or type(node) is not Leaf:
        return None
    strides = node.strides
    offset = node.offset
    for k, n, st in zip(key, shape, c_strides(shape) if strides is None else strides):
        if type(k) is not int or not -n <= k < n:
            return None
        offset += st * (k % n)
    return offset


# (array shape, basic key: see _basic_key) -> the view's (shape, offsets, coeffs), or
# None for the array itself: a key of ints, slices and None found again is no walk
_basic_maps: dict[tuple, Any] = {}
BASIC_MAPS_MAX = 4096
_caches.register("ops.indexing.basic_maps", _basic_maps.clear, lambda: len(_basic_maps),
                 BASIC_MAPS_MAX)
_MISSING = object()


def _basic_getitem(arr: Array, key: Any, hashable: tuple) -> Array:
    """``arr[key]`` for a key of :func:`_basic_key`'s: its map found by the array's shape
    and the key, the view made by :func:`fuseloop.ops.shape.view`."""
    at = (arr._shape, hashable)
    hit = _basic_maps.get(at, _MISSING)
    if hit is _MISSING:
        items = _split(arr, key).basic  # (raises for a key that does not fit the array)
        shape, offs, coeffs = basic_map(arr.shape, items)
        hit = None if _is_identity(arr.shape, shape, offs, coeffs) else \
            (shape, tuple(offs), tuple(tuple(r) for r in coeffs))
        if len(_basic_maps) >= BASIC_MAPS_MAX:
            _basic_maps.clear()
        _basic_maps[at] = hit
    return arr if hit is None else view(arr, *hit)


def _gather_1d(arr: Array, key: Any) -> Array | None:
    """``arr[idx]`` for a 1-D ``arr`` (of a nonzero length) and one non-empty integer
    array ``idx`` of its device: the gather the general path makes (checked, its
    errors naming axis 0), made without its key analysis (spmv's ``x[cols]``, once
    per row: the analysis cost more than the gather), or None."""
    if type(key) is not Array or len(arr._shape) != 1 or not arr._shape[0] \
            or key.device is not arr.device or key.dtype.kind not in "iu" \
            or not math.prod(key._shape) or trace_checks:
        return None
    settle_gathered(arr)
    # (indices whose values a host copy holds (see ops.host_mirror) are checked here:
    # a gather that neither checks nor reads its flag back)
    held = _host_mirror.values(key)
    checked = 2 if held is None or not held.size or held.min() < 0 \
        or held.max() >= arr._shape[0] else False
    return Array._lazy(Gather(arr._node, key._node, 0, checked=checked), arr.device)


_PLAIN_ITEMS = frozenset((int, slice, type(None), Array))


def _element_indices(arr: Array, key: Any) -> Array | None:
    """``arr[k, idx, ...]`` for a key of ints and slices with 0-d integer arrays among
    them, on a CPU device whose buffers numpy reads (NPBench's ``G[k, E - w,
    neigh_idx[a, b]]``): numpy takes a 0-d integer array as its value, so this is the
    view at those values, copied (an advanced index gives a copy: lazy here, computed
    when read or before ``arr`` is written).  The values are read once the device's
    queue is finished.  None: the general path (a checked gather whose error flag was
    read back, a wait, before the next statement's write)."""
    if type(key) is not tuple or trace_checks or arr._storage is None \
            or not all(type(k) in _PLAIN_ITEMS for k in key):
        return None  # (only keys _plain_view takes once the values are in)
    items: list[Any] | None = None
    for p, k in enumerate(key):
        if type(k) is Array:
            if k._shape:
                return None
            if k.dtype.kind not in "iu" or k.device is not arr.device:
                return None
            if items is None:
                if not host_device(arr.device) or not _host_path.HOST_MAX_WORK:
                    return None
                items = list(key)
            from ..runtime.devices import _runtime

            rt = _runtime(k.device)
            if rt.deferred:  # (enqueued, then waited for with the read)
                rt.flush()
            v = host_scalar(k)
            if v is None:
                return None
            items[p] = int(v)
    if items is None:
        return None
    view = _plain_view(arr, tuple(items))
    return None if view is None else view.copy()


def getitem(arr: Array, key: Any) -> Array:
    node: Any = arr._node
    if type(node) is Leaf and arr._storage is not None:
        # (a loop's moving views walked at once: _plain_view's first test)
        out = _walk_view(arr, node, key) if node.views is _MOVING else _plain_view(arr, key)
        if out is not None:
            return out
    hashable = _basic_key(key)
    if hashable is not None:
        if arr._storage is None and isinstance(node, Apply):  # (evaluated once, if viewed again)
            return settled_view(arr, lambda: _basic_getitem(arr, key, hashable))
        return _basic_getitem(arr, key, hashable)
    out = _gather_1d(arr, key)
    if out is not None:
        return out
    out = _element_indices(arr, key)
    if out is not None:
        return out
    flag = _zero_d_mask(key)
    if flag is not None:
        # numpy: a 0-d mask adds an axis of length 1 (True) or 0 (False); a copy
        if flag:
            return arr.copy()[None]
        from ..creation import empty

        return empty((0, *arr.shape), dtype=arr.dtype, device=arr.device)
    out = host_select(arr, key)  # (a small mask of its shape on a CPU device: numpy's)
    if out is not None:
        return out
    copied = _fancy_statics(arr, key)
    if copied is not None:
        # (a key of device index arrays: its chain of views and gathers copied from the
        # one built for the same structures before; copies only where nothing depends
        # on the index values: composite_of records no subtree holding a new buffer)
        settle_gathered(arr)
        statics, arrays = copied
        return composite_of("getitem", (arr, *arrays), lambda: _fancy(arr, key), statics)
    return _fancy(arr, key)


def _fancy(arr: Array, key: Any) -> Array:
    """``arr[key]`` by numpy's advanced-indexing rules (the general path)."""
    split = _split(arr, key)
    if split.arrays:
        settle_gathered(arr)
    out = _basic_view(arr, split.basic)
    if not split.arrays:
        return out
    keys = [k for _, _, k in split.arrays]
    for k in keys:
        _check_index_dtype(k.dtype)
    bshape = _index_shape(keys)
    out, pos = _advanced_axes(out, split)
    m = len(keys)
    rest = out.shape[pos + m:]
    shape = out.shape[:pos] + bshape + rest
    srcs = [src for _, src, _ in split.arrays]
    if math.prod(bshape):
        # (numpy checks the index values whenever there are some, even for an empty
        # result: then no gather kernel runs, so device indices are checked at once)
        nodes, codes = _positions(keys, out.shape[pos:pos + m], srcs, split.in_range,
                                  arr.device, now=not math.prod(shape))
    else:  # no index value is ever read (a kernel that ran would still check them; an
        # empty index has none to check: no flag to read back, spmv's empty rows)
        nodes = [_index_node(k, arr.device) for k in keys]
        codes = tuple(s + 2 if math.prod(k.shape) else False for k, s in zip(keys, srcs))
    node = out._node
    ax = pos
    for n, code in zip(nodes, codes):
        node = Gather(node, n, ax, checked=code)
        ax += len(n.shape)
    if node.shape != shape:
        # the chain's result has one set of axes per index: read its diagonal, where
        # every index is taken at the same broadcast position (unit axes broadcast)
        q = len(bshape)
        rows = [[int(d == k) for d in range(len(shape))] for k in range(pos)]
        for n in nodes:
            lead = pos + q - len(n.shape)
            rows += [[int(d == lead + t and size != 1) for d in range(len(shape))]
                     for t, size in enumerate(n.shape)]
        rows += [[int(d == pos + q + k) for d in range(len(shape))] for k in range(len(rest))]
        node = affine_view(node, shape, (0,) * len(rows), rows)
    return Array._lazy(node, arr.device)


def take(a: Any, indices: Any, axis: int | None = None) -> Array:
    """``numpy.take``: elements of ``a`` at integer ``indices`` along ``axis``."""
    a = _coerce(a)
    if axis is None:
        a, axis = ravel(a), 0
    ax = normalize_axis(axis, a.ndim)
    if isinstance(indices, int | np.integer):
        key = (slice(None),) * ax + (int(indices),)
        return getitem(a, key)
    if not isinstance(indices, Array):
        indices = np.asarray(indices)
        if indices.size == 0 and indices.dtype.kind == "f":
            indices = indices.astype(np.int64)  # numpy's reading of ``take(a, [])``
    _check_index_dtype(indices.dtype)
    if math.prod(a.shape[:ax] + indices.shape + a.shape[ax + 1:]):
        nodes, codes = _positions([indices], (a.shape[ax],), [ax], frozenset(), a.device,
                                  now=False)
    else:  # numpy's take checks no value when it takes none
        nodes, codes = [_index_node(indices, a.device)], (ax + 2,)
    return Array._lazy(Gather(a._node, nodes[0], ax, checked=codes[0]), a.device)


def _refuse_empty_axis(index: Any, length: int, src: int) -> None:
    """Raise numpy's error for index values into an axis of length 0 before the gather
    runs: every value is out of range, and the kernel's clamp into ``[0, n)`` has no
    element to read there (it would read outside the buffer)."""
    if length:
        return
    on_device = isinstance(index, Array)  # (np.shape of an Array would evaluate it)
    if math.prod(index.shape if on_device else np.shape(index)):
        values = index.get() if on_device else np.asarray(index)
        raise index_value_out_of_bounds(int(values.flat[0]), src, 0)


def _same_view(value: Any, target: Array) -> bool:
    if not isinstance(value, Array) or value.is_lazy or value.shape != target.shape:
        return False
    a, b = value._node, target._node
    return (a.storage is b.storage and a.offset == b.offset  # type: ignore[attr-defined]
            and a.view_strides() == b.view_strides())  # type: ignore[attr-defined]


def written_in_place(arr: Array, key: Any, value: Array) -> bool:
    """Whether ``value`` is a concrete array of ``arr``'s buffer that is the view ``arr[key]``
    itself (``a[k] op= v``'s write back, after the operator wrote through the view):
    ``arr[key] = value`` then changes nothing."""
    if value._storage is None or value._storage is not arr._storage \
            or value.dtype is not arr.dtype:
        return False
    if not value._shape:  # (an element: its offset alone, the commonest write back)
        return _element_offset(arr, key) == value._node.offset  # type: ignore[attr-defined]
    plain = _plain_view(arr, key)
    return plain is not None and _same_view(value, plain)


def _assigned_without_scatter(arr: Array, key: Any, value: Any, held: bool) -> bool:
    """``arr[key] = value`` done when ``key`` is a plain view, a 0-d mask or a mask the
    masked paths take; False when it needs the scatter."""
    if type(value) is Array and not value._shape and value._storage is arr._storage \
            and value._storage is not None and value.dtype is arr.dtype \
            and _element_offset(arr, key) == value._node.offset:  # type: ignore[attr-defined]
        return True  # a[i, j] += b: the in-place operator already wrote that element
    plain = _plain_view(arr, key)
    if plain is not None:
        # (small, on a CPU device: written by numpy without assign's checks)
        if not _same_view(value, plain) and not (
                plain.device.type == "cpu" and host_assign(plain, value, held)):
            assign(plain, value, cast="unsafe", value_is_held=held)
        return True
    flag = _zero_d_mask(key)
    if flag is not None:
        if flag:
            setitem(arr, None, value, held)
        return True
    return bool(host_masked_assign(arr, key, value) or masked_fill(arr, key, value))


def setitem(arr: Array, key: Any, value: Any, held: bool, atomic: str | None = None) -> None:
    """``arr[key] = value``; ``atomic``: ``arr[key] = atomic(arr[key], value)`` unbuffered,
    an atomic update per element (``fl.add.at``, :mod:`fuseloop.ops.scatter_add`)."""
    if atomic is not None:
        from ..ufuncs import FUNCTIONS

        split = _split(arr, key)
        if not split.arrays:  # no index array: no position repeats
            target = _basic_view(arr, split.basic)
            assign(target, FUNCTIONS[atomic](target, value), cast="unsafe", value_is_held=False)
            return
    elif key is Ellipsis or (type(key) is tuple and len(key) == 1 and key[0] is Ellipsis):
        # ``out[...] = e``, the common form: all of ``arr`` itself, no view to build
        if arr.is_lazy:
            arr.eval()
        if not _same_view(value, arr):
            assign(arr, value, cast="unsafe", value_is_held=held)
        return
    if atomic is None:
        if _assigned_without_scatter(arr, key, value, held) \
                or (arr.device.type == "cpu" and host_scatter(arr, key, value)):
            return
        split = _split(arr, key)
    if arr.is_lazy:
        arr.eval()
    if scatter_kernel.takes(arr, key, value, atomic):  # (a 1-D scatter on a GPU)
        scatter_kernel.scatter(arr, key, value, atomic)
        return
    target = _basic_view(arr, split.basic)
    if not split.arrays:
        if _same_view(value, target):
            return  # a[k] += b: the in-place operator already wrote through the view
        assign(target, value, cast="unsafe", value_is_held=held)
        return
    keys = [k for _, _, k in split.arrays]
    for k in keys:
        _check_index_dtype(k.dtype)
    bshape = _index_shape(keys)
    target, pos = _advanced_axes(target, split)
    m = len(keys)
    leaf = target._node
    storage = leaf.storage  # type: ignore[attr-defined]
    lengths = target.shape[pos:pos + m]
    result_shape = target.shape[:pos] + bshape + target.shape[pos + m:]
    srcs = [src for _, src, _ in split.arrays]
    # (a check whose answer stays on the device: it masks the stores, read back after)
    gates: list[tuple[Array, list]] = []

    def dest() -> Target:
        # called by assign once the value fits, before anything is written
        if math.prod(bshape) == 0:
            # nothing is written, and numpy checks no index then: the nodes as given,
            # checked by the scatter kernel (codes as for gathers) should one run
            nodes = [_index_node(k, arr.device) for k in keys]
            codes: tuple = tuple(src + 2 for src in srcs)
        else:
            # every value checked and in [0, n): the kernel neither wraps nor checks
            nodes, codes = _positions(keys, lengths, srcs, split.in_range, arr.device, now=True,
                                      gates=gates)
        # (the positions are computed before the scatter kernel, so none reads the buffer
        # written; should one ever be lazy over it, it gets a buffer of its own first)
        nodes = [n if storage not in n.storages else
                 Array._lazy(n, arr.device).copy().eval()._node for n in nodes]
        mask = broadcast_to(gates[0][0], result_shape)._node if gates else None
        return Target(storage, leaf.view_strides(), leaf.offset,  # type: ignore[attr-defined]
                      scatter=(pos, tuple(nodes), lengths, codes), atomic=atomic, mask=mask)

    assign(target, value, cast="unsafe", value_is_held=held, scatter=(dest, result_shape))
    if gates:
        from .index_check import confirm

        confirm(*gates[0])


_INT64 = np.dtype(np.int64)
_INT32_MAX = 2**31 - 1


def _host_wrapped(k: np.ndarray, n: int, src: int) -> np.ndarray:
    """Host index array ``k`` checked against an axis of length ``n`` (source axis
    ``src``, for the message) and wrapped into ``[0, n)``: int32 where ``n`` allows
    (the gather reads fewer bytes), else int64."""
    # (uint64 values above int64's range wrap to negative ones, as in numpy and the kernel)
    wide = k.astype(_INT64)  # (a copy: wrapped in place below)
    bad = (wide < -n) | (wide >= n)
    if bad.any():
        raise index_value_out_of_bounds(int(wide.flat[int(np.argmax(bad))]), src, n)
    wrapped = np.remainder(wide, n, out=wide)
    return wrapped.astype(np.int32) if n <= _INT32_MAX else wrapped


def _positions(keys: list[Any], lengths: tuple[int, ...], srcs: list[int],
               in_range: frozenset[int], device: Any, *, now: bool,
               gates: list[tuple[Array, list]] | None = None) -> tuple[list[Node], tuple]:
    """Index nodes for a gather or scatter along axes of ``lengths`` (source axes
    ``srcs``, for messages) and each one's check code for :class:`Gather`.

    Raises :class:`IndexOutOfBoundsError` (the gathers' message) for a value out of
    range that can be seen here.  A mask's positions are in range already; a host
    array is checked and wrapped into ``[0, n)`` on the host, so its gather neither
    checks nor reads a flag back (and is not synchronous).  Any other index (a device
    array or an expression) is checked by the gather that reads it (code ``src + 2``)
    or, with ``now`` (a scatter, which must not write before it fails, or a read that
    runs no kernel), gathered at once from ``arange(n)`` by a checked gather: one
    kernel and one read-back of its error flag for each distinct index shape; or,
    computed already, checked by its minimum and maximum and wrapped by its reader
    (:mod:`fuseloop.ops.index_check`).  With ``gates`` (a scatter that masks its
    stores), computed indices are not waited for: their check's device answer and the
    indices are appended to ``gates`` for the scatter's mask and its read-back after.
    """
    nodes: list[Node | None] = []
    codes: list[bool | int] = []
    # (nodes, not lazy arrays: an array would stay registered as a reader of the
    # buffers while a traceback keeps this frame, and a later write would compute it
    # first and raise again)
    on_device: dict[tuple[int, ...], list[tuple[int, Node]]] = {}
    computed: list[tuple[int, tuple[Array, int, int]]] = []
    for p, (k, n, src) in enumerate(zip(keys, lengths, srcs)):
        if id(k) in in_range:
            nodes.append(k._node)
            codes.append(False)
        elif isinstance(k, np.ndarray):
            nodes.append(asarray(_host_wrapped(k, n, src), device=device)._node)
            codes.append(False)
        else:
            _refuse_empty_axis(k, n, src)
            if now and not k.is_lazy and not trace_checks:  # (see ops.index_check)
                computed.append((p, (k, n, src)))
                nodes.append(None)
                codes.append(False)
            elif now:
                wrapped = Gather(Iota((n,), _INT64), k._node, 0, checked=src + 2)
                on_device.setdefault(k.shape, []).append((p, wrapped))
                nodes.append(None)
                codes.append(False)
            else:
                nodes.append(k._node)
                codes.append(src + 2)
    if computed:
        from .index_check import gated_in_range, wrapped_in_range
        from .index_check import gates as _gates

        checks = [c for _, c in computed]
        if gates is None or not _gates(device):
            positions = wrapped_in_range(checks)
        else:
            positions, ok = gated_in_range(checks)
            gates.append((ok, checks))
        for (p, _), node in zip(computed, positions):
            nodes[p] = node
    for shape, group in on_device.items():
        outs = run([g for _, g in group], shape, device)
        for (p, _), out in zip(group, outs):
            nodes[p] = Leaf(out, _INT64, shape)
    return nodes, tuple(codes)  # type: ignore[return-value]


__all__ = ["take"]
