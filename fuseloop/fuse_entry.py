"""The record of one signature of a fused function (``fl.fuse``, :mod:`fuseloop.fuse`):
:class:`Entry`, what a later call with that signature does, and how a finished trace
(:class:`fuseloop.tracing.Trace`) becomes one (:func:`make_entry`).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable
from typing import Any

from . import evaluate as _ev
from . import flags as _flags
from . import fuse_graphs as _graphs
from . import plan_steps as _steps
from .array import Array, _weak_scalar, _weak_scalars
from .dtypes import scalar_to
from .errors import OutOfMemoryError
from .expr.nodes import Storage
from .fuse_prune import prune_trace
from .launching import (
    DEFER_MAX,
    DEFER_MAX_ELEMENTS,
    enqueue,
    index_dtype_for,
    plan_launch,
    recipe_kind,
    thread_kernel,
)
from .recipe_state import current as _recipes_current
from .recipe_state import recipe_for
from .recipe_state import stamp as _recipe_stamp
from .runtime.devices import Device, _runtime
from .stats import cached_launches
from .tracing import Aliased, HostStep, Trace, TracedScalar

_tally_cached_launch = cached_launches.__next__  # (see fuseloop.stats)

class Entry:
    """What a call of one signature does: ``run(storages, values, args)``.

    ``steps``: per recorded launch ``(step, input positions, output positions,
    scalar slots, small)``, positions into the call's pool of buffers
    (the arguments', then new temporaries, then constants); a step may be a
    :class:`~fuseloop.tracing.HostStep` (host code on those buffers) instead.  The index dtype, the
    device and the sizes of a step are fixed by the signature, so a step's launch
    plan (``step.plan``, made by ``plan_steps.launch_step`` on its first replay) is
    used while its recipe and kernel are still current, as ``run_plans`` checks.

    ``run`` is the signature's prepared replay: for the commonest record (one small
    launch into one new buffer, which is the result) a closure that does only what
    changes per call (:func:`_prepared_single`, with the one-output launch plan
    ``plan1``), falling back to :meth:`replay`, which ``run`` is otherwise; for a
    record that writes into arguments (``written``) or was traced with arguments sharing
    a buffer (``aliases``), :meth:`replay_guarded`.
    """

    __slots__ = ("aliases", "consts", "device", "eager", "fixed_scalars", "plan1", "pool",
                 "result1", "results", "run", "single", "slots", "steps", "structure",
                 "supplied", "temps", "written")

    aliases: tuple[int, ...]  # per array argument the first one sharing its buffer

    consts: list[Storage]
    device: Device
    eager: bool  # run the function as Python on each call (see Fused._call_eager)
    fixed_scalars: list[Any] | None  # the scalars when every slot is a constant
    plan1: Any  # the one-output LaunchPlan of a single-launch record with one result
    pool: Any  # the device's memory (DeviceMemory)
    result1: tuple | None  # (dtype, shape) when the result is one new array
    results: list[tuple]  # per result (kind, position or value, dtype, shape)
    run: Callable[[list[Storage], list[Any], tuple], Any]
    single: tuple | None  # (step, recipe kind, output sizes): see replay
    slots: list[tuple]  # per scalar slot (kind, constant/argument/function, dtype)
    steps: list[tuple]
    structure: Any  # tuple, list or None (one result)
    # per temporary taken, not allocated (tracing.Trace.supply): its position, how
    supplied: tuple[tuple[int, Callable[[Device], Storage]], ...]
    temps: list[int]
    # the array arguments the steps write into; None where no step writes one and none
    # is a host step (the plain replay, :meth:`_launch_steps`)
    written: tuple[int, ...] | None

    def scalars(self, values: list[Any]) -> list[Any]:
        """The call's kernel scalars, per slot, from its scalar arguments ``values``."""
        sc = self.fixed_scalars  # (all constants: one list serves every call)
        if sc is not None:
            return sc
        sc = []
        for kind, a, dtype in self.slots:
            if kind == 1:  # a Python int or float argument (conversions remembered:
                # array._weak_scalar, its hit inline as the operators have it)
                v = values[a]
                hit = _weak_scalars.get((v, dtype.char)) if v and v == v else None
                sc.append(_weak_scalar(v, dtype) if hit is None else hit)
            elif kind == 0:
                sc.append(a)
            else:
                sc.append(scalar_to(a(values), dtype))
        return sc

    def replay(self, storages: list[Storage], values: list[Any], args: tuple) -> Any:
        """A call of this signature, the general way (``run`` when not prepared)."""
        sc = self.scalars(values)
        single = self.single
        if single is not None:
            if self.result1 is not None:
                self._plan_single(storages)  # (for run's next call)
            done = self._deferred_single(single, storages, values, args, sc)
            if done is not None:
                return done[0]
        return self._replay(storages, values, args, sc)

    def replay_guarded(self, storages: list[Storage], values: list[Any], args: tuple) -> Any:
        """A call of a record that writes into arguments, or was traced with arguments
        sharing a buffer (its steps read one for both): arguments sharing buffers
        otherwise than when traced raise :class:`Aliased` (a record of its own: the steps
        would read what they write, or one argument for another); as eagerly, the lazy
        arrays still reading the old contents of those written are computed first."""
        if len(storages) > 1:
            aliases = _aliases(storages)
            if aliases != self.aliases:
                raise Aliased(aliases)
        for k in self.written or ():
            pending = [r for r in storages[k].live_readers() if r._storage is None]
            if pending:
                from .assignment import compute

                compute(*pending)
        return self.replay(storages, values, args)

    def _plan_single(self, storages: list[Storage]) -> None:
        """Make (or confirm) ``plan1``, the one-output plan :func:`_prepared_single` uses."""
        step, kind = self.single[:2]  # type: ignore[index]
        device = self.device
        biggest = max(max(step.params, default=0), math.prod(step.out_shape))
        index_dtype = index_dtype_for(storages, biggest, device)
        token = _recipe_stamp()
        recipe = recipe_for(device, kind)
        plan = self.plan1
        if plan is None or not plan.valid(recipe, index_dtype):
            plan = self.plan1 = plan_launch(step.program, step.params, step.out_shape,
                                            index_dtype, recipe, device, one_output=True)
        if plan is not None:
            plan.stamp = token
            thread_kernel(plan)  # (this thread's kernel object: run needs it made)

    def _deferred_single(self, single: tuple, storages: list[Storage], values: list[Any],
                         args: tuple, sc: list[Any]) -> tuple[Any] | None:
        """One small launch into new buffers, its plan current: deferred at once (what
        launching.enqueue does for it, written out as evaluate.run_flat has it); the
        results in a 1-tuple, None when the general path must run it."""
        step, _, out_bytes, _ = single
        plan = step.plan
        if plan is None or plan.stamp is not _recipes_current[0] \
                or not plan.compiled.in_cache:
            return None
        device = self.device
        try:
            kernel, last = plan.threads.state
            palloc = self.pool.allocate
            outs = [Storage(palloc(n), n, device) for n in out_bytes]
        except (AttributeError, OutOfMemoryError):
            return None  # (this thread's first launch, or no memory: the general path)
        rt = plan.runtime
        deferred = rt.deferred
        deferred.append((plan.go, (outs, storages, sc, kernel, last)))
        _tally_cached_launch()
        if len(deferred) >= DEFER_MAX:
            rt.flush()
        result1 = self.result1
        if result1 is not None:
            return (Array._concrete(outs[0], *result1),)
        return (self._results(storages + outs, values, args),)

    def _replay(self, storages: list[Storage], values: list[Any], args: tuple,
                sc: list[Any], temps: list[Storage] | None = None) -> Any:
        """The steps launched one by one (``temps``: the temporaries' buffers, new ones
        from the pool unless given)."""
        device = self.device
        if temps is None and self.temps:
            palloc = self.pool.allocate
            temps = [_allocate(palloc, n, device) for n in self.temps] \
                if not self.supplied else self._taken(palloc, device)
        pool = self.pool_of(storages, temps)
        # (the steps write the call's own buffers only: checked gathers' error flags are
        # read once, after the last launch, as in an evaluation; see fuseloop.flags)
        _flags.deferring(self._launch_steps if self.written is None else self._launch_mixed,
                         pool, storages, sc, device)
        return self._results(pool, values, args)

    def _taken(self, palloc: Callable[[int], Any], device: Device) -> list[Storage]:
        """The call's temporaries, those :attr:`supplied` taken as they say."""
        takes = dict(self.supplied)
        return [_allocate(palloc, n, device) if k not in takes else takes[k](device)
                for k, n in enumerate(self.temps)]

    def _launch_steps(self, pool: list[Storage], storages: list[Storage], sc: list[Any],
                      device: Device) -> None:
        for step, st, os_, scalars, small in self.bound(pool, storages, sc):
            plan = step.plan
            if plan is None or plan.stamp is not _recipes_current[0] \
                    or not plan.compiled.in_cache:
                _steps.launch_step(step, st, os_, scalars, device)  # (plans; counts the look-up)
            else:
                enqueue(plan, os_, st, scalars, small, device, 1)

    def _launch_mixed(self, pool: list[Storage], storages: list[Storage], sc: list[Any],
                      device: Device) -> None:
        """:meth:`_launch_steps` of a record with host steps or writes into arguments."""
        for step, st, os_, scalars, small in self.bound(pool, storages, sc):
            if type(step) is HostStep:
                step.action(st, os_)
                continue
            if step.writes_input:  # (a user's array: checked gathers' flags read first)
                _flags.check_pending()
            plan = step.plan
            if plan is None or plan.stamp is not _recipes_current[0] \
                    or not plan.compiled.in_cache:
                _steps.launch_step(step, st, os_, scalars, device)  # (plans; counts the look-up)
            else:
                enqueue(plan, os_, st, scalars, small, device, 1)

    def pool_of(self, storages: list[Storage], temps: list[Storage] | None) -> list[Storage]:
        """The call's buffers by position: the arguments', the temporaries', the constants'."""
        pool = storages + temps if temps else storages
        return pool + self.consts if self.consts else pool

    def bound(self, pool: list[Storage], storages: list[Storage], sc: list[Any]
              ) -> Iterable[tuple[Any, list[Storage], list[Storage], list[Any], bool]]:
        """Per step: (step, its inputs, its outputs, its scalars, small)."""
        for step, ins, outs, scal, small in self.steps:
            yield (step, storages if ins is None else [pool[j] for j in ins],
                   [pool[j] for j in outs], [sc[j] for j in scal], small)

    def _results(self, pool: list[Storage], values: list[Any], args: tuple) -> Any:
        device = self.device
        results = []
        for kind, a, dtype, shape in self.results:
            if kind == 0:
                results.append(Array._concrete(pool[a], dtype, shape))
            elif kind == 1:
                results.append(arg_at(args, a))
            elif kind == 2:
                results.append(a)
            elif kind == 3:
                results.append(a(values))
            else:
                results.append(Array._concrete(_ev.allocate(0, device), dtype, shape))
        return results[0] if self.structure is None else self.structure(results)


def _prepared_single(entry: Entry) -> Callable[[list[Storage], list[Any], tuple], Any]:
    """``entry.run`` for a record of one small launch into one new buffer, the result,
    with no scalar computed from the arguments: only what changes per call is done
    (the scalars, the output buffer, the deferred launch, the result array); the
    plan's validity is one comparison (``LaunchPlan.stamp``), the allocation
    ``DeviceMemory.allocate``'s common case written out (``DeviceMemory.reserve``).
    Anything else, and the first call, go to ``entry.replay``, which makes ``plan1``.
    """
    device = entry.device
    nbytes = entry.single[3]  # type: ignore[index]
    dtype, shape = entry.result1  # type: ignore[misc]
    mem = entry.pool
    reserve = mem.reserve(nbytes)
    pooled, refused = mem.pooled, mem.refused
    # (not a trace's watcher of another thread: see tracing._watch)
    pooled = getattr(pooled, "unwatched", pooled)
    fixed = entry.fixed_scalars
    slots = entry.slots
    replay = entry.replay
    current = _recipes_current
    concrete = Array._concrete

    def run(storages: list[Storage], values: list[Any], args: tuple) -> Any:
        plan = entry.plan1
        if plan is None or plan.stamp is not current[0] or not plan.compiled.in_cache:
            return replay(storages, values, args)
        try:
            kernel, last = plan.threads.state
        except AttributeError:  # this thread's first launch
            return replay(storages, values, args)
        credit = mem.credit - reserve
        if credit < 0:  # (replay's allocation checks the room)
            return replay(storages, values, args)
        sc = fixed
        if sc is None:  # Python int or float arguments, constants (see Entry.scalars)
            sc = []
            for kind, a, t in slots:
                if kind == 1:
                    v = values[a]
                    hit = _weak_scalars.get((v, t.char)) if v and v == v else None
                    sc.append(_weak_scalar(v, t) if hit is None else hit)
                else:
                    sc.append(a)
        mem.credit = credit
        try:
            buffer = pooled(nbytes)
        except refused:
            return replay(storages, values, args)
        out = Storage(buffer, nbytes, device)
        rt = plan.runtime
        deferred = rt.deferred
        deferred.append((plan.go, (out, storages, sc, kernel, last)))
        _tally_cached_launch()
        if len(deferred) >= DEFER_MAX:
            rt.flush()
        return concrete(out, dtype, shape)

    return run


def _allocate(palloc: Callable[[int], Any], nbytes: int, device: Device) -> Storage:
    """A new buffer from the device's pool (``evaluate.allocate`` when that fails: it
    lets go of unheld lazy arrays and tries again, or reports)."""
    try:
        return Storage(palloc(nbytes), nbytes, device)
    except OutOfMemoryError:
        return _ev.allocate(nbytes, device)


def _aliases(storages: list[Storage]) -> tuple[int, ...]:
    """Per buffer of ``storages``, the position of the first one with the same buffer."""
    buffers = [s.buffer for s in storages]
    return tuple(next(j for j, b in enumerate(buffers) if b is x) for x in buffers)


def arg_at(args: tuple, path: tuple[int, ...]) -> Any:
    """The argument at ``path`` (a position, then items of tuples or lists)."""
    a = args[path[0]]
    for i in path[1:]:
        a = a[i]
    return a



def make_entry(trace: Trace, device: Device, structure: Any, outs: list,
                computed: list[Storage | None], stand_ins: dict[int, tuple[int, ...]],
                n_arrays: int) -> Entry:
    """The record of ``trace`` as an :class:`Entry` (slots as pool positions)."""
    entry = Entry()
    entry.device = device
    entry.structure = structure
    entry.eager = trace.failed is not None
    prune_trace(trace, computed)  # (before the slots are counted: temporaries may go)
    n_in, n_t = n_arrays, len(trace.temps)
    base = {"i": 0, "t": n_in, "c": n_in + n_t}

    def pos(ref: tuple[str, int]) -> int:
        return base[ref[0]] + ref[1]

    entry.temps = [s.nbytes for s in trace.temps]
    entry.supplied = tuple((k, trace.supplied[id(s)]) for k, s in enumerate(trace.temps)
                           if id(s) in trace.supplied)
    entry.consts = list(trace.consts)
    entry.pool = _runtime(device).pool
    entry.steps = _record_steps(trace, entry.temps, n_in, pos)
    entry.slots = slots = _record_slots(trace)
    entry.fixed_scalars = [a for _, a, _ in slots] if all(k == 0 for k, _, _ in slots) else None
    entry.results = _record_results(entry, trace, outs, computed, stand_ins, pos)
    written = tuple(sorted({k for st in trace.steps for kind, k in st.out_refs if kind == "i"}))
    mixed = written or any(type(st) is HostStep for st in trace.steps)
    entry.written = written if mixed else None
    phs = trace.placeholder_list
    entry.aliases = tuple(next(j for j, q in enumerate(phs) if q is p) for p in phs)
    _choose_replay(entry, n_in)
    return entry


def _record_steps(trace: Trace, temps: list[int], n_in: int,
                  pos: Callable[[tuple[str, int]], int]) -> list[tuple]:
    """:attr:`Entry.steps` of ``trace``'s launches."""
    nbytes = [s.nbytes for s in trace.placeholder_list] + temps + \
        [s.nbytes for s in trace.consts]
    steps = []
    for st in trace.steps:
        ins = tuple(map(pos, st.storage_refs))
        # (small as plan_steps.launch_step has it: deferred like small cached launches)
        limit = 4 * DEFER_MAX_ELEMENTS
        biggest = max(max(st.params, default=0), math.prod(st.out_shape))
        small = biggest <= limit and max([nbytes[j] for j in ins], default=0) <= limit
        steps.append((st, None if ins == tuple(range(n_in)) else ins,
                      tuple(map(pos, st.out_refs)), st.scalar_refs, small))
    return steps


def _record_slots(trace: Trace) -> list[tuple]:
    """:attr:`Entry.slots` of ``trace``'s scalar slots: (0, constant, None), (1, argument
    position, dtype) for a Python int or float argument, else (2, function, dtype)."""
    slots: list[tuple] = []
    for slot in trace.slots:
        if slot[0] == "const":
            slots.append((0, slot[1], None))
        else:
            standin, dtype = slot
            if standin.arg is not None and standin.kind in (int, float):
                slots.append((1, standin.arg, dtype))
            else:
                slots.append((2, standin.fn if standin.arg is not None else
                              standin.checked_fn(), dtype))
    return slots


def _record_results(entry: Entry, trace: Trace, outs: list, computed: list[Storage | None],
                    stand_ins: dict[int, tuple[int, ...]],
                    pos: Callable[[tuple[str, int]], int]) -> list[tuple]:
    """:attr:`Entry.results` (sets ``entry.eager`` for a result no launch wrote)."""
    results: list[tuple] = []
    for o, c in zip(outs, computed):
        if isinstance(o, Array):
            ref = trace.refs.get(id(c)) if c is not None else None
            if id(o) in stand_ins:
                results.append((1, stand_ins[id(o)], None, None))
            elif ref is not None and ref[0] == "t":
                results.append((0, pos(ref), o.dtype, o.shape))
            elif c is not None and c.nbytes == 0:  # (no launch: a new buffer per call)
                results.append((4, None, o.dtype, o.shape))
            elif ref is None and c is o._storage and c not in trace.traced \
                    and (c is None or not trace.made_here(c)):
                results.append((2, o, None, None))  # a constant array, returned as is
            else:  # a result no recorded launch wrote (a sort's, a scan's)
                entry.eager = True
                results.append((2, None, None, None))
        elif isinstance(o, TracedScalar):
            results.append((3, o.fn, None, None))
        else:
            results.append((2, o, None, None))
    return results


def _choose_replay(entry: Entry, n_in: int) -> None:
    """``entry.single`` and ``result1`` (see :meth:`Entry.replay`), and ``entry.run``."""
    # the single-launch path: one small launch, its inputs the arguments in order, its
    # scalars the slots in order, its outputs new buffers
    entry.single = entry.result1 = None
    entry.plan1 = None
    if len(entry.steps) == 1 and not entry.eager:
        st, ins1, outs1, scal, small1 = entry.steps[0]
        temps = entry.temps
        if type(st) is not HostStep and small1 and ins1 is None and \
                scal == tuple(range(len(entry.slots))) and \
                outs1 == tuple(range(n_in, n_in + len(temps))) and temps and \
                _error_free(st.program):
            entry.single = (st, recipe_kind(st.program), temps,
                            temps[0] if len(temps) == 1 else 0)
            if entry.structure is None and entry.results[0][0] == 0:
                entry.result1 = entry.results[0][2:]
    prepared = entry.result1 is not None and len(entry.temps) == 1 and \
        all(kind != 2 for kind, _, _ in entry.slots)
    if entry.written or entry.aliases != tuple(range(n_in)):
        entry.run = entry.replay_guarded
    elif prepared:
        entry.run = _prepared_single(entry)
    elif entry.written is not None:  # (host steps: no graphs)
        entry.run = entry.replay
    elif _graphs.suits(entry, [st.program for st, *_ in entry.steps]):
        entry.run = _graphs.GraphReplay(entry, n_in)
    else:
        entry.run = entry.replay


def _error_free(program: Any) -> bool:
    """Whether ``program`` has no gather with an error flag (read after its launch)."""
    return not any(e.kind == "gather" for e in program.entries)

