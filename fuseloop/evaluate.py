"""Evaluation: turn lazy expressions into device buffers, fusing what can be fused.

This is the hot path: linearise the DAG (the structural key), look the kernel up in
memory, allocate outputs from the pool, enqueue.  Nothing here waits for the device,
except to report an out-of-range gather index; reading results (``Array.get``) does.

Fusion decisions (:func:`run`): a reduction is computed inside the kernel
that consumes it when each of its results is needed by a whole row of that
kernel's work (``x.sum(axis=1)``, softmax along the last axis); a reduction to
a single value consumed by a larger expression (``x - x.mean()``) runs first,
as its own kernels.  A large reduction to few values runs in two stages: many
work-groups reduce pieces, a second small kernel combines the pieces.
"""

from __future__ import annotations

import math
import threading
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from typing import Any

import numpy as np

from . import flags as _flags
from . import host_path as _host
from . import launching as _launching
from . import pending_joined as _pending_joined
from . import run_plans  # (it reads this module's functions at call time)
from . import sharing as _sharing
from .errors import DeviceMemoryError, OneLaunchRefused, OutOfMemoryError
from .expr import program as _prog
from .expr.contraction import operand_producers as _operand_producers
from .expr.nodes import (
    Apply,
    Concat,
    Gather,
    Iota,
    Leaf,
    Node,
    Reduce,
    Remap,
    SparseProduct,
    Storage,
    c_strides,
    recent_lazy,
    register_readers,
)
from .expr.overlap import one_group_fits as _one_group
from .expr.program import (
    INT32_LIMIT,
    Bindings,
    Program,
    Target,
    flat_entries,
    linearize,
    structure_entry,
)
from .expr.views import nocopy_reshape_strides, reshape_view
from .flat_moves import moved_launch
from .launching import (
    DEFER_MAX,
    INDEX_INT32,
    INDEX_INT64,
    enqueue,
    index_dtype_for,
    launch_cached,
    plan_launch,
    recipe_kind,
    rows_of,
)
from .node_walks import (  # noqa: F401  (assignment, masked and multi import them here)
    _may_fail,
    _reads_only_in_place,
    _rebuild,
    reads_outside,
)
from .passes.axis_merge import merged_reductions as _merged_reductions
from .recipe_state import current as _recipes_current
from .recipe_state import recipe_for
from .runtime.devices import Device
from .runtime.transfer import host_buffer, write
from .split_k import split_param  # noqa: F401  (read by run_plans)
from .splits import SPLITTABLE as _SPLITTABLE
from .splits import (
    TWO_STAGE_MAX_ROWS,
    TWO_STAGE_MIN_LENGTH,
    TwoStage,
    column_params,
    two_stage_split,
)
from .splits import chunking as _chunking
from .splits import fits_one_row as _fits_one_row
from .splits import folds_into as _folds_into
from .splits import has_reduce as _has_reduce
from .splits import nested_reduces as _nested_reduces
from .splits import one_launch as _one_launch
from .splits import runs_child_first as _runs_child_first
from .stats import cached_launches as _cached_launches

_plan_recorder = run_plans.recorder
recording_threads = run_plans.recording_threads
_tally_cached_launch = _cached_launches.__next__
# fl.show_code: while a thread captures, launch() records that thread's kernel sources
# instead of running them; capturing_threads[0] counts the threads capturing now, so
# the common answer ("none") needs no thread-local look-up
capturing_threads = [0]
_capture_local = threading.local()
_capture_lock = threading.Lock()


def captured_sources() -> list[str] | None:
    """The list this thread's kernel sources go to instead of running (None: run)."""
    if not capturing_threads[0]:
        return None
    return getattr(_capture_local, "sources", None)


@contextmanager
def capturing_sources() -> Iterator[list[str]]:
    """Within it, this thread's evaluations record their kernels' sources, run nothing."""
    saved = getattr(_capture_local, "sources", None)
    sources: list[str] = []
    _capture_local.sources = sources
    with _capture_lock:
        capturing_threads[0] += 1
    try:
        yield sources
    finally:
        _capture_local.sources = saved
        with _capture_lock:
            capturing_threads[0] -= 1

# Full reductions consumed by a larger output stay in its kernel (one row) when the
# output and every reduced range are shorter than this (see splits.fits_one_row)
ONE_ROW_MAX_LENGTH = TWO_STAGE_MIN_LENGTH
__all__ = ["TWO_STAGE_MAX_ROWS", "TWO_STAGE_MIN_LENGTH", "TwoStage", "column_params",
           "two_stage_split"]  # (their home is fuseloop.splits)


def _check_alloc_size(nbytes: int, device: Device) -> None:
    if nbytes > device.max_alloc_size:
        raise DeviceMemoryError(
            f"cannot allocate {nbytes} bytes on {device.name}: its largest single allocation "
            f"is {device.max_alloc_size} bytes (global memory {device.global_mem_size} bytes); "
            "use smaller arrays or a device with more memory")


# Lazy arrays that nothing holds any more can still be held for a short while
# by the registry of recent lazy arrays (see expr.nodes.recent_lazy); they are
# let go before an allocation of this many bytes or more, and before an
# allocation is tried again after failing, so their buffers can serve it.
RELEASE_RECENT_AT = 1 << 20


def _with_recent_released(make: Callable[[], Any], nbytes: int, device: Device) -> Any:
    """``make()`` (an allocation), after letting go of unheld recent lazy arrays
    if it is large, and tried once more after doing so if it fails."""
    if nbytes >= RELEASE_RECENT_AT and recent_lazy:
        register_readers()
    try:
        return make()
    except OutOfMemoryError:
        register_readers()
        try:
            return make()
        except OutOfMemoryError as exc:
            raise DeviceMemoryError(
                f"out of device memory allocating {nbytes} bytes on {device.name}: "
                f"{exc}") from None


def allocate(nbytes: int, device: Device) -> Storage:
    """A device buffer of ``nbytes`` from the device's pool."""
    _check_alloc_size(nbytes, device)
    allocator = device.allocator
    buf = _with_recent_released(lambda: allocator.allocate(max(nbytes, 1)), nbytes, device)
    return Storage(buf, nbytes, device)


def upload(host: np.ndarray, device: Device) -> Storage:
    """A new device buffer holding a copy of ``host`` (C-contiguous); the copy is
    complete on return, so the caller may change ``host`` at once."""
    nbytes = host.nbytes
    _check_alloc_size(nbytes, device)
    # (CPU devices: no queue command, no wait)
    made = _with_recent_released(lambda: host_buffer(host, device), nbytes, device)
    if made is not None:
        return Storage(made, nbytes, device)
    out = allocate(nbytes, device)
    if nbytes:
        write(out.buffer, host, device)
    return out


# {{{ node rewriting


def _reduces_to_materialise(roots: Sequence[Node], out_shape: tuple[int, ...]
                            ) -> list[Node]:
    """Reductions that must run as kernels of their own before this one.

    A reduction stays inside the kernel when it is a root itself, or when each
    of its results is consumed along whole rows of the kernel's index space
    (softmax's row maximum inside the row sum).  A full reduction (one value)
    consumed by anything larger, a reduction whose value changes along an
    enclosing reduction's own loop (a chain of contractions: it would be
    recomputed for every step of that loop), or one behind a gather runs first;
    where such reductions are as large as the enclosing reduction's operand, that
    operand runs first instead (:func:`~fuseloop.splits.runs_child_first`).
    Except: when every reduction is a full one and the output and every reduced
    range are short (:func:`~fuseloop.splits.fits_one_row`), the kernel is one row and they all
    stay (a short vector's softmax or ``x - x.mean()`` is one kernel).  Kept ones the
    kernel would compute again per step along others' axes run first (sharing.recomputed).

    Sparse products (their own recipes: a row loop only) stay in a kernel without
    reductions that has no more elements than they have rows, wherever they are
    read; in one that keeps a reduction, inside a reduction or broadcast to a
    larger output, they run first.
    """
    out_size = math.prod(out_shape)
    one_row = _fits_one_row(roots, out_size, ONE_ROW_MAX_LENGTH)
    found: list[Node] = []
    seen: set[tuple[int, frozenset]] = set()
    sparse: list[tuple[SparseProduct, bool]] = []
    keeps_reduce = [False]
    kept: list[tuple[Node, frozenset[int]]] = []  # (reductions the kernel keeps)

    def walk(node: Node, in_root_space: bool, inside_reduce: bool,
             forbidden: frozenset) -> None:
        key = (id(node), forbidden)
        if key in seen or not node.fancy:
            return
        seen.add(key)
        if isinstance(node, Reduce):
            size_one = math.prod(node.shape) == 1
            varies_badly = any(node.shape[d] != 1 for d in forbidden)
            if (size_one and (inside_reduce or out_size > 1) and not one_row) \
                    or not in_root_space or varies_badly:
                found.append(node)
                return
            keeps_reduce[0] = True
            if not inside_reduce:
                kept.append((node, _sharing.varying_axes(node, len(out_shape))))
            if _runs_child_first(node):
                found.append(node.child)
                return
            # (a contraction's operands: their reductions and gathers run first)
            pulled = [] if one_row else _operand_producers(node)
            found.extend(p for p in pulled if p not in found)
            walk(node.child, True, True, frozenset(node.axes))
        elif isinstance(node, SparseProduct):
            # (read by more elements than it has rows, e.g. broadcast: each would
            # compute its row again)
            sparse.append((node, inside_reduce or out_size > node.shape[0]))
        elif isinstance(node, Apply):
            n = len(node.shape)
            for a in node.args:
                r = len(a.shape)
                sub = frozenset(k for k in range(r) if (n - r + k) in forbidden)
                walk(a, in_root_space, inside_reduce, sub)
        elif isinstance(node, Gather):
            walk(node.child, False, inside_reduce, frozenset())
            walk(node.index, False, inside_reduce, frozenset())
        elif isinstance(node, Remap):
            walk(node.child, False, inside_reduce, frozenset())
        elif isinstance(node, Concat):  # (pieces are read at shifted positions: kept simple)
            for p in node.pieces:
                walk(p, False, inside_reduce, frozenset())

    for r in roots:
        walk(r, True, False, frozenset())
    if len(kept) > 1 and not one_row:  # (one computed again per step along another's axes)
        found.extend(r for r in _sharing.recomputed(kept) if r not in found)
    for node, inside in sparse:
        if (inside or keeps_reduce[0]) and node not in found:
            found.append(node)
    return found


def _materialise_pending(pending: Sequence[Node], device: Device) -> dict[int, Node]:
    """:func:`fuseloop.sharing.materialise_pending` (what replaces each pending node)."""
    return _sharing.materialise_pending(pending, device, materialise, _rebuild)


def materialise(node: Node, device: Device) -> Leaf:
    """Evaluate ``node`` into a new contiguous buffer."""
    storage = run([node], node.shape, device)[0]
    return Leaf(storage, node.dtype, node.shape)


# }}}


def _coalesced(roots: Sequence[Node], out_shape: tuple[int, ...],
               targets: Sequence[Target | None]) -> tuple[list[Node], tuple[int, ...],
                                                           list[Target | None]] | None:
    """Elementwise work over fewer, longer dimensions where every operand allows it.

    Dimensions of length 1 drop out and neighbours that every leaf (and output) strides
    through alike merge: (7, 9) and (63,) share a kernel, most are one flat loop.
    """
    if any(t is not None and t.scatter is not None for t in targets):
        return None  # a scatter's index addresses one axis of the output: keep the axes
    # a mask (Target.mask) is read at the output's index like a root
    masks = list({id(t.mask): t.mask for t in targets
                  if t is not None and t.mask is not None}.values())
    kept = [n for n in out_shape if n != 1]
    if len(kept) <= 1:
        new_shape = tuple(kept) or ()
    else:
        strides_lists: list[tuple[int, ...]] = []
        ok = _leaf_strides([*roots, *masks], out_shape, strides_lists)
        if not ok:
            return None
        for t in targets:
            if t is not None:
                strides_lists.append(t.strides if t.strides is not None else c_strides(out_shape))
        dims = [d for d, n in enumerate(out_shape) if n != 1]
        groups: list[list[int]] = [[dims[0]]]
        for d in dims[1:]:
            prev = groups[-1][-1]
            if all(st[prev] == st[d] * out_shape[d] for st in strides_lists):
                groups[-1].append(d)
            else:
                groups.append([d])
        new_shape = tuple(math.prod(out_shape[d] for d in g) for g in groups)
    if new_shape == out_shape:
        return list(roots), out_shape, list(targets)
    new_roots = []
    for r in [*roots, *masks]:
        if r.shape != out_shape:
            from .expr.views import affine_view, broadcast_map

            off, coeffs = broadcast_map(r.shape, out_shape)
            r = affine_view(r, out_shape, off, coeffs)
        v = reshape_view(r, new_shape)
        if v is None:
            return None
        new_roots.append(v)
    new_mask = new_roots[len(roots)] if masks else None
    del new_roots[len(roots):]
    new_targets: list[Target | None] = []
    for t in targets:
        if t is None:
            new_targets.append(None)
            continue
        if t.strides is None:  # (a whole buffer stays one: no offset parameter)
            new_targets.append(t._replace(mask=new_mask))
            continue
        ns = nocopy_reshape_strides(out_shape, t.strides, new_shape)
        if ns is None:
            return None
        new_targets.append(Target(t.storage, ns, t.offset, mask=new_mask))
    return new_roots, new_shape, new_targets


def _leaf_strides(roots: Sequence[Node], out_shape: tuple[int, ...],
                  acc: list[tuple[int, ...]]) -> bool:
    """Strides of every leaf as seen from the output's index (False: not elementwise)."""
    n = len(out_shape)
    seen: set[tuple[int, tuple[int, ...]]] = set()

    def walk(node: Node, bshape: tuple[int, ...]) -> bool:
        key = (id(node), bshape)
        if key in seen:
            return True
        seen.add(key)
        if isinstance(node, Leaf | Iota):
            st = node.view_strides()
            r = len(node.shape)
            full = [0] * n
            for k in range(r):
                if node.shape[k] != 1:
                    full[n - r + k] = st[k]
            acc.append(tuple(full))
            return True
        if isinstance(node, Apply):
            return all(walk(a, a.shape) for a in node.args)
        return not node.storages and type(node).__name__ in ("Scalar", "Literal")

    return all(walk(r, r.shape) for r in roots)


def flat_launch_ready(node: Node, shape: tuple[int, ...], device: Device
                      ) -> tuple[Any, list[Storage], list[Any], Any, Any] | None:
    """The launch of the flat elementwise ``node`` (rank 0 or 1) whose structure, kernel
    and int32 launch plan are all cached and valid now: (the launch plan, its buffers,
    its scalars, this thread's kernel object, its argument record); None where anything
    else applies (the caller then takes :func:`run`, which handles every other case).
    :func:`run_flat` and a split array's staged parts (``multi.replay``) both read it."""
    operands = node.operands
    if operands is None or len(shape) > 1 or capturing_threads[0] \
            or recording_threads[0] or _prog.CHECK_STRUCTURE_CACHE:
        return None
    # found by signature and shape alone (the entry's picker checks that the operands
    # repeat as its program needs: see expr.program.flat_entries)
    entry = flat_entries.get((node.sig, shape))
    if entry is None:
        return None
    picked = entry.take(operands)
    plans = entry.launches.get(device)
    if picked is None or plans is None:
        return None
    # the int32 plan exists only where the entry's sizes and parameters allow it
    # (launch_cached chose it with index_dtype_for, the rule), and a buffer past int32
    # bytes makes that rule's answer int64 whatever they are: what is left to check
    # is the buffers; anything else goes to run, which reports a buffer on another
    # device
    storages, scalars = picked
    wide = False
    for s in storages:
        if s.device is not device:
            return None
        if s.nbytes > INT32_LIMIT:
            wide = True
    plan = plans.get(INDEX_INT64 if wide else INDEX_INT32)
    # (LaunchPlan.valid through the plan's stamp: its recipe is still recipe_for's)
    if plan is None or plan.stamp is not _recipes_current[0] or not plan.compiled.in_cache:
        return None
    if entry.offs != node.offs:  # (its views elsewhere: the offsets as launch arguments)
        if wide or (moved := moved_launch(entry, plan, node.offs, scalars, shape, device)) is None:
            return None
        plan, scalars = moved
    try:
        kernel, last = plan.threads.state
    except AttributeError:  # this thread's first launch of the structure
        return None
    return plan, storages, scalars, kernel, last


def run_flat(node: Node, shape: tuple[int, ...], device: Device,
             into: Storage | None = None, now: bool = False) -> Storage | None:
    """:func:`run` of one flat elementwise ``node`` whose structure, kernel and launch
    are all cached (:func:`flat_launch_ready`); None when anything else applies.

    ``into``: a buffer of exactly the result's bytes to write instead of a new one
    (``out[...] = e``), which ``node`` must not read (see :func:`run_into`).
    ``now``: also a launch that is not deferred (a large result), enqueued at once;
    without it only deferred launches are made here.

    This is the commonest evaluation (``(x*2 + y).eval()`` in a loop), and most of
    its cost is the host's: so it does in place what :func:`run`, :func:`allocate`,
    ``structure_entry`` and ``launch_cached`` do in turn, with what does not change
    between calls decided per launch plan (``LaunchPlan.stamp``, ``small_bytes``,
    ``reserve``).  On None the caller uses :func:`run`, which handles every other
    case and reports every error.  ``fl.stats()`` counts as for :func:`run`.
    """
    ready = flat_launch_ready(node, shape, device)
    if ready is None:
        return None
    plan, storages, scalars, kernel, last = ready
    nbytes = plan.small_bytes  # (0: not deferred, a large result: enqueued now)
    if not nbytes:
        # (what run's hot path does with this plan: allocate with the room checked,
        # then launch_cached's enqueue, without its look-ups made again)
        size = shape[0] if shape else 1
        if not now or not size:
            return None
        out = into if into is not None else allocate(size * node.dtype.itemsize, device)
        _launching.enqueue_or_defer(plan.go, (out, storages, scalars, kernel, last), False,
                                    device)
        _tally_cached_launch()
        return out
    rt = plan.runtime
    if into is None:
        # DeviceMemory.allocate, its common case written out (see DeviceMemory.reserve);
        # out of credit, run allocates (and checks the room), as on a refusal (and reports)
        mem = rt.pool
        credit = mem.credit - plan.reserve
        if credit < 0:
            return None
        mem.credit = credit
        try:
            buffer = mem.pooled(nbytes)
        except mem.refused:
            return None
        out = Storage(buffer, nbytes, device)
    else:
        out = into
    deferred = rt.deferred
    deferred.append((plan.go, (out, storages, scalars, kernel, last)))
    _tally_cached_launch()  # a memory-cache hit and a launch (see fuseloop.stats)
    if len(deferred) >= DEFER_MAX:
        rt.flush()
    return out


_run_flat = run_flat  # (eval_rest's: the one-frame path itself, wherever it is wrapped)


def run_into(node: Node, shape: tuple[int, ...], device: Device, into: Storage) -> None:
    """:func:`run` of ``node`` into all of the contiguous buffer ``into``.

    A flat elementwise ``node`` of the target's dtype and shape that does not read
    ``into`` takes the path of ``.eval()`` (:func:`run_flat`, else the cached
    structure and launch), writing ``into`` instead of a new buffer: there is no
    aliasing to check and no run plan to look up.  Anything else goes to :func:`run`.
    """
    if node.fancy or len(shape) > 1 or node.shape != shape or into in node.storages \
            or into.nbytes != (shape[0] if shape else 1) * node.dtype.itemsize \
            or (_host.host_device(device)  # (run tries the host path first)
                and _host.within_limit(shape[0] if shape else 1, (node,))):
        run([node], shape, device, [into])
        return
    if into.nbytes and run_flat(node, shape, device, into) is None:
        _run_cached([node], shape, device, into)


def _run_cached(roots: Sequence[Node], out_shape: tuple[int, ...], device: Device,
                out: Storage) -> None:
    """One flat elementwise root into ``out``: its cached structure and launch if it
    has them (linearised and remembered otherwise)."""
    hit = structure_entry(roots, out_shape)
    if hit is None:  # (not cached: not looked up again)
        program, bindings = linearize(roots, out_shape, cache=False)
        launch(program, bindings, [out], device)
    elif captured_sources() is not None or _plan_recorder() is not None or \
            not launch_cached(*hit, out, out_shape, device):
        entry, storages, scalars = hit
        launch(entry.program, Bindings(storages, scalars, list(entry.params), out_shape,
                                       None, entry.offset_slots), [out], device)


def run(roots: Sequence[Node], out_shape: tuple[int, ...], device: Device,
        targets: Sequence[Target | Storage | None] | None = None) -> list[Storage]:
    """Compute ``roots`` (each broadcast to ``out_shape``); return their storages.

    ``targets`` optionally names existing buffers (or strided views of them) to write
    into.  A target the expression also reads through another index is written by one
    work-group loading every value first, or through a temporary past its limit.
    """
    if targets is not None:
        if any(t is not None for t in targets):
            _flags.check_pending()  # (written below, perhaps by numpy: earlier checks first)
    elif len(roots) == 1 and (roots[0].fancy or len(out_shape) > 1):
        # (``.eval()`` of a reduction or an n-d result: its plan by signature, if one is
        # remembered, replayed in one frame)
        one = run_plans.replay_one(roots[0], out_shape, device)
        if one is not None:
            return [one]
    return _run_rest(roots, out_shape, device, targets)


def eval_rest(node: Node, shape: tuple[int, ...], device: Device,
              tried: bool = False) -> Storage:
    """``run([node], shape, device)[0]`` after :func:`run_flat` found no deferred launch
    (``.eval()``): a plan remembered by signature, a flat launch made now (a large
    result), each tried once (``tried``: the caller tried it), then what :func:`run`
    does after them."""
    if tried:
        one = None
    elif node.fancy or len(shape) > 1:
        one = run_plans.replay_one(node, shape, device)
    else:
        one = _run_flat(node, shape, device, None, True)
    if one is not None:
        return one
    return _run_rest([node], shape, device, None)[0]


def _run_rest(roots: Sequence[Node], out_shape: tuple[int, ...], device: Device,
              targets: Sequence[Target | Storage | None] | None) -> list[Storage]:
    """:func:`run` after its plan by signature: the host path, the flat hot path, the
    general path."""
    done = _host.try_run(roots, out_shape, device, targets)  # (small work on a CPU: numpy)
    if done is not None:
        return done
    if targets is None and len(roots) == 1 and len(out_shape) <= 1 and not roots[0].fancy:
        # the hot path: one flat elementwise result into a new buffer
        root = roots[0]
        out = allocate((out_shape[0] if out_shape else 1) * root.dtype.itemsize, device)
        if out.nbytes:
            _run_cached(roots, out_shape, device, out)
        return [out]
    # (checked gathers' error flags are read once, when all of its kernels are enqueued)
    if captured_sources() is None and _plan_recorder() is None:
        return _flags.deferring(run_plans.run, roots, out_shape, device, targets)
    return _flags.deferring(run_unplanned, roots, out_shape, device, targets)


def run_unplanned(roots: Sequence[Node], out_shape: tuple[int, ...], device: Device,
                  targets: Sequence[Target | Storage | None] | None = None) -> list[Storage]:
    """:func:`run` deciding everything afresh (:mod:`fuseloop.run_plans` records it)."""
    if _sharing.active() is None:  # (one scope per evaluation: the runs it nests share it)
        with _sharing.scope():
            return run_unplanned(roots, out_shape, device, targets)
    tgts: list[Target | None] = [
        Target(t, None, 0) if isinstance(t, Storage) else t
        for t in (targets if targets is not None else [None] * len(roots))]
    roots = list(roots)

    fancy = any(r.fancy for r in roots)
    pending = _reduces_to_materialise(roots, out_shape) if fancy else None
    if pending and (done := _pending_joined.run(pending, roots, out_shape, tgts, device)):
        return done  # (reductions not fused here run first; a full one of one: joined)
    if pending:
        replace = _materialise_pending(pending, device)
        memo: dict[int, Node] = {}
        roots = [_rebuild(r, replace, memo) for r in roots]

    # reading a target through another index (or a gather may fail after writing: user
    # buffers untouched): one work-group if it fits, else fresh buffers first
    has_gather = fancy and any(_may_fail(r) for r in roots)
    # (a scatter writes elsewhere than it reads even where the strides agree)
    unsafe = [t is not None and (has_gather or (any(t.storage in r.storages for r in roots)
                                 and (t.scatter is not None
                                      or not _reads_only_in_place(roots, t, out_shape,
                                                                  root.dtype.itemsize))))
              for t, root in zip(tgts, roots)]
    if any(unsafe) and (fancy or not _one_group(tgts, out_shape, device)):
        direct = [None if u else t for t, u in zip(tgts, unsafe)]
        outs = run(roots, out_shape, device, direct)
        for k, t in enumerate(tgts):
            if unsafe[k] and t is not None:  # (unsafe only where there is a target)
                leaf = Leaf(outs[k], roots[k].dtype, out_shape)
                run([leaf], out_shape, device, [t])
                outs[k] = t.storage
        return outs

    size = math.prod(out_shape)
    outs = [t.storage if t is not None else allocate(size * r.dtype.itemsize, device)
            for r, t in zip(roots, tgts)]
    if size == 0:
        return outs

    if fancy and (co := _merged_reductions(roots, out_shape, tgts, device)) is not None:
        roots, out_shape = co[0], co[1]  # (neighbouring axes of one role as one)
    # two stages for large reductions to few values
    split = two_stage_split(roots, out_shape, device) if fancy else None
    if split is not None and any(_has_reduce(top.child) for top in split.tops):
        # a reduction nested in a split one runs first: each piece would compute it again
        inner: list[Reduce] = []
        for top in split.tops:
            _nested_reduces(top.child, inner)
        replace = _before_split(inner, split, device)
        memo = {}
        roots = [_rebuild(r, replace, memo) for r in roots]
        split = two_stage_split(roots, out_shape, device)
    first = None
    if split is not None:
        roots, first = _first_stage(split, roots, out_shape, device)

    co = None if fancy else _coalesced(roots, out_shape, tgts)
    work_roots, work_shape, work_targets = co or (roots, out_shape, tgts)
    # (while a run plan records, linearised afresh: its bindings name their scalar nodes)
    program, bindings = linearize(work_roots, work_shape, work_targets,
                                  cache=_plan_recorder() is None)
    program = program._replace(one_group=True) if any(unsafe) else program  # (fits one)
    if any(t is not None for t in work_targets):
        _flags.check_pending()  # (a failed index check leaves user arrays untouched)
    if first is not None:
        _launch_joined(first, program, bindings, outs, device)
    else:
        launch(program, bindings, [o for o in outs], device)
    return outs


def _before_split(inner: list[Reduce], split: TwoStage, device: Device) -> dict[int, Node]:
    """What replaces the reductions ``inner`` nested in ``split``'s tops: each run
    first, but one whose own split's partials are few enough for every piece of
    ``split`` to combine them (``splits.folds_into``: a column mean inside a column
    variance) runs its first stage only, its combination left to those pieces."""
    shared = _sharing.active()
    folded: dict[int, Node] = {}
    for r in inner:
        own = None if _has_reduce(r.child) or (
            shared is not None and shared.lookup(r) is not None) \
            else two_stage_split([r], r.shape, device)
        if own is not None and _folds_into(own, split):
            folded[id(r)] = _first_stage(own, [r], r.shape, device)[0][0]
    rest = [r for r in inner if id(r) not in folded]
    return {**(_materialise_pending(rest, device) if rest else {}), **folded}


def _first_stage(split: TwoStage, roots: list[Node], out_shape: tuple[int, ...],
                 device: Device) -> tuple[list[Node], FirstLaunch | None]:
    """Run the first stage of ``split``; return ``roots`` combining the partial results.

    The partial results have a last axis of pieces, or, for column-like
    reductions, a first one: the combining stage is then a column reduction too,
    and its work-items read neighbouring partials.  Where both stages are to share
    a launch (``splits.one_launch``), the first stage is returned unlaunched, as a
    :data:`FirstLaunch` for :func:`_launch_joined`.
    """
    tops = split.tops
    pieces, chunk, exact, axis = _chunking(split, out_shape)
    part_shape = (*out_shape[:axis], pieces, *out_shape[axis:])
    program, bindings = linearize(tops, part_shape, None, chunks=(pieces, chunk, exact, axis))
    size = math.prod(part_shape)
    partials = [allocate(size * t.dtype.itemsize, device) for t in tops]
    first = None
    if _one_launch(split, out_shape):
        first = (program, bindings, partials)
    else:
        launch(program, bindings, partials, device)
    replace: dict[int, Node] = {}
    for t, part in zip(tops, partials):
        leaf = Leaf(part, t.dtype, part_shape)
        replace[id(t)] = Reduce(_SPLITTABLE[t.op], leaf, (axis,), t.dtype)
    memo: dict[int, Node] = {}
    return [_rebuild(r, replace, memo) for r in roots], first


# a first stage not yet launched: its program, bindings and partial results
FirstLaunch = tuple[Program, Bindings, list[Storage]]
# (joined program, device index) whose stages could not share a launch
_refused: set[tuple[Program, int]] = set()


def _launch_joined(first: FirstLaunch, program: Program, bindings: Bindings,
                   outs: list[Storage], device: Device) -> None:
    """Launch the first stage and the combining ``program`` as one kernel (see
    :mod:`fuseloop.lower.one_launch`), or one after the other where they cannot share
    a launch on ``device``.  The joined launch's bindings are the combining stage's,
    then the first stage's and its rows and row length; its outputs are ``outs``
    then the partial results."""
    program1, bindings1, partials = first
    ins = bindings.storages
    joined = program._replace(first=_prog.FirstStage(
        program1, len(outs), len(ins), len(bindings.scalars), len(bindings.params),
        len(bindings1.params),
        tuple(next(k for k, s in enumerate(ins) if s is p) for p in partials)))
    if (joined, device.index) not in _refused:
        n_params = len(bindings.params)
        nodes = None if bindings.scalar_nodes is None or bindings1.scalar_nodes is None \
            else bindings.scalar_nodes + bindings1.scalar_nodes
        slots = None if bindings.offset_slots is None or bindings1.offset_slots is None \
            else bindings.offset_slots + tuple(n_params + k for k in bindings1.offset_slots)
        both = Bindings(ins + bindings1.storages, bindings.scalars + bindings1.scalars,
                        [*bindings.params, *bindings1.params,
                         *rows_of(program1, bindings1.out_shape)],
                        bindings.out_shape, nodes, slots)
        try:
            _build_ahead(joined, both, device)
        except OneLaunchRefused:
            _refused.add((joined, device.index))
        else:
            launch(joined, both, [*outs, *partials], device)
            return
    launch(program1, bindings1, partials, device)
    launch(program, bindings, outs, device)


def _build_ahead(program: Program, bindings: Bindings, device: Device) -> None:
    """Build ``program``'s kernel for ``bindings`` now, if not built (a run plan's
    replay looks it up; a refusal, :class:`OneLaunchRefused`, is known before anything
    launched; while a plan records, only the kernel's plan is made: prebuild.ahead)."""
    index_dtype, recipe, n_rows, n_elem = launch_choice(program, bindings, device, True)
    key = _launching.kernel_key(program, index_dtype, device, recipe, bindings.params,
                                n_rows, n_elem)
    if key not in _launching._memory:
        from .prebuild import ahead
        ahead(key, (program, index_dtype, device, recipe, bindings.params, n_rows, n_elem))


def launch_choice(program: Program, bindings: Bindings, device: Device,
                  check_device: bool = False) -> tuple[np.dtype, Any, int, int]:
    """What a launch of ``program`` with ``bindings`` on ``device`` uses: the index
    dtype, the recipe, the number of rows and the elements per row.  ``check_device``:
    raise unless every buffer is on ``device`` (:mod:`fuseloop.stages` compiles for
    any device)."""
    shape = bindings.out_shape
    index_dtype = index_dtype_for(bindings.storages,
                                  max(max(bindings.params, default=0), math.prod(shape)),
                                  device if check_device else None)
    recipe = recipe_for(device, recipe_kind(program))
    return (index_dtype, recipe, *rows_of(program, shape, recipe))


def launch(program: Program, bindings: Bindings, outs: list[Storage], device: Device) -> None:
    """Launch ``program`` with ``bindings`` into ``outs``: the general path (see
    :mod:`fuseloop.launching` for its steps).  While ``fl.show_code`` captures,
    records the kernel's source instead; while a run plan records, the recorder
    sees the launch (see :meth:`fuseloop.run_plans.Recorder.launch`)."""
    rec = _plan_recorder()
    if rec is not None:
        rec.launch(program, bindings, outs, device)
    else:
        launch_now(program, bindings, outs, device)


def launch_now(program: Program, bindings: Bindings, outs: Sequence[Storage],
               device: Device) -> None:
    index_dtype, recipe, _, _ = launch_choice(program, bindings, device, check_device=True)
    plan = plan_launch(program, bindings.params, bindings.out_shape, index_dtype, recipe,
                       device)
    assert plan is not None  # (only a one-output plan can be refused)
    capture = captured_sources()
    if capture is not None:
        capture.append(plan.compiled.plan.source)
        return
    enqueue(plan, outs, bindings.storages, bindings.scalars, False, device)


def cast_node(node: Node, dtype: np.dtype) -> Node:
    if node.dtype == dtype:
        return node
    return Apply("cast", (node,), (node.dtype, dtype), node.shape)
