"""Tracing for ``fl.fuse``: the stand-ins a function is called on, the checks
before a traced value is read, and the recorder of the kernels it needs.

A :class:`Trace` is one trace in progress.  Array arguments are stood in for by
arrays over *placeholders* (new :class:`Storage` objects holding the arguments'
own buffers: the first call computes real results, and a placeholder tells the
recorder which argument a buffer is); scalar arguments by :class:`TracedScalar`.
While installed (:func:`install`), the trace is this thread's run-plan recorder
(the interface of :class:`fuseloop.run_plans.Recorder`: ``launch``), and its
``check`` is in :data:`fuseloop.trace_hooks.trace_checks`.
"""

from __future__ import annotations

import operator
import os
import sys
import threading
from collections.abc import Callable, Iterable
from typing import Any

import numpy as np

from . import evaluate as _ev
from . import run_plans as _rp
from .array import Array
from .backends import backend_for
from .dtypes import as_dtype, scalar_to
from .errors import TracingError
from .expr.nodes import Leaf, Node, Scalar, Storage
from .runtime.devices import Device
from .runtime.transfer import write
from .trace_hooks import Contents, ScalarStandIn, constant_buffers, trace_checks

_PACKAGE_DIR = os.path.dirname(os.path.abspath(__file__))
SCALAR_TYPES = (bool, int, float)
# the Array methods that read a value through Array._scalar or Array.get, as the
# operation a TracingError names
_ASKED_BY = {"__float__": "float()", "__int__": "int()", "__index__": "an index",
             "item": ".item()", "__repr__": "repr() or print()", "__str__": "str() or print()",
             "__array__": "np.asarray()", "tolist": ".tolist()", "__reduce__": "pickling"}


# {{{ traced scalars


def _in_package(filename: str) -> bool:
    folder = os.path.dirname(os.path.abspath(filename))
    return folder == _PACKAGE_DIR or folder.startswith(_PACKAGE_DIR + os.sep)


class Unreplayable(Exception):
    """A call that its signature's record cannot replay (``fl.fuse`` then runs it as
    plain Python); raised before anything is launched."""


class Aliased(Unreplayable):
    """Array arguments share buffers otherwise than when traced, in a function that
    writes into arguments (``aliases``: per argument the first sharing its buffer)."""

    def __init__(self, aliases: tuple[int, ...]) -> None:
        super().__init__(aliases)
        self.aliases = aliases


class KindChanged(Unreplayable):
    """A host expression of scalar arguments has another type than when it was traced."""


def _kind_of(value: Any) -> Any:
    """A scalar's kind for numpy's promotion: its Python type (weak) or its dtype."""
    t = type(value)
    if t in SCALAR_TYPES:
        return t
    if isinstance(value, np.generic) and value.dtype.kind in "biuf":
        return as_dtype(value.dtype)
    raise TracingError(f"a traced scalar expression gave {value!r} of type {t.__name__}, "
                       "which fuseloop kernels cannot take (bool, int, float and numpy "
                       "scalars of those kinds can)")


def _constant_fn(value: Any) -> Callable[[list], Any]:
    return lambda values: value


class TracedScalar(ScalarStandIn):
    """The stand-in for a scalar argument (or a host expression of some) while
    ``fl.fuse`` traces: in an array expression it becomes a kernel argument of the
    loop's dtype, as the Python or numpy scalar would (NEP 50: Python scalars are
    weak); arithmetic with other scalars stays symbolic (computed on the host on
    each call, as Python would).  Its value is unknown to the traced code."""

    __slots__ = ("arg", "fn", "kind", "name", "nodes", "trace", "value")

    def __init__(self, trace: Trace, value: Any, fn: Callable[[list], Any], name: str,
                 arg: int | None = None) -> None:
        self.arg = arg  # the position among the call's scalar arguments; None: derived
        self.trace = trace
        self.value = value  # (the first call's: the trace computes its results too)
        self.fn = fn  # the value on a call, from the call's scalar arguments
        self.name = name
        self.kind = _kind_of(value)
        self.nodes: dict[np.dtype, Scalar] = {}

    def node_for(self, dtype: np.dtype) -> Node:
        node = self.nodes.get(dtype)
        if node is None:
            node = self.nodes[dtype] = Scalar(scalar_to(self.value, dtype))
            self.trace.scalar_node(node, self, dtype)
        return node

    def _derive(self, op: Callable[..., Any], operands: Iterable[Any]) -> Any:
        fns, values, names = [], [], []
        for o in operands:
            if isinstance(o, TracedScalar):
                fns.append(o.fn)
                values.append(o.value)
                names.append(o.name)
            elif type(o) in SCALAR_TYPES or isinstance(o, np.generic):
                fns.append(_constant_fn(o))
                values.append(o)
            else:
                return NotImplemented
        value = op(*values)
        if len(fns) == 1:
            f0 = fns[0]

            def fn(v: list) -> Any:
                return op(f0(v))
        elif len(fns) == 2:
            f0, f1 = fns

            def fn(v: list) -> Any:
                return op(f0(v), f1(v))
        else:
            def fn(v: list) -> Any:
                return op(*[f(v) for f in fns])
        return TracedScalar(self.trace, value, fn, " and ".join(dict.fromkeys(names)))

    def checked_fn(self) -> Callable[[list], Any]:
        """``fn`` for a kernel argument: the kernel was made for the type the value had
        when traced (``2 ** n`` is an int for n >= 0, a float below), so a call whose
        value has another type raises :class:`KindChanged` instead of converting it."""
        fn, expected = self.fn, type(self.value)

        def checked(values: list) -> Any:
            v = fn(values)
            if type(v) is not expected:
                raise KindChanged
            return v
        return checked

    def _value_needed(self, what: str) -> TracingError:
        return self.trace.error(what, f"traced scalar {self.name}")

    def __bool__(self) -> bool:
        raise self._value_needed("bool()")

    def __float__(self) -> float:
        raise self._value_needed("float()")

    def __int__(self) -> int:
        raise self._value_needed("int()")

    def __index__(self) -> int:
        raise self._value_needed("an index")

    def __array_ufunc__(self, ufunc: Any, method: str, *inputs: Any, **kwargs: Any) -> Any:
        if method != "__call__" or kwargs or ufunc.nout != 1:
            return NotImplemented
        return self._derive(ufunc, inputs)

    def __array__(self, *args: Any, **kwargs: Any) -> np.ndarray:
        raise self._value_needed("np.asarray()")

    def __repr__(self) -> str:
        kind = self.kind.__name__ if isinstance(self.kind, type) else str(self.kind)
        return f"<traced scalar {self.name} ({kind})>"


def _binary(op: Callable[[Any, Any], Any], reflected: bool = False) -> Any:
    def method(self: TracedScalar, other: Any) -> Any:
        if isinstance(other, Array):
            return NotImplemented  # (the array's operator takes the stand-in)
        return self._derive(op, (other, self) if reflected else (self, other))
    return method


for _name in ("add", "sub", "mul", "truediv", "floordiv", "mod", "pow", "and", "or", "xor",
              "lshift", "rshift"):
    _op = getattr(operator, f"{_name}_" if _name in ("and", "or") else _name)
    setattr(TracedScalar, f"__{_name}__", _binary(_op))
    setattr(TracedScalar, f"__r{_name}__", _binary(_op, reflected=True))
for _name in ("lt", "le", "gt", "ge", "eq", "ne"):
    setattr(TracedScalar, f"__{_name}__", _binary(getattr(operator, _name)))
for _name in ("neg", "pos", "abs", "invert"):
    setattr(TracedScalar, f"__{_name}__",
            (lambda op: lambda self: self._derive(op, (self,)))(getattr(operator, _name)))
TracedScalar.__hash__ = None  # type: ignore[assignment]


# }}}


# {{{ tracing: the stand-ins, the value checks and the recorder


class Trace:
    """One trace in progress: its stand-ins and the record of its launches.

    The record maps buffers to pool slots: ``("i", k)`` the k-th array argument,
    ``("t", k)`` the k-th temporary (a buffer first seen as a launch's output),
    ``("c", k)`` the k-th constant (read, but neither an argument nor written);
    launches' scalars to scalar slots (see :meth:`_slot`).  A buffer the function made
    with known contents (``fl.zeros``, ``fl.full``, ``fl.asarray`` of host data,
    ``fl.empty``: :class:`~fuseloop.trace_hooks.Contents`) is ``("m", k)`` until the
    trace ends (:meth:`finish`): a temporary whose contents a :class:`HostStep` makes
    again before its first use where the function writes into it or returns it, else a
    constant.
    """

    def __init__(self, name: str) -> None:
        self.name = name  # the function's
        self.placeholders: dict[int, str] = {}  # id(placeholder) -> argument name
        self.placeholder_list: list[Storage] = []
        self.traced: set[Storage] = set()  # placeholders and temporaries
        self.refs: dict[int, tuple[str, int]] = {}
        self.temps: list[Storage] = []
        self.consts: list[Storage] = []
        self.scalar_nodes: dict[int, tuple[TracedScalar, np.dtype]] = {}
        self.scalar_values: dict[int, tuple[TracedScalar, np.dtype]] = {}
        self.slots: list[tuple] = []  # (stand-in, dtype) or ("const", value)
        self.slot_of: dict[int, int] = {}
        self.steps: list[Any] = []  # (run_plans._Step, HostStep)
        self.failed: str | None = None
        self.keep: list[Any] = []  # (ids of these are keys above: kept alive)
        # buffers allocated on this thread while the trace is installed (see _watch), by
        # id, kept alive: one that a launch reads before any recorded launch wrote it was
        # made by work the record does not hold (a sort, a scan), unless it was filled
        # or uploaded (constant)
        self.thread = threading.get_ident()
        self.born: dict[int, Any] = {}
        # id(buffer) -> (buffer, its Contents) of the new buffers with known contents
        self.contents: dict[int, tuple[Any, Contents]] = {}
        # per ("m", k) ref: [storage, contents, the step of its first use, written]
        self.made: list[list[Any]] = []
        # id(storage) -> how a call takes its buffer (see supply)
        self.supplied: dict[int, Callable[[Device], Storage]] = {}

    def made_here(self, storage: Storage) -> bool:
        """Whether ``storage``'s buffer was allocated while this trace ran (and not
        declared constant: :meth:`constant`)."""
        return id(storage.buffer) in self.born

    def constant(self, buffer: Any, contents: Contents | None = None) -> None:
        """``buffer``'s contents are constants of the function (a fill, an upload), made
        as ``contents`` says (None: unknown, the function may not write into it)."""
        if threading.get_ident() == self.thread:
            self.born.pop(id(buffer), None)
            if contents is not None:
                self.contents[id(buffer)] = (buffer, contents)

    # stand-ins

    def placeholder(self, storage: Storage, name: str, k: int) -> Storage:
        """The stand-in of the k-th array argument's buffer: one per buffer (arguments
        sharing one share it, so that writes and reads of them are ordered as eagerly)."""
        ph = next((p for p in self.placeholder_list if p.buffer is storage.buffer), None)
        if ph is not None:
            self.placeholder_list.append(ph)
            return ph
        ph = Storage(storage.buffer, storage.nbytes, storage.device, storage.constant)
        self.placeholders[id(ph)] = name
        self.placeholder_list.append(ph)
        self.refs[id(ph)] = ("i", k)
        self.traced.add(ph)
        self.keep.append(ph)
        return ph

    def scalar_node(self, node: Scalar, standin: TracedScalar, dtype: np.dtype) -> None:
        self.scalar_nodes[id(node)] = self.scalar_values[id(node.value)] = (standin, dtype)
        self.keep.append(node)

    # the check before a value is read (fuseloop.trace_hooks.trace_checks)

    def check(self, a: Any, what: str) -> None:
        node = a._node
        if what == "assignment":
            if type(node) is not Leaf or _rp.recorder() is not self:
                return  # (a lazy target is computed into a temporary first)
            s = node.storage
            ref = self.refs.get(id(s))
            if (ref is None and id(s.buffer) not in self.contents) or \
                    (ref is not None and ref[0] == "c"):
                # a buffer neither an argument nor made by the function (an array it
                # closes over, a sort's result): its contents before the write are not
                # replayed
                self.failed = ("it writes into an array that is neither an argument nor "
                               "made by it (fl.zeros, fl.empty, ...) or computed by a kernel")
            return
        if self.traced.isdisjoint(node.storages):
            return  # (not computed from the arguments: a constant, its value is known)
        if what in ("a Python scalar", ".get()"):  # (which conversion asked)
            caller = sys._getframe(3).f_code.co_name
            what = _ASKED_BY.get(caller, what)
        args = sorted({self.placeholders[id(s)] for s in node.storages
                       if id(s) in self.placeholders})
        source = (f"computed from argument{'s' if len(args) > 1 else ''} {', '.join(args)}"
                  if args else "computed from the arguments")
        raise self.error(what, f"a traced array (shape {a.shape}, {a.dtype}, {source})")

    def error(self, what: str, value: str, advice: str | None = None) -> TracingError:
        name = self.name
        frame = sys._getframe(1)
        while frame is not None and _in_package(frame.f_code.co_filename):
            frame = frame.f_back  # type: ignore[assignment]
        where = f" at {frame.f_code.co_filename}:{frame.f_lineno}" if frame is not None else ""
        if advice is None:
            advice = ("values are unknown while fl.fuse traces: make the argument static "
                      "(fl.fuse(..., static_argnums=..., static_argnames=...)), choose "
                      "elementwise with fl.where(cond, a, b), or call the function "
                      "without fl.fuse")
        return TracingError(f"fl.fuse: {name}(){where} needs the value of {value} for "
                            f"{what}; {advice}")

    # the recorder (evaluate.launch hands it each launch while installed)

    def launch(self, program: Any, bindings: Any, outs: list[Storage], device: Device) -> None:
        _ev.launch_now(program, bindings, outs, device)
        self.traced.update(outs)  # (computed from the arguments, or may be)
        if self.failed is None:
            self._note(program, bindings, outs)

    def _note(self, program: Any, bindings: Any, outs: list[Storage]) -> None:
        refs = self._refs(bindings.storages, outs)
        if refs is None:
            return
        scalar_refs = []
        nodes = bindings.scalar_nodes
        for k, v in enumerate(bindings.scalars):
            if nodes is not None:
                key, hit = id(nodes[k]), self.scalar_nodes.get(id(nodes[k]))
            else:  # by value object (see run_plans.Recorder)
                key, hit = id(v), self.scalar_values.get(id(v))
                if hit is not None and hit[1].kind == "b":
                    # (numpy's booleans are two shared objects: a constant could be one)
                    self.failed = "a boolean scalar argument cannot be told from a constant"
                    return
            scalar_refs.append(self._slot(key, hit, v))
        self.steps.append(_rp._Step(program, list(bindings.params), bindings.out_shape,
                                    refs[0], refs[1], tuple(scalar_refs)))

    def host_step(self, action: Callable[[list[Storage], list[Storage]], Any],
                  ins: list[Storage], outs: list[Storage]) -> None:
        """Run ``action(ins, outs)`` (host code on device buffers: a hand-written kernel's
        launch, a read of its error flag) and record it as a :class:`HostStep`."""
        action(ins, outs)
        self.traced.update(outs)
        if self.failed is None:
            refs = self._refs(ins, outs)
            if refs is not None:
                self.steps.append(HostStep(action, *refs))

    def supply(self, storage: Storage, take: Callable[[Device], Storage]) -> None:
        """``storage`` is a temporary that each call takes from ``take(device)`` (with
        the contents it has now: a zeroed gate kept by the scatter), not a new buffer
        made again (:attr:`supplied`, by id)."""
        self.contents.pop(id(storage.buffer), None)
        self.supplied[id(storage)] = take
        self.keep.append(storage)
        if id(storage) not in self.refs:  # (a temporary even where first read: a gate)
            self.refs[id(storage)] = ("t", len(self.temps))
            self.temps.append(storage)

    def _refs(self, ins: Iterable[Storage], outs: list[Storage]
              ) -> tuple[tuple[tuple[str, int], ...], tuple[tuple[str, int], ...]] | None:
        """A step's refs to the buffers it reads and writes; None where the trace
        cannot be replayed (``failed`` says why)."""
        refs = self.refs
        for s in outs:
            ref = refs.get(id(s)) or self._made_ref(s)
            if ref is None:  # first seen as an output: a temporary of the call
                refs[id(s)] = ("t", len(self.temps))
                self.temps.append(s)
            elif ref[0] == "m":
                self.made[ref[1]][3] = True
            elif ref[0] == "c":
                self.failed = "it writes into an array it neither made nor was passed"
                return None
        storage_refs = []
        for s in ins:
            ref = refs.get(id(s)) or self._made_ref(s)
            if ref is None:
                if self.made_here(s):
                    # (a replay would read this call's contents again: stale results)
                    self.failed = ("it reads an array made by work the record does not "
                                   "hold (a sort, a scan, an FFT)")
                    return None
                ref = refs[id(s)] = ("c", len(self.consts))
                self.consts.append(s)
            storage_refs.append(ref)
        return tuple(storage_refs), tuple(refs[id(s)] for s in outs)

    def _made_ref(self, s: Storage) -> tuple[str, int] | None:
        """``("m", k)`` for a buffer made with known contents, first seen now; else None."""
        found = self.contents.get(id(s.buffer))
        if found is None or not s.nbytes:
            return None
        ref = self.refs[id(s)] = ("m", len(self.made))
        self.made.append([s, found[1], len(self.steps), False])
        return ref

    def finish(self, results: Iterable[Storage | None]) -> None:
        """Resolve the ``("m", k)`` refs once the function returned: a buffer written or
        returned (``results``: the results' buffers) becomes a temporary, its contents
        made again by a :class:`HostStep` before its first use (a new array per call,
        as eagerly); one only read, a constant."""
        for s in results:
            if s is not None:
                ref = self.refs.get(id(s)) or self._made_ref(s)
                if ref is not None and ref[0] == "m":
                    self.made[ref[1]][3] = True
        if not self.made:
            return
        resolved: dict[tuple[str, int], tuple[str, int]] = {}
        remakes: dict[int, list[HostStep]] = {}  # step position -> the steps before it
        for k, (s, contents, first, written) in enumerate(self.made):
            if written:
                ref = ("t", len(self.temps))
                self.temps.append(s)
                if contents.pattern is not None or contents.host is not None:
                    remakes.setdefault(first, []).append(
                        HostStep(_remake(contents, s.device), (), (ref,), contents))
            else:
                ref = ("c", len(self.consts))
                self.consts.append(s)
            resolved[("m", k)] = self.refs[id(s)] = ref
        steps: list[Any] = []
        for j, st in enumerate(self.steps):
            steps += remakes.pop(j, ())
            st.storage_refs = tuple(resolved.get(r, r) for r in st.storage_refs)
            st.out_refs = tuple(resolved.get(r, r) for r in st.out_refs)
            steps.append(st)
        for later in remakes.values():  # (a result no launch touched)
            steps += later
        self.steps = steps

    def _slot(self, key: int, hit: tuple[TracedScalar, np.dtype] | None, value: Any) -> int:
        if hit is None:  # a constant of the function's body (``2 * x``)
            self.slots.append(("const", value))
            return len(self.slots) - 1
        slot = self.slot_of.get(key)
        if slot is None:
            slot = self.slot_of[key] = len(self.slots)
            self.slots.append(hit)
        return slot


class HostStep:
    """A step of a record that the host runs on the call's buffers, not a recorded
    launch: ``action(inputs, outputs)`` (a hand-written kernel's launch, a read of its
    error flag, a new buffer's contents made again: :func:`_remake`)."""

    __slots__ = ("action", "contents", "out_refs", "storage_refs")
    # (the interface of a recorded launch that fuse_entry's record reads)
    scalar_refs: tuple = ()
    params: tuple = ()
    out_shape: tuple = ()
    writes_input = False  # (the action reads pending flags itself where it must)

    def __init__(self, action: Callable[[list[Storage], list[Storage]], Any],
                 storage_refs: tuple, out_refs: tuple, contents: Contents | None = None
                 ) -> None:
        self.action = action
        self.storage_refs = storage_refs
        self.out_refs = out_refs
        # a remade array's contents (its one output, as fl.full or fl.asarray made it):
        # the record's pruning (fuseloop.fuse_prune) may fold or drop the step
        self.contents = contents


def _remake(contents: Contents, device: Device) -> Callable[[list[Storage], list[Storage]],
                                                             None]:
    """The action making ``contents`` (what ``fl.full`` or ``fl.asarray`` did while
    tracing) in a call's own buffer."""
    pattern, host = contents

    def remake(ins: list[Storage], outs: list[Storage]) -> None:
        out = outs[0]
        if pattern is not None:
            backend_for(device).fill(device, out.buffer, pattern, out.nbytes)
        elif host is not None and host.nbytes:
            write(out.buffer, host, device)
    return remake


def host_step(action: Callable[[list[Storage], list[Storage]], Any], ins: list[Storage],
              outs: list[Storage]) -> None:
    """``action(ins, outs)``: host code on device buffers (a hand-written kernel's launch,
    a read of its flag), recorded as a step while ``fl.fuse`` traces on this thread."""
    rec = _rp.recorder()
    if type(rec) is Trace:
        rec.host_step(action, ins, outs)
    else:
        action(ins, outs)


def supply(storage: Storage, take: Callable[[Device], Storage]) -> None:
    """While ``fl.fuse`` traces on this thread: see :meth:`Trace.supply`."""
    rec = _rp.recorder()
    if type(rec) is Trace:
        rec.supply(storage, take)


def tracing() -> bool:
    """Whether ``fl.fuse`` traces on this thread."""
    return type(_rp.recorder()) is Trace


_local = threading.local()


def install(trace: Trace, device: Device | None = None) -> Any:
    """Make ``trace`` this thread's run-plan recorder (what run_plans.run does for its
    own :class:`~fuseloop.run_plans.Recorder`); returns the one it replaces.  ``device``:
    the one the function runs on (its memory is watched even if nothing used it yet)."""
    _watch(trace, device)
    saved = _rp.install_recorder(trace)
    trace_checks.append(trace.check)
    return saved


def uninstall(trace: Trace, saved: Any) -> None:
    trace_checks.remove(trace.check)
    _rp.restore_recorder(saved)
    _unwatch(trace)


# Allocations while a trace runs.  Work that no recorded launch does (hand-written
# kernels: sorts, FFTs; pyopencl's scans) writes buffers the recorder never sees; a later
# recorded launch reading one would take it for a constant and replay it with the first
# call's contents.  Every such buffer is allocated during the trace, so each device
# memory's ``pooled`` (which ``allocate`` and the hot paths' own allocation call) is
# wrapped while any trace runs; a buffer of another thread is not noted, and fills and
# uploads say that theirs hold constants (trace_hooks.constant_contents).
_watch_lock = threading.Lock()


class _Watching:
    """A device memory's ``pooled`` while traces run: the allocation, noted in each
    trace of the calling thread."""

    __slots__ = ("traces", "unwatched")

    def __init__(self, unwatched: Any) -> None:
        self.unwatched = unwatched  # (the memory's own pooled, restored after)
        self.traces: list[Trace] = []

    def __call__(self, nbytes: int) -> Any:
        buffer = self.unwatched(nbytes)
        me = threading.get_ident()
        for t in self.traces:
            if t.thread == me:
                t.born[id(buffer)] = buffer
        return buffer


_watched: dict[int, tuple[Any, _Watching]] = {}  # id(device memory): (it, its watcher)


def note_born(buffer: Any) -> None:
    """``buffer`` was made outside the device pools (CuPy's sorts and scans on a CUDA
    device): noted in this thread's traces as a pool's watcher notes its own."""
    me = threading.get_ident()
    with _watch_lock:
        for _memory, watching in _watched.values():
            for t in watching.traces:
                if t.thread == me:
                    t.born[id(buffer)] = buffer


def _watch(trace: Trace, device: Device | None) -> None:
    from .runtime.devices import _runtime, _runtimes

    if device is not None:
        _runtime(device)  # (opened now, so that its allocations are seen)
    with _watch_lock:
        for rt in list(_runtimes.values()):
            memory = rt.pool
            entry = _watched.get(id(memory))
            if entry is None:
                entry = _watched[id(memory)] = (memory, _Watching(memory.pooled))
                memory.pooled = entry[1]
            entry[1].traces.append(trace)
        constant_buffers.append(trace.constant)


def _unwatch(trace: Trace) -> None:
    with _watch_lock:
        if trace.constant in constant_buffers:
            constant_buffers.remove(trace.constant)
        for key, (memory, watching) in list(_watched.items()):
            if trace in watching.traces:
                watching.traces.remove(trace)
            if not watching.traces:
                if memory.pooled is watching:  # (else replaced since: left as it is)
                    memory.pooled = watching.unwatched
                del _watched[key]


# }}}
