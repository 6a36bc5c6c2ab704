"""Traced functions: ``@fl.fuse`` (VexCL's symbolic kernel generator, JAX's ``jit``).

A fused function is traced once per *signature*: per argument its shape,
dtype, strides and device (arrays), its kind (Python scalars are weak, numpy
scalars have a dtype) or its value (static arguments), and the keyword names
of the call.  Tracing calls the Python function on stand-ins: arrays over
placeholder buffers (new :class:`Storage` objects holding the arguments' own
device buffers, so the first call computes real results) and
:class:`TracedScalar` for scalars.  Its results are evaluated while a recorder
(the interface of :class:`fuseloop.run_plans.Recorder`) sees every kernel
:func:`fuseloop.evaluate.launch` is asked for, including those of arrays the
function evaluates itself (reductions run first, ``x.eval()``, contractions'
producers).  The record, kept per signature, is a list of
:mod:`fuseloop.run_plans` steps over slots: the arguments' buffers, the
temporaries the launches write first, the buffers the function reads from
elsewhere (constants, e.g. an array it closes over), and scalar slots
(arguments, host expressions of them, constants of the function's body).

A later call with the same signature computes the key, collects the
arguments' buffers and scalars, allocates outputs and replays the steps
through ``launching.plan_launch``/``enqueue`` (``plan_steps.launch_step``):
no Python function call, no expression building, no structure look-up.

Values are unknown while tracing: reading one (``bool(x > 0)``, ``float(x)``,
``x.get()``, a boolean mask, ``if dt > 0:`` on a scalar argument) raises
:class:`~fuseloop.errors.TracingError` naming the function, the operation and
the arguments the value depends on.  A function the recorder cannot replay
(it writes into a buffer it did not make, e.g. ``z = fl.zeros(n); z[1:] = x``)
runs as plain Python on every call instead (``Fused.eager_signatures``).
"""

from __future__ import annotations

import functools
import inspect
import math
import operator
import weakref
from collections.abc import Callable, Iterable
from typing import Any

import numpy as np

from . import caches as _caches
from . import evaluate as _ev
from . import flags as _flags
from . import fuse_graphs as _graphs
from . import plan_steps as _steps
from . import run_plans as _rp
from .array import Array, _weak_scalar, _weak_scalars
from .dtypes import scalar_to
from .errors import OutOfMemoryError, TracingError
from .expr.nodes import Leaf, Storage
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
from .runtime.devices import Device, _runtime, get_device
from .stats import cached_launches
from .tracing import KindChanged, Trace, TracedScalar, install, uninstall

_tally_cached_launch = cached_launches.__next__  # (see fuseloop.stats)
# threads recording a run plan (or a trace) and capturing show_code sources now
_recording, _capturing = _rp.recording_threads, _ev.capturing_threads
# signatures kept per fused function (all dropped when reached, as other caches do)
ENTRIES_MAX = 256
_fused: weakref.WeakSet[Fused] = weakref.WeakSet()


# {{{ the record of one signature


class _Entry:
    """What a call of one signature does: ``run(storages, values, args)``.

    ``steps``: per recorded launch ``(step, input positions, output positions,
    scalar slots, small)``, positions into the call's pool of buffers
    (the arguments', then new temporaries, then constants).  The index dtype, the
    device and the sizes of a step are fixed by the signature, so a step's launch
    plan (``step.plan``, made by ``plan_steps.launch_step`` on its first replay) is
    used while its recipe and kernel are still current, as ``run_plans`` checks.

    ``run`` is the signature's prepared replay: for the commonest record (one small
    launch into one new buffer, which is the result) a closure that does only what
    changes per call (:func:`_prepared_single`, with the one-output launch plan
    ``plan1``), falling back to :meth:`replay`, which ``run`` is otherwise.
    """

    __slots__ = ("consts", "device", "eager", "fixed_scalars", "plan1", "pool", "result1",
                 "results", "run", "single", "slots", "steps", "structure", "temps")

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
    temps: list[int]

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
            temps = [_allocate(palloc, n, device) for n in self.temps]
        pool = self.pool_of(storages, temps)
        # (the steps write the call's own buffers only: checked gathers' error flags are
        # read once, after the last launch, as in an evaluation; see fuseloop.flags)
        _flags.deferring(self._launch_steps, pool, storages, sc, device)
        return self._results(pool, values, args)

    def _launch_steps(self, pool: list[Storage], storages: list[Storage], sc: list[Any],
                      device: Device) -> None:
        for step, st, os_, scalars, small in self.bound(pool, storages, sc):
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
                results.append(_at(args, a))
            elif kind == 2:
                results.append(a)
            elif kind == 3:
                results.append(a(values))
            else:
                results.append(Array._concrete(_ev.allocate(0, device), dtype, shape))
        return results[0] if self.structure is None else self.structure(results)


def _prepared_single(entry: _Entry) -> Callable[[list[Storage], list[Any], tuple], Any]:
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
        if sc is None:  # Python int or float arguments, constants (see _Entry.scalars)
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


def _shaped(structure: Any, results: list) -> Any:
    if structure is None:
        return results[0]
    return structure(results)


# }}}


class Fused:
    """A function traced into fused kernels per signature: see :func:`fuse`."""

    def __init__(self, fn: Callable[..., Any], static_argnums: Iterable[int] = (),
                 static_argnames: Iterable[str] = ()) -> None:
        if not callable(fn):
            raise TypeError(f"fl.fuse takes a function, got {type(fn).__name__}")
        functools.update_wrapper(self, fn)
        self.fn = fn
        self.__name__ = getattr(fn, "__name__", "fused")
        try:
            params = list(inspect.signature(fn).parameters.values())
        except (TypeError, ValueError):
            params = []
        positional = [p.name for p in params
                      if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
        self._positional = positional
        self._varargs = next((p.name for p in params if p.kind == p.VAR_POSITIONAL), None)
        nums = {int(n) for n in ([static_argnums] if isinstance(static_argnums, int)
                                 else static_argnums)}
        names = {static_argnames} if isinstance(static_argnames, str) else set(static_argnames)
        # a static argument is static by position and by name alike
        names |= {positional[n] for n in nums if 0 <= n < len(positional)}
        nums |= {positional.index(n) for n in names if n in positional}
        self.static_argnums = frozenset(nums)
        self.static_argnames = frozenset(names)
        self._has_static = bool(nums or names)
        self._static_masks: dict[tuple, tuple[bool, ...]] = {}
        self._entries: dict[tuple, _Entry] = {}
        self.traces = 0  # how often the function was traced (tests, curiosity)
        self.eager_signatures = 0  # signatures that run the Python function on each call
        _fused.add(self)

    def __repr__(self) -> str:
        return f"<fuseloop fused function {self.__name__}>"

    def __get__(self, obj: Any, objtype: Any = None) -> Any:
        # (a fused method: bound like a function; self is then a static argument
        # only if named so)
        return self if obj is None else functools.partial(self, obj)

    def _static_mask(self, n: int, names: tuple) -> tuple[bool, ...]:
        mask = self._static_masks.get((n, names))
        if mask is None:
            npos = n - len(names)
            mask = tuple(k in self.static_argnums if k < npos else names[k - npos] in
                         self.static_argnames for k in range(n))
            self._static_masks[(n, names)] = mask
        return mask

    def _arg_name(self, k: int, npos: int, names: tuple) -> str:
        if k >= npos:
            return repr(names[k - npos])
        if k < len(self._positional):
            return repr(self._positional[k])
        return f"{self._varargs or 'args'}[{k - len(self._positional)}]"

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        if _recording[0] or _capturing[0]:
            if _rp.recorder() is not None or _ev.captured_sources() is not None:
                # inside another trace (its recorder must see these launches: the
                # function is inlined into it) or a show_code capture: plain Python
                return self.fn(*args, **kwargs)
        if kwargs:
            names = tuple(kwargs)
            args = (*args, *kwargs.values())
        else:
            names = ()
        key: list[Any] = [names]
        storages: list[Storage] = []
        values: list[Any] = []
        if self._has_static:
            self._static_key(args, names, key, storages, values)
        else:
            for a in args:
                t = type(a)
                if t is Array:
                    n = a._node
                    if type(n) is Leaf and n.strides is None and n.offset == 0:
                        s = n.storage
                        key += (n.shape, n.dtype, s.device)
                    else:
                        s = _other_array(a, key)
                    storages.append(s)
                elif t is float or t is int or t is bool:
                    key.append(t)
                    values.append(a)
                else:
                    self._other_arg(a, args, names, key, storages, values)
        if not storages:
            key.append(get_device())
        try:
            entry = self._entries.get(tuple(key))
        except TypeError:  # an unhashable static argument
            mask = self._static_mask(len(args), names)
            bad = [a for a, m in zip(args, mask) if m and not _hashable(a)]
            raise TracingError(
                f"fl.fuse: static arguments of {self.__name__}() must be hashable, got "
                f"{type(bad[0]).__name__ if bad else 'an unhashable value'}") from None
        if entry is None:
            return self._trace(tuple(key), args, names)
        if entry.eager:
            return self._call_eager(args, names)
        try:
            return entry.run(storages, values, args)
        except KindChanged:  # (raised before anything is launched)
            return self._call_eager(args, names)

    def _static_key(self, args: tuple, names: tuple, key: list[Any], storages: list[Storage],
                    values: list[Any]) -> None:
        """:meth:`__call__`'s key, storages and scalars for a function with static
        arguments: their type and value are part of the key."""
        mask = self._static_mask(len(args), names)
        for a, static in zip(args, mask):
            if static:
                key += (type(a), a)
            else:
                self._other_arg(a, args, names, key, storages, values)

    def _other_arg(self, a: Any, args: tuple, names: tuple, key: list[Any],
                   storages: list[Storage], values: list[Any]) -> None:
        """One argument's part of the key, its buffer or scalar: an array (see
        :func:`_other_array`), a Python or numpy scalar (its type or dtype is in the
        key), a tuple or list of arguments (its type and length are; its items are taken
        in order), else a TracingError."""
        t = type(a)
        if t is Array or isinstance(a, Array):  # (a small view: host_eager.HostArray)
            storages.append(_other_array(a, key))
        elif t is float or t is int or t is bool:
            key.append(t)
            values.append(a)
        elif t is tuple or t is list:
            key += (t, len(a))
            for item in a:
                self._other_arg(item, args, names, key, storages, values)
        elif isinstance(a, np.generic) and a.dtype.kind in "biuf":
            key.append(a.dtype)
            values.append(a)
        else:
            k = next((i for i, b in enumerate(args) if b is a), None)
            self._refuse(a, k, len(args) - len(names), names)

    def _refuse(self, a: Any, k: int | None, npos: int, names: tuple) -> None:
        what = type(a).__name__
        hint = ("copy it to the device with fl.asarray first" if isinstance(a, np.ndarray)
                else "mark it static (static_argnums=/static_argnames=) if it is a "
                     "hashable setting")
        which = ("an item of a tuple or list argument" if k is None else
                 f"argument {self._arg_name(k, npos, names)}")
        raise TracingError(
            f"fl.fuse: {which} of {self.__name__}() is a {what}; a fused function takes "
            f"fuseloop arrays, bool, int, float or numpy scalars, and tuples or lists of "
            f"them; {hint}")

    def _call_eager(self, args: tuple, names: tuple) -> Any:
        npos = len(args) - len(names)
        result = self.fn(*args[:npos], **dict(zip(names, args[npos:])))
        outs = result if isinstance(result, tuple | list) else (result,)
        from .assignment import compute

        compute(*[o for o in outs if isinstance(o, Array)])
        return result

    # {{{ tracing a signature

    def _trace(self, key: tuple, args: tuple, names: tuple) -> Any:
        trace = Trace(self.__name__)
        npos = len(args) - len(names)
        mask = self._static_mask(len(args), names)
        call_args = list(args)
        # id(stand-in array) -> its place in the arguments (a path: position, then the
        # item of each tuple or list it is in), for a result that is an argument
        stand_ins: dict[int, tuple[int, ...]] = {}
        values: list[Any] = []  # the scalars, in the order of the key's
        devices: list[Device] = []

        def stand_in(a: Any, name: str, path: tuple[int, ...]) -> Any:
            t = type(a)
            if t is tuple or t is list:
                # ('state'[0] shown as 'state[0]')
                return t(stand_in(v, f"{name[:-1]}[{i}]'" if name.endswith("'") else
                                  f"{name}[{i}]", (*path, i)) for i, v in enumerate(a))
            if t is not Array and not isinstance(a, Array):
                values.append(a)
                return TracedScalar(trace, a, operator.itemgetter(len(values) - 1), name,
                                    len(values) - 1)
            n = a._node
            assert isinstance(n, Leaf)  # (__call__ evaluated lazy arguments)
            ph = trace.placeholder(n.storage, name, len(trace.placeholder_list))
            if n.strides is None and n.offset == 0:
                stand = Array._concrete(ph, n.dtype, n.shape)
            else:
                stand = Array._lazy(Leaf(ph, n.dtype, n.shape, n.strides, n.offset), a.device)
            stand_ins[id(stand)] = path
            trace.keep.append(stand)
            devices.append(a.device)
            return stand

        for k, a in enumerate(args):
            if not mask[k]:
                call_args[k] = stand_in(a, self._arg_name(k, npos, names), (k,))
        n_arrays = len(trace.placeholder_list)
        device = devices[0] if devices else None
        device = device or get_device()
        saved = install(trace, device)
        try:
            result = self.fn(*call_args[:npos], **dict(zip(names, call_args[npos:])))
            structure, outs = _flatten(result, self.__name__)
            computed = _evaluate_outputs(outs, device)
        finally:
            uninstall(trace, saved)
        self.traces += 1
        entry = _make_entry(trace, device, structure, outs, computed, stand_ins, n_arrays)
        trace.born.clear()  # (the buffers allocated while tracing: no longer needed)
        if len(self._entries) >= ENTRIES_MAX:
            self._entries.clear()
        self._entries[key] = entry
        if entry.eager:
            self.eager_signatures += 1
        # the first call's results (computed while tracing: the placeholders hold the
        # arguments' buffers)
        results = []
        for o, c in zip(outs, computed):
            if isinstance(o, Array):
                if id(o) in stand_ins:
                    o = _at(args, stand_ins[id(o)])
                elif o._storage is None and c is not None:
                    o._become(c)
            elif isinstance(o, TracedScalar):
                o = o.fn(values)
            results.append(o)
        return _shaped(structure, results)

    # }}}

    @property
    def graph_calls(self) -> int:
        """Calls of the kept signatures replayed as one graph (CUDA: see
        :mod:`fuseloop.fuse_graphs`)."""
        return sum(getattr(e.run, "graph_calls", 0) for e in self._entries.values())

    def clear(self) -> None:
        """Forget every traced signature (the next call of each traces again)."""
        self._entries.clear()


def _other_array(a: Array, key: list[Any]) -> Storage:
    """An array argument that is not a whole buffer: a lazy one is computed first (on
    its own); a strided view's key holds its strides, offset and buffer size (which
    may change the index dtype)."""
    n = a._node
    if type(n) is not Leaf:
        n = a.eval()._node
    assert isinstance(n, Leaf)
    s = n.storage
    if n.strides is None and n.offset == 0:
        key += (n.shape, n.dtype, s.device)
    else:
        key += (n.leaf_token(), s.nbytes, n.dtype, s.device)
    return s


def _at(args: tuple, path: tuple[int, ...]) -> Any:
    """The argument at ``path`` (a position, then items of tuples or lists)."""
    a = args[path[0]]
    for i in path[1:]:
        a = a[i]
    return a


def _hashable(a: Any) -> bool:
    try:
        hash(a)
    except TypeError:
        return False
    return True


_PLAIN_RESULTS = (bool, int, float, complex, str, bytes, type(None), np.generic)


def _flatten(result: Any, name: str) -> tuple[Any, list]:
    """(how to rebuild, the flat results): a single result, a tuple or a list of arrays,
    traced scalars or plain values (returned as they are on every call)."""
    structure: Any = None
    if type(result) is tuple or type(result) is list:
        structure, outs = type(result), list(result)
    else:
        outs = [result]
    for o in outs:
        if not isinstance(o, (Array, TracedScalar, *_PLAIN_RESULTS)):
            raise TracingError(
                f"fl.fuse: {name}() returned a {type(o).__name__}"
                f"{' in its ' + type(result).__name__ if structure else ''}; a fused "
                "function returns arrays, scalars, or a tuple or list of them")
    return structure, outs


def _evaluate_outputs(outs: list, device: Device) -> list[Storage | None]:
    """Compute the lazy array results (one kernel per shape, as ``fl.compute`` does);
    the buffer of each array result (None for others)."""
    groups: dict[tuple, list[int]] = {}
    computed: list[Storage | None] = [None] * len(outs)
    for k, o in enumerate(outs):
        if isinstance(o, Array):
            if o._storage is not None and o.is_contiguous:
                computed[k] = o._storage
            else:
                groups.setdefault((o.device.index, o.shape), []).append(k)
    for (_, shape), members in groups.items():
        first = outs[members[0]]
        # (also a result of size 0, which launches nothing: a new empty buffer per call)
        got = _ev.run([outs[k]._node for k in members], shape, first.device)
        for k, s in zip(members, got):
            computed[k] = s
    return computed


def _make_entry(trace: Trace, device: Device, structure: Any, outs: list,
                computed: list[Storage | None], stand_ins: dict[int, tuple[int, ...]],
                n_arrays: int) -> _Entry:
    """The record of ``trace`` as an :class:`_Entry` (slots as pool positions)."""
    entry = _Entry()
    entry.device = device
    entry.structure = structure
    entry.eager = trace.failed is not None
    n_in, n_t = n_arrays, len(trace.temps)
    base = {"i": 0, "t": n_in, "c": n_in + n_t}

    def pos(ref: tuple[str, int]) -> int:
        return base[ref[0]] + ref[1]

    entry.temps = [s.nbytes for s in trace.temps]
    entry.consts = list(trace.consts)
    entry.pool = _runtime(device).pool
    entry.steps = _record_steps(trace, entry.temps, n_in, pos)
    entry.slots = slots = _record_slots(trace)
    entry.fixed_scalars = [a for _, a, _ in slots] if all(k == 0 for k, _, _ in slots) else None
    entry.results = _record_results(entry, trace, outs, computed, stand_ins, pos)
    _choose_replay(entry, n_in)
    return entry


def _record_steps(trace: Trace, temps: list[int], n_in: int,
                  pos: Callable[[tuple[str, int]], int]) -> list[tuple]:
    """:attr:`_Entry.steps` of ``trace``'s launches."""
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
    """:attr:`_Entry.slots` of ``trace``'s scalar slots: (0, constant, None), (1, argument
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


def _record_results(entry: _Entry, trace: Trace, outs: list, computed: list[Storage | None],
                    stand_ins: dict[int, tuple[int, ...]],
                    pos: Callable[[tuple[str, int]], int]) -> list[tuple]:
    """:attr:`_Entry.results` (sets ``entry.eager`` for a result no launch wrote)."""
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


def _choose_replay(entry: _Entry, n_in: int) -> None:
    """``entry.single`` and ``result1`` (see :meth:`_Entry.replay`), and ``entry.run``."""
    # the single-launch path: one small launch, its inputs the arguments in order, its
    # scalars the slots in order, its outputs new buffers
    entry.single = entry.result1 = None
    entry.plan1 = None
    if len(entry.steps) == 1 and not entry.eager:
        st, ins1, outs1, scal, small1 = entry.steps[0]
        temps = entry.temps
        if small1 and ins1 is None and scal == tuple(range(len(entry.slots))) and \
                outs1 == tuple(range(n_in, n_in + len(temps))) and temps and \
                _error_free(st.program):
            entry.single = (st, recipe_kind(st.program), temps,
                            temps[0] if len(temps) == 1 else 0)
            if entry.structure is None and entry.results[0][0] == 0:
                entry.result1 = entry.results[0][2:]
    prepared = entry.result1 is not None and len(entry.temps) == 1 and \
        all(kind != 2 for kind, _, _ in entry.slots)
    if prepared:
        entry.run = _prepared_single(entry)
    elif _graphs.suits(entry, [st.program for st, *_ in entry.steps]):
        entry.run = _graphs.GraphReplay(entry, n_in)
    else:
        entry.run = entry.replay


def _error_free(program: Any) -> bool:
    """Whether ``program`` has no gather with an error flag (read after its launch)."""
    return not any(e.kind == "gather" for e in program.entries)


def fuse(fn: Callable[..., Any] | None = None, *, static_argnums: Iterable[int] | int = (),
         static_argnames: Iterable[str] | str = ()) -> Any:
    """Trace a function of arrays and scalars into fused kernels, once per signature.

    ``@fl.fuse`` or ``fl.fuse(f, static_argnums=..., static_argnames=...)``.  The first
    call with a new signature (argument shapes, dtypes, strides and devices; Python
    scalar types, numpy scalar dtypes; static argument values; keyword names) runs
    ``fn`` on stand-ins and records the kernels its results need (one, for an
    elementwise function, also with several results); later calls enqueue the
    recorded kernels with the new arguments.  Python scalars are kernel arguments
    (a new value does not trace again); static arguments are passed to ``fn`` as
    they are and are part of the signature.  Reading a traced value (``if x > 0``,
    ``float(x)``, ``x.get()``) raises :class:`~fuseloop.errors.TracingError`.
    """
    if fn is None:
        return lambda f: Fused(f, static_argnums, static_argnames)  # type: ignore[arg-type]
    return Fused(fn, static_argnums, static_argnames)  # type: ignore[arg-type]


def _clear() -> None:
    for f in list(_fused):
        f.clear()


_caches.register("fuse.signatures", _clear, lambda: sum(len(f._entries) for f in _fused),
                 why=f"per fused function, up to {ENTRIES_MAX} signatures")
