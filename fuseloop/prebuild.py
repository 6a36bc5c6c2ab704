"""The kernels of one evaluation built together, ahead of its launches.

An evaluation that needs several new kernels (a reduction run first, a two-stage
reduction's stages, a temporary's copy, ``fl.compute`` over several shapes) would
build them one after the other, each when its launch comes.  A new structure's run
plan (:mod:`fuseloop.run_plans`) is recorded dry (nothing is enqueued: the recorder
only notes each launch) and then replayed; in between, the kernels its steps need
that the memory cache does not hold are built together (:func:`build_steps_ahead`).
``fl.compute`` over several shapes records each group dry first (:func:`build_ahead`).
Together: Loopy generates each (one at a time, :data:`fuseloop.lower.codegen.loopy_lock`),
then kernels of one preamble are built as one program, which pays the driver's fixed
cost of a build once (:mod:`fuseloop.batch_build`).  With compile workers (the default)
each program is built in a thread of its own, so that two workers build two at once;
building inline, programs are built one after the other in the calling thread (in
several threads pyopencl would make kernel objects at once, which once crashed a
driver: see :data:`fuseloop.cache.kernel_objects_lock`).  A build that fails here is
not reported: nothing is cached for it, and the evaluation's own launch builds it
again and raises.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np

from . import cache as _cache
from . import caches as _caches
from . import evaluate as _ev
from . import host_path as _host
from . import launching
from . import run_plans as _rp
from .batch_build import build_together
from .cache import Request, _memory, kernel_request
from .expr.ir import INT32_LIMIT
from .expr.nodes import Node, Storage
from .expr.program import Bindings, Target
from .launching import INDEX_INT32, INDEX_INT64
from .recipe_state import recipe_for
from .runtime import compile_workers
from .runtime.devices import Device

#: fewest missing kernels worth building ahead (one is built by its launch anyway)
MIN_KERNELS = 2
#: structure keys of fl.compute groups built ahead once (all dropped when reached)
AHEAD_MAX = 4096
_ahead: set[tuple] = set()

Job = tuple[Sequence[Node], tuple[int, ...], Device, Sequence[Target | Storage | None] | None]


class _DryRecorder(_rp.Recorder):
    """Notes the launches of an evaluation and enqueues nothing."""

    def __init__(self) -> None:
        super().__init__([], [], {})
        self.launches: list[tuple[Any, Bindings, Device]] = []

    def launch(self, program: Any, bindings: Bindings, outs: Sequence[Storage],
               device: Device) -> None:
        self.launches.append((program, bindings, device))


def _dry_launches(jobs: Sequence[Job]) -> list[tuple[Any, Bindings, Device]]:
    rec = _DryRecorder()
    with _rp.recording(rec):
        for roots, out_shape, device, targets in jobs:
            _ev.run_unplanned(roots, out_shape, device, targets)
    return rec.launches


def _request(args: tuple) -> Request:
    """What :func:`fuseloop.launching.kernel_for` with ``args`` would build on a miss."""
    program, index_dtype, device, recipe, params, n_rows, n_elem = args
    recipe = launching._tuned(recipe, program, index_dtype, device, params, n_rows, n_elem)
    sizes = launching.size_class_of(recipe, program, params, n_rows, n_elem)
    launching._check_fp64(program.entries, device)
    if program.first is not None:
        launching._check_fp64(program.first.program.entries, device)
    return kernel_request(program, index_dtype, device, recipe, launching.user_functions,
                          sizes)


def ahead(key: tuple, args: tuple) -> None:
    """Make the kernel :func:`fuseloop.launching.kernel_for` with ``args`` finds (under
    memory-cache ``key``, missing) ready before its launch: while a run plan records,
    only its plan (:func:`fuseloop.cache.plan_ahead`: the replay builds it with the
    plan's other kernels), else built now, its first look-up then not counted again
    (a two-stage reduction's joined kernel: whether its stages share a launch is known
    from its plan)."""
    if _rp.recorder() is not None:
        _cache.plan_ahead(_request(args))
        return
    launching.kernel_for(*args)
    launching.prebuilt.add(key)


def _build_all(missing: list[tuple[tuple, tuple]]) -> list[tuple]:
    """Build the missing kernels (``(key, kernel_for's arguments)``), when there are at
    least :data:`MIN_KERNELS`, together (:mod:`fuseloop.batch_build`: few programs,
    built in threads of their own with compile workers); returns the keys built (the
    caller forgets those its evaluation did not look up: see :func:`forget`)."""
    if len(missing) < MIN_KERNELS:
        return []
    requests = []
    for _, args in missing:
        try:
            requests.append(_request(args))
        except Exception:
            continue  # (the evaluation reports what is wrong)
    if not requests:
        return []
    built = build_together(requests, missing[0][1][2],
                           threads=compile_workers.mode() == "process")
    launching.prebuilt.update(built)
    return built


def forget(built: list[tuple]) -> None:
    """Count later look-ups of kernels ``built`` ahead as usual again."""
    if built:
        launching.prebuilt.difference_update(built)


def _missing(launches: Sequence[tuple[Any, Sequence[int], tuple[int, ...], np.dtype]],
             device: Device) -> list[tuple[tuple, tuple]]:
    """``(key, kernel_for's arguments)`` of each distinct kernel of ``launches``
    (program, parameters, output shape, index dtype) the memory cache lacks."""
    seen: set[tuple] = set()
    out = []
    for program, params, out_shape, index_dtype in launches:
        recipe = recipe_for(device, launching.recipe_kind(program))
        n_rows, n_elem = launching.rows_of(program, out_shape, recipe)
        args = (program, index_dtype, device, recipe, params, n_rows, n_elem)
        key = launching.kernel_key(*args)
        if key not in seen and key not in _memory:
            seen.add(key)
            out.append((key, args))
    return out


def build_steps_ahead(steps: Sequence[Any], storages: Sequence[Storage],
                      allocs: Sequence[int], offsets: Sequence[int], device: Device
                      ) -> list[tuple]:
    """Build the kernels a new run plan's ``steps`` need (see the module docstring),
    for a replay with these input ``storages``, temporaries of ``allocs`` bytes and
    view ``offsets``; returns the keys built."""
    if len(steps) < MIN_KERNELS:
        return []
    launches = []
    for step in steps:
        params = _rp._params(step, offsets)
        biggest = max(max(params, default=0), math.prod(step.out_shape),
                      *(storages[k].nbytes if kind == "i" else allocs[k]
                        for kind, k in step.storage_refs))
        index_dtype = INDEX_INT32 if biggest <= INT32_LIMIT else INDEX_INT64
        launches.append((step.program, params, step.out_shape, index_dtype))
    try:
        missing = _missing(launches, device)
    except Exception:  # (the replay reports what is wrong)
        return []
    return _build_all(missing)


def _needs_kernels(job: Job) -> bool:
    """Whether ``job`` may need kernels not built ahead before: not small work the
    CPU device's host path computes (:func:`fuseloop.host_path.eligible`), and not a
    structure (its run-plan key) that was built ahead already.  A loop of statements
    (``y[:k] += alpha * y[k - 1::-1]`` computing the pending ``alpha`` and another
    reader first) otherwise lowered every group again on every statement."""
    roots, out_shape, device, targets = job
    if _host.eligible(roots, out_shape, device, targets):
        return False
    # a plan remembered by its roots' signatures was recorded, its kernels built: found
    # without the walk of the key below (fl.compute of several shapes, every call)
    signed = _rp._signed_key(roots, out_shape, device) if targets is None else None
    if signed is not None and signed[0] in _rp._signed:
        return False
    # one flat elementwise root whose kernel and launch are cached: run's hot path
    # launches it without a run plan, so none is remembered by signature (nussinov's
    # pending 0-d sums, computed before each element write, walked every statement)
    if targets is None and len(roots) == 1 and len(out_shape) <= 1 and not roots[0].fancy \
            and _ev.flat_launch_ready(roots[0], out_shape, device) is not None:
        return False
    keyed = _rp._key(roots, out_shape, targets, device)
    if keyed is None:  # (not plannable: no key to remember it by)
        return True
    key = keyed[0]
    if key in _ahead:
        return False
    if len(_ahead) >= AHEAD_MAX:
        _ahead.clear()
    _ahead.add(key)
    return True


def build_ahead(jobs: Sequence[Job]) -> list[tuple]:
    """Build the kernels that evaluating ``jobs`` would build, concurrently (a dry
    recording of each finds them); returns the keys built.  Jobs that need no kernel,
    or whose structure was built ahead before, are left out (see :func:`_needs_kernels`)."""
    try:
        jobs = [job for job in jobs if _needs_kernels(job)]
        if not jobs:
            return []
        launches = []
        for program, bindings, device in _dry_launches(jobs):
            index_dtype, _, _, _ = _ev.launch_choice(program, bindings, device)
            launches.append((program, bindings.params, bindings.out_shape, index_dtype))
        missing = _missing(launches, jobs[0][2])
    except Exception:  # (the evaluation itself reports what is wrong)
        return []
    return _build_all(missing)


_caches.register("prebuild.ahead", _ahead.clear, lambda: len(_ahead), AHEAD_MAX)
