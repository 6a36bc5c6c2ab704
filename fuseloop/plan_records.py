"""The records of :mod:`fuseloop.run_plans`: a run plan (:class:`_Plan`), its steps (one
recorded launch each, :class:`_Step`) and the :class:`Recorder` that notes them while an
evaluation runs, installed per thread (:func:`recording`; see ``run_plans``' docstring)."""

from __future__ import annotations

import contextlib
import math
import threading
from collections import OrderedDict
from collections.abc import Iterator, Sequence
from typing import Any, Literal

import numpy as np

from . import evaluate as _ev
from . import plan_lengths as _pl
from .expr.nodes import Scalar, Storage
from .expr.program import Bindings, ViewOffsets
from .launching import LaunchPlan
from .plan_ready import Ready
from .runtime.devices import Device


class _Step:
    """One recorded launch; refs are ``("i", slot)`` inputs or ``("t", k)`` allocations.

    ``offsets``: ``(position in params, k)`` for each parameter holding the k-th of the
    walk's distinct view offsets (:class:`~fuseloop.expr.program.ViewOffsets`), which a
    replay takes from its own views.
    """

    __slots__ = ("biggest", "device", "kernel", "moving", "offsets", "out_refs", "out_shape",
                 "params", "picks", "plan", "plan_params", "plans", "program", "rebind",
                 "scalar_refs", "storage_refs", "writes_input")

    def __init__(self, program: Any, params: list[int], out_shape: tuple[int, ...],
                 storage_refs: tuple, out_refs: tuple, scalar_refs: tuple,
                 offsets: tuple[tuple[int, int], ...] = ()) -> None:
        self.program = program
        self.params = params
        self.offsets = offsets
        self.plan_params = params  # the parameters ``plan`` was made for
        # a step with offsets: its launch plans per parameters, made on first use
        self.plans: OrderedDict[tuple, LaunchPlan] | None = None
        self.out_shape = out_shape
        self.storage_refs = storage_refs
        self.out_refs = out_refs
        # it writes a caller's buffer: checked gathers' flags are read first (fuseloop.flags)
        self.writes_input = any(kind == "i" for kind, _ in out_refs)
        self.scalar_refs = scalar_refs
        # (inputs count, storage_refs and out_refs as positions in a replay's pool of
        # inputs then allocations): made by the first replay, see _steps.pool_refs
        self.picks: tuple[int, tuple[int, ...], tuple[int, ...]] | None = None
        # the launch plan of its last replay (see fuseloop.launching.LaunchPlan), and the
        # device it was confirmed for under the plan's recipes stamp
        self.plan: LaunchPlan | None = None
        self.device: Device | None = None
        # (recipe, index dtype, device, tuned recipe and size class, kernel): the
        # kernel its last plan_launch found (see plan_steps._new_plan)
        self.kernel: tuple | None = None
        self.rebind: tuple | None = None  # (kernel, its offsets' places): plan_steps._rebound
        # (its launch plan taking the offsets as launch arguments, and their places:
        # plan_steps.launch_step)
        self.moving: tuple[LaunchPlan, Any] | None = None
        # the largest of its own parameters and output size (replays without offsets)
        self.biggest = max(max(params, default=0), math.prod(out_shape))


class _Plan:
    __slots__ = ("allocs", "forms", "growing", "lengths", "moving", "picks", "ready",
                 "results", "signed", "split", "splits_at", "steps", "variants")

    def __init__(self, allocs: list[int], steps: list[_Step], results: tuple,
                 lengths: tuple[int, ...] = (), split: _pl.Split | None = None) -> None:
        self.allocs = allocs
        self.steps = steps
        self.results = results
        # the walk's lengths it was recorded for, and how its sizes follow from other
        # lengths of its key once known (see fuseloop.plan_lengths)
        self.lengths = lengths
        self.forms: _pl.Forms | None = None
        # a plan with a split reduction: its split, which its forms hold for (None: not
        # known; see plan_lengths.split_of)
        self.split = split
        # its key's lengths -> their split, where it has a split or variants (see
        # plan_lengths.owner_at)
        self.splits_at: dict[tuple[int, ...], Any] | None = None
        # the key's plans for lengths that split otherwise (see plan_lengths.learn)
        self.variants: tuple[_Plan, ...] = ()
        self.picks: tuple[int, tuple[int, ...]] | None = None  # (see _Step.picks)
        self.signed = 0  # the signatures it was remembered under (see _remember_signed)
        # its replays made ready, per view offsets (see fuseloop.plan_ready)
        # (False: not to be made ready for those offsets)
        self.ready: dict[tuple[int, ...], Ready | Literal[False]] | None = None
        # its replay at any view offsets (fuseloop.plan_moving), or the general replays
        # that could not make one
        self.moving: Any = None
        # its replay at any lengths its forms hold for (fuseloop.plan_growing), or the
        # general replays that could not make one
        self.growing: Any = None


class Recorder:
    """Collects the launches of one evaluation, and the temporaries they write (see the
    module docstring): :func:`fuseloop.evaluate.launch` hands this thread's recorder
    each launch (:meth:`launch`)."""

    def __init__(self, storages: list[Storage], scalars: list[np.generic],
                 slots: dict[Any, int], offsets: ViewOffsets | None = None,
                 dry: bool = False) -> None:
        self.refs: dict[int, tuple] = {id(s): ("i", k) for k, s in enumerate(storages)}
        # a launch's scalars by the node they came from (Bindings.scalar_nodes), else
        # by value object: -1 where two scalar nodes hold one object (``x*2 + y*2``:
        # Python's 2 converts to one numpy scalar), which a launch could not tell apart
        self.node_slots = {id(n): k for n, k in slots.items() if type(n) is Scalar}
        self.scalar_slots: dict[int, int] = {}
        for k, v in enumerate(scalars):
            self.scalar_slots[id(v)] = -1 if id(v) in self.scalar_slots else k
        self.keep: list[Any] = [storages, scalars, slots]  # ids stay unique while recording
        self.allocs: list[int] = []
        self.steps: list[_Step] = []
        self.failed = False
        self.offsets = offsets
        self.dry = dry  # note launches without enqueuing them
        # a launch read an offset that is not one of the walk's views' (or could not
        # say which parameters are offsets): the plan holds for these offsets only
        self.exact = False

    def launch(self, program: Any, bindings: Bindings, outs: Sequence[Storage],
               device: Device) -> None:
        """Launch (``evaluate.launch_now``, unless dry), then note the launch as a step."""
        if not self.dry:
            _ev.launch_now(program, bindings, outs, device)
        if not self.failed:
            self._note(program, bindings, outs)

    def _note(self, program: Any, bindings: Bindings, outs: Sequence[Storage]) -> None:
        refs = self.refs
        for s in outs:  # a buffer first seen as an output is a temporary of the evaluation
            if id(s) not in refs:
                refs[id(s)] = ("t", len(self.allocs))
                self.allocs.append(s.nbytes)
                self.keep.append(s)
        try:
            storage_refs = tuple(refs[id(s)] for s in bindings.storages)
            out_refs = tuple(refs[id(s)] for s in outs)
            if bindings.scalar_nodes is not None:
                scalar_refs = tuple(self.node_slots[id(n)] for n in bindings.scalar_nodes)
            else:
                scalar_refs = tuple(self.scalar_slots[id(v)] for v in bindings.scalars)
        except KeyError:  # a buffer neither an input nor written by a kernel here
            self.failed = True
            return
        if -1 in scalar_refs:
            self.failed = True
            return
        self.steps.append(_Step(program, list(bindings.params), bindings.out_shape,
                                storage_refs, out_refs, scalar_refs,
                                self._offset_refs(bindings)))

    def _offset_refs(self, bindings: Bindings) -> tuple[tuple[int, int], ...]:
        offs = self.offsets
        if offs is None or not offs.values:
            return ()
        slots = bindings.offset_slots
        if slots is None:
            self.exact = True
            return ()
        refs = []
        for j in slots:
            k = offs.index.get(bindings.params[j])
            if k is None:
                self.exact = True
                return ()
            refs.append((j, k))
        return tuple(refs)

    def ref(self, storage: Storage) -> tuple | None:
        return self.refs.get(id(storage))


_local = threading.local()
# threads recording now: the common answer, "none", without the local
recording_threads: list[int] = [0]
_lock = threading.Lock()


def install_recorder(rec: Any) -> Any:
    """Make ``rec`` this thread's recorder (every launch and allocation is reported to it,
    see :class:`Recorder`); returns the one it replaces, for :func:`restore_recorder`."""
    saved = getattr(_local, "recorder", None)
    with _lock:
        recording_threads[0] += 1
    _local.recorder = rec
    return saved


def restore_recorder(saved: Any) -> None:
    """Undo :func:`install_recorder`."""
    _local.recorder = saved
    with _lock:
        recording_threads[0] -= 1


@contextlib.contextmanager
def recording(rec: Any) -> Iterator[Any]:
    """``with recording(rec):`` the block's launches are reported to ``rec``."""
    saved = install_recorder(rec)
    try:
        yield rec
    finally:
        restore_recorder(saved)


def recorder() -> Recorder | None:
    """The recorder of this thread's evaluation in progress, if any."""
    if not recording_threads[0]:
        return None
    return getattr(_local, "recorder", None)
