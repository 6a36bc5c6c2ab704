"""Run plans made ready: a plan's replay for one set of view offsets, bound once.

A run plan (:mod:`fuseloop.run_plans`) remembered under an expression's signature is
replayed on every ``.eval()`` of that structure.  The general replay asks, per step and
per call, what such a replay answers alike each time: where the step's buffers are in
the pool, whether its kept launch plan is still valid (recipes token, device, index
dtype, parameters) and which thread kernel object it runs on.  :class:`Ready` keeps
those answers, made after a replay whose every step ran its kept launch plan; a later
replay checks only what can change between calls: the recipes token, each kernel
still in the memory cache, this thread's kernel objects and the caller's buffers (done
by the caller: on the device, no larger than int32 indexes).  Its temporaries are
allocated as ``plan_steps.temporaries`` allocates the general replay's.  Anything else
returns None and the caller replays the general way (which also makes a new
:class:`Ready`).

Launches are deferred or enqueued by ``launching.enqueue_or_defer``'s rule, as the
general replay's are, and count as they do (one memory-cache hit and one launch each).
A step that writes a caller's buffer reads the pending flags of checked gathers first,
as in the general replay.  A plan with checked gathers (``x[rows, labels]``: a kernel
that writes an error flag) runs as the general replay does, within
``flags.deferring``: each such launch enqueued at once with the evaluation's flag
(``launching._enqueue_flagged``), the flag read at the end (or left unread:
``FUSELOOP_GATHER_WAIT=defer``).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from operator import attrgetter, itemgetter
from typing import Any

from . import evaluate as _ev
from . import flags as _flags
from . import launching as _launching
from .errors import OutOfMemoryError
from .expr.nodes import Storage, recent_lazy
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
# a Ready per plan and offsets, at most (a loop over rows replays one plan with
# ever new offsets: those stay on the general replay)
READY_PER_PLAN = 8


#: a ready step: (launch plan, getters of its inputs, outputs (in the call's pool) and
#: scalars (None: none), the positions of the caller's buffers among its inputs,
#: deferred unless one of those is large, writes a caller's buffer, writes an error flag)
Step = tuple[Any, Any, Any, Any, tuple[int, ...], bool, bool, bool]


class Ready:
    """One plan's replay with fixed view offsets, its per-call questions answered.

    ``steps``: per step a :data:`Step`; positions are in the call's pool of inputs
    then temporaries."""

    __slots__ = ("allocs", "biggest", "flagged", "launch_plans", "n_inputs", "result", "results",
                 "runtime", "steps", "temporaries", "token")
    allocs: list[int]
    biggest: int  # the largest temporary's bytes
    flagged: bool  # a step writes a checked gather's error flag
    launch_plans: list[Any]
    n_inputs: int
    result: int  # the one result's position (-1: several)
    results: tuple[int, ...]
    runtime: Any  # the device's runtime (devices._runtime)
    steps: list[Step]
    temporaries: Any  # plan_steps.temporaries: new buffers of the plan's sizes
    token: object

    @classmethod
    def make(cls, plan: Any, offsets: Sequence[int], n_inputs: int, device: Device,
             params_of: Any, temporaries: Any) -> Ready | None:
        """``plan`` made ready for ``offsets`` (``params_of(step, offsets)``: a step's
        parameters; ``temporaries(sizes, device)``: new buffers), or None where a step
        is not: no kept launch plan for these parameters on ``device`` under the current
        recipes."""
        self = cls.__new__(cls)
        limit = 4 * _launching.DEFER_MAX_ELEMENTS  # (plan_steps.launch_step's bound)
        self.token = _recipes_current[0]
        if self.token is None:  # (recipes in flux: a use() block is open)
            return None
        self.n_inputs = n = n_inputs
        self.allocs = allocs = list(plan.allocs)
        steps = []
        for step in plan.steps:
            lp = step.plan
            params = params_of(step, offsets)
            ins = tuple(k if kind == "i" else n + k for kind, k in step.storage_refs)
            outs = tuple(k if kind == "i" else n + k for kind, k in step.out_refs)
            biggest = max(max(params, default=0), math.prod(step.out_shape))
            # (what index_dtype_for answers with the caller's buffers within int32)
            widest = max([biggest, *(allocs[k - n] for k in ins if k >= n)])
            index = _launching.INDEX_INT32 if widest <= INT32_LIMIT else \
                _launching.INDEX_INT64
            if lp is None or lp.stamp is not self.token or step.device is not device \
                    or lp.index_dtype is not index or list(params) != list(step.plan_params):
                return None
            scal = tuple(step.scalar_refs)
            flag = lp.error_arg is not None
            steps.append((lp, _getter(ins), _getter(outs), _getter(scal),
                          tuple(k for k in ins if k < n), biggest <= limit and not flag,
                          step.writes_input, flag))
        self.steps = steps
        self.flagged = any(s[7] for s in steps)
        self.launch_plans = [s[0] for s in steps]
        self.results = tuple(k if kind == "i" else n + k for kind, k in plan.results)
        self.result = self.results[0] if len(self.results) == 1 else -1
        self.temporaries = temporaries
        self.runtime = _runtime(device)
        self.biggest = max(allocs, default=0)
        return self

    def run(self, storages: list[Storage], scalars: list[Any], device: Device
            ) -> list[Storage] | None:
        """The plan's results, its launches enqueued; None when the general replay must
        run it (nothing was enqueued then).

        What ``plan_steps.temporaries`` and ``launching.enqueue_or_defer`` do per call is
        written out here, with the runtime found when the plan was made ready: each
        launch deferred or enqueued as ``enqueue_or_defer`` would, without its frame and
        a runtime look-up per launch; a step's buffers and scalars picked by getters made
        once (:func:`_getter`), not a ``map`` and a list each."""
        if self.token is not _recipes_current[0] or len(storages) != self.n_inputs \
                or _devices._blocked is not None:  # (the general replay reports it)
            return None
        if self.flagged and _flags._local.pending is None:  # (as the general replay)
            return _flags.deferring(self.run, storages, scalars, device)
        launch_plans = self.launch_plans
        try:  # (attrgetter's map: no comprehension's frame)
            states = list(map(_thread_state, launch_plans)) if len(launch_plans) != 1 \
                else [launch_plans[0].threads.state]  # (none: an empty statement's plan)
        except AttributeError:  # this thread's first launch of a kernel
            return None
        for lp in launch_plans:
            if not lp.compiled.in_cache:
                return None
        _tally_replay()
        rt = self.runtime
        allocs = self.allocs
        pool = storages + self._allocate(rt.pool, allocs, device) if allocs else storages
        limit = 4 * _launching.DEFER_MAX_ELEMENTS
        deferred = rt.deferred
        for (lp, g_in, g_out, g_sc, callers, small, writes, flag), (kernel, last) in \
                zip(self.steps, states):
            if writes:  # (it writes a caller's buffer: earlier gathers' flags first)
                check_pending()
            # (deferred as plan_steps.launch_step decides: its sizes, and the inputs')
            for k in callers if small else ():
                if pool[k].nbytes > limit:
                    small = False
                    break
            args: tuple[Any, ...] = (g_out(pool), g_in(pool) if g_in else (),
                                     g_sc(scalars) if g_sc else (), kernel, last)
            if small:
                deferred.append((lp.go, args))
                if len(deferred) >= DEFER_MAX:
                    rt.flush()
            elif flag:  # (now, with this evaluation's flag: read by deferring at its end)
                o, st, sc = args[:3]
                _launching._enqueue_flagged(lp, o, st, sc, kernel, last, device)
            else:
                with rt.launch_lock:  # (after the deferred ones, amid no other flush)
                    if deferred:
                        rt.flush()
                    lp.go(*args, rt.queue)
            _tally()
        if self.result >= 0:
            return [pool[self.result]]
        return [pool[k] for k in self.results]

    def _allocate(self, mem: Any, allocs: list[int], device: Device) -> list[Storage]:
        """The temporaries' new buffers, as ``plan_steps.temporaries`` makes them (see
        :meth:`run`)."""
        if recent_lazy and self.biggest >= _ev.RELEASE_RECENT_AT:
            return self.temporaries(allocs, device)  # (it lets go of recent arrays first)
        allocate = mem.allocate
        made = []
        try:
            for n in allocs:
                made.append(Storage(allocate(n), n, device))
        except OutOfMemoryError:
            return [_ev.allocate(n, device) for n in allocs]
        return made


def _getter(refs: tuple[int, ...]) -> Any:
    """``refs``' items of a sequence as a tuple, in one C call (None for no refs): the
    first is picked twice more at the end, so one ref still gives a tuple; launchers
    read their arguments by position (``LaunchSpec``), never the length."""
    return itemgetter(*refs, refs[0]) if refs else None


def ready_for(plan: Any, offsets: tuple[int, ...], n_inputs: int, device: Device,
              params_of: Any, temporaries: Any) -> Ready | None:
    """``plan``'s :class:`Ready` for ``offsets``, made now if its steps allow (after a
    general replay with these offsets, which left each step its launch plan)."""
    readies = plan.ready
    if readies is None:
        readies = plan.ready = {}
    else:
        known = readies.get(offsets)
        if known is False or (known is None and len(readies) >= READY_PER_PLAN):
            return None  # (steps that stay on the general replay, or too many offsets)
    made = Ready.make(plan, offsets, n_inputs, device, params_of, temporaries)
    # (False: not to be made again; what decides it does not change between calls)
    readies[offsets] = made if made is not None else False
    return made
