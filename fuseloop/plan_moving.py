"""A run plan's replay at any view offsets, bound once (issue 26: statements whose views
move every iteration).

:class:`fuseloop.plan_ready.Ready` serves one set of view offsets: a loop over rows or
elements (``path[i, :] = minimum(path[i, :], path[i, k] + path[k, :])``,
``A[i, j] += A[i, j - 1]``) meets new offsets at every statement, so each of its
statements took the general replay (``run_plans._replay``: the step's parameters copied
with the offsets, the launch plan's validity asked again, ``plan_steps.launch_step``'s
frames) although every step's kernel takes those offsets as launch arguments already
(``plan_steps``: a step's ``moving`` launch plan, made once its offsets changed and its
kernel reads them only as arguments).

:class:`Moving` keeps what those answers are, made after a general replay whose every
step ran a kept launch plan: a step without offsets its plan, a step with offsets its
moving plan and, per offset argument, which of the statement's distinct view offsets it
is.  A replay then checks what can change between calls (as ``Ready.run``: the recipes
token, the kernels still in the memory cache, this thread's kernel objects; the caller
checks the buffers: on the device, within int32 indexing, where every offset is too)
and enqueues each step with this call's offsets appended to its scalars.  A launch is
deferred by ``plan_steps.launch_step``'s rule, its offsets counted among its sizes.
Counted as the general replay counts (a replay, and per launch a memory-cache hit and a
launch).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from operator import attrgetter, itemgetter
from typing import Any

from . import launching as _launching
from .expr.nodes import Storage
from .expr.program import INT32_LIMIT
from .flags import check_pending
from .recipe_state import current as _recipes_current
from .runtime import devices as _devices
from .runtime.devices import Device, _runtime
from .stats import cached_launches, tallies

DEFER_MAX = _launching.DEFER_MAX
_tally = cached_launches.__next__  # one memory-cache hit and one launch
_tally_replay = tallies["plans_replayed"].__next__
_nbytes = attrgetter("nbytes")
_thread_state = attrgetter("threads.state")
# general replays of a plan after which no Moving is tried again (a step whose kernel
# reads an offset in its grid never has a moving plan)
MOVING_TRIES = 4


class Moving:
    """One plan's replay at any view offsets.  ``steps``: per step (launch plan, getters
    of its inputs, outputs, scalars and appended offsets (:func:`_exact`; None: none),
    deferred unless a size or an input is large, writes a caller's buffer); positions in
    the pool of inputs then temporaries."""

    __slots__ = ("allocs", "device", "launch_plans", "n_inputs", "results", "runtime", "steps",
                 "temporaries", "token")
    allocs: list[int]
    device: Device
    launch_plans: list[Any]
    n_inputs: int
    results: Any  # the results' getter (a list of them, as the general replay returns)
    runtime: Any  # the device's runtime (devices._runtime)
    steps: list[tuple[Any, Any, Any, Any, Any, bool, bool]]
    temporaries: Any
    token: object

    @classmethod
    def make(cls, plan: Any, n_inputs: int, device: Device, temporaries: Any
             ) -> Moving | None:
        """``plan`` (just replayed in full on ``device``) made a :class:`Moving`, or None
        where a step is not ready: no kept launch plan under the current recipes, a step
        with offsets without its moving plan, an error flag, int64 indexing."""
        self = cls.__new__(cls)
        self.token = token = _recipes_current[0]
        if token is None or not any(step.offsets for step in plan.steps):
            return None
        self.n_inputs = n = n_inputs
        self.allocs = allocs = list(plan.allocs)
        limit = 4 * _launching.DEFER_MAX_ELEMENTS  # (plan_steps.launch_step's bound)
        steps = []
        for step in plan.steps:
            ins = tuple(k if kind == "i" else n + k for kind, k in step.storage_refs)
            outs = tuple(k if kind == "i" else n + k for kind, k in step.out_refs)
            made = _step_plan(step, device, token)
            if made is None:
                return None
            lp, appended = made
            at = dict(step.offsets)
            fixed = [p for j, p in enumerate(step.params) if j not in at]
            biggest = max(max(fixed, default=0), math.prod(step.out_shape))
            widest = max([biggest, *(allocs[k - n] for k in ins if k >= n)])
            if widest > INT32_LIMIT or lp.index_dtype is not _launching.INDEX_INT32:
                return None
            steps.append((lp, _exact(ins), _exact(outs), _exact(tuple(step.scalar_refs)),
                          _exact(appended), biggest <= limit, step.writes_input))
        self.steps = steps
        self.launch_plans = [s[0] for s in steps]
        results = [k if kind == "i" else n + k for kind, k in plan.results]
        self.results = _exact(tuple(results))
        self.temporaries = temporaries
        self.device = device
        self.runtime = _runtime(device)
        return self

    def current(self) -> bool:
        """Whether it can still run: made under the current recipes, its kernels in the
        memory cache (``fl.clear_memory_cache()`` drops them: the general replay then
        finds them again, and a Moving made from it launches those)."""
        if self.token is not _recipes_current[0]:
            return False
        for lp in self.launch_plans:
            if not lp.compiled.in_cache:
                return False
        return True

    def run(self, storages: list[Storage], scalars: list[Any], device: Device,
            offsets: Sequence[int]) -> list[Storage] | None:
        """The plan's results at view ``offsets``, its launches enqueued (each deferred or
        enqueued as ``launching.enqueue_or_defer`` would, with the runtime found when
        the Moving was made); None when the general replay must run it (nothing was
        enqueued then)."""
        if self.token is not _recipes_current[0] or len(storages) != self.n_inputs \
                or device is not self.device or _devices._blocked is not None:
            return None  # (the general replay reports a closed runtime)
        launch_plans = self.launch_plans
        try:
            states = list(map(_thread_state, launch_plans)) if len(launch_plans) > 1 \
                else [launch_plans[0].threads.state]
        except AttributeError:  # this thread's first launch of a kernel
            return None
        for lp in launch_plans:
            if not lp.compiled.in_cache:
                return None
        _tally_replay()
        pool = storages + self.temporaries(self.allocs, device) if self.allocs else storages
        limit = 4 * _launching.DEFER_MAX_ELEMENTS
        rt = self.runtime
        deferred = rt.deferred
        for (lp, g_in, g_out, g_sc, g_off, small, writes), (kernel, last) in zip(
                self.steps, states):
            if writes:  # (it writes a caller's buffer: earlier gathers' flags first)
                check_pending()
            st = g_in(pool) if g_in else ()
            if g_off:
                moved = g_off(offsets)
                sc: Any = (*g_sc(scalars), *moved) if g_sc else moved
                if small:
                    small = max(moved) <= limit
            else:
                sc = g_sc(scalars) if g_sc else ()
            if small and st:
                small = max(map(_nbytes, st)) <= limit
            args = (g_out(pool), st, sc, kernel, last)
            if small:
                deferred.append((lp.go, args))
                if len(deferred) >= DEFER_MAX:
                    rt.flush()
            else:
                with rt.launch_lock:  # (after the deferred ones, amid no other flush)
                    if deferred:
                        rt.flush()
                    lp.go(*args, rt.queue)
            _tally()
        return list(self.results(pool))


def _exact(refs: tuple[int, ...]) -> Any:
    """``refs``' items of a sequence, exactly those, in one C call (None for no refs):
    a launcher reads its scalars by position, the moved offsets following the step's
    own (one ref: a slice of the sequence, a list or tuple as the sequence is)."""
    if not refs:
        return None
    return itemgetter(*refs) if len(refs) > 1 else itemgetter(slice(refs[0], refs[0] + 1))


def _step_plan(step: Any, device: Device, token: object) -> tuple[Any, tuple[int, ...]] | None:
    """The launch plan a :class:`Moving` keeps for ``step`` and the places (among the
    distinct offsets) of the offsets it appends to the step's scalars, or None."""
    if step.device is not device:
        return None
    if not step.offsets:
        lp = step.plan
        if lp is None or (step.plan_params is not step.params and \
                list(step.plan_params) != list(step.params)):
            return None
        appended: tuple[int, ...] = ()
    else:
        if step.moving is None:
            return None
        lp, table = step.moving
        at = dict(step.offsets)
        appended = tuple(at[idx] for _, idx, _ in table)
    if lp.stamp is not token or lp.error_arg is not None or not lp.compiled.in_cache:
        return None  # (a kernel dropped from the memory cache: made once replayed again)
    return lp, appended


def moving_for(plan: Any, n_inputs: int, device: Device, temporaries: Any) -> Moving | None:
    """``plan``'s :class:`Moving`, made now if its steps allow (after a general replay);
    after ``MOVING_TRIES`` replays that could not make one, none is tried again
    (``plan.moving``: the Moving, or the replays that tried); one whose kernels left
    the memory cache, or made under other recipes, is made again."""
    known = plan.moving
    if type(known) is Moving:
        if known.current():
            return known
        known = None  # (its kernels left the memory cache: made again from this replay)
    tries = known or 0
    if tries >= MOVING_TRIES:
        return None
    made = Moving.make(plan, n_inputs, device, temporaries)
    plan.moving = made if made is not None else tries + 1
    return made
