"""The parts of a split call replayed back to back (issue 29: the time between two
parts' enqueues decides how far a split sum or stencil step scales): a split
reduction's partial results (:func:`replayed`) and a split array's lazy parts when it
is evaluated (:func:`launched`: a stencil step's parts, an elementwise expression's
where ``run_plans`` holds its plan).

Once a call has built the reduction of a part's structure, a later call's part is the
replay of the run plan its device holds (``run_plans``' plan by signature).  Through
``run_plans.replay_signed`` each part pays that path's layers: the flag-reading frame,
the key's checks, the plan's replay, each step's launch checks, ``launching.enqueue``
and its deferral, then the part's own queue look-up and submit.  :func:`replayed`
makes those checks once per call where they are the same for every part (capture,
recording and checking modes, the flags' frame, the partial's signature).  It works
in two phases: first every part is staged (:class:`_Staged`: its plan looked up and its
launch checked), then the staged parts are enqueued back to back (:func:`enqueue_all`):
between two parts' enqueues there is only what needs the part's device current (CUDA:
one switch per part), its temporaries allocated and argument lists made, the queue's
lock, the enqueue calls and the submit.  The last part still starts after all
of the call's host work (every part staged and enqueued): only less work per part makes
it earlier.  A step whose kept launch plan is not valid for this launch (recipes changed,
another index type, an error flag, a kernel not in the memory cache) goes through
``run_plans``' own step launch, so nothing is launched differently from the general
path, only with fewer frames.  A flat elementwise part is staged from the look-up
``evaluate.run_flat`` makes (``evaluate.flat_launch_ready``; :func:`_stage_flat`).
"""

from __future__ import annotations

import contextlib
import functools
import math
import threading
from collections.abc import Sequence
from typing import Any

from .. import caches as _caches
from .. import flags as _flags
from .. import host_path as _host
from .. import plan_steps as _steps
from .. import run_plans as _rp
from ..array import Array
from ..errors import OutOfMemoryError
from ..evaluate import allocate, capturing_threads, flat_launch_ready, recording_threads
from ..expr import program as _prog
from ..expr.ir import INT32_LIMIT
from ..expr.nodes import Storage, signature_of
from ..launching import (
    DEFER_MAX_ELEMENTS,
    INDEX_INT32,
    INDEX_INT64,
    _counters,
    _stats_lock,
    index_dtype_for,
    thread_kernel,
)
from ..recipe_state import current as _recipes_current
from ..runtime.devices import _runtime
from . import calls as _calls
from . import trace

#: the parts the last split reduction or evaluation replayed here (or found evaluated)
LAST_FAST: list[int] = [0]


def _ready(parts: Sequence[Array]) -> bool:
    """Whether parts may be replayed here at all: the checks that are the same for
    every part of a call (no capture, recording or plan checking; not the host path's
    small work on a CPU device)."""
    if capturing_threads[0] or recording_threads[0] or _prog.CHECK_STRUCTURE_CACHE \
            or not parts:
        return False
    return not (_host.HOST_MAX_WORK and _host.host_device(parts[0].device)
                and min(math.prod(p.shape) for p in parts) <= _host.HOST_MAX_WORK)


def replayed(partials: dict, base: tuple, used: Sequence[Array], hold: bool = False
             ) -> tuple[list[Array], Any]:
    """The partial results of the leading parts of ``used`` whose reduction (``base``:
    see ``reduce._plan_base``) has a plan on their device, all staged, then enqueued
    back to back; it stops at the first part without one (the caller continues from
    there).  With them, the kept call (``calls._Call``) they were staged from or kept
    as, or None.  ``partials``: ``reduce._PARTIALS``; ``hold``: the caller reads every
    partial before it returns, so a kept call's parts may write the buffers the kept
    call holds (:class:`_Held`)."""
    LAST_FAST[0] = 0
    if not _ready(used):
        return [], None
    done: list[Array] = []
    call: list[Any] = [None]
    _flags.deferring(_partials, partials, base, used, done, call, hold)
    LAST_FAST[0] = len(done)
    return done, call[0]


def _partials(partials: dict, base: tuple, used: Sequence[Array], done: list[Array],
              call: list[Any], hold: bool) -> None:
    token = _recipes_current[0]
    if trace.events is not None:
        trace.note("staging begun", -1, used[0].device)
    key, staged, call[0] = _calls.found(base, used, hold)
    if staged is not None:
        kinds = call[0].results
    else:
        staged, kinds, launches = _stage_partials(partials, base, used, token)
        if len(staged) == len(used):
            call[0] = _calls.keep(key, launches, kinds)
    results: list[Any] = []
    try:
        enqueue_all(staged, results)
    finally:  # (the parts enqueued before an error are the caller's to keep)
        done.extend(Array._concrete(r, dtype, shape)
                    for r, (shape, dtype) in zip(results, kinds))


def _stage_partials(partials: dict, base: tuple, used: Sequence[Array], token: Any
                    ) -> tuple[list[_Staged], list[tuple], list[Any]]:
    """The leading parts of ``used`` whose reduction has a plan, staged one by one:
    (their staged launches, their results' (shape, dtype), how each was staged)."""
    last_sig: Any = None
    hit: Any = None
    staged: list[_Staged] = []
    kinds: list[tuple[tuple[int, ...], Any]] = []
    launches: list[Any] = []
    for p in used:
        node = p._node
        if p._storage is not None:
            break
        sig = node.sig or signature_of(node)
        if not sig:
            break
        if sig is not last_sig:
            hit = partials.get((base, sig))
            last_sig = sig
        if hit is None:
            break
        rsig, shape, dtype = hit
        ready = _stage(node, rsig, shape, p.device, token)
        if ready is None:
            break
        staged.append(ready[0])
        launches.append(ready[1])
        kinds.append((shape, dtype))
    return staged, kinds, launches


def launched(parts: Sequence[Array]) -> list[bool]:
    """Each lazy part of ``parts`` (a split array's, to be evaluated) whose structure
    has a plan on its device replayed here and made concrete (its queue submitted before
    the next part is looked at): per part, whether it was (the caller evaluates the
    others its own way).  Parts evaluated already count as done."""
    if not _ready(parts):
        return [p._storage is not None for p in parts]
    out: list[bool] = []
    _flags.deferring(_lazy_parts, parts, out)
    LAST_FAST[0] = sum(out)
    return out


def _lazy_parts(parts: Sequence[Array], out: list[bool]) -> None:
    token = _recipes_current[0]
    if trace.events is not None:
        trace.note("staging begun", -1, parts[0].device)
    key, staged, _ = _calls.found("eval", parts)
    owners: list[Array] = []
    if staged is not None:
        owners = list(parts)
        out.extend([True] * len(parts))
    else:
        staged = []
        launches: list[Any] = []
        for p in parts:
            if p._storage is not None:
                out.append(True)
                launches.append(None)
                continue
            node, shape = p._node, p.shape
            ready = _stage_flat(node, shape, p.device) \
                if not node.fancy and len(shape) == 1 else None
            if ready is None:
                sig = node.sig or signature_of(node)
                ready = _stage(node, sig, shape, p.device, token) if sig else None
            out.append(ready is not None)
            launches.append(None if ready is None else ready[1])
            if ready is not None:
                staged.append(ready[0])
                owners.append(p)
        _calls.keep(key, launches)
    results: list[Any] = []
    try:
        enqueue_all(staged, results)
    finally:
        for p, r in zip(owners, results):
            p._become(r)
        if len(results) < len(owners):  # (an error: the rest are still lazy)
            late = {id(p) for p in owners[len(results):]}
            out[:] = [o and id(p) not in late for p, o in zip(parts, out)]


def enqueue_all(staged: Sequence[_Staged], results: list[Any]) -> None:
    """Each of ``staged`` enqueued and its queue submitted, back to back (nothing else
    between two parts: every look-up, allocation and argument list was made when they
    were staged); their results appended to ``results`` as they are enqueued."""
    events = trace.events
    counted = 0
    try:
        for k, ready in enumerate(staged):
            if events is not None:
                trace.note("enqueue begun", k, ready.device)
            # (off CUDA no device to make current: _launch itself, a frame less)
            results.append(ready.launch() if ready.device.backend == "cuda"
                           else ready._launch())
            counted += ready.counted
            if events is not None:
                trace.note("enqueued", k, ready.device)
    finally:
        if counted:
            with _stats_lock:
                _counters["memory_cache_hits"] += counted
                _counters["kernels_launched"] += counted


def _stage(node: Any, sig: Any, shape: tuple[int, ...], device: Any, token: Any
           ) -> tuple[_Staged, Any] | None:
    """The launch of the plan ``device`` holds for signature ``sig`` and ``shape`` over
    ``node``'s operands, made ready to enqueue (:class:`_Staged`), and how a later call
    stages it again (``calls._PartLaunch``; None: not kept for later calls); None where
    none is held or its buffers need ``run_plans``' walk (as ``run_plans._signed_replay``
    decides)."""
    operands = node.operands
    if operands is None:
        return None
    signed = _rp.signed_of(sig, operands, node.offs, shape, device)
    if signed is None:
        return None
    entry = _rp._signed.get(signed[0])
    hit = _rp.signed_pick(entry, operands, device, (), signed[3])
    if hit is None or entry is None:
        return None
    plan, offsets, storages, scalars = hit
    if offsets is None:  # (an entry for any views' offsets: this call's)
        offsets = signed[3]
    take, head, wide = entry[2], entry[3], entry[4] is not None
    ready = _PREPARED.get((id(entry), offsets))
    if ready is None or ready.entry is not entry or ready.token is not token:
        ready = _prepare(entry, offsets, storages, device, token)
    if ready is not None and ready.valid(token):
        return ready.stage(storages, scalars), \
            _calls._PartLaunch(device, take, wide, head, prepared=ready)
    # (a launch that may be prepared, not from this thread or with a kernel out of the
    # memory cache: launched in general now, and not kept so)
    keep = ready is None or not ready.steps
    return _Staged(device, 0, functools.partial(_launch, plan, storages, scalars, offsets,
                                                device, token)), \
        _calls._PartLaunch(device, take, wide, head, general=(plan, offsets, token)) \
        if keep else None


def _stage_flat(node: Any, shape: tuple[int, ...], device: Any
                ) -> tuple[_Staged, Any] | None:
    """The launch ``evaluate.run_flat`` would make of the flat elementwise ``node``
    (``evaluate.flat_launch_ready``: the same look-ups and checks), made ready to enqueue
    with its output allocated, and how a later call stages it again; None where run_flat
    would not take it (the part then goes its own way)."""
    ready = flat_launch_ready(node, shape, device)
    if ready is None:
        return None
    plan, storages, scalars, kernel, last = ready
    entry = _prog.flat_entries[(node.sig, shape)]
    wide = any(s.nbytes > INT32_LIMIT for s in storages)
    return _Staged(device, 1, flat=(plan.go, kernel, last, shape[0] * node.dtype.itemsize),
                   storages=storages, scalars=scalars), \
        _calls._PartLaunch(device, entry.take, wide, flat=plan)


class _Staged:
    """One part's launch with every look-up and check made: what is left needs its device
    current (CUDA: switched once per part, in :meth:`launch`): its buffers allocated, its
    steps' argument lists made, its kernels enqueued and its queue submitted.  A prepared
    launch (``prepared``: a :class:`_Prepared` over ``storages`` and ``scalars``), a flat
    elementwise one (``flat``: (launch function, kernel object, its argument record, the
    output's bytes)) or ``general``, the general step launch of :func:`_launch` (which
    counts its own launches); ``held``: a prepared launch onto the buffers a kept call
    holds (:class:`_Held`); ``counted``: the launches :func:`enqueue_all` counts."""

    __slots__ = ("counted", "device", "flat", "general", "held", "prepared", "scalars",
                 "storages")

    def __init__(self, device: Any, counted: int, general: Any = None, prepared: Any = None,
                 flat: tuple | None = None, storages: Sequence[Any] = (),
                 scalars: Sequence[Any] = (), held: _Held | None = None) -> None:
        self.device, self.counted, self.general = device, counted, general
        self.prepared, self.flat, self.held = prepared, flat, held
        self.storages, self.scalars = storages, scalars

    def launch(self) -> Any:
        """The part's buffers allocated, its kernels enqueued and its queue submitted; its
        result."""
        if self.device.backend == "cuda":  # (elsewhere no context: frames per part)
            with current(self.device):
                return self._launch()
        return self._launch()

    def _launch(self) -> Any:
        if self.general is not None:
            return self.general()
        device, storages, scalars = self.device, self.storages, self.scalars
        rt = _runtime(device)
        prepared = self.prepared
        calls: list[tuple[Any, ...]]
        if prepared is not None:
            held = self.held
            pool = storages
            if held is not None:
                one = held.one
                if one is not None:  # (its arguments but the inputs made at its first)
                    go, kernel, last, outs, scs, result = one
                    rt.enqueued = True  # (what the runtime's ``queue`` marks; valid()
                    queue = prepared.queue  # checked it is the runtime's queue)
                    with rt.launch_lock:
                        if rt.deferred:
                            rt.flush()
                        go(outs, storages, [scalars[i] for i in scs] if scs else [], kernel,
                           last, queue)
                        rt.submit(queue)
                    return result
                pool = held.pool(storages, rt)
            elif prepared.allocs:
                pool = [*storages, *temporaries(prepared.allocs, device, rt)]
            calls = _step_calls(prepared.steps, pool, storages, scalars)
            result = pool[prepared.result]
        else:
            assert self.flat is not None
            go, kernel, last, nbytes = self.flat
            result = output(nbytes, device)
            calls = [(go, kernel, last, result, storages, scalars)]
        queue = rt.queue
        with rt.launch_lock:
            if rt.deferred:
                rt.flush()
            for go, kernel, last, outs, ins, scs in calls:
                go(outs, ins, scs, kernel, last, queue)
            rt.submit(queue)
        return result


def _step_calls(steps: list[tuple], pool: Sequence[Any], storages: Sequence[Any],
                scalars: Sequence[Any]) -> list[tuple[Any, ...]]:
    """A prepared launch's steps' argument lists over ``pool`` (the part's ``storages``,
    then the plan's new buffers): what each step's launch function is called with."""
    # (a step's inputs that are the part's in order are passed as they are, no scalars
    # as an empty list: no list made per argument kind)
    return [(go, kernel, last, [pool[i] for i in outs],
             storages if ins is None else [pool[i] for i in ins],
             [scalars[i] for i in scs] if scs else [])
            for go, kernel, last, outs, ins, scs in steps]


#: a kept part's new buffers (temporaries and result) are held by it (:class:`_Held`)
#: up to this many bytes in all (a full reduction's first-stage partials and its
#: partial result: 32 kB at 8192 float32 pieces; kept calls are at most
#: ``calls.CALLS_MAX``)
HELD_MAX_BYTES = 1 << 18


class _Held:
    """A kept call's part launched onto new buffers it holds (issue 29: a split full
    reduction combined on the host reads every partial result before the call returns,
    and a device's queue runs its launches in order, so the next such call may write the
    same buffers): the plan's temporaries and result are allocated once, not per call,
    and its launches find those arguments as they left them.  Only they are held (the
    part's inputs are the call's: a kept call keeps no array's buffer alive).  One per
    ``calls._PartLaunch`` and its prepared launch (``prepared``), used by the thread
    that prepared it only (``_Prepared.valid``)."""

    __slots__ = ("one", "prepared", "temps")

    def __init__(self, prepared: _Prepared) -> None:
        self.prepared = prepared
        self.temps: list[Storage] | None = None
        #: a plan of one step that reads the part's inputs in order and writes held
        #: buffers (a split sum's part: one launch): (launch function, kernel object, its
        #: argument record, the outputs' list, scalar positions, the result), made with
        #: the buffers, so a launch builds no pool and no argument lists
        self.one: tuple | None = None

    def pool(self, storages: Sequence[Any], rt: Any) -> list[Any]:
        """The launch's pool: the part's ``storages``, then the held new buffers
        (allocated at the first launch, its device current)."""
        temps = self.temps
        if temps is None:
            prepared = self.prepared
            temps = self.temps = temporaries(prepared.allocs, prepared.device, rt)
            n = len(storages)
            if prepared.n_steps == 1 and prepared.result >= n:
                go, kernel, last, outs, ins, scs = prepared.steps[0]
                if ins is None and min(outs, default=n) >= n:
                    self.one = (go, kernel, last, [temps[i - n] for i in outs], scs,
                                temps[prepared.result - n])
        return [*storages, *temps]


def output(nbytes: int, device: Any) -> Storage:
    """A split part's output buffer of ``nbytes`` from ``device``'s pool, as
    ``evaluate.allocate`` makes it but without letting go of the recent lazy arrays
    first (``evaluate.RELEASE_RECENT_AT``): before a large part's output that walk
    registered the split expression's own parts as readers (every part of every
    operation, tens of microseconds before the first part launched) only for them to
    be evaluated at once.  The pool's own check still lets them go where the device is
    short of room, and a refusal goes to ``evaluate.allocate``, which does."""
    if nbytes > device.max_alloc_size:
        return allocate(nbytes, device)  # (its error)
    try:
        return Storage(_runtime(device).pool.allocate(max(nbytes, 1)), nbytes, device)
    except OutOfMemoryError:
        return allocate(nbytes, device)


def temporaries(allocs: list[int], device: Any, rt: Any = None) -> list[Storage]:
    """``plan_steps.temporaries`` for a split part, without its letting go of the recent
    lazy arrays first (see :func:`output`; the sizes were allocated when the plan was
    recorded); ``rt``: the device's runtime, where the caller has it."""
    allocate_pooled = (rt or _runtime(device)).pool.allocate
    try:
        return [Storage(allocate_pooled(n), n, device) for n in allocs]
    except OutOfMemoryError:
        return [allocate(n, device) for n in allocs]


#: a known plan's launch on a device is prepared once (:class:`_Prepared`: its steps'
#: checks made, kernel objects and argument positions found) and later parts of that
#: plan are launched from it.
#: (``id`` of a ``run_plans._signed`` entry, view offsets) -> its prepared launch (the
#: entry is held by it, so the id is not reused while the item lives; a replaced entry is
#: prepared again)
_PREPARED: dict[tuple[int, tuple[int, ...]], _Prepared] = {}
PREPARED_MAX = 256
_caches.register("multi.prepared", _PREPARED.clear, lambda: len(_PREPARED), PREPARED_MAX)


class _Prepared:
    """One run plan's launch on one device with everything that does not depend on the
    buffers found once: per step its launch function, this thread's kernel object and
    argument record, and where its outputs, inputs (None: the part's inputs in order)
    and scalars lie in the replay's pool (inputs, then the plan's new buffers).  A launch
    is then staged (:meth:`stage`) and enqueued (:meth:`_Staged.launch`: allocations,
    argument lists, enqueues): no step's validity checked again but the kernel's
    presence in the memory cache (:meth:`valid`, once per launch).  Made only for plans
    whose steps all pass ``_launch``'s checks for a kept launch plan with the index type
    every admitted launch takes (:func:`_index_of`; the inputs' side of int32 is checked
    by ``run_plans.signed_pick`` and ``calls._PartLaunch``); a step
    with view offsets launches the launch plan its step keeps for the entry's offsets.
    ``steps`` empty: the plan cannot be prepared under this recipes token
    (:func:`_prepare`), its parts take ``_launch`` without asking again."""

    __slots__ = ("allocs", "compiled", "device", "entry", "holdable", "n_steps", "queue",
                 "result", "rt", "steps", "thread", "token")

    def __init__(self, entry: Any, device: Any, token: Any, steps: list[tuple],
                 compiled: list[Any], result: int) -> None:
        self.entry, self.device, self.token = entry, device, token
        self.allocs = entry[0].allocs
        #: whether a kept part may hold its new buffers (:class:`_Held`): few bytes
        self.holdable = bool(steps) and sum(self.allocs) <= HELD_MAX_BYTES
        self.steps, self.compiled, self.result = steps, compiled, result
        self.n_steps = len(steps)
        self.thread = threading.get_ident()
        self.rt = _runtime(device)
        self.queue = self.rt.bare_queue

    def valid(self, token: Any) -> bool:
        """Whether this launch may run now: the same recipes, thread and queue, its
        kernels still in the memory cache."""
        if not self.steps or token is not self.token or threading.get_ident() != self.thread \
                or self.rt.bare_queue is not self.queue:
            return False
        for c in self.compiled:
            if not c.in_cache:
                return False
        return True

    def stage(self, storages: list[Any], scalars: list[Any], held: _Held | None = None
              ) -> _Staged:
        """The plan's launch over ``storages`` and ``scalars``, to be enqueued (onto the
        buffers of ``held``, one of this launch's, where given)."""
        return _Staged(self.device, self.n_steps, prepared=self, storages=storages,
                       scalars=scalars, held=held)


def _prepare(entry: Any, offsets: tuple[int, ...], storages: list[Any], device: Any,
             token: Any) -> _Prepared | None:
    """The prepared launch of ``entry`` (a ``run_plans._signed`` entry) on ``device``, or
    None where a step needs ``_launch``'s per-launch path (no launch plan kept for its
    parameters, another device's, other recipes, an error flag, an input written, an
    index type that the launch's buffers decide (:func:`_index_of`), more small steps
    than the queue takes without holding them back: those that the next general launch
    does not change are remembered as a launch without steps).  A step taking view
    offsets gets the launch plan its step keeps for the call's ``offsets`` (kept per
    entry and offsets)."""
    plan = entry[0]
    if token is None:
        return None
    n = len(storages)
    rt = _runtime(device)
    steps: list[tuple] = []
    compiled = []
    small = 0
    for step in plan.steps:
        params = _rp._params(step, offsets)
        if params is step.params:
            lp = step.plan if params is step.plan_params else None
            biggest = step.biggest
        else:
            kept = step.plans
            lp = step.plan if params == step.plan_params else \
                kept.get(tuple(params)) if kept is not None else None
            biggest = max(max(params, default=0), math.prod(step.out_shape))
        if lp is None or lp.stamp is not token or step.device is not device \
                or not lp.compiled.in_cache:
            return None  # (the general launch makes or checks its plan: asked again)
        if lp.error_arg is not None or step.writes_input \
                or lp.index_dtype is not _index_of(step, biggest, n, entry[4] is not None):
            return _kept(_Prepared(entry, device, token, [], [], 0), offsets)
        if biggest <= 4 * DEFER_MAX_ELEMENTS:
            small += 1
        kernel, last = thread_kernel(lp)
        ins = _steps.pool_refs(step.storage_refs, n)
        steps.append((lp.go, kernel, last, _steps.pool_refs(step.out_refs, n),
                      None if ins == tuple(range(n)) else ins, tuple(step.scalar_refs)))
        compiled.append(lp.compiled)
    if (rt.gate_at and small >= rt.gate_at) or any(a > INT32_LIMIT for a in plan.allocs):
        steps, compiled = [], []
    kind, k = plan.results[0]
    return _kept(_Prepared(entry, device, token, steps, compiled, k if kind == "i" else n + k),
                 offsets)


def _index_of(step: Any, biggest: int, n: int, wide: bool) -> Any:
    """The index type (``launching.index_dtype_for``'s rule) of every launch of ``step``
    (largest size ``biggest``) that a kept part of its plan admits (``n`` inputs; a
    ``wide`` entry's launches have an input past int32 bytes, a narrow one's none, and
    the plan's new buffers are within int32): int64 where its sizes pass int32 or it
    reads every input of a wide entry; int32 where it reads no input of a wide entry or
    any of a narrow one's; None where it reads some of a wide entry's inputs (their
    sizes at each launch decide: ``_launch`` checks them).  At 2**30 float32 over two
    GPUs each part is a wide buffer: its sum's steps are prepared too."""
    if biggest > INT32_LIMIT:
        return INDEX_INT64
    reads = {k for kind, k in step.storage_refs if kind == "i"}
    if not wide or not reads:
        return INDEX_INT32
    return INDEX_INT64 if len(reads) == n else None


def _kept(ready: _Prepared, offsets: tuple[int, ...]) -> _Prepared:
    if len(_PREPARED) >= PREPARED_MAX:
        _PREPARED.clear()
    _PREPARED[(id(ready.entry), offsets)] = ready
    return ready


_NO_SWITCH = contextlib.nullcontext()


#: ``backends.cuda.current_device``, bound at the first CUDA part (CuPy is imported only
#: where a CUDA device is; an import statement per call cost each part microseconds)
_CUDA_SWITCH: list[Any] = []


def current(device: Any) -> Any:
    """A context making ``device`` the current one for its part's allocations and
    launches (CUDA: switched once per part, not at each launch and allocation; the
    device current before is current again after), a null context elsewhere."""
    if device.backend != "cuda":
        return _NO_SWITCH
    if not _CUDA_SWITCH:
        from ..backends.cuda import current_device

        _CUDA_SWITCH.append(current_device)
    return _CUDA_SWITCH[0](device)


def _launch(plan: Any, storages: list[Any], scalars: list[Any], offsets: Sequence[int],
            device: Any, token: Any) -> Any:
    """``run_plans._replay`` of ``plan`` with its steps enqueued back to back under the
    queue's lock (each launch checked as ``plan_steps.launch_step`` checks its kept
    plan), then the queue submitted; the plan's result."""
    tmps = temporaries(plan.allocs, device)
    rt = _runtime(device)
    queue = rt.queue
    launched = 0
    small_max = 4 * DEFER_MAX_ELEMENTS  # (plan_steps.launch_step's bound)
    with rt.launch_lock:
        if rt.deferred:
            rt.flush()
        for step in plan.steps:
            if step.writes_input:
                _flags.check_pending()
            st = [storages[k] if kind == "i" else tmps[k] for kind, k in step.storage_refs]
            outs = [storages[k] if kind == "i" else tmps[k] for kind, k in step.out_refs]
            sc = [scalars[k] for k in step.scalar_refs]
            params = _rp._params(step, offsets)
            lp = step.plan
            if params is step.params and lp is not None and lp.stamp is token \
                    and token is not None and step.device is device \
                    and params is step.plan_params and lp.error_arg is None \
                    and lp.compiled.in_cache \
                    and lp.index_dtype is index_dtype_for(st, step.biggest, device):
                kernel, last = thread_kernel(lp)
                if step.biggest <= small_max and \
                        max([x.nbytes for x in st], default=0) <= small_max:
                    # (small: deferred as run_plans defers it, so the flush below
                    # enqueues the part's small launches together, PoCL's workers
                    # held back meanwhile)
                    rt.deferred.append((lp.go, (outs, st, sc, kernel, last)))
                else:
                    if rt.deferred:  # (in order: an earlier small step first)
                        rt.flush()
                    lp.go(outs, st, sc, kernel, last, queue)
                launched += 1
            else:  # (the general step launch: plans made or checked, flags, deferral)
                _steps.launch_step(step, st, outs, sc, device, params)
        if launched:
            with _stats_lock:
                _counters["memory_cache_hits"] += launched
                _counters["kernels_launched"] += launched
        if rt.deferred:
            rt.flush()
        rt.submit(queue)
    kind, k = plan.results[0]
    return storages[k] if kind == "i" else tmps[k]


__all__ = ["LAST_FAST", "current", "launched", "replayed"]
