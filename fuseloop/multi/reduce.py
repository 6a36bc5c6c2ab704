"""Reductions of split arrays.

Along axes that keep the split axis, each part reduces its own rows (the result is
split the same way).  Along the split axis, each part computes a partial result on
its device (each launched before the next part's is built); where every part's device
copies to the first device without the host (one device, CUDA peer copies, OpenCL
devices of one context) the partials are copied there and combined by one elementwise
kernel (``add``, ``maximum``, ...), so nothing waits; otherwise, and for a full
reduction (a 0-d result: :func:`host_combines`), they are combined on the host with
numpy (all enqueued, then one small read per part, before the host waits for any; the
same operation: sum of sums, max of maxima, ..., each part's folded into the first, in
part order, as its read is done).  A full reduction's value is read
back or, in split work, passed to every part as a value: either way the host waits for
it, and the read of each partial behind its own kernel spares the copies to the first
device, the combine's launch and the read after it.  The result is an array on the
set's first device.
``mean`` is the combined sum over the count (on the device where the sum is);
``var``/``std`` take two passes (the mean, then the sum of squared deviations), as the
single-device ones do, combined on the host.
"""

from __future__ import annotations

import math
import os
from collections.abc import Callable
from itertools import accumulate
from typing import Any, cast

import numpy as np

from .. import caches as _caches
from .. import flags as _flags
from .. import host_path as _host
from ..array import Array
from ..creation import asarray  # (module level: an import per call cost microseconds)
from ..evaluate import _rebuild, capturing_threads, recording_threads
from ..expr import program as _prog
from ..expr.nodes import Scalar, signature_of
from ..ops.reductions import _ddof, _mean_dtypes
from ..ops.shape import normalize_axes
from ..run_plans import _signed_replay, signed_of
from . import calls as _calls
from . import replay as _replay
from . import trace
from .array import MultiArray, finish_reads, launch_part, map_parts, start_read
from .exchange import _transfer

# how partial results combine (the ufunc reducing them in the partials' dtype: what
# numpy's sum, prod, max, min, any and all call); count_nonzero's partials are counts
_COMBINE: dict[str, np.ufunc] = {
    "sum": np.add, "prod": np.multiply, "max": np.maximum, "min": np.minimum,
    "any": np.logical_or, "all": np.logical_and, "count_nonzero": np.add}


#: where a full reduction's partial results are combined when copies allow either:
#: ``auto`` (default) on the host, ``0`` on the first device (the result stays lazy:
#: nothing waits until it is read); ``FUSELOOP_MULTI_HOST_COMBINE``
#: (``bench_multigpu --variants`` row ``-devicecombine``)
HOST_COMBINE = os.environ.get("FUSELOOP_MULTI_HOST_COMBINE", "auto").strip().lower()


def host_combines(x: Any, axes: tuple[int, ...], keepdims: bool) -> bool:
    """Whether the reduction of ``x`` over ``axes`` combines its partials on the host
    even where every part's device copies to the first: a full reduction to a 0-d
    result (its value is what a read or a split consumer waits for anyway; kept
    dimensions would be uploaded again), unless :data:`HOST_COMBINE` is off."""
    return len(axes) == len(x.shape) and not keepdims \
        and HOST_COMBINE not in ("0", "off", "no", "false")


def reduce(func: Callable[..., Any], x: Any, args: tuple, kwargs: dict) -> Any:
    """``func`` (a fuseloop reduction, by name) of the split array ``x``."""
    name = func.__name__
    if args or kwargs:
        params = dict(zip(_POSITIONAL.get(name, ("axis",)), args))
        params.update(kwargs)
        axes = normalize_axes(params.pop("axis", None), x.ndim)
        keepdims = bool(params.pop("keepdims", False))
    else:  # (fl.sum(x): every axis, as normalize_axes(None) gives)
        params, axes, keepdims = {}, tuple(range(len(x.shape))), False
    if 0 not in axes:  # each part reduces its own rows: still split
        parts = [func(p, axis=axes, keepdims=keepdims, **params) for p in x.parts]
        return MultiArray(parts, x.bounds, x.device_set)
    if name == "mean":
        return _mean(x, axes, keepdims, params.get("dtype"))
    if name in ("var", "std"):
        ddof = _ddof(params.get("ddof", 0), params.get("correction"))
        v = _var(x, axes, keepdims, params.get("dtype"), ddof)
        return _on_first(np.sqrt(v) if name == "std" else v, x)
    if name not in _COMBINE:
        raise NotImplementedError(f"fl.{name} of a split array along its split axis is not "
                                  "supported; gather it with .get() first")
    if not host_combines(x, axes, keepdims):
        on_device = _device_combined(func, name, x, axes, keepdims, params)
        if on_device is not None:
            return on_device
    return _on_first(_combined(func, name, x, axes, keepdims, params), x)


def _device_combined(func: Callable[..., Any], name: str, x: Any, axes: tuple[int, ...],
                     keepdims: bool, params: dict) -> Any:
    """The partial results copied to the first device and combined there (nothing
    waits: the result is as asynchronous as one device's reduction), or None when a
    part's device cannot copy to the first one without the host."""
    first = x.devices[0]
    direct = x.device_set.copies_to_first
    nonempty = [k for k, p in enumerate(x.parts) if p.shape[0]] or [0]
    if not all(direct[k] for k in nonempty):
        return None
    used = [x.parts[k] for k in nonempty]
    # (without the reduced axes where asked: the pieces are combined elementwise)
    partials, call = _launched_partials(func, used, axes, keepdims, params)
    if call is not None and call.combine is not None:
        kept = _calls.combined(call, partials)
        if kept is not None:
            return kept
    pieces = [q if q.device is first else _transfer(q, first) for q in partials]
    out = None
    for piece in pieces:
        # (one elementwise kernel over the pieces: cheaper to launch than a reduction
        # of their concatenation; the same values, the partials being few)
        out = piece if out is None else _PAIRWISE[name](out, piece)
    assert out is not None
    if call is not None and len(pieces) > 1:
        return _calls.keep_combine(call, out, pieces)
    return out


#: the last split reduction's partial results: [built through the reduction, substituted]
LAST_PARTIALS: list[int] = [0, 0]
#: the last split reduction's partial results replayed from a plan (:func:`_planned`)
LAST_PLANNED: list[int] = [0]

#: (reduction, axes, keepdims, its other arguments, a part's signature) -> (the signature,
#: shape and dtype of that part's reduction node, whose operands are the part's): what a
#: later part of that signature replays (signatures are never reused: see expr.nodes)
_PARTIALS: dict[tuple, tuple[int, tuple[int, ...], np.dtype]] = {}
PARTIALS_MAX = 256
_caches.register("multi.partials", _PARTIALS.clear, lambda: len(_PARTIALS), PARTIALS_MAX)


def _plan_base(name: str, axes: tuple[int, ...], keepdims: bool, params: dict
               ) -> tuple | None:
    """The part of :data:`_PARTIALS`' key a call's arguments give, or None (an argument
    that is not hashable)."""
    if not params:
        return (name, axes, keepdims, ())
    base = (name, axes, keepdims, tuple(sorted(params.items())))
    try:
        hash(base)
    except TypeError:
        return None
    return base


def _remember(base: tuple | None, p: Any, q: Any) -> None:
    """Note ``q``, the reduction of part ``p`` just built, for :func:`_planned` (where its
    node reads exactly ``p``'s operands: a reduction node over ``p``'s own node)."""
    if base is None or type(q) is not Array or not q.is_lazy:
        return
    child, node = p._node, q._node
    sig = child.sig or signature_of(child)
    if not sig or not node.sig or child.operands is None \
            or node.operands is not child.operands:
        return
    if len(_PARTIALS) >= PARTIALS_MAX:
        _PARTIALS.clear()
    _PARTIALS[(base, sig)] = (node.sig, q.shape, q.dtype)


def _planned(base: tuple, p: Any) -> Array | None:
    """Part ``p``'s partial result, replayed from the run plan its device holds for the
    reduction of ``p``'s structure (:data:`_PARTIALS`), without building its node: the
    plan's signature is the reduction's, its operands ``p``'s own.  None where nothing is
    known, no plan is held, or ``evaluate.run`` would take another path (the host path of
    small work on a CPU, ``show_code``, a plan being recorded or checked)."""
    node = p._node
    sig = node.sig or signature_of(node)
    if not sig:
        return None
    hit = _PARTIALS.get((base, sig))
    operands = node.operands
    if hit is None or operands is None or capturing_threads[0] or recording_threads[0] \
            or _prog.CHECK_STRUCTURE_CACHE:
        return None
    device = p.device
    if _host.HOST_MAX_WORK and _host.host_device(device) \
            and math.prod(p.shape) <= _host.HOST_MAX_WORK:
        return None
    rsig, shape, dtype = hit
    signed = signed_of(rsig, operands, node.offs, shape, device)
    done = None if signed is None else _flags.deferring(_signed_replay, signed, device)
    return None if done is None else Array._concrete(done[0], dtype, shape)


def _launched_partials(func: Callable[..., Any], used: list[Any], axes: tuple[int, ...],
                       keepdims: bool, params: dict, hold: bool = False
                       ) -> tuple[list[Any], Any]:
    """Each part's partial result, launched before the next part's is made (a device
    starts while the host prepares the next; copies and reads come after all).  A part
    whose reduction's structure a call built before is replayed from its device's plan
    (:func:`_planned`); else a part of a shape met before gets that part's reduction
    node with its own expression substituted: a walk of the few nodes the reduction
    added, not the reduction's argument checks, dtype rules and node building again.
    With them, the kept call (``calls._Call``) every partial was staged from, or None.
    ``hold``: the caller reads every partial before it returns (``replay.replayed``)."""
    partials: list[Any] = []
    templates: dict[tuple, tuple[Any, Any]] = {}
    counts = [0, 0]
    planned = 0
    base = (func.__name__, axes, keepdims, ()) if not params else \
        _plan_base(func.__name__, axes, keepdims, params)
    call: Any = None
    if base is not None:  # (the parts with known plans, back to back)
        partials, call = _replay.replayed(_PARTIALS, base, used, hold)
        planned = len(partials)
    for k, p in enumerate(used):
        if k < planned:
            continue
        q = _planned(base, p) if base is not None else None
        if q is not None:
            planned += 1
            partials.append(q)
            launch_part(k, q)
            continue
        key = (p.shape, p.dtype)
        hit = templates.get(key)
        q = _substituted(hit, p) if hit is not None else None
        if q is None:
            q = func(p, axis=axes, keepdims=keepdims, **params)
            counts[0] += 1
            if hit is None and type(q) is Array and q.is_lazy:
                templates[key] = (p._node, q._node)
        else:
            counts[1] += 1
        _remember(base, p, q)
        partials.append(q)
        launch_part(k, q)
    LAST_PARTIALS[:] = counts
    LAST_PLANNED[0] = planned
    return partials, call


def _substituted(template: tuple[Any, Any], p: Any) -> Array | None:
    """The template's reduction (``(first part's node, its reduction's node)``) of part
    ``p`` instead, or None where the reduction's node does not hold the first part's
    node as it is (a view of it, e.g. merged axes: then it is built again)."""
    old, made = template
    node = _rebuild(made, {id(old): p._node}, {})
    # (nothing of the first part may be left: a buffer only its node holds, seen again,
    # means the reduction read it through another node)
    left = old.storages - p._node.storages
    if node is made or (left and not left.isdisjoint(node.storages)) \
            or any(s.device is not p.device for s in node.storages):
        return None
    return Array._lazy(node, p.device)


def _pairwise(ufunc: str) -> Callable[[Any, Any], Any]:
    found: list[Callable[[Any, Any], Any]] = []  # (fuseloop's function, bound at first use)

    def combine(a: Any, b: Any) -> Any:
        if not found:
            import fuseloop

            found.append(getattr(fuseloop, ufunc))
        return found[0](a, b)
    return combine


# how two partial results combine on a device (elementwise, same dtype)
_PAIRWISE: dict[str, Callable[[Any, Any], Any]] = {
    "sum": _pairwise("add"), "prod": _pairwise("multiply"), "max": _pairwise("maximum"),
    "min": _pairwise("minimum"), "any": _pairwise("logical_or"),
    "all": _pairwise("logical_and"), "count_nonzero": _pairwise("add")}


_POSITIONAL = {"sum": ("axis", "dtype", "keepdims"), "prod": ("axis", "dtype", "keepdims"),
               "mean": ("axis", "dtype", "keepdims"),
               "var": ("axis", "dtype", "ddof", "keepdims"),
               "std": ("axis", "dtype", "ddof", "keepdims")}


def _combined(func: Callable[..., Any], name: str, x: Any, axes: tuple[int, ...],
              keepdims: bool, params: dict) -> np.ndarray:
    """The partial results of the parts, combined on the host: every part's partial
    launched, then every small read enqueued, before the host waits for any."""
    bounds = x.bounds
    # (no part empty, as bounds that never repeat say: the parts as they are, no frame)
    used = list(x.parts) if len(set(bounds)) == len(bounds) else \
        [p for p in x.parts if p.shape[0]] or list(x.parts[:1])
    # (held: each partial is read below, before the next call may write its buffer)
    partials = _launched_partials(func, used, axes, True, params, hold=True)[0]
    # (each partial read into its rows of one host array: nothing to concatenate)
    q0 = partials[0]
    host = np.empty((sum(q.shape[0] for q in partials), *q0.shape[1:]), q0.dtype)
    rows = list(accumulate([q.shape[0] for q in partials], initial=0))  # (few: not numpy)
    pending = [start_read(k, q, host[lo:hi]) for k, (q, lo, hi)
               in enumerate(zip(partials, rows, rows[1:]))]
    ufunc = _COMBINE[name]
    if rows[-1] != len(partials):  # (a partial of several rows: reduced at once)
        finish_reads(pending)
        out = ufunc.reduce(host, axis=0, keepdims=True, dtype=host.dtype)
    else:
        # each partial (one row) folded into the first as its read is done, in part
        # order: after the last part's read only its own fold is left (the host comes
        # out of that wait with cold caches: a reduction over every row then cost more
        # than the rest of the call's end)
        out = host[:1]

        def fold(i: int) -> None:
            if i:
                ufunc(out, host[i:i + 1], out=out)
        finish_reads(pending, fold)
    if trace.events is not None:
        trace.note("combined", -1, x.devices[0])
    if not keepdims:  # (a full reduction: 0-d, without a generator's frame)
        out = out.reshape(()) if len(axes) == out.ndim else \
            out.reshape(tuple(n for d, n in enumerate(out.shape) if d not in axes))
    return out if out.dtype == host.dtype else np.asarray(out, dtype=host.dtype)


def _mean(x: Any, axes: tuple[int, ...], keepdims: bool, dtype: Any) -> Any:
    from .. import sum as fl_sum

    acc, res = _mean_dtypes(x.dtype, dtype)
    total = None if host_combines(x, axes, keepdims) else \
        _device_combined(fl_sum, "sum", x, axes, keepdims, {"dtype": acc})
    if total is None:
        return _on_first(_mean_host(x, axes, keepdims, dtype, fl_sum), x)
    count = math.prod(x.shape[d] for d in axes)  # (as the host's: inf or nan when 0)
    out = total / acc.type(count) if count else total * acc.type(np.nan)
    return out.astype(res) if out.dtype != res else out


def _mean_host(x: Any, axes: tuple[int, ...], keepdims: bool, dtype: Any,
               fl_sum: Callable[..., Any]) -> np.ndarray:
    acc, res = _mean_dtypes(x.dtype, dtype)
    total = _combined(fl_sum, "sum", x, axes, keepdims, {"dtype": acc})
    count = math.prod(x.shape[d] for d in axes)
    with np.errstate(divide="ignore", invalid="ignore"):  # (as the device: inf, nan)
        out = total / acc.type(count) if count else total * acc.type(np.nan)
    return np.asarray(out, dtype=acc).astype(res)


def _var(x: Any, axes: tuple[int, ...], keepdims: bool, dtype: Any, ddof: Any) -> np.ndarray:
    from .. import sum as fl_sum

    if x.dtype.kind == "c":
        raise NotImplementedError("fl.var of a complex split array is not supported")
    acc, res = _mean_dtypes(x.dtype, dtype)
    xa = x.astype(acc) if x.dtype != acc else x
    m = _mean_host(xa, axes, True, None, fl_sum)  # (acc; the split axis reduced)
    d = map_parts(lambda p, c: (p - c) * (p - c), (xa, m))
    total = _combined(fl_sum, "sum", d, axes, keepdims, {"dtype": acc})
    n = math.prod(x.shape[k] for k in axes) - ddof
    with np.errstate(divide="ignore", invalid="ignore"):
        return np.asarray(total / acc.type(max(n, 0)), dtype=acc).astype(res)


def _on_first(host: np.ndarray, x: Any) -> Any:
    """A result combined on the host, on the set's first device: a 0-d one stays the
    host's value (a scalar node: ``float()``, ``.item()`` and ``.get()`` of it read no
    device, a kernel using it takes it as an argument, ``.eval()`` writes it to a
    buffer), others are uploaded."""
    host = np.asarray(host)
    first = x.device_set.devices[0]
    if host.ndim == 0:
        return Array._lazy(Scalar(cast(np.generic, host[()])), first)
    return asarray(host, device=first)
