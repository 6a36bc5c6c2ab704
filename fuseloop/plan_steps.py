"""Replaying a run plan's steps: each step's launch plan kept per parameters, and the
temporaries of a replay (see :mod:`fuseloop.run_plans`; ``fl.fuse`` and split arrays
replay their steps through these too)."""

from __future__ import annotations

import math
from collections import OrderedDict
from operator import attrgetter
from typing import Any

import numpy as np

from . import evaluate as _ev
from .errors import OutOfMemoryError
from .expr.nodes import Storage, recent_lazy, register_readers
from .launching import (
    DEFER_MAX_ELEMENTS,
    LaunchPlan,
    OffsetConsts,
    enqueue,
    index_dtype_for,
    kernel_key,
    moving_plan,
    offset_args,
    offset_consts,
    plan_for,
    plan_launch,
    rebound,
    recipe_kind,
    rows_of,
)
from .recipe_state import current as _recipes_current
from .recipe_state import recipe_for
from .recipe_state import stamp as _recipe_stamp
from .runtime.devices import Device, _runtime
from .stats import increment as _increment_stat


def temporaries(allocs: list[int], device: Device) -> list[Storage]:
    """New buffers of ``allocs`` bytes from the device's pool, as ``evaluate.allocate``
    makes them but without its frames per buffer (fl.fuse's replay allocates so too):
    the sizes were allocated when the plan was recorded, so only the pool's own checks
    remain; unheld recent lazy arrays are let go once, before a large buffer (see
    ``evaluate.RELEASE_RECENT_AT``), and ``evaluate.allocate`` takes over on a refusal."""
    if not allocs:
        return []
    if recent_lazy and max(allocs) >= _ev.RELEASE_RECENT_AT:
        register_readers()
    allocate = _runtime(device).pool.allocate  # (device.allocator, its frames saved)
    try:
        if len(allocs) == 1:  # (most plans: no comprehension's frame)
            n = allocs[0]
            return [Storage(allocate(n), n, device)]
        return [Storage(allocate(n), n, device) for n in allocs]
    except OutOfMemoryError:
        return [_ev.allocate(n, device) for n in allocs]


def pool_refs(refs: tuple, n: int) -> tuple[int, ...]:
    """Refs ``("i", k)`` / ``("t", k)`` as positions in a pool of ``n`` inputs followed
    by the plan's allocations."""
    return tuple(k if kind == "i" else n + k for kind, k in refs)



_nbytes = attrgetter("nbytes")


def launch_step(step: Any, storages: list[Storage], outs: list[Storage],
                scalars: list[np.generic], device: Device,
                params: list[int] | None = None) -> None:
    """Enqueue ``step`` with the launch plan of its last replay while still valid
    (``params``: the step's own unless given, see ``run_plans._params``)."""
    if params is None or params is step.params:
        params = step.params
        biggest = step.biggest
    else:
        biggest = max(max(params, default=0), math.prod(step.out_shape))
    index_dtype = index_dtype_for(storages, biggest, device)
    limit = 4 * DEFER_MAX_ELEMENTS
    small = biggest <= limit and max(map(_nbytes, storages), default=0) <= limit
    plan = step.plan
    # the common replay: the plan kept for these parameters on this device, its recipe
    # confirmed under the current recipes token (as fl.fuse's and run_flat's hot paths)
    if plan is not None and plan.stamp is _recipes_current[0] and step.device is device \
            and params is step.plan_params and plan.index_dtype is index_dtype \
            and plan.compiled.in_cache:
        enqueue(plan, outs, storages, scalars, small, device, 1)
        return
    if step.moving is not None and params is not step.params:
        # (other offsets, as every statement of a loop over rows: the one plan taking
        # them as arguments; params differ from the step's in its offsets only)
        moving, table = step.moving
        if moving.stamp is _recipes_current[0] and step.device is device \
                and moving.index_dtype is index_dtype and moving.compiled.in_cache:
            enqueue(moving, outs, storages, scalars + offset_args(table, params), small,
                    device, 1)
            return
    program = step.program
    token = _recipes_current[0]
    if plan is not None and plan.stamp is token and token is not None \
            and step.device is device:
        # (new offsets, the recipes unchanged: recipe_for's answer is the one confirmed
        # for the last plan under this token)
        recipe = plan.recipe
    else:
        token = _recipe_stamp()
        recipe = recipe_for(device, recipe_kind(program))
    hit = 1
    key = None
    if params is not step.plan_params and params != step.plan_params:
        key = tuple(params)
        plan = step.plans.get(key) if step.plans is not None else None
        step.plan_params = params
    if plan is None or not plan.valid(recipe, index_dtype):
        plan = _new_plan(step, params, index_dtype, recipe, device)  # (counts the look-up)
        hit = 0
        if step.offsets:
            keep_plan(step, tuple(params) if key is None else key, plan)
            rebind = step.rebind  # (its kernel reads the offsets as arguments: one plan)
            if rebind is not None and rebind[0] is plan.compiled and rebind[1] is not None:
                moving = moving_plan(plan, rebind[1], len(step.scalar_refs))
                moving.stamp = token
                step.moving = (moving, rebind[1])
    step.plan = plan
    step.device = device
    plan.stamp = token  # (fl.fuse's replay checks it: see LaunchPlan)
    # small steps are deferred like small cached launches (``biggest`` counts bytes
    # or elements), reductions too: a result read at once (``float(x.sum())``)
    # enqueues it first anyway, and on PoCL a launch enqueued alone wakes its
    # workers, which cost ~20 us per call in a loop of ``(x - x.mean()).eval()``
    enqueue(plan, outs, storages, scalars, small, device, hit)


#: launch plans a step with offsets keeps (the oldest dropped beyond)
STEP_PLANS_MAX = 256


def _new_plan(step: Any, params: list[int], index_dtype: np.dtype, recipe: Any,
              device: Device) -> LaunchPlan:
    """A launch plan of ``step`` for ``params`` (``launching.plan_launch``'s), counted as
    a memory-cache look-up.  A loop over rows replays a step at more offsets than it
    keeps plans for, and a loop over lengths a plan's steps at each length
    (``run_plans._at_lengths``, which hands them their step's ``kernel``); where that
    kernel was found for this recipe, index type and device, and the tuned recipe and
    size class of these parameters and sizes are those it was found for (the memory
    cache's key but the program, which is the step's), it serves them: its plan for
    these sizes is made without building and looking up the key (which compares the
    whole program).  A step whose parameters changed in its view offsets only takes its
    last plan with the offsets bound anew (:func:`_rebound`)."""
    prev = step.plan  # (its last replay's: launch_step sets the new one after)
    if prev is not None and step.offsets and prev.recipe is recipe \
            and prev.index_dtype is index_dtype and step.device is device \
            and prev.compiled.in_cache:
        made = _rebound(step, prev, params)
        if made is not None:
            _increment_stat("memory_cache_hits")  # (the look-up kernel_for counts)
            return made
    program = step.program
    n_rows, n_elem = rows_of(program, step.out_shape, recipe)
    sizes = _kernel_sizes(program, index_dtype, device, recipe, params, n_rows, n_elem)
    known = step.kernel
    if known is not None and known[0] is recipe and known[1] is index_dtype \
            and known[2] is device and known[4].in_cache and known[3] == sizes:
        made = plan_for(known[4], params, n_rows, n_elem, device)
        if made is not None:
            _increment_stat("memory_cache_hits")  # (the look-up kernel_for counts)
            made.recipe = recipe
            made.index_dtype = index_dtype
            return made
    plan = plan_launch(program, params, step.out_shape, index_dtype, recipe, device)
    assert plan is not None  # (only a one-output plan can be refused)
    step.kernel = (recipe, index_dtype, device, sizes, plan.compiled)
    return plan


def _rebound(step: Any, prev: LaunchPlan, params: list[int]) -> LaunchPlan | None:
    """``prev`` (the step's last launch plan) for ``params`` where they differ from its
    own in view offsets only and its kernel reads offsets only as arguments
    (``launching.offset_consts``, asked once per step and kernel), else None.  A loop
    over rows (``A[i, j] /= A[j, j]``) thus makes no grid, size class or argument
    layout per row: offsets are arguments, not part of the grid."""
    positions = [j for j, _ in step.offsets]
    mixed = list(prev.params)
    if len(mixed) != len(params):
        return None
    for j in positions:
        mixed[j] = params[j]
    if mixed != params:  # (another length or stride: the full path)
        return None
    table: OffsetConsts | None
    known = step.rebind
    if known is not None and known[0] is prev.compiled:
        table = known[1]
    else:
        kernel = step.kernel  # (the size class its kernel was found for)
        if kernel is None or kernel[4] is not prev.compiled or step.program.first is not None:
            return None
        table = offset_consts(prev.compiled, kernel[3][-1], positions)
        step.rebind = (prev.compiled, table)
    return None if table is None else rebound(prev, params, table)


def _kernel_sizes(program: Any, index_dtype: np.dtype, device: Device, recipe: Any,
                  params: list[int], n_rows: int, n_elem: int) -> tuple:
    """What of ``kernel_key`` follows from the parameters: the tuned recipe's cache id
    and the size class."""
    return kernel_key(program, index_dtype, device, recipe, params, n_rows, n_elem)[3:]


def keep_plan(step: Any, key: tuple[int, ...], plan: LaunchPlan) -> None:
    plans = step.plans
    if plans is None:
        plans = step.plans = OrderedDict()
    elif len(plans) >= STEP_PLANS_MAX:
        try:
            plans.popitem(last=False)
        except KeyError:  # (emptied by another thread)
            pass
    plans[key] = plan
