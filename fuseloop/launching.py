"""Launching compiled kernels: the one path every evaluation's kernels take.

The flow, for any program (elementwise, reduction, contraction, replayed step):

1. :func:`index_dtype_for`: the index type (int32 unless a size or buffer is larger);
2. :func:`kernel_for`: the compiled kernel (memory cache, else built);
3. :func:`plan_launch`: a :class:`LaunchPlan` for that kernel and these sizes: the
   grid, the constant arguments and a launcher closure that sets the arguments that
   change and enqueues, made once per plan by the kernel's backend
   (:func:`make_binder`, ``Backend.make_launcher``), kept on the compiled kernel per
   sizes;
4. :func:`enqueue`: run the launcher on this thread's kernel object, now or
   deferred with other small launches (:func:`enqueue_or_defer`).

:func:`fuseloop.evaluate.launch` runs the four steps for any program.  Callers that
launch one structure again and again keep its plan and skip steps 2 and 3 while
the plan is valid (:meth:`LaunchPlan.valid`): :func:`launch_cached` (flat
elementwise structures, plans on the structure's entry), ``evaluate.run_flat``
(the same, inlined) and :mod:`fuseloop.run_plans` (replayed steps).  Kernels
written by hand (``fuseloop.ops.compaction``) take steps 3 and 4 with
:func:`plan_for` on a :class:`fuseloop.cache.SourceKernel`'s compiled kernel.
"""

from __future__ import annotations

import math
import re
import threading
from collections.abc import Sequence
from typing import Any
from weakref import WeakValueDictionary

import numpy as np

from . import flags as _flags
from .backends import Launcher, LaunchSpec
from .backends.base import Consts
from .cache import CompiledKernel, _memory, get_kernel
from .errors import DeviceError, DTypeError, RecipeError
from .expr.nodes import Storage
from .expr.program import INT32_LIMIT, Program, StructureEntry, with_row_loops
from .recipe_state import recipe_for
from .recipe_state import stamp as _recipe_stamp
from .runtime.devices import Device, _runtime
from .stats import _lock as _stats_lock
from .stats import counters as _counters
from .stats import increment as _increment_stat
from .tuning import tuned as _tuned

INDEX_INT32, INDEX_INT64 = np.dtype(np.int32), np.dtype(np.int64)
# key -> UserFunction, filled by fuseloop.functions.  Weak: a function no longer
# referenced is forgotten (its compiled kernels stay cached; only lowering a new
# kernel looks a function up, and then the expression calling it holds it).
user_functions: WeakValueDictionary[str, object] = WeakValueDictionary()

# Cached elementwise launches (and replayed elementwise run-plan steps) of at most
# this many elements are deferred and enqueued in batches of up to DEFER_MAX (see
# enqueue_or_defer and fuseloop.runtime.devices._DeviceRuntime).
DEFER_MAX_ELEMENTS = 1 << 15
DEFER_MAX = 64


def _check_fp64(program_entries: tuple, device: Device) -> None:
    if device.has_fp64:
        return
    for e in program_entries:
        kind = e.kind
        if kind in ("op", "call"):
            chars = e.loop
        elif kind in ("load", "arg", "reduce", "lit", "iota", "sparse"):
            chars = (e.dtype,)
        else:
            continue
        if "d" in chars:
            raise DTypeError(
                f"device {device.name} does not support float64, but this expression needs it "
                "(numpy promotes e.g. int32 / int32 and float32 + float64 to float64); "
                "use float32 arrays or .astype(np.float32)")


def size_class_of(recipe: Any, program: Program, params: Sequence[int], n_rows: int,
                  n_elem: int) -> str:
    """The recipe's size class for this launch (see :mod:`fuseloop.recipes`); for two
    stages in one launch (``program.first``), both stages' as ``second|first``."""
    first = program.first
    if first is not None:
        rows = first.n_params + first.first_params
        return (size_class_of(recipe, program._replace(first=None), params[:first.n_params],
                              n_rows, n_elem) + "|" +
                size_class_of(recipe, first.program, params[first.n_params:rows],
                              params[rows], params[rows + 1]))
    size_class = recipe.size_class
    sizes = "" if size_class is None else size_class(program, params, n_rows, n_elem)
    if type(sizes) is not str:
        raise RecipeError(f"recipe {recipe.name!r}: size_class returned {sizes!r}; it must "
                          "return a string of Loopy assumptions ('' for none)")
    return sizes


# memory-cache keys of kernels built ahead of their evaluation's launches (see
# fuseloop.prebuild): the first look-up that finds one is not counted again
prebuilt: set[tuple] = set()


def kernel_key(program: Program, index_dtype: np.dtype, device: Device, recipe: Any,
               params: Sequence[int], n_rows: int, n_elem: int) -> tuple:
    """The memory-cache key :func:`kernel_for` looks up for this launch."""
    recipe = _tuned(recipe, program, index_dtype, device, params, n_rows, n_elem)
    sizes = size_class_of(recipe, program, params, n_rows, n_elem)
    return (program, index_dtype.char, device.index, recipe.cache_id, sizes)


def kernel_for(program: Program, index_dtype: np.dtype, device: Device, recipe: Any,
               params: Sequence[int], n_rows: int, n_elem: int) -> Any:
    """The compiled kernel for this launch of ``program``.

    Its memory-cache key holds the recipe's size class for these sizes (see
    :mod:`fuseloop.recipes`); counts a memory-cache hit when there is one.  The
    recipe's tuned parameters apply (:func:`fuseloop.tuning.tuned`; plans are kept,
    so this runs when a plan is made, not per launch).
    """
    recipe = _tuned(recipe, program, index_dtype, device, params, n_rows, n_elem)
    sizes = size_class_of(recipe, program, params, n_rows, n_elem)
    key = (program, index_dtype.char, device.index, recipe.cache_id, sizes)
    compiled = _memory.get(key)
    if compiled is not None:
        if prebuilt and key in prebuilt:
            prebuilt.discard(key)  # (its look-up was counted when it was built ahead)
        else:
            _increment_stat("memory_cache_hits")
    else:
        _check_fp64(program.entries, device)
        if program.first is not None:
            _check_fp64(program.first.program.entries, device)
        compiled = get_kernel(program, index_dtype, device, recipe, user_functions, sizes)
    return compiled


def other_device(s: Storage, device: Device) -> DeviceError:
    return DeviceError(
        f"an input lives on {s.device.name} but the kernel runs on {device.name}; "
        "move arrays with fl.asarray(x, device=...) first")


def index_dtype_for(storages: Sequence[Storage], biggest: int,
                    device: Device | None) -> np.dtype:
    """The launch's index type: int64 when ``biggest`` (the caller's largest parameter
    and output size) or any buffer's byte size exceeds int32, else int32.

    The one place this rule lives; it also checks that every buffer is on ``device``
    (unless None: a stage compiled for another device than its arrays').
    """
    for s in storages:
        if s.device is not device and device is not None:
            raise other_device(s, device)
        if s.nbytes > biggest:
            biggest = s.nbytes
    return INDEX_INT32 if biggest <= INT32_LIMIT else INDEX_INT64


def recipe_kind(program: Program) -> str:
    """Which recipe family launches ``program``."""
    return ("one_group" if program.one_group else
            "contraction" if program.contraction is not None else
            "reduction" if program.has_reduce else
            "sparse" if program.has_sparse else "elementwise")


def rows_of(program: Program, out_shape: tuple[int, ...],
            recipe: Any = None) -> tuple[int, int]:
    """(number of rows, elements per row) of a launch of ``program`` over ``out_shape``
    by ``recipe`` (one whose ``row_loops`` is set lowers elementwise programs of
    several axes in rows: :func:`~fuseloop.expr.program.with_row_loops`)."""
    if recipe is not None and recipe.row_loops:
        program = with_row_loops(program)
    if program.row_dims is None:
        return math.prod(out_shape), 1
    n_rows = math.prod(out_shape[d] for d in program.row_dims)
    return n_rows, math.prod(out_shape) // max(1, n_rows)


# a LaunchPlan.stamp no recipes token is (see fuseloop.recipes.registry.current)
UNCONFIRMED = object()
# a LaunchPlan.reserve no DeviceMemory.credit covers
NO_RESERVE = 1 << 62


class LaunchPlan:
    """How a compiled kernel is launched for one set of sizes: all but the data.

    ``go(outs, storages, scalars, kernel, last, queue)`` (the backend's launcher,
    see :func:`make_binder`) sets the arguments that changed and enqueues;
    ``consts`` are the arguments set when the kernel object last ran another
    plan; ``threads.state`` is this thread's ``(kernel object, record of its
    arguments)``.  ``error_arg``: the position of a gather's error flag (a pooled
    buffer, read back: see :mod:`fuseloop.flags`), else None.  ``recipe``, ``index_dtype`` and the
    kernel's ``in_cache`` say when a
    caller's kept plan is still valid (None for hand-written kernels' plans).

    ``stamp`` is the recipes token (``fuseloop.recipes.registry.current[0]``) under
    which ``recipe`` was last confirmed to be recipe_for's answer: while it is still
    the current token the hot paths (``evaluate.run_flat``, ``fl.fuse``'s replay)
    need not ask recipe_for.  For a one-output plan made by :func:`launch_cached`,
    ``small_bytes`` is its output's byte size when its launches are deferred (small),
    else 0, and ``reserve`` what a new output counts against the device's memory
    credit (``DeviceMemory.reserve``): the hot path's allocation, per plan.
    """

    __slots__ = ("compiled", "consts", "error_arg", "family", "go", "grid", "index_dtype",
                 "params", "recipe", "reserve", "runtime", "small_bytes", "stamp", "threads")
    compiled: CompiledKernel
    consts: Consts
    error_arg: int | None
    family: Any  # the backend's launcher family of its grid: go is family(consts)
    go: Launcher
    grid: tuple  # (global size, local size, one output): its family's key on the kernel
    index_dtype: np.dtype | None
    params: tuple[int, ...]  # the parameters its constants were bound from
    recipe: Any
    reserve: int
    runtime: Any
    small_bytes: int
    stamp: object
    threads: threading.local

    def valid(self, recipe: Any, index_dtype: np.dtype) -> bool:
        return (self.recipe is recipe and self.index_dtype is index_dtype
                and self.compiled.in_cache)


# plans a compiled kernel keeps (per sizes and output form); the oldest dropped beyond
PLANS_PER_KERNEL = 16


def plan_launch(program: Program, params: Sequence[int], out_shape: tuple[int, ...],
                index_dtype: np.dtype, recipe: Any, device: Device,
                one_output: bool = False) -> LaunchPlan | None:
    """The :class:`LaunchPlan` of ``program`` over ``out_shape``; looks the kernel up
    (counted as :func:`kernel_for` counts).  ``one_output``: ``go`` takes the output
    storage itself, not a list (None when the kernel has a second output or an
    error flag)."""
    n_rows, n_elem = rows_of(program, out_shape, recipe)
    compiled = kernel_for(program, index_dtype, device, recipe, params, n_rows, n_elem)
    plan = plan_for(compiled, params, n_rows, n_elem, device, one_output)
    if plan is None:
        return None
    # (also on a kept plan: the kernel is shared by every recipe object with its cache id,
    # and a plan naming an older one would never again pass a caller's identity check)
    plan.recipe = recipe
    plan.index_dtype = index_dtype
    return plan


def plan_for(compiled: CompiledKernel, params: Sequence[int], n_rows: int, n_elem: int,
             device: Device, one_output: bool = False) -> LaunchPlan | None:
    """The :class:`LaunchPlan` of ``compiled`` for these sizes, kept on it (made on
    first use); None as for :func:`plan_launch`."""
    key = (tuple(params), n_rows, n_elem, one_output)
    plans = compiled.launch_plans
    plan = plans.get(key)
    if plan is None:
        local = compiled.lsize(n_rows, n_elem, params)
        global_size = tuple(g * w for g, w in zip(compiled.gsize(n_rows, n_elem, params), local))
        made = make_binder(compiled, params, n_rows, n_elem, global_size, local, one_output)
        if made is None:
            return None
        plan = LaunchPlan()
        plan.go, plan.consts, plan.error_arg, plan.family = made
        plan.grid = (tuple(global_size), tuple(local), one_output)
        plan.params = key[0]
        plan.compiled = compiled
        plan.index_dtype = None
        plan.recipe = None
        plan.stamp = UNCONFIRMED
        plan.small_bytes = 0
        plan.reserve = NO_RESERVE
        plan.runtime = _runtime(device)
        # (one per kernel: a thread's kernel object is the kernel's, not a plan's)
        plan.threads = compiled.plan_threads
        if len(plans) >= PLANS_PER_KERNEL:
            plans.pop(next(iter(plans), ()), None)  # (the oldest)
        plans[key] = plan
    return plan


#: ``(outputs, inputs, scalars, constants, error flag)``: a kernel's arguments sorted
#: for :class:`~fuseloop.backends.LaunchSpec`; a constant is ``(position, kind, index,
#: numpy scalar type)`` (kind 3 a parameter, 4 the rows, 5 the row length)
ArgLayout = tuple[tuple[tuple[int, int], ...], tuple[tuple[int, int], ...],
                  tuple[tuple[int, int, Any], ...], tuple[tuple[int, int, int, Any], ...],
                  int | None]


def arg_layout(compiled: CompiledKernel) -> ArgLayout:
    """The kernel's arguments sorted by kind (``compiled.arg_plan``, with the kernel's
    declared types), worked out once per compiled kernel and kept on it."""
    layout: ArgLayout | None = compiled.arg_layout
    if layout is not None:
        return layout
    dtypes = compiled.plan.arg_dtypes
    outs: list[tuple[int, int]] = []
    bufs: list[tuple[int, int]] = []
    scals: list[tuple[int, int, Any]] = []
    consts: list[tuple[int, int, int, Any]] = []
    error_arg = None
    for i, (kind, idx) in enumerate(compiled.arg_plan):
        if kind == 0:
            outs.append((i, idx))
        elif kind == 1:
            bufs.append((i, idx))
        elif kind == 2:
            scals.append((i, idx, np.dtype(dtypes[i]).type))
        elif kind in (3, 4, 5):
            consts.append((i, kind, idx, np.dtype(dtypes[i]).type))
        elif kind == 6:
            error_arg = i
    layout = compiled.arg_layout = (tuple(outs), tuple(bufs), tuple(scals), tuple(consts),
                                    error_arg)
    return layout


# launcher families a compiled kernel keeps (per grid and output form); the oldest
# dropped beyond
LAUNCHERS_PER_KERNEL = 16


def make_binder(compiled: CompiledKernel, params: Sequence[int], n_rows: int, n_elem: int,
                global_size: tuple[int, ...], local_size: tuple[int, ...],
                one_output: bool = False) -> tuple[Any, Consts, int | None, Any] | None:
    """``(go, consts, error_arg, family)`` for a kernel launched with these sizes, or None
    when ``one_output`` and the kernel has a second output or an error flag.

    Takes the kernel's sorted arguments (:func:`arg_layout`): outputs, input
    buffers, scalars (with the kernel's declared types), constants (sizes and
    parameters, set once per kernel object) and the error flag.  The backend's
    launcher family for this grid (``Backend.launcher_family``, made from a
    :class:`~fuseloop.backends.LaunchSpec` once per grid and kept on the kernel) binds
    this launch's constants into ``go``; every launch of the plan calls ``go``
    directly.  A loop of statements on new offsets (``A[i, :j]``) thus sorts no
    arguments and makes no spec: it binds its constants (measured 7 us a new plan
    before, on this CPU).
    """
    outs, bufs, scals, const_args, error_arg = arg_layout(compiled)
    if one_output and (error_arg is not None or len(outs) != 1 or outs[0][1] != 0):
        return None
    consts = tuple([(i, T(params[idx] if kind == 3 else n_rows if kind == 4 else n_elem))
                    for i, kind, idx, T in const_args])
    grid = (tuple(global_size), tuple(local_size), one_output)
    family = compiled.launchers.get(grid)
    if family is None:
        spec = LaunchSpec(outs, bufs, scals, consts, grid[0], grid[1], one_output, error_arg)
        family = compiled.backend.launcher_family(spec)
        if len(compiled.launchers) >= LAUNCHERS_PER_KERNEL:
            compiled.launchers.pop(next(iter(compiled.launchers), ()), None)  # (the oldest)
        compiled.launchers[grid] = family
    return family(consts), consts, error_arg, family


#: ``(index in a plan's consts, parameter position, numpy scalar type)`` per constant
#: that holds a view offset (see :func:`offset_consts`)
OffsetConsts = tuple[tuple[int, int, Any], ...]


def offset_consts(compiled: CompiledKernel, sizes: str, positions: Sequence[int]
                  ) -> OffsetConsts | None:
    """Where a plan of ``compiled`` holds the parameters at ``positions`` (view offsets)
    among its constants, or None where its grid or its size class ``sizes`` (Loopy
    assumptions over the launch's parameters; not for two stages in one launch, whose
    class numbers each program's own) names one of them: new offsets might then need
    another grid or kernel.  Otherwise the kernel reads offsets only as arguments, and
    a plan for new ones is a kept plan with them bound anew (:func:`rebound`)."""
    named = {int(k) for e in (*compiled.plan.gsize, *compiled.plan.lsize)
             for k in re.findall(r"\bp\[(\d+)\]", e)}
    named.update(int(k) for k in re.findall(r"\bp(\d+)\b", sizes))
    wanted = set(positions)
    if named & wanted:
        return None
    const_args = arg_layout(compiled)[3]
    return tuple((c, idx, T) for c, (_, kind, idx, T) in enumerate(const_args)
                 if kind == 3 and idx in wanted)


def rebound(plan: LaunchPlan, params: Sequence[int], table: OffsetConsts) -> LaunchPlan:
    """``plan`` for ``params``, which differ from its own in the offsets ``table`` names
    only (see :func:`offset_consts`): its grid, kernel and launcher family, with those
    constants bound anew (what :func:`plan_for` would make, without the grid's and the
    arguments' work)."""
    consts = list(plan.consts)
    for c, idx, T in table:
        consts[c] = (consts[c][0], T(params[idx]))
    new = LaunchPlan()
    new.consts = bound = tuple(consts)
    new.go = plan.family(bound)
    new.family, new.grid = plan.family, plan.grid
    new.params = tuple(params)
    new.compiled, new.error_arg, new.runtime = plan.compiled, plan.error_arg, plan.runtime
    new.recipe, new.index_dtype, new.stamp = plan.recipe, plan.index_dtype, plan.stamp
    new.small_bytes, new.reserve, new.threads = 0, NO_RESERVE, plan.threads
    return new


def moving_plan(plan: LaunchPlan, table: OffsetConsts, first: int) -> LaunchPlan:
    """``plan`` with the offsets ``table`` names (see :func:`offset_consts`) taken as
    arguments of each launch, not constants: the ``t``-th is the launch's scalar
    ``first + t`` (after the launch's own ``first`` scalars: :func:`offset_args`).  One
    such plan serves every offset of a loop over rows (``path[i, :] = ...``), where a
    plan per offsets (:func:`rebound`) made a plan and a launcher per statement, and each
    launch set all of that plan's constants again."""
    outs, bufs, scals, _, error_arg = arg_layout(plan.compiled)
    moved = {c: t for t, (c, _, _) in enumerate(table)}
    consts = tuple([a for c, a in enumerate(plan.consts) if c not in moved])
    scalars = scals + tuple((plan.consts[c][0], first + t, T)
                            for t, (c, _, T) in enumerate(table))
    global_size, local_size, one_output = plan.grid
    spec = LaunchSpec(outs, bufs, scalars, consts, global_size, local_size, one_output,
                      error_arg)
    new = LaunchPlan()
    new.family = plan.compiled.backend.launcher_family(spec)
    new.go, new.consts, new.grid, new.params = new.family(consts), consts, plan.grid, ()
    new.compiled, new.error_arg, new.runtime = plan.compiled, error_arg, plan.runtime
    new.recipe, new.index_dtype, new.stamp = plan.recipe, plan.index_dtype, plan.stamp
    new.small_bytes, new.reserve, new.threads = 0, NO_RESERVE, plan.threads
    return new


def offset_args(table: OffsetConsts, params: Sequence[int]) -> list[int]:
    """The offsets of ``params`` that a :func:`moving_plan` of ``table`` takes per launch.
    A launcher sets a scalar argument unless it is the very object it set last there;
    a plan setting its constants forgets what was set where it sets them (the
    backends' launchers), so an offset another plan of the kernel overwrote is set
    again."""
    return [params[idx] for _, idx, _ in table]


def thread_kernel(plan: LaunchPlan) -> tuple[Any, list[Any]]:
    """This thread's kernel object for ``plan`` and the record of its arguments.

    One object per compiled kernel and thread, shared by the kernel's plans (its
    sizes and offsets; they share ``compiled.plan_threads`` too, so a new plan finds
    it at once): making a ``cl.Kernel`` costs pyopencl 0.1-0.8 ms (its invoker comes
    from an on-disk cache), so a loop whose statements differ only in offsets
    (``A[i, j] += ...``) made one per statement when each plan had its own.
    The launcher sets a plan's constants when the object last ran another plan's.
    """
    try:
        return plan.threads.state
    except AttributeError:
        pass
    plan.threads.state = state = plan.compiled.thread_state()
    return state


def enqueue(plan: LaunchPlan, outs: Any, storages: list[Storage], scalars: list[Any],
            small: bool, device: Device, hit: int = 0, launched: int = 1) -> None:
    """Launch ``plan`` with this data: deferred when ``small`` (see
    :func:`enqueue_or_defer`), else now; a kernel with an error flag runs now, and its
    flag is read at once or, within an evaluation, at its end (raising on an
    out-of-range gather index: see :mod:`fuseloop.flags`).  Counts ``launched``
    launches (0: the mask compaction's, counted as scans) and ``hit`` memory-cache
    hits in ``fl.stats()``."""
    if small and plan.error_arg is None:  # (the commonest: enqueue_or_defer's deferral)
        try:
            kernel, last = plan.threads.state
        except AttributeError:
            kernel, last = thread_kernel(plan)
        rt = _runtime(device)
        deferred = rt.deferred
        deferred.append((plan.go, (outs, storages, scalars, kernel, last)))
        with _stats_lock:
            _counters["memory_cache_hits"] += hit
            _counters["kernels_launched"] += launched
        if len(deferred) >= DEFER_MAX:
            rt.flush()
        return
    flag = None
    try:
        kernel, last = thread_kernel(plan)
        if plan.error_arg is None:
            enqueue_or_defer(plan.go, (outs, storages, scalars, kernel, last), small, device)
        else:
            flag = _enqueue_flagged(plan, outs, storages, scalars, kernel, last, device)
    except BaseException:
        _increment_stat("memory_cache_hits", hit)
        raise
    with _stats_lock:  # both counters at once: one lock round trip
        _counters["memory_cache_hits"] += hit
        _counters["kernels_launched"] += launched
    if flag is not None:
        _flags.check(flag, device)


def _enqueue_flagged(plan: LaunchPlan, outs: Any, storages: list[Storage], scalars: list[Any],
                     kernel: Any, last: list[Any], device: Device) -> Any:
    """Enqueue a kernel with an error flag now; return the flag for the caller to read,
    or None when the evaluation in progress reads it at its end."""
    position = plan.error_arg
    assert position is not None  # (the caller's test)
    flag, deferred = _flags.flag_for(device)
    rt = _runtime(device)
    with rt.launch_lock:
        if rt.deferred:
            rt.flush()
        plan.compiled.backend.set_buffer_arg(kernel, position, flag)
        plan.go(outs, storages, scalars, kernel, last, rt.queue)
    return None if deferred else flag


def launch_cached(entry: StructureEntry, storages: list[Storage], scalars: list[np.generic],
                  out: Storage, out_shape: tuple[int, ...], device: Device) -> bool:
    """Launch one flat elementwise output of a cached structure with the plan kept on
    ``entry.launches`` (per device, then index dtype), made on first use or when no
    longer valid.  ``fl.stats()`` counts as for ``evaluate.launch``.  False when the
    kernel needs more than this path binds (the caller then uses ``evaluate.launch``).
    """
    size = out_shape[0] if out_shape else 1
    index_dtype = index_dtype_for(storages, max(entry.max_param, size), device)
    token = _recipe_stamp()
    recipe = recipe_for(device, "elementwise")
    plans = entry.launches.get(device)  # per device, then per index dtype (no key tuples)
    plan = None if plans is None else plans.get(index_dtype)
    small = size <= DEFER_MAX_ELEMENTS
    if plan is None or not plan.valid(recipe, index_dtype):
        program = entry.program
        if program.row_dims is not None or program.has_reduce or len(program.outputs) != 1:
            return False
        plan = plan_launch(program, entry.params, out_shape, index_dtype, recipe, device,
                           one_output=True)  # (counts the look-up)
        if plan is None:
            return False
        # (what evaluate.run_flat allocates: the output of this plan is always this size)
        plan.small_bytes = out.nbytes if small else 0
        plan.reserve = plan.runtime.pool.reserve(out.nbytes)
        entry.launches.setdefault(device, {})[index_dtype] = plan
        hit = 0
    else:
        hit = 1
    plan.stamp = token
    enqueue(plan, out, storages, scalars, small, device, hit)
    return True


def enqueue_or_defer(go: Any, args: tuple, small: bool, device: Device) -> None:
    """``go(*args, queue)`` now, or for a small launch later, back to back with others.

    A deferred launch is enqueued before anything else uses the device's queue
    (see ``_DeviceRuntime``); its record keeps the buffers alive until then.  A
    launch made now first enqueues the deferred ones, under the runtime's lock
    so that it is not placed amid another thread's flush.
    """
    rt = _runtime(device)
    if small:
        deferred = rt.deferred
        deferred.append((go, args))
        if len(deferred) >= DEFER_MAX:
            rt.flush()
    else:
        with rt.launch_lock:
            if rt.deferred:
                rt.flush()
            go(*args, rt.queue)
