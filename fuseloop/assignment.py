"""Writing results: assignment into existing arrays and several results in one kernel."""

from __future__ import annotations

import math
import sys
from collections.abc import Sequence
from typing import Any

import numpy as np

from . import flags as _flags
from . import host_path as _host
from .array import Array, Constant, _coerce, _operand_node, apply_op
from .dtypes import scalar_to
from .errors import DeviceError, DTypeError, ShapeError
from .evaluate import _rebuild, cast_node, reads_outside, run, run_into
from .expr.nodes import (
    SHARED_WITH_PYOPENCL,
    Apply,
    Leaf,
    Literal,
    Node,
    broadcast_shapes,
    forget_recent,
    note_reader,
    recent_lazy,
    register_readers,
)
from .expr.overlap import View, views_disjoint
from .expr.program import Target
from .expr.readers import _EXACT_REFCOUNTS as EXACT_REFCOUNTS
from .multi_hooks import any_split, is_split
from .plan_into import replay_into
from .trace_hooks import check_traced, trace_checks


def _broadcasts_after(value_shape: tuple[int, ...], dest_shape: tuple[int, ...]) -> bool:
    """Whether ``value_shape`` without its extra leading axes broadcasts to ``dest_shape``."""
    tail = value_shape[len(value_shape) - len(dest_shape):] if dest_shape else ()
    return len(value_shape) >= len(dest_shape) and all(
        v in (1, d) for v, d in zip(tail, dest_shape))


class NodeValue:
    """An expression node being assigned, not wrapped in an Array (no reader entry);
    ``operand``: the in-place operator's other operand (``Array._inplace``'s)."""

    __slots__ = ("node", "operand")

    def __init__(self, node: Node, operand: Any = None) -> None:
        self.node = node
        self.operand = operand


def _operand_refcount_probe() -> int:
    """sys.getrefcount in :func:`_unheld_operand` of a temporary operand of an in-place
    operator (``a[i] -= b @ c``), through the frames ``Array.__isub__`` and
    ``Array._inplace`` make, measured on stand-ins of them."""
    class Probe:
        def __isub__(self, o: Any) -> Any:
            return self._inplace("subtract", o)

        def _inplace(self, op: str, other: Any) -> Any:
            self.count = _count(NodeValue(None, other))  # type: ignore[arg-type]
            return self

    def _count(value: NodeValue) -> int:
        return sys.getrefcount(value.operand)

    p = Probe()
    p -= object()
    return p.count


_OPERAND_REFCOUNT = _operand_refcount_probe()


def _unheld_operand(value: Any) -> Any:
    """The lazy operand of an in-place operator that nothing but the statement holds
    (its value is needed by no one after the write), taken out of the recent lazy
    arrays if it is among the last of them, so that it never becomes a reader of its
    buffers (its entry would only cost the write's check a walk of it); None otherwise."""
    count = sys.getrefcount(value.operand)  # (first: a local would hold it once more)
    operand = value.operand
    if type(operand) is not Array or operand._storage is not None or not EXACT_REFCOUNTS:
        return None
    # (the in-place result built after it is the last, or one of the last few)
    listed = any(a is operand for a in recent_lazy[-4:])
    if count > _OPERAND_REFCOUNT + listed:
        return None
    if listed:
        forget_recent(operand)
    return operand


def _fitted(node: Node, dest_shape: tuple[int, ...], inplace: bool, scatter: bool
            ) -> Node | None:
    """``node`` of another shape than ``dest_shape`` as written there: its leading unit
    axes dropped (as numpy, not for an in-place operand), broadcast; None when nothing is
    written (an empty scatter target, numpy's rule); ShapeError otherwise."""
    extra = len(node.shape) - len(dest_shape)
    if extra > 0 and not inplace and all(n == 1 for n in node.shape[:extra]):
        from .expr.views import affine_view

        node = affine_view(node, node.shape[extra:], (0,) * len(node.shape),
                           [[int(d == k - extra) for d in range(len(dest_shape))]
                            for k in range(len(node.shape))])
    if node.shape != dest_shape and broadcast_shapes(node.shape, dest_shape) != dest_shape:
        if scatter and 0 in dest_shape and _broadcasts_after(node.shape, dest_shape):
            return None
        raise ShapeError(
            f"could not broadcast input array from shape {node.shape} into shape {dest_shape}")
    return node


def assign(target: Array, value: Any, *, cast: str, value_is_held: bool,
           scatter: tuple[Any, tuple[int, ...]] | None = None, also: Array | None = None) -> None:
    """Write ``value`` (Array, node or scalar) into all of ``target``, in one kernel.

    ``target`` may be a strided view; ``scatter=(dest, shape)`` writes a value of
    ``shape`` to the positions a gathered index names (``a[idx] = v``): ``dest`` is
    the :class:`Target`, or a function giving it, called once the value is known to
    fit and before anything is written (it may check the indices and raise).  ``also``: a
    lazy array the caller keeps (``x[x > 0] = v``'s mask), computed in the same kernel.
    """
    if trace_checks:  # (fl.fuse refuses writes into a traced function's arguments)
        check_traced(target, "assignment")
    if type(value) is not Array:
        value = _coerce(value)
    held_array: Array | None = None
    unheld = None
    if isinstance(value, NodeValue):
        node = value.node
        unheld = _unheld_operand(value) if value.operand is not None else None
    elif isinstance(value, Array):
        if value.device is not target.device:
            raise DeviceError(
                f"cannot assign an array on {value.device} into one on {target.device}")
        if value_is_held and value._storage is None:
            if value.shape == target.shape and scatter is None:
                held_array = value
            else:
                value.eval()  # the caller keeps it: give it its own buffer first
        node = value._node
    else:
        node = _operand_node(value, target.dtype) if not isinstance(value, Constant) else \
            Literal(scalar_to(value.value, value.dtype or target.dtype))
    dest_shape = target.shape if scatter is None else scatter[1]
    if node.shape != dest_shape:
        fitted = _fitted(node, dest_shape, isinstance(value, NodeValue), scatter is not None)
        if fitted is None:
            return  # numpy: an empty fancy-indexed target takes a value with leading axes more
        node = fitted
    if node.dtype != target.dtype:  # (cast_node's test, its frame saved: most values fit)
        node = cast_node(node, target.dtype)
    if target._storage is None:
        target.eval()
    storage = target._storage
    assert storage is not None
    leaf = target._node
    if also is not None and held_array is None and also.is_lazy and also.shape == target.shape:
        held_array = also
    if scatter is None and held_array is None and _host.write(target, node):
        return  # (small work on a CPU device: computed by numpy in place)
    if scatter is not None:
        dest: Any = scatter[0]
        if callable(dest):
            dest = dest()
        held_array = None
    else:
        assert isinstance(leaf, Leaf)  # (concrete: it has a buffer)
        strides = leaf.view_strides()
        # (target.is_contiguous, inline)
        dest = storage if leaf.strides is None and leaf.offset == 0 else Target(
            storage, strides, leaf.offset)
    written = None if scatter is not None else (
        leaf.shape, strides, leaf.offset)  # type: ignore[attr-defined]
    node = _readers_first(node, storage, written, target.dtype.itemsize, value,
                          held_array, unheld)
    if _flags._unread:  # (a gather's flag left unread: reported before a user array is written)
        _flags.read_unread()
    if held_array is not None:
        # the caller keeps the value: materialise it too, in the same kernel
        out = run([node, held_array._node], target.shape, target.device, [dest, None])
        held_array._become(out[1])
    elif dest is storage:
        run_into(node, dest_shape, target.device, storage)
    elif scatter is not None or not replay_into(node, dest_shape, target.device, dest):
        run([node], dest_shape, target.device, [dest])  # (a view: a loop's statement first)
    if SHARED_WITH_PYOPENCL and storage in SHARED_WITH_PYOPENCL:
        target.device.queue  # noqa: B018  (the property enqueues the deferred launches)


# An in-place operator on a lazy array writes no buffer (the array has none, and a view of
# a lazy array reads its expression, not its buffer): the new expression takes the
# array's place, so ``trace += tanh(a[i, i])`` in a loop makes no kernel per statement.
# A chain of such steps is cut every INPLACE_CHAIN_MAX steps: the value so far is
# computed into a buffer the next step reads, which bounds the kernel's size and the
# buffers the chain holds.  Only for results of at most INPLACE_LAZY_MAX elements,
# where the statement's launch costs more than its work and the chain holds little.
# A chain of two or more steps is also cut before a step whose operand reads a buffer
# the chain does not: a chain over ever new buffers (durbin's ``beta *= 1 - alpha *
# alpha``, ``alpha`` computed anew each iteration) is another structure at every length
# (one more buffer), compiled anew by each statement that reads it, for every length
# class of that statement's slices.
INPLACE_CHAIN_MAX = 16
INPLACE_LAZY_MAX = 1 << 15


def inplace_lazy(target: Array, op: str, other: Any) -> bool:
    """``target op= other`` for a small lazy ``target`` and an array on its device or a
    Python int or float: ``target`` becomes the expression (numpy's ``same_kind`` cast
    to its dtype); False (nothing done) for anything else."""
    node = target._node
    shape = target._shape
    to = type(other)
    if target._storage is not None or type(target) is not Array or (
            to is not int and to is not float and (
                to is not Array or other.device is not target.device)) \
            or math.prod(shape) > INPLACE_LAZY_MAX or node.fancy:
        return False
    base: Array = target
    steps = 0
    step = node
    # (at most INPLACE_CHAIN_MAX steps, and two where the operand reads a new buffer)
    most = INPLACE_CHAIN_MAX if to is not Array or other._node.storages <= node.storages \
        else 2
    while type(step) is Apply:  # (the chain's length: its first arguments)
        steps += 1
        if steps >= most:
            base = Array._lazy(node, target.device).eval()  # (the value so far, computed)
            if to is Array:  # (``x += x * c``: its operand reads the value so far there)
                read = _rebuild(other._node, {id(node): base._node}, {})
                if read is not other._node:
                    other = Array._lazy(read, target.device)
            break
        step = step.args[0]
    new = apply_op(op, base, other)._node
    if new.shape != shape or new.fancy:
        return False  # (numpy's errors and the reductions' order: assign's)
    if new.dtype is not target.dtype and not np.can_cast(new.dtype, target.dtype, "same_kind"):
        raise DTypeError(
            f"cannot cast ufunc {op!r} output from {new.dtype} to {target.dtype} "
            "with casting rule 'same_kind' (numpy's rule for in-place operators)")
    new = cast_node(new, target.dtype)
    old = node.storages
    target._node = new
    now = new.storages
    if now is not old and not now <= old:
        note_reader(target)
    for s in old - now if base is not target else ():
        s.discard_reader(target)  # (the chain's earlier buffers, read no more)
    return True


def _readers_first(node: Node, storage: Any, written: View | None, itemsize: int,
                   value: Any, held_array: Array | None, unheld: Any = None) -> Node:
    """Evaluate the lazy arrays still reading the old contents of ``storage`` before
    the write (not those reading only elements it leaves alone); returns the value's
    ``node``, reading their results where it read them (unless ``held_array``, which
    is computed with it): ``p = A[i, :-1] * c; A[i, 1:] += p``'s ``p``, computed first,
    is read from its buffer, so the value no longer reads the elements it writes (no
    temporary and copy, nor one work-group).  ``unheld``: an operand read by the value
    only, not computed first (the value's own check decides whether it reads through a
    temporary or takes one work-group)."""
    readers = storage.live_readers()
    if not readers:  # (the commonest: no lazy array reads the buffer written)
        return node
    pending = [r for r in readers if r._storage is None and r is not held_array
               and r is not value and r is not unheld and (written is None or not reads_outside(
                   r._node, storage, written, itemsize))]
    if not pending:
        return node
    before = {id(r._node): r for r in pending}
    compute(*pending)
    if held_array is not None:
        return node
    replace = {k: r._node for k, r in before.items()}
    return _rebuild(node, replace, {})


def compute(*arrays: Array, out: Array | Sequence[Array] | None = None,
            where: Any = None) -> tuple[Array, ...]:
    """Evaluate several arrays, one kernel for each group of equal shape and device.

    ``a, b = fl.compute(x + y, x - y)`` reads ``x`` and ``y`` once and writes both
    results (VexCL's tuple assignment).  Returns the arrays, now concrete.
    ``out=(p, q)`` writes the results into those existing arrays (or views) instead,
    one kernel per shape, and returns ``out`` (see :func:`compute_into`).
    ``where=mask`` (with ``out=``; a boolean array broadcasting to the targets, or
    ``fl.bitmask(words)``) computes and writes only the elements where the mask holds,
    as numpy's ``np.add(a, b, out=y, where=mask)``; the others keep their values.
    """
    targets = None if out is None else _targets(out)
    if targets is not None and any_split(targets):
        return _compute_split(arrays, targets, where)
    if where is not None and where is not True:
        if targets is None:
            raise ValueError("fl.compute(..., where=mask) needs out=: the elements "
                             "outside the mask keep the values of out (numpy's rule)")
        # values held only by this call need not keep their own values (see compute_into);
        # the list of recent lazy arrays is emptied first (it holds them too)
        register_readers()
        held = [sys.getrefcount(arrays[k]) > _ARGS_REFCOUNT[0] for k in range(len(arrays))]
        where_held = sys.getrefcount(where) > _ARGS_REFCOUNT[1]
        return compute_into(arrays, targets, where, held, where_held)
    if targets is not None:
        return compute_into(arrays, targets)
    groups: dict[tuple, list[Array]] = {}
    seen: set[int] = set()
    for a in arrays:
        if not isinstance(a, Array):
            raise TypeError(f"fl.compute takes fuseloop arrays, got {type(a).__name__}")
        if a._storage is None and id(a) not in seen:
            seen.add(id(a))
            groups.setdefault((a.device.index, a.shape), []).append(a)
    built: list[tuple] = []
    if len(groups) > 1:  # their new kernels are built concurrently (fuseloop.prebuild)
        from .prebuild import build_ahead

        built = build_ahead([([m._node for m in members], shape, members[0].device, None)
                             for (_, shape), members in groups.items()])
    try:
        for (_, shape), members in groups.items():
            outs = run([m._node for m in members], shape, members[0].device)
            for m, s in zip(members, outs):
                m._become(s)
    finally:
        if built:
            from .prebuild import forget

            forget(built)
    return arrays


def _args_refcount_probe(*arrays: Any, out: Any = None, where: Any = None
                         ) -> tuple[int, int]:
    return sys.getrefcount(arrays[0]), sys.getrefcount(where)


# sys.getrefcount of temporaries passed to compute (an expression, the mask): above
# it, the caller holds the array
_ARGS_REFCOUNT = _args_refcount_probe(object(), out=None, where=object())


def _leaf_view(target: Array) -> View:
    leaf: Any = target._node
    return (leaf.shape, leaf.view_strides(), leaf.offset)


def _check_targets(values: Sequence[Any], targets: Sequence[Any]) -> None:
    """numpy's checks of ``out=``, plus what one kernel needs (one device, no overlap)."""
    if len(values) != len(targets):
        raise ValueError(f"fl.compute got {len(values)} expressions but {len(targets)} "
                         "arrays in out=; give one target per expression")
    for k, (v, t) in enumerate(zip(values, targets)):
        if not isinstance(v, Array) or not isinstance(t, Array):
            bad = v if not isinstance(v, Array) else t
            raise TypeError(f"fl.compute(..., out=) takes fuseloop arrays, got "
                            f"{type(bad).__name__} at position {k}")
        if v.device is not t.device:
            raise DeviceError(f"out[{k}] lives on {t.device.name} but its expression on "
                              f"{v.device.name}; move one with fl.asarray(x, device=...)")
        if broadcast_shapes(v.shape, t.shape) != t.shape:
            raise ShapeError(f"expression {k} of shape {v.shape} cannot be written into "
                             f"out[{k}] of shape {t.shape} (it must broadcast to it)")
        if not np.can_cast(v.dtype, t.dtype, "same_kind"):
            raise DTypeError(f"cannot write expression {k} of dtype {v.dtype} into out[{k}] "
                             f"of dtype {t.dtype} with casting rule 'same_kind' (numpy's "
                             "rule for out=); convert it with .astype() first")
    devices = {id(t.device): t.device.name for t in targets}
    if len(devices) > 1:
        raise DeviceError("the arrays in out= live on different devices "
                          f"({', '.join(sorted(devices.values()))}); one kernel "
                          "writes them all: move them to one device")
    for t in targets:
        t.eval()  # (a lazy target: as `t[...] = v`, it gets its buffer first)
    for j, t in enumerate(targets):
        for k in range(j):
            u = targets[k]
            if u._storage is t._storage and (t is u or not views_disjoint(
                    _leaf_view(t), _leaf_view(u)) or t.dtype != u.dtype):
                raise ValueError(f"out[{k}] and out[{j}] share memory: each element of a "
                                 "buffer can be written by one expression only; give "
                                 "distinct arrays (or disjoint views)")


def _targets(out: Any) -> tuple:
    """``out=`` of :func:`compute` as a tuple of targets."""
    if isinstance(out, Array) or is_split(out):
        return (out,)
    if isinstance(out, list | tuple):
        return tuple(out)
    raise TypeError(f"fl.compute: out= takes an array or a tuple of arrays, "
                    f"got {type(out).__name__}")


def _compute_split(values: Sequence[Any], targets: tuple, where: Any) -> tuple:
    """:func:`compute` into split (multi-device) arrays: part by part, each part's values
    into its targets' part on its own device."""
    if where is not None and where is not True:
        raise NotImplementedError("fl.compute(..., where=) into split arrays is not "
                                  "supported; write each part (x.parts[k]) instead")
    every = (*values, *targets)
    first = targets[0]
    if not all(is_split(v) and v.bounds == first.bounds
               and v.device_set is first.device_set for v in every):
        shapes = ", ".join(f"{type(v).__name__} {getattr(v, 'shape', '')}" for v in every)
        raise DeviceError(f"fl.compute into split arrays needs every value and target split "
                          f"the same way (same devices and row bounds); got {shapes}")
    for k in range(len(first.parts)):
        compute(*(v.parts[k] for v in values), out=tuple(t.parts[k] for t in targets))
    return targets


def compute_into(values: Sequence[Array], targets: Sequence[Array], where: Any = None,
                 held: Sequence[bool] | None = None, where_held: bool = True
                 ) -> tuple[Array, ...]:
    """Write ``values[k]`` into ``targets[k]`` (arrays or strided views), one kernel for
    all targets of one shape (Stan's ``results(a, b) = expressions(...)``).

    Every value is computed before anything is written, so a value may read the
    targets (``fl.compute(a + b, a - b, out=(a, b))`` is numpy's result).  Casting
    follows numpy's ``same_kind`` rule.  A value the caller keeps stays lazy and keeps
    its values: it then reads its target, when of the target's dtype and shape (no
    cost), else it is computed by the same kernel into a buffer of its own.

    ``where``: a mask (see :func:`fuseloop.ops.masked.mask_node`); only its elements
    are computed and written.  A lazy value that reads a target and that the caller
    keeps (``held``) is then computed in full first, so that it keeps its values; one
    held by this call only is computed where the mask holds, and nowhere else.  A lazy
    mask reading a target (``where=y > 0``, ``out=y``) is computed in the masked kernel
    unless the caller keeps it (``where_held``): then it is computed first.
    """
    _check_targets(values, targets)
    storages = {id(t._storage): t._storage for t in targets}
    mask = None
    if where is not None:
        mask = _mask_for(where, values, targets, storages, held)
    # lazy arrays still reading the old contents are evaluated before the write
    pending: dict[int, Array] = {}
    for t in targets:
        written = _leaf_view(t)
        target_storage = t._storage
        assert target_storage is not None  # (_check_targets evaluated lazy targets)
        for r in target_storage.live_readers():
            # (a masked write's values: computed first where the caller keeps them)
            exempt = any(r is v and (v.shape == u.shape or mask is not None)
                         for v, u in zip(values, targets)) or (r is where and not where_held)
            if r._storage is None and not exempt and not reads_outside(
                    r._node, target_storage, written, t.dtype.itemsize):
                pending[id(r)] = r
    if pending:
        compute(*pending.values())
    groups: dict[tuple[int, ...], list[int]] = {}
    for k, t in enumerate(targets):
        groups.setdefault(t.shape, []).append(k)
    for shape, ks in groups.items():
        nodes: list[Node] = []
        dests: list[Any] = []
        for k in ks:
            v, t = values[k], targets[k]
            nodes.append(cast_node(v._node, t.dtype))
            leaf: Any = t._node
            storage = t._storage
            assert storage is not None
            if mask is not None:
                dests.append(Target(storage, None, 0, mask=mask) if t.is_contiguous else
                             Target(storage, leaf.view_strides(), leaf.offset, mask=mask))
            else:
                dests.append(storage if t.is_contiguous else
                             Target(storage, leaf.view_strides(), leaf.offset))
        # kept values that read a target and cannot become a read of it: computed too
        # (a masked write computed the kept ones first: see _mask_for)
        extra = [values[k] for k in ks if mask is None and values[k].is_lazy
                 and not _reads_as_target(values[k], targets[k]) and any(
                     s in values[k]._node.storages for s in storages.values())]
        outs = run(nodes + [e._node for e in extra], shape, targets[ks[0]].device,
                   dests + [None] * len(extra))
        for e, s in zip(extra, outs[len(ks):]):
            e._become(s)
    for v, t in zip(values, targets):
        if mask is None and v.is_lazy and _reads_as_target(v, t):
            # its values are now the target's: read them there (a later write to the
            # target evaluates it first, as for any lazy reader)
            v._node = t._node
            note_reader(v)
    return tuple(targets)


def _mask_for(where: Any, values: Sequence[Array], targets: Sequence[Array],
              storages: dict[int, Any], held: Sequence[bool] | None) -> Node:
    """The checked mask node of ``where`` for ``targets`` (one shape); lazy values the
    caller keeps that read a target are computed first (they keep their values)."""
    from .ops.masked import mask_node

    shapes = {t.shape for t in targets}
    if len(shapes) > 1:
        raise ShapeError(f"fl.compute(..., where=) writes targets of one shape; out= has "
                         f"shapes {', '.join(map(str, sorted(shapes)))}")
    mask = mask_node(where, targets[0].shape, targets)
    for k, v in enumerate(values):
        if v.is_lazy and (held is None or held[k]) and any(
                s in v._node.storages for s in storages.values()):
            v.eval()
    return mask


def _reads_as_target(value: Array, target: Array) -> bool:
    return value.dtype == target.dtype and value.shape == target.shape
