"""``MultiArray``: one array split along its first axis over a device set.

Each part is an ordinary :class:`~fuseloop.array.Array` on its device, holding rows
``bounds[k]:bounds[k + 1]``.  Elementwise functions and operators run once per part
(each part's expression is one fused kernel, enqueued on its device's queue; nothing
waits between parts); operands split differently are brought to the same bounds
first by copying the rows a part lacks from the parts that hold them
(:mod:`fuseloop.multi.exchange`).
"""

from __future__ import annotations

import itertools
import math
import operator
from collections.abc import Callable, Sequence
from operator import is_ as _is
from typing import Any

import numpy as np

from .. import flags as _flags
from .. import host_path as _host
from ..array import Array
from ..backends import backend_for
from ..errors import DeviceError, ShapeError
from ..evaluate import capturing_threads, recording_threads, run
from ..expr import readers as _readers
from ..expr.readers import _readers_lock, recent_lazy
from ..host_path import read as host_read
from ..run_plans import replay_signed
from ..runtime.devices import _runtime
from ..runtime.transfer import before_read, wait
from . import trace
from .devset import DeviceSet, split_bounds
from .replay import current, launched


class MultiArray:
    """An array split along axis 0 over the devices of a :class:`DeviceSet`.

    ``parts`` (one :class:`~fuseloop.array.Array` per entry of the set, rows
    ``bounds[k]:bounds[k + 1]``; a slice may leave some parts empty), ``devices``,
    ``bounds``; ``get()`` gathers the parts into one numpy array.
    """

    __slots__ = ("__weakref__", "bounds", "device_set", "dtype", "parts", "shape")
    __array_ufunc__ = None  # numpy's operators defer to ours (np_array + x)
    __hash__ = None  # type: ignore[assignment]

    parts: tuple[Array, ...]
    bounds: tuple[int, ...]
    device_set: DeviceSet
    dtype: np.dtype
    shape: tuple[int, ...]

    def __init__(self, parts: Sequence[Array], bounds: Sequence[int], dset: DeviceSet) -> None:
        self.parts = tuple(parts)
        self.bounds = tuple(bounds)
        self.device_set = dset
        first = self.parts[0]
        self.dtype = first.dtype
        self.shape = (self.bounds[-1], *first.shape[1:])
        for p, d, lo, hi in zip(self.parts, dset.devices, self.bounds, self.bounds[1:]):
            # (an internal check: every function that makes parts keeps these)
            assert p.device is d and p.shape[0] == hi - lo and p.dtype == self.dtype, \
                (p.device, d, p.shape, lo, hi, p.dtype, self.dtype)

    def __getattr__(self, name: str) -> Any:
        # (only for names the class lacks: an operation reading an Array's internals)
        raise AttributeError(f"a split array (MultiArray) has no {name!r}: the operation "
                             "does not take split arrays; work on .parts or gather with "
                             ".get() (docs/api.md, Several devices)")

    # {{{ properties

    @property
    def devices(self) -> tuple[Any, ...]:
        """The device of each part."""
        return self.device_set.devices

    @property
    def ndim(self) -> int:
        return len(self.shape)

    @property
    def size(self) -> int:
        return math.prod(self.shape)

    @property
    def nbytes(self) -> int:
        return self.size * self.dtype.itemsize

    def __len__(self) -> int:
        return self.shape[0]

    def __repr__(self) -> str:
        rows = ", ".join(f"[{d.index}]: {hi - lo}" for d, lo, hi
                         in zip(self.devices, self.bounds, self.bounds[1:]))
        return f"MultiArray(shape={self.shape}, dtype={self.dtype}, rows per device {{{rows}}})"

    # }}}

    # {{{ evaluation and host transfer

    def eval(self) -> MultiArray:
        """Evaluate every part (each enqueued on its device; no waiting between them)."""
        launch_parts(self.parts)
        return self

    def get(self) -> np.ndarray:
        """Evaluate and gather the parts into one new numpy array (waits)."""
        self.eval()
        out = np.empty(self.shape, self.dtype)
        read_parts(self.parts, [out[lo:hi] for lo, hi in zip(self.bounds, self.bounds[1:])])
        return out

    def __array__(self, dtype: Any = None, copy: Any = None) -> np.ndarray:
        host = self.get()
        return host if dtype is None else host.astype(dtype)

    def __bool__(self) -> bool:
        if self.size != 1:
            raise ValueError(f"the truth value of an array of shape {self.shape} is "
                             "ambiguous; use fl.any or fl.all")
        return bool(self.get().reshape(()).item())

    def __float__(self) -> float:
        return float(self.get().reshape(()).item())

    # }}}

    def astype(self, dtype: Any, copy: bool = True) -> MultiArray:
        return map_parts(lambda p: p.astype(dtype, copy=copy), (self,))

    def copy(self) -> MultiArray:
        return map_parts(lambda p: p.copy(), (self,))

    def __getitem__(self, key: Any) -> Any:
        row, rest = _split_key(key, self.ndim)
        if isinstance(row, int):
            r = _row_index(row, self.shape[0])
            k = _part_of(self.bounds, r)
            return self.parts[k][(r - self.bounds[k], *rest)]
        locals_, bounds = _row_slices(row, self.bounds)
        parts = [p[(s, *rest)] for p, s in zip(self.parts, locals_)]
        return MultiArray(parts, bounds, self.device_set)

    def __setitem__(self, key: Any, value: Any) -> None:
        row, rest = _split_key(key, self.ndim)
        if isinstance(row, int):
            if is_multi(value):
                raise ShapeError("cannot assign a split array to one row of a split array")
            r = _row_index(row, self.shape[0])
            k = _part_of(self.bounds, r)
            self.parts[k][(r - self.bounds[k], *rest)] = _scalar_or_host(value, self.devices[k])
            return
        locals_, bounds = _row_slices(row, self.bounds)
        view_ndim = self[key].ndim
        values = prepare(value, self.device_set, bounds, view_ndim)
        for k, (p, s) in enumerate(zip(self.parts, locals_)):
            if bounds[k + 1] > bounds[k]:
                p[(s, *rest)] = values[k]

    # {{{ reductions (fuseloop.multi.reduce)

    def sum(self, axis: Any = None, dtype: Any = None, keepdims: bool = False) -> Any:
        from .. import sum as fl_sum

        return fl_sum(self, axis=axis, dtype=dtype, keepdims=keepdims)

    def prod(self, axis: Any = None, dtype: Any = None, keepdims: bool = False) -> Any:
        from .. import prod

        return prod(self, axis=axis, dtype=dtype, keepdims=keepdims)

    def max(self, axis: Any = None, keepdims: bool = False) -> Any:
        from .. import max as fl_max

        return fl_max(self, axis=axis, keepdims=keepdims)

    def min(self, axis: Any = None, keepdims: bool = False) -> Any:
        from .. import min as fl_min

        return fl_min(self, axis=axis, keepdims=keepdims)

    def mean(self, axis: Any = None, dtype: Any = None, keepdims: bool = False) -> Any:
        from .. import mean

        return mean(self, axis=axis, dtype=dtype, keepdims=keepdims)

    def var(self, axis: Any = None, dtype: Any = None, ddof: Any = 0,
            keepdims: bool = False) -> Any:
        from .. import var

        return var(self, axis=axis, dtype=dtype, ddof=ddof, keepdims=keepdims)

    def std(self, axis: Any = None, dtype: Any = None, ddof: Any = 0,
            keepdims: bool = False) -> Any:
        from .. import std

        return std(self, axis=axis, dtype=dtype, ddof=ddof, keepdims=keepdims)

    def any(self, axis: Any = None, keepdims: bool = False) -> Any:
        from .. import any as fl_any

        return fl_any(self, axis=axis, keepdims=keepdims)

    def all(self, axis: Any = None, keepdims: bool = False) -> Any:
        from .. import all as fl_all

        return fl_all(self, axis=axis, keepdims=keepdims)

    # }}}


def _ufunc_named(name: str) -> Callable[..., Any]:
    from ..ufuncs import FUNCTIONS

    return FUNCTIONS[name]


def _operator(name: str, reflected: bool = False) -> Callable[..., Any]:
    # (the ufunc's function, as numpy's operator calls it: a numpy scalar becomes a scalar
    # array there, so parts keep the lean path and their signatures)
    func: list[Callable[..., Any]] = []  # (fuseloop.ufuncs imports this module: bound late)

    def method(self: MultiArray, other: Any) -> Any:
        if not func:
            func.append(_ufunc_named(name))
        return map_elementwise(func[0], (other, self) if reflected else (self, other))

    method.__name__ = name
    return method


def _unary(name: str) -> Callable[..., Any]:
    func: list[Callable[..., Any]] = []

    def method(self: MultiArray) -> Any:
        if not func:
            func.append(_ufunc_named(name))
        return map_elementwise(func[0], (self,))

    method.__name__ = name
    return method


_BINARY = {"add": "add", "sub": "subtract", "mul": "multiply", "truediv": "true_divide",
           "floordiv": "floor_divide", "mod": "remainder", "pow": "power",
           "and": "bitwise_and", "or": "bitwise_or", "xor": "bitwise_xor",
           "lshift": "left_shift", "rshift": "right_shift"}
for _dunder, _ufunc in _BINARY.items():
    setattr(MultiArray, f"__{_dunder}__", _operator(_ufunc))
    setattr(MultiArray, f"__r{_dunder}__", _operator(_ufunc, reflected=True))
for _dunder, _ufunc in {"eq": "equal", "ne": "not_equal", "lt": "less", "le": "less_equal",
                        "gt": "greater", "ge": "greater_equal"}.items():
    setattr(MultiArray, f"__{_dunder}__", _operator(_ufunc))
for _dunder, _ufunc in {"neg": "negative", "pos": "positive", "abs": "absolute",
                        "invert": "invert"}.items():
    setattr(MultiArray, f"__{_dunder}__", _unary(_ufunc))


def launch_parts(parts: Sequence[Array]) -> None:
    """Evaluate ``parts`` one after the other (:func:`launch_part`), so a device starts
    while the next part is enqueued rather than when the host first waits on it.
    Nothing here waits.  Parts whose plans are known are replayed back to back
    (:func:`fuseloop.multi.replay.launched`)."""
    done = launched(parts)
    for k, p in enumerate(parts):
        if not done[k]:
            launch_part(k, p)
    if recent_lazy:
        _not_recent(parts)


def _not_recent(parts: Sequence[Array]) -> None:
    """Take ``parts``, just evaluated (they read nothing now), out of the recent lazy
    arrays (``expr.readers``), as ``Array.eval`` takes its own array: held there, a
    dropped split result's part buffers lived on until the next prune (up to 64 lazy
    arrays later), and a split part's allocation does not prune the list first
    (``replay.output``), so large dead parts held their devices' memory.  The parts
    were made last, so they are looked for among the list's last entries only (the
    weak references at its head, ``readers.pending_count``, hold nothing)."""
    n = len(parts)
    with _readers_lock:
        lo = max(_readers.pending_count, len(recent_lazy) - 2 * n - 4)
        tail = recent_lazy[-n:]
        if len(recent_lazy) - n >= lo and all(map(_is, tail, parts)):
            del recent_lazy[-n:]  # (the common case: the parts, last and in order)
            return
        ids = {id(p) for p in parts}
        for k in range(len(recent_lazy) - 1, lo - 1, -1):
            if id(recent_lazy[k]) in ids:
                del recent_lazy[k]


def launch_part(k: int, p: Array) -> None:
    """Evaluate ``p`` (part ``k``) and hand its device's queue to the device at once
    (its deferred small launches too).  Nothing waits."""
    if p._storage is None:
        with current(p.device):  # (CUDA: its device current once for the part)
            done = _replayed(p) if p._node.fancy else None
            if done is None:
                p.eval()
            else:
                p._become(done)
    rt = _runtime(p.device)
    if rt.deferred:
        rt.flush()
    rt.submit(rt.queue)
    if trace.events is not None:
        trace.note("enqueued", k, p.device)


def _replayed(p: Array) -> Any:
    """``p``'s buffer, computed by the replay of the run plan its structure has on its
    device, or None (no plan yet, or a case ``evaluate.run`` handles otherwise: the host
    path, ``show_code``, a plan being recorded).  A reduction's partial result on each of
    the parts takes the same path as its eval would, without its layers (the flat
    elementwise check, the host path's, the structure walk's): what a part costs the host
    before its device starts."""
    if capturing_threads[0] or recording_threads[0]:
        return None
    node, shape, device = p._node, p.shape, p.device
    if _host.HOST_MAX_WORK and _host.eligible([node], shape, device, None):
        return None
    done = _flags.deferring(replay_signed, [node], shape, device)
    return None if done is None else done[0]


#: reads of at most this many bytes go through the backend's staging buffer
#: (:meth:`~fuseloop.backends.base.Backend.read_staging`): partial results, halo rows
STAGED_READ_MAX = 1 << 20


def read_parts(parts: Sequence[Array], hosts: Sequence[np.ndarray]) -> None:
    """Copy each of ``parts`` into its C-contiguous host array: every part is launched
    and its read enqueued (after the part's work) and handed to its device before the
    host waits for any, then each is waited for once; the devices' copies overlap and
    no read waits behind another device's work."""
    launch_parts(parts)
    finish_reads([start_read(k, p, host) for k, (p, host) in enumerate(zip(parts, hosts))])


_Pending = tuple[int, Any, Any, Any, np.ndarray, np.ndarray, Any] | None


def start_read(k: int, p: Array, host: np.ndarray) -> _Pending:
    """Enqueue the read of ``p`` (part ``k``, launched) into ``host`` without waiting;
    what :func:`finish_reads` completes (None: already read, or nothing to read)."""
    if not host.size:
        return None
    small = host_read(p._node, p.device)  # (small arrays on a CPU: no copy command)
    if small is not None:
        host[...] = small
        return None
    storage = p._storage if p.is_contiguous else run([p._node], p.shape, p.device)[0]
    assert storage is not None and host.flags.c_contiguous
    rt = _runtime(p.device)
    if rt.deferred:
        rt.flush()
    slot, stage = staging(p.device, host.nbytes)
    into = host if stage is None else stage.view(host.dtype).reshape(host.shape)
    event = rt.enqueue_read(rt.queue, into, storage.buffer, None, False)
    if slot is not None:
        slot.event = event
    rt.submit(rt.queue)
    if trace.events is not None:
        trace.note("read enqueued", k, p.device)
    # (the storage lives until read, the staging buffer until copied out)
    return k, event, p.device, storage, host, into, slot


def staging(device: Any, nbytes: int) -> tuple[Any, np.ndarray | None]:
    """(a page-locked slot, its first ``nbytes`` bytes) for a read of ``nbytes`` from
    ``device`` (OpenCL: :mod:`~fuseloop.backends.opencl_staging`; the slot is released
    once its bytes are copied out), or (None, the backend's staging buffer, CUDA's
    page-locked memory), or (None, None): read into ordinary memory."""
    if nbytes > STAGED_READ_MAX:
        return None, None
    backend = backend_for(device)
    slot = backend.staging_slot(device, nbytes)
    if slot is not None:
        return slot, slot.host[:nbytes]
    return None, backend.read_staging(nbytes)


def finish_reads(pending: Sequence[_Pending], each: Callable[[int], None] | None = None
                 ) -> None:
    """Wait for each read :func:`start_read` enqueued, in turn, and copy staged ones out
    (``each(i)``, where given, once the ``i``-th's rows are in place: the caller's work
    on them is done while later reads are still under way); then raise a deferred
    error (``transfer.before_read``: a failed halo upload's, a gather's flag) before the
    caller sees the rows."""
    for i, item in enumerate(pending):
        if item is not None:
            k, event, device, _, host, into, slot = item
            if event is not None:
                wait(event, device)
            if into is not host:
                host[...] = into
            if slot is not None:
                slot.release()
            if trace.events is not None:
                trace.note("read done", k, device)
        if each is not None:
            each(i)
    if before_read:
        for hook in tuple(before_read):
            hook()


def is_multi(x: Any) -> bool:
    return type(x) is MultiArray


# {{{ mapping functions over the parts


def map_parts(func: Callable[..., Any], args: Sequence[Any],
              kwargs: dict[str, Any] | None = None) -> Any:
    """``func`` applied to each part: split arguments give their part (brought to the
    first split argument's bounds), host data their rows or a copy on the part's
    device, 0-d arrays their value; the results as split arrays."""
    if not kwargs:
        columns = _aligned_columns(args)
        if columns is not None:  # (the common case, without prepare()'s general rules)
            ref, cols = columns
            return _wrap(list(map(func, *cols)), ref.bounds, ref.device_set)
    kwargs = kwargs or {}
    ref = next(a for a in (*args, *kwargs.values()) if is_multi(a))
    dset, bounds = ref.device_set, ref.bounds
    ready = [prepare(a, dset, bounds, ref.ndim) for a in args]
    ready_kw = {k: prepare(v, dset, bounds, ref.ndim) for k, v in kwargs.items()}
    results = [func(*(r[k] for r in ready), **{n: r[k] for n, r in ready_kw.items()})
               for k in range(len(dset))]
    return _wrap(results, bounds, dset)


def map_elementwise(func: Callable[..., Any], args: Sequence[Any]) -> Any:
    """``func``, an elementwise function of arrays (a ufunc's operator path), over the
    parts: where every argument is a split array split alike or a scalar, its results are
    the new split array's parts as they are (elementwise over parts of the same rows, on
    their devices: nothing to check); anything else through :func:`map_parts`."""
    columns = _aligned_columns(args)
    if columns is None:
        return map_parts(func, args)
    ref, cols = columns
    parts = list(map(func, *cols))
    if not isinstance(parts[0], Array):
        return _wrap(parts, ref.bounds, ref.device_set)
    out = object.__new__(MultiArray)
    out.parts, out.bounds, out.device_set = tuple(parts), ref.bounds, ref.device_set
    out.dtype = parts[0].dtype
    out.shape = (ref.shape[0], *parts[0].shape[1:])
    return out


_SCALARS = (int, float, bool, complex)


def _aligned_columns(args: Sequence[Any]) -> tuple[MultiArray, list[Sequence[Any]]] | None:
    """(the first split argument, each argument per part) when every argument is a split
    array split as the first one (same set, bounds and rank) or a Python or numpy
    scalar; None otherwise (:func:`prepare` then decides).  Split arrays are operated
    on once per part and operator, so this costs a few microseconds, not tens."""
    ref = None
    for a in args:
        if type(a) is MultiArray:
            ref = a
            break
    if ref is None:
        return None
    p = len(ref.parts)
    cols: list[Sequence[Any]] = []
    for a in args:
        if type(a) is MultiArray:
            if a is not ref and (a.bounds != ref.bounds or len(a.shape) != len(ref.shape)
                                 or not a.device_set.same(ref.device_set)):
                return None
            cols.append(a.parts)
        elif type(a) in _SCALARS or isinstance(a, np.generic):
            cols.append((a,) * p)
        else:
            return None
    return ref, cols


def _wrap(results: list[Any], bounds: tuple[int, ...], dset: DeviceSet) -> Any:
    first = results[0]
    if isinstance(first, tuple):
        return tuple(_wrap([r[i] for r in results], bounds, dset) for i in range(len(first)))
    if not isinstance(first, Array):
        raise TypeError(f"a function over a split array's parts returned "
                        f"{type(first).__name__}, not an array")
    return MultiArray(results, bounds, dset)


def prepare(a: Any, dset: DeviceSet, bounds: tuple[int, ...], ndim: int) -> list[Any]:
    """``a`` as one value per part of a split array with ``bounds`` and ``ndim`` axes."""
    from ..creation import asarray
    from .exchange import realign

    p = len(dset)
    n = bounds[-1]
    if is_multi(a):
        if not a.device_set.same(dset):
            raise DeviceError(f"split arrays on different device sets in one expression: "
                              f"{dset} and {a.device_set}; make both in one "
                              "`with fl.device([...])` block")
        if a.ndim != ndim or a.shape[0] != n:
            raise ShapeError(f"split arrays of shapes {a.shape} and rows {n}, rank {ndim} "
                             "in one expression: they must have the same rank and number "
                             "of rows (broadcasting along the split axis is not supported)")
        return list(a.parts) if a.bounds == bounds else realign(a, bounds)
    if isinstance(a, Array):
        if a.ndim == 0:  # a scalar (a reduction's result): its value, in every part
            return [a.get()[()]] * p
        raise DeviceError(f"a split array ({dset}) and an array on one device "
                          f"({a.device}, shape {a.shape}) in one expression; make the "
                          "second in the same `with fl.device([...])` block, or gather the "
                          "first with .get()")
    if isinstance(a, np.ndarray | list | tuple):
        host = np.asarray(a)
        if host.ndim == 0:
            return [host[()]] * p
        if host.ndim > ndim or (host.ndim == ndim and host.shape[0] not in (1, n)):
            raise ShapeError(f"host data of shape {host.shape} does not broadcast over a "
                             f"split array of {n} rows and rank {ndim} without growing or "
                             "splitting it differently")
        if host.ndim == ndim and host.shape[0] == n and n != 1:
            return [asarray(host[lo:hi], device=d)
                    for d, lo, hi in zip(dset.devices, bounds, bounds[1:])]
        copies: dict[int, Array] = {}  # (one upload per device)
        return [copies.setdefault(d.index, asarray(host, device=d)) for d in dset.devices]
    return [a] * p  # (Python and numpy scalars, fl.constant, keywords)


def _scalar_or_host(value: Any, device: Any) -> Any:
    if isinstance(value, Array) and value.ndim == 0:
        return value.get()[()]
    if isinstance(value, np.ndarray | list | tuple):
        from ..creation import asarray

        return asarray(np.asarray(value), device=device)
    return value


# }}}

# {{{ indexing along the split axis


def _split_key(key: Any, ndim: int) -> tuple[Any, tuple[Any, ...]]:
    """(the index of axis 0, the indices of the other axes)."""
    key = key if isinstance(key, tuple) else (key,)
    if any(k is Ellipsis for k in key):
        at = next(i for i, k in enumerate(key) if k is Ellipsis)
        fill = (slice(None),) * (ndim - (len(key) - 1))
        key = key[:at] + fill + key[at + 1:]
    if not key:
        return slice(None), ()
    row, rest = key[0], key[1:]
    for k in rest:
        if not isinstance(k, int | slice | np.integer):
            raise TypeError(f"a split array takes ints and slices as indices, not "
                            f"{type(k).__name__} (gather it with .get() first)")
    if isinstance(row, int | np.integer) and not isinstance(row, bool | np.bool_):
        return operator.index(row), rest
    if not isinstance(row, slice):
        raise TypeError(f"the split axis of a split array takes an int or a slice, not "
                        f"{type(row).__name__}")
    return row, rest


def _row_index(r: int, n: int) -> int:
    if not -n <= r < n:
        raise IndexError(f"index {r} is out of bounds for axis 0 with size {n}")
    return r + n if r < 0 else r


def _part_of(bounds: tuple[int, ...], r: int) -> int:
    return next(k for k in range(len(bounds) - 1) if bounds[k] <= r < bounds[k + 1])


def _row_slices(row: slice, bounds: tuple[int, ...]) -> tuple[list[slice], tuple[int, ...]]:
    """Each part's local slice of the global slice ``row``, and the result's bounds."""
    start, stop, step = row.indices(bounds[-1])
    if step < 0:
        raise ValueError("a split array's first axis takes slices with a positive step "
                         "only (the parts stay in device order); gather with .get() first")
    count = max(0, -(-(stop - start) // step))
    locals_: list[slice] = []
    sizes = []
    for lo, hi in itertools.pairwise(bounds):
        # positions i (of the result) whose row start + i * step lies in [lo, hi)
        i0 = min(count, max(0, -(-(lo - start) // step)))
        i1 = min(count, max(0, -(-(hi - start) // step)))
        i1 = max(i0, i1)
        first = start + i0 * step - lo
        locals_.append(slice(first, first + (i1 - i0) * step, step) if i1 > i0
                       else slice(0, 0))
        sizes.append(i1 - i0)
    return locals_, split_bounds(sizes)


# }}}

__all__ = ["MultiArray", "finish_reads", "is_multi", "launch_part", "launch_parts",
           "map_elementwise", "map_parts", "prepare", "read_parts", "start_read"]
