"""Run plans: the kernels one evaluation enqueues, remembered per expression structure.

Evaluating an expression with reductions, views or several outputs decides a
lot before anything runs: which reductions run first, whether a target is
read through another index, whether a long reduction runs in two stages,
how dimensions coalesce, and then linearises each kernel's program.  All of
that is a function of the expression's *structure* (the prefix code of
:func:`fuseloop.expr.program.walk_structure`: operations, dtypes, shapes,
strides and offsets, which buffers and scalar nodes are the same) and of the
device, never of the data.

So the first evaluation of a structure is *recorded*: every buffer
:func:`fuseloop.evaluate.allocate` hands out and every kernel
:func:`fuseloop.evaluate.launch` enqueues, with its buffers and scalars
expressed as slots of the structure (an input, a target, or the n-th buffer
allocated).  Later evaluations of the same structure *replay* the record:
allocate the same sizes, enqueue the same programs with this call's buffers
and scalars.  The counters of ``fl.stats()`` move as they would without the
plan.  Gathers of device indices (their out-of-range check reads a flag back) and
scatters are never planned; neither is anything while ``show_code`` captures
sources.  Unchecked gathers (the computed positions of roll, tile, repeat, host
indices checked on the host, a mask's positions) are.
"""

from __future__ import annotations

import math
import threading
from collections.abc import Sequence
from typing import Any

import numpy as np

from . import caches as _caches
from . import evaluate as _ev
from . import stats as _stats
from .cache import memory_generation
from .expr import program as _prog
from .expr.nodes import Node, Scalar, Storage
from .expr.program import Bindings, Target, walk_structure
from .launching import (
    DEFER_MAX_ELEMENTS,
    INDEX_INT32,
    INDEX_INT64,
    INT32_LIMIT,
    enqueue_or_defer,
    kernel_for,
    launcher,
    other_device,
    thread_kernel,
)
from .recipes import recipe_for
from .runtime.devices import Device

_local = threading.local()
recording_threads = [0]  # threads recording now: the common answer, "none", without the local
_lock = threading.Lock()
_plans: dict[tuple, _Plan | None] = {}
PLANS_MAX = 1024  # plans kept (all are dropped when it is reached)


class _Step:
    """One recorded launch; refs are ``("i", slot)`` inputs or ``("t", k)`` allocations."""

    __slots__ = ("fast", "out_refs", "out_shape", "params", "program", "scalar_refs",
                 "storage_refs")

    def __init__(self, program: Any, params: list[int], out_shape: tuple[int, ...],
                 storage_refs: tuple, out_refs: tuple, scalar_refs: tuple) -> None:
        self.program = program
        self.params = params
        self.out_shape = out_shape
        self.storage_refs = storage_refs
        self.out_refs = out_refs
        self.scalar_refs = scalar_refs
        # (recipe, memory-cache generation, compiled, enqueue function, constant
        # arguments, per-thread kernel objects, index dtype)
        self.fast: _FastLaunch | None = None


class _Plan:
    __slots__ = ("allocs", "results", "steps")

    def __init__(self, allocs: list[int], steps: list[_Step], results: tuple) -> None:
        self.allocs = allocs
        self.steps = steps
        self.results = results


class Recorder:
    """Collects what one evaluation allocates and launches (see the module docstring)."""

    def __init__(self, storages: list[Storage], scalars: list[np.generic],
                 slots: dict[Any, int]) -> None:
        self.refs: dict[int, tuple] = {id(s): ("i", k) for k, s in enumerate(storages)}
        # a launch's scalars by the node they came from (Bindings.scalar_nodes), else
        # by value object: -1 where two scalar nodes hold one object (``x*2 + y*2``:
        # Python's 2 converts to one numpy scalar), which a launch could not tell apart
        self.node_slots = {id(n): k for n, k in slots.items() if type(n) is Scalar}
        self.scalar_slots: dict[int, int] = {}
        for k, v in enumerate(scalars):
            self.scalar_slots[id(v)] = -1 if id(v) in self.scalar_slots else k
        self.keep: list[Any] = [storages, scalars, slots]  # ids stay unique while recording
        self.allocs: list[int] = []
        self.steps: list[_Step] = []
        self.failed = False

    def allocated(self, storage: Storage) -> None:
        self.refs[id(storage)] = ("t", len(self.allocs))
        self.allocs.append(storage.nbytes)
        self.keep.append(storage)

    def launched(self, program: Any, bindings: Bindings, outs: Sequence[Storage]) -> None:
        try:
            storage_refs = tuple(self.refs[id(s)] for s in bindings.storages)
            out_refs = tuple(self.refs[id(s)] for s in outs)
            if bindings.scalar_nodes is not None:
                scalar_refs = tuple(self.node_slots[id(n)] for n in bindings.scalar_nodes)
            else:
                scalar_refs = tuple(self.scalar_slots[id(v)] for v in bindings.scalars)
        except KeyError:
            self.failed = True
            return
        if -1 in scalar_refs:
            self.failed = True
            return
        self.steps.append(_Step(program, list(bindings.params), bindings.out_shape,
                                storage_refs, out_refs, scalar_refs))

    def ref(self, storage: Storage) -> tuple | None:
        return self.refs.get(id(storage))


def recorder() -> Recorder | None:
    """The recorder of this thread's evaluation in progress, if any."""
    if not recording_threads[0]:
        return None
    return getattr(_local, "recorder", None)


def _key(roots: Sequence[Node], out_shape: tuple[int, ...],
         targets: Sequence[Target | Storage | None] | None, device: Device
         ) -> tuple[tuple, list[Storage], list[np.generic], dict[Any, int]] | None:
    head: list[Any] = ["run", device.index, out_shape, len(roots),
                       _ev.TWO_STAGE_MIN_LENGTH, _ev.TWO_STAGE_MAX_ROWS, _ev.ONE_ROW_MAX_LENGTH]
    walked = walk_structure(roots, head)
    if walked is None:
        return None
    toks, slots, storages, scalars = walked
    if targets is not None:
        for t in targets:
            if t is None:
                toks.append(None)
                continue
            if isinstance(t, Storage):
                t = Target(t, None, 0)
            if t.scatter is not None:
                return None
            s = t.storage
            k = slots.get(s)
            if k is None:
                k = slots[s] = len(storages)
                storages.append(s)
            toks.append(("T", k, t.strides, t.offset))
    return tuple(toks), storages, scalars, slots


def run(roots: Sequence[Node], out_shape: tuple[int, ...], device: Device,
        targets: Sequence[Target | Storage | None] | None) -> list[Storage]:
    """:func:`fuseloop.evaluate.run_unplanned`, replayed from a plan when one is known."""
    keyed = _key(roots, out_shape, targets, device)
    if keyed is None:
        return _ev.run_unplanned(roots, out_shape, device, targets)
    key, storages, scalars, slots = keyed
    plan = _plans.get(key, False)
    if plan is None:  # known not to record
        return _ev.run_unplanned(roots, out_shape, device, targets)
    if plan is not False and not _prog.CHECK_STRUCTURE_CACHE:
        return _replay(plan, storages, scalars, device)  # type: ignore[arg-type]
    rec = Recorder(storages, scalars, slots)
    with _lock:
        recording_threads[0] += 1
    _local.recorder = rec
    try:
        outs = _ev.run_unplanned(roots, out_shape, device, targets)
    finally:
        _local.recorder = None
        with _lock:
            recording_threads[0] -= 1
    result_refs = tuple(rec.ref(o) for o in outs)
    fresh = None if rec.failed or None in result_refs else _Plan(
        rec.allocs, rec.steps, result_refs)
    if plan is not False:  # checking a cached plan against a fresh record
        assert fresh is not None and _same(plan, fresh), ("run plan differs", key)  # type: ignore[arg-type]
        return outs
    if len(_plans) >= PLANS_MAX:
        _plans.clear()
    _plans[key] = fresh
    return outs


def _same(a: _Plan, b: _Plan) -> bool:
    if a.allocs != b.allocs or a.results != b.results or len(a.steps) != len(b.steps):
        return False
    return all(repr(x.program) == repr(y.program) and x.params == y.params
               and x.out_shape == y.out_shape and x.storage_refs == y.storage_refs
               and x.out_refs == y.out_refs and x.scalar_refs == y.scalar_refs
               for x, y in zip(a.steps, b.steps))


def _replay(plan: _Plan, storages: list[Storage], scalars: list[np.generic],
            device: Device) -> list[Storage]:
    allocate = _ev.allocate
    tmps = [allocate(n, device) for n in plan.allocs]
    for s in storages:
        if s.device is not device:
            raise other_device(s, device)
    for step in plan.steps:
        st = [storages[k] if kind == "i" else tmps[k] for kind, k in step.storage_refs]
        outs = [storages[k] if kind == "i" else tmps[k] for kind, k in step.out_refs]
        sc = [scalars[k] for k in step.scalar_refs]
        if not _launch_fast(step, st, outs, sc, device):
            _ev.launch(step.program, Bindings(st, sc, step.params, step.out_shape), outs, device)
    return [storages[k] if kind == "i" else tmps[k] for kind, k in plan.results]


def _launch_fast(step: _Step, storages: list[Storage], outs: list[Storage],
                 scalars: list[np.generic], device: Device) -> bool:
    """Enqueue ``step`` with what its first replay worked out; False: use ``launch``."""
    biggest = max(max(step.params, default=0), math.prod(step.out_shape),
                  max([s.nbytes for s in storages], default=0))
    index_dtype = INDEX_INT32 if biggest <= INT32_LIMIT else INDEX_INT64
    program = step.program
    recipe = recipe_for(device, "contraction" if program.contraction is not None else
                        "reduction" if program.has_reduce else "elementwise")
    fast = step.fast
    if fast is None or fast.recipe is not recipe or fast.index_dtype is not index_dtype \
            or fast.generation != memory_generation[0]:
        fast = step.fast = _prepare(step, recipe, index_dtype, device)
        if fast is None:
            return False
        hit = 0  # _prepare counted the look-up
    else:
        hit = 1
    try:
        try:
            kernel, last = fast.threads.state
        except AttributeError:
            kernel, last = thread_kernel(fast.compiled, fast.consts, fast.threads)
        # small steps are deferred like small cached launches (``biggest`` counts bytes
        # or elements), reductions too: a result read at once (``float(x.sum())``)
        # enqueues it first anyway, and on PoCL a launch enqueued alone wakes its
        # workers, which cost ~20 us per call in a loop of ``(x - x.mean()).eval()``
        enqueue_or_defer(fast.go, (outs, storages, scalars, kernel, last),
                         biggest <= 4 * DEFER_MAX_ELEMENTS, device)
    except BaseException:
        _stats.increment("memory_cache_hits", hit)
        raise
    with _stats._lock:
        _stats.counters["memory_cache_hits"] += hit
        _stats.counters["kernels_launched"] += 1
    return True


class _FastLaunch:
    """How a step is launched again, worked out at its first replay.

    ``go`` enqueues the kernel with ``consts`` (see :func:`fuseloop.launching.launcher`);
    ``threads`` holds each thread's kernel object.  Valid while ``recipe``, the
    memory cache's ``generation`` and ``index_dtype`` are still those of the launch.
    (A slotted class: its fields read as fast as a tuple's items.)
    """

    __slots__ = ("compiled", "consts", "generation", "go", "index_dtype", "recipe", "threads")

    def __init__(self, recipe: Any, generation: int, compiled: Any, go: Any, consts: Any,
                 threads: threading.local, index_dtype: np.dtype) -> None:
        self.recipe = recipe
        self.generation = generation
        self.compiled = compiled
        self.go = go
        self.consts = consts
        self.threads = threads
        self.index_dtype = index_dtype


def _prepare(step: _Step, recipe: Any, index_dtype: np.dtype, device: Device
             ) -> _FastLaunch | None:
    program = step.program
    shape = step.out_shape
    if program.row_dims is None:
        n_rows, n_elem = math.prod(shape), 1
    else:
        n_rows = math.prod(shape[d] for d in program.row_dims)
        n_elem = math.prod(shape) // max(1, n_rows)
    generation = memory_generation[0]  # (read first: a clear during the look-up ends it)
    compiled = kernel_for(program, index_dtype, device, recipe, step.params, n_rows, n_elem)
    local = compiled.lsize(n_rows, n_elem, step.params)
    global_size = tuple(g * w for g, w in zip(compiled.gsize(n_rows, n_elem, step.params),
                                              local))
    made = launcher(compiled, step.params, n_rows, n_elem, global_size, local,
                    one_output=False)
    if made is None:  # an error flag: never in planned programs (no gathers)
        return None
    # the enqueue function sets only the arguments that changed on a kernel object
    # of its own per thread (see launching.launcher)
    go, consts = made
    return _FastLaunch(recipe, generation, compiled, go, consts, threading.local(), index_dtype)


def clear() -> None:
    """Forget every plan (tests; plans hold no buffers)."""
    _plans.clear()


_caches.register("run_plans.plans", clear, lambda: len(_plans), PLANS_MAX)
