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
the arguments the value depends on.

Writes are recorded (see :class:`fuseloop.tracing.Trace`): into arrays the function
makes (a fill or an upload is made again per call by a host step of the record where
the array is written or returned), into temporaries, and into arguments (the record
is then replayed by :meth:`fuseloop.fuse_entry.Entry.replay_guarded`: the caller's
lazy readers first, a record of its own per way the arguments share buffers).  A
function the recorder cannot replay (it writes into an array it closes over, or reads
a buffer written by work it does not see: a sort) runs as plain Python on every call
instead (``Fused.eager_signatures``).  A finished record is made minimal once
(:mod:`fuseloop.fuse_prune`): fills fold into the kernels reading them, and writes no
later step or result reads are dropped.
"""

from __future__ import annotations

import functools
import inspect
import operator
import weakref
from collections.abc import Callable, Iterable
from typing import Any

import numpy as np

from . import caches as _caches
from . import evaluate as _ev
from . import run_plans as _rp
from .array import Array
from .errors import TracingError
from .expr.nodes import Leaf, Storage
from .fuse_entry import Entry, arg_at, make_entry
from .runtime.devices import Device, get_device
from .tracing import Aliased, Trace, TracedScalar, Unreplayable, install, uninstall

# threads recording a run plan (or a trace) and capturing show_code sources now
_recording, _capturing = _rp.recording_threads, _ev.capturing_threads
# signatures kept per fused function (all dropped when reached, as other caches do)
ENTRIES_MAX = 256
_fused: weakref.WeakSet[Fused] = weakref.WeakSet()


def _shaped(structure: Any, results: list) -> Any:
    if structure is None:
        return results[0]
    return structure(results)




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
        self._entries: dict[tuple, Entry] = {}
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
        except Aliased as e:  # (a record per way the arguments share buffers)
            return self._call_aliased((*key, e.aliases), storages, values, args, names)
        except Unreplayable:  # (raised before anything is launched)
            return self._call_eager(args, names)

    def _call_aliased(self, key: tuple, storages: list[Storage], values: list[Any],
                      args: tuple, names: tuple) -> Any:
        """A call of a function writing into arguments that share buffers otherwise than
        when it was traced: the record of this way of sharing them (traced now if new)."""
        entry = self._entries.get(key)
        if entry is None:
            return self._trace(key, args, names)
        if entry.eager:
            return self._call_eager(args, names)
        try:
            return entry.run(storages, values, args)
        except Unreplayable:
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
            else:  # (a concrete view, as the argument is: writes into it reach the buffer)
                stand = object.__new__(Array)
                stand._storage, stand.device = ph, a.device
                stand._node = Leaf(ph, n.dtype, n.shape, n.strides, n.offset)
                stand.dtype, stand._shape = n.dtype, n.shape
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
        _readers_first(args)
        saved = install(trace, device)
        try:
            result = self.fn(*call_args[:npos], **dict(zip(names, call_args[npos:])))
            structure, outs = _flatten(result, self.__name__)
            computed = _evaluate_outputs(outs, device)
        finally:
            uninstall(trace, saved)
        trace.finish(computed)
        self.traces += 1
        entry = make_entry(trace, device, structure, outs, computed, stand_ins, n_arrays)
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
                    o = arg_at(args, stand_ins[id(o)])
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


def _readers_first(args: Any) -> None:
    """Compute the lazy arrays reading the array arguments' buffers (as a write into
    them would first: the function may write into one, and a replay does what the
    trace recorded)."""
    pending = []
    for a in args:
        if isinstance(a, Array) and type(a._node) is Leaf:
            pending += [r for r in a._node.storage.live_readers() if r._storage is None]
        elif type(a) is tuple or type(a) is list:
            _readers_first(a)
    if pending:
        from .assignment import compute

        compute(*pending)


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
