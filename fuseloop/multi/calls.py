"""Split calls kept whole (issue 29): a split call's parts found in one look-up.

A split reduction or evaluation whose every part was staged from a known launch (a
prepared run plan, :class:`~fuseloop.multi.replay._Prepared`, or a flat elementwise
launch plan) is kept as a :class:`_Call` under the call's key: the kind of call (a
reduction's arguments, or an evaluation), and each part's signature, shape and device.
The next call of that key stages every part from its :class:`_PartLaunch` (the
part's operands picked into buffers and scalars and checked; its temporaries are
allocated as it is enqueued) without any per-part look-up: no signed key, no plan or
prepared-launch look-up, no flat structure look-up.  Nothing about buffers is kept:
each call picks them from its own parts' operands, so new arrays, a write or another
split (other shapes: another key) never meet a stale buffer.  A part whose launch is
no longer valid (other recipes, a kernel out of the memory cache, another thread, an
operand repeated differently, a buffer on another device or past int32 bytes) drops
the call; the caller then stages the parts one by one and keeps the call again.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Sequence
from typing import Any

from .. import caches as _caches
from ..array import Array
from ..backends import backend_for
from ..evaluate import allocate, flat_launch_ready
from ..expr.ir import INT32_LIMIT
from ..expr.nodes import signature_of
from ..launching import _counters, _stats_lock
from ..recipe_state import current as _recipes_current
from ..run_plans import _key_head
from . import replay as _replay  # (which imports this module first: bound at use)

#: call key -> its parts' launches (see the module's text)
_CALLS: dict[tuple, _Call] = {}
CALLS_MAX = 128
_caches.register("multi.calls", _CALLS.clear, lambda: len(_CALLS), CALLS_MAX)
#: ``exchange.EXCHANGED``, bound at the first kept combine (not an import per call)
_EXCHANGED: list[dict[str, int]] = []
#: [calls found whole, calls kept] since start-up (tests: a second call is one hit)
COUNTS = [0, 0]


class _PartLaunch:
    """How one part of a kept call is staged from its node's operands (``take``: the
    picker of its plan's entry, see ``expr.program.operand_picker``): a prepared run plan
    (``prepared``: ``replay._Prepared``), a run plan launched step by step with its
    checks (``general``: (plan, view offsets, the recipes token it was kept under),
    ``replay._launch``: buffers past int32 bytes, launches a prepared one does not make)
    or a flat elementwise launch plan (``flat``).
    ``head``: a run plan's key head (``run_plans._key_head``: the recipes and split
    thresholds it was found under); ``wide``: whether its buffers were past int32 bytes
    (its launches' index type follows)."""

    __slots__ = ("device", "flat", "general", "head", "held", "prepared", "take", "wide")

    def __init__(self, device: Any, take: Any, wide: bool, head: Any = None,
                 prepared: Any = None, general: Any = None, flat: Any = None) -> None:
        self.device, self.take, self.wide, self.head = device, take, wide, head
        self.prepared, self.general, self.flat = prepared, general, flat
        #: the buffers a prepared launch writes when the caller reads its result before
        #: the next call (``replay._Held``; made at the first such call)
        self.held: Any = None

    def stage(self, node: Any, shape: tuple[int, ...], token: Any, hold: bool = False
              ) -> Any:
        """This part's launch over ``node``'s operands made ready (``replay._Staged``;
        ``shape``: the part's, a flat launch's result's), or None where the kept launch
        no longer applies; ``hold``: onto the buffers this part holds (see
        ``replay._Held``: the caller has read the last call's result)."""
        picked = self.take(node.operands)
        if picked is None:
            return None
        storages, scalars = picked
        device = self.device
        wide = False
        for s in storages:
            if s.device is not device:
                return None
            if s.nbytes > INT32_LIMIT:
                wide = True
        if wide is not self.wide:
            return None
        if self.head is not None:
            head = _key_head(device)
            if head is not self.head and head != self.head:
                return None
        prepared = self.prepared
        if prepared is not None:
            if not prepared.valid(token):
                return None
            held = None
            if hold and prepared.holdable:
                held = self.held
                if held is None:
                    held = self.held = _replay._Held(prepared)
            # (prepared.stage's launch, made here: a frame less per part)
            return _replay._Staged(device, prepared.n_steps, None, prepared, None, storages,
                                   scalars, held)
        if self.general is not None:
            plan, offsets, made = self.general
            if made is not token:  # (other recipes: a prepared launch may apply now)
                return None
            go = functools.partial(_replay._launch, plan, storages, scalars, offsets, device,
                                   token)
            return _replay._Staged(device, 0, go)
        plan = self.flat
        if plan.stamp is not token or not plan.compiled.in_cache:
            return None
        try:
            kernel, last = plan.threads.state
        except AttributeError:  # (another thread: its first launch goes the general way)
            return None
        return _replay._Staged(device, 1, flat=(plan.go, kernel, last,
                                                math.prod(shape) * node.dtype.itemsize),
                               storages=storages, scalars=scalars)


class _Call:
    """A kept split call: each part's :class:`_PartLaunch`, in order, its result's
    (shape, dtype) (``results``: a reduction's partials; None: the parts' own), and a
    reduction's combine on the first device (:class:`_Combine`, once known)."""

    __slots__ = ("combine", "parts", "results")

    def __init__(self, parts: Sequence[_PartLaunch], results: Sequence[Any] | None) -> None:
        self.parts, self.results = tuple(parts), results
        self.combine: _Combine | None = None


class _Combine:
    """How a kept reduction's partial results are combined on the first device
    (``device``): each other device's copied there by its ``backend``, then one flat
    elementwise launch (``plan``) over the pieces taken in ``order`` (positions among
    the partials), its result of ``shape`` and ``dtype``."""

    __slots__ = ("backend", "device", "dtype", "order", "plan", "shape")

    def __init__(self, device: Any, plan: Any, order: list[int], shape: tuple[int, ...],
                 dtype: Any) -> None:
        self.backend, self.device, self.plan = backend_for(device), device, plan
        self.order, self.shape, self.dtype = order, shape, dtype


def keep_combine(call: _Call, out: Array, pieces: Sequence[Array]) -> Array:
    """``out``, the ``pieces`` (the partial results on the first device, in order)
    combined; kept as ``call``'s combine where its launch is a flat one whose kernel
    is cached (``evaluate.flat_launch_ready``) over the pieces' buffers alone."""
    if out._storage is not None:
        return out
    ready = flat_launch_ready(out._node, out.shape, out.device)
    if ready is None:
        return out
    plan, storages, scalars, _, _ = ready
    pool = [p._storage for p in pieces]
    order = [next((k for k, b in enumerate(pool) if b is s), -1) for s in storages]
    if not scalars and -1 not in order:
        call.combine = _Combine(out.device, plan, order, out.shape, out.dtype)
    return out


def combined(call: _Call, partials: Sequence[Array]) -> Array | None:
    """The ``partials`` combined by ``call``'s kept combine, enqueued now (the copies,
    then the launch); None where it no longer applies (the caller combines them its
    own way)."""
    comb = call.combine
    assert comb is not None
    plan, first = comb.plan, comb.device
    if plan.stamp is not _recipes_current[0] or not plan.compiled.in_cache:
        call.combine = None
        return None
    try:
        kernel, last = plan.threads.state
    except AttributeError:  # (another thread's first launch of it goes the general way)
        return None
    if not _EXCHANGED:  # (exchange imports array, which imports this module)
        from .exchange import EXCHANGED

        _EXCHANGED.append(EXCHANGED)
    counts = _EXCHANGED[0]
    pool = []
    with _replay.current(first):
        for q in partials:
            s = q._storage
            if s is None:
                return None
            if q.device is not first:
                nbytes = q.nbytes
                copy = allocate(nbytes, first)
                if not comb.backend.copy_from(first, copy.buffer, q.device, s.buffer, nbytes):
                    return None
                counts["rows"] += q.shape[0] if q.ndim else 1
                counts["bytes"] += nbytes
                counts["copies"] += 1
                s = copy
            pool.append(s)
    storages = [pool[k] for k in comb.order]
    out = _replay._Staged(first, 1, flat=(plan.go, kernel, last,
                                          math.prod(comb.shape) * comb.dtype.itemsize),
                          storages=storages).launch()
    with _stats_lock:
        _counters["memory_cache_hits"] += 1
        _counters["kernels_launched"] += 1
    return Array._concrete(out, comb.dtype, comb.shape)


def found(tag: Any, parts: Sequence[Array], hold: bool = False
          ) -> tuple[tuple | None, list[Any] | None, _Call | None]:
    """The key of a split call over the lazy ``parts`` (``tag``: what the call does with
    them; then each part's signature, view offsets, shape and device index), and where a
    call is kept under it, every part staged from it (``replay._Staged``) and the call.
    The key is None where a part is evaluated already or has no signature; the staged
    parts None where no call is kept or a part's launch no longer applies (the call is
    dropped: the caller stages the parts one by one, and may keep the call again);
    ``hold``: see :meth:`_PartLaunch.stage`."""
    sigs, offs, shapes, devices = [], [], [], []
    for p in parts:
        if p._storage is not None:
            return None, None, None
        node = p._node
        sig = node.sig or signature_of(node)
        if not sig:
            return None, None, None
        sigs.append(sig)
        offs.append(node.offs)  # (signatures leave views' offsets out: kept launches bake them)
        shapes.append(p.shape)
        devices.append(p.device.index)
    key = (tag, tuple(sigs), tuple(offs), tuple(shapes), tuple(devices))
    call = _CALLS.get(key)
    if call is None or len(call.parts) != len(parts):
        return key, None, None
    token = _recipes_current[0]
    staged = []
    for part, p in zip(call.parts, parts):
        ready = part.stage(p._node, p.shape, token, hold)
        if ready is None:
            _CALLS.pop(key, None)  # (another thread may have dropped it too)
            return key, None, None
        staged.append(ready)
    COUNTS[0] += 1
    return key, staged, call


def keep(key: tuple | None, parts: Sequence[_PartLaunch | None],
         results: Sequence[Any] | None = None) -> _Call | None:
    """Keep (and return) the call of ``key`` whose parts were staged from ``parts``
    (None: a part staged otherwise, so the call is not kept); ``results``: see
    :class:`_Call`."""
    if key is None or not parts or any(p is None for p in parts):
        return None
    if len(_CALLS) >= CALLS_MAX:
        _CALLS.clear()
    call = _CALLS[key] = _Call([p for p in parts if p is not None], results)
    COUNTS[1] += 1
    return call


__all__ = ["COUNTS", "combined", "found", "keep", "keep_combine"]
