"""``fl.fuse`` replayed as graphs (CUDA graphs) where the backend has them.

A traced signature's record (:class:`fuseloop.fuse_entry.Entry`) of several launches
costs the host one launch each per call.  On a backend with graphs
(``Backend.graphs``: CUDA) :class:`GraphReplay` captures the record's launches once
and replays them as one graph launch (``cudaGraphLaunch``).

A captured graph holds its kernels' arguments as values: the addresses of every
buffer and the scalars.  So a graph serves one *buffer set* and one *key*:

* the temporaries (the results among them) are a buffer set the replay owns: it
  keeps :data:`SETS` sets per signature and writes a call's results into a set
  none of whose previous results is still referenced (each call wraps the set's
  buffers in new ``Storage`` objects and keeps weak references to them).  Two sets
  serve both ``y = f(x)`` in a loop (the previous ``y`` is alive during the call)
  and ``x = f(x)`` (the inputs alternate between the two sets);
* the key is the arguments' buffer addresses and scalar arguments (which decide the
  kernels' scalars; zeros with their signs): a graph is replayed only for the same
  key.  A key is captured the second time it is seen (a one-off argument costs no
  capture), at most :data:`GRAPHS_MAX` per signature:
  past that (e.g. a scalar argument that changes every call) the signature goes
  back to its launches for good.

Anything else falls back to the launches, one by one, correctly: no set free (every
set's results still held), a key not yet captured, recipes changed since the capture
(``fuseloop.recipes.registry.current``: the graphs are dropped), a launch plan not
current, or the driver refusing the capture (graphs are then off for the signature).
Records of one launch do not use graphs (one graph launch costs what one kernel
launch does), nor records with a checked gather (its error flag is read per call),
nor records whose temporaries exceed :data:`SET_MAX_BYTES`.
``FUSELOOP_GRAPHS=0`` turns graphs off.
"""

from __future__ import annotations

import math
import os
import threading
import weakref
from collections.abc import Sequence
from typing import Any

import numpy as np

from .array import Array
from .backends import backend_for
from .expr.nodes import Storage
from .launching import thread_kernel
from .recipe_state import current as _recipes_current
from .runtime.devices import _runtime
from .stats import _lock as _stats_lock  # (fl.stats, a function, shadows the module)
from .stats import counters as _counters

#: whether fused functions use graphs on backends that have them
ENABLED = os.environ.get("FUSELOOP_GRAPHS", "1").strip().lower() not in ("0", "no", "off")
#: a record replays as a graph from this many launches (one: a launch with temporaries,
#: a split reduction's one launch among them, replays cheaper as a graph than launched)
MIN_LAUNCHES = 1
#: buffer sets (temporaries and results) a signature keeps for its graphs
SETS = 2
#: graphs captured per signature before it stops trying
GRAPHS_MAX = 8
#: the largest buffer set (bytes of the temporaries): larger records keep no sets (their
#: kernels' run time dwarfs a launch's host cost, and the sets would hold the memory)
SET_MAX_BYTES = 1 << 26
#: keys seen once (not yet captured) remembered per signature (all dropped when reached)
SEEN_MAX = 64


def suits(entry: Any, programs: Sequence[Any]) -> bool:
    """Whether ``entry`` (a new record) is replayed by :class:`GraphReplay`."""
    if not ENABLED or entry.eager or not entry.temps or len(entry.steps) < MIN_LAUNCHES \
            or sum(entry.temps) > SET_MAX_BYTES:
        return False
    if not getattr(backend_for(entry.device), "graphs", False):
        return False
    return not any(e.kind == "gather" for p in programs for e in p.entries)


class _Set:
    """One set of the temporaries' buffers, and the graphs captured writing into it."""

    __slots__ = ("buffers", "graphs", "held", "inner")

    def __init__(self, buffers: list[Any], inner: list[Storage]) -> None:
        self.buffers = buffers
        # the temporaries no result is, as Storage objects made once (a graph's
        # calls hand out new ones only for the results)
        self.inner = inner
        # key -> (graph, what it must keep alive)
        self.graphs: dict[tuple, tuple[Any, list[Any]]] = {}
        # weak references to the Storage objects of the set's last call
        self.held: list[weakref.ref] = []

    def free(self) -> bool:
        for r in self.held:
            if r() is not None:
                return False
        return True


def _scalar_key(values: list[Any]) -> tuple:
    """What decides a call's kernel scalars (a function of its scalar arguments): the
    arguments, with the signs of zeros (-0.0 == 0.0)."""
    key = tuple(values)
    if 0 in key:
        key += tuple(math.copysign(1.0, v) if isinstance(v, float | np.floating) else 0
                     for v in values)
    return key


class _Bound:
    """What a captured launch holds of a buffer: the buffer, not its ``Storage`` (whose
    weak references say when a set is free)."""

    __slots__ = ("__weakref__", "buffer")

    def __init__(self, storage: Storage) -> None:
        self.buffer = storage.buffer


class GraphReplay:
    """``entry.run`` of a record replayed as graphs (see the module docstring);
    ``graph_calls`` counts the calls that launched a graph."""

    def __init__(self, entry: Any, n_in: int) -> None:
        self.entry = entry
        self.backend = backend_for(entry.device)
        self.address = self.backend.buffer_address
        self.runtime = _runtime(entry.device)
        self.sets: list[_Set] = []
        self.seen: set[tuple] = set()
        self.captured = 0
        self.stamp = _recipes_current[0]
        self.graph_calls = 0
        self.lock = threading.Lock()
        # the results when each is a temporary: (temporary index, dtype, shape) each
        # (the hit path makes them itself), else None (entry._results makes them);
        # a result's position in the call's pool is n_in + its temporary's index
        self.fast: list[tuple[int, Any, tuple]] | None = None
        if all(kind == 0 for kind, *_ in entry.results) and \
                entry.structure in (None, tuple, list):
            self.fast = [(a - n_in, dtype, shape) for _, a, dtype, shape in entry.results]
        self.result_temps = {a - n_in for kind, a, _, _ in entry.results if kind == 0}

    def __call__(self, storages: list[Storage], values: list[Any], args: tuple) -> Any:
        entry = self.entry
        sc = entry.scalars(values)  # (first: it may raise KindChanged, nothing launched)
        with self.lock:
            if self.stamp is not _recipes_current[0]:  # (recipes changed: kernels may too)
                self.stamp = _recipes_current[0]
                for s in self.sets:
                    s.graphs.clear()
            chosen = next((s for s in self.sets if s.free()), None) or self._another_set()
            if chosen is None:  # (every set's results are still held)
                return entry._replay(storages, values, args, sc)
            address = self.address
            key = (tuple([address(s.buffer) for s in storages]), _scalar_key(values))
            graph = chosen.graphs.get(key)
            if graph is None:
                return self._launches_into(chosen, key, storages, values, args, sc)
            fast = self.fast
            if fast is None:
                return self._graph_call(chosen, graph[0], storages, values, args)
            device = entry.device
            buffers, sizes = chosen.buffers, entry.temps
            results = []
            held = []
            for k, dtype, shape in fast:
                out = Storage(buffers[k], sizes[k], device)
                held.append(weakref.ref(out))
                results.append(Array._concrete(out, dtype, shape))
            chosen.held = held
            self._launch(graph[0])
        structure = entry.structure
        return results[0] if structure is None else structure(results)

    def _launches_into(self, chosen: _Set, key: tuple, storages: list[Storage],
                       values: list[Any], args: tuple, sc: list[Any]) -> Any:
        """A call launched kernel by kernel into ``chosen``'s buffers (new Storage
        objects for all, held weakly: deferred launches hold them until enqueued)."""
        entry = self.entry
        device = entry.device
        temps = [Storage(b, n, device) for b, n in zip(chosen.buffers, entry.temps)]
        chosen.held = [weakref.ref(t) for t in temps]
        done = entry._replay(storages, values, args, sc, temps)
        self._remember(chosen, key, storages, temps, sc)
        return done

    def _graph_call(self, chosen: _Set, graph: Any, storages: list[Storage],
                    values: list[Any], args: tuple) -> Any:
        """A graph call whose results are not all temporaries (``entry._results``)."""
        entry = self.entry
        device = entry.device
        temps = [Storage(b, n, device) if k in self.result_temps else chosen.inner[k]
                 for k, (b, n) in enumerate(zip(chosen.buffers, entry.temps))]
        chosen.held = [weakref.ref(temps[k]) for k in self.result_temps]
        self._launch(graph)
        return entry._results(entry.pool_of(storages, temps), values, args)

    def _another_set(self) -> _Set | None:
        """A new set while there are fewer than :data:`SETS`, else one freed by
        enqueueing the deferred launches, else None."""
        if len(self.sets) >= SETS:
            rt = self.runtime
            if not rt.deferred:
                return None
            # deferred launches hold their buffers until enqueued (a graph launch
            # enqueues them first anyway)
            rt.flush()
            return next((s for s in self.sets if s.free()), None)
        from .fuse_entry import _allocate

        entry = self.entry
        made = [_allocate(entry.pool.allocate, n, entry.device) for n in entry.temps]
        self.sets.append(_Set([m.buffer for m in made], made))
        return self.sets[-1]

    def _remember(self, chosen: _Set, key: tuple, storages: list[Storage],
                  temps: list[Storage], sc: list[Any]) -> None:
        """Note ``key``; capture its graph when it is seen the second time."""
        if key not in self.seen:
            if len(self.seen) >= SEEN_MAX:
                self.seen.clear()
            self.seen.add(key)
            return
        launches = self._launches(storages, temps, sc)
        if launches is None:
            return
        entry = self.entry
        self.captured += 1
        if self.captured > GRAPHS_MAX:
            self._give_up()
            return

        def enqueue(queue: Any) -> None:
            for go, bound in launches:
                go(*bound, queue)
        try:
            graph = self.backend.capture(entry.device, enqueue)
        except Exception:  # (the driver refused: launches one by one from now on)
            self._give_up()
            return
        # (with the kernel objects: they keep the programs the graph runs loaded, also
        # once the kernel cache lets them go)
        chosen.graphs[key] = (graph, [bound[3] for _, bound in launches])

    def _launches(self, storages: list[Storage], temps: list[Storage], sc: list[Any]
                  ) -> list[tuple[Any, tuple]] | None:
        """Each step's ``(go, its arguments but the queue)``, or None unless every
        step's launch plan is current (a replay then makes them first)."""
        entry = self.entry
        token = _recipes_current[0]
        launches = []
        for step, st, os_, scalars, _ in entry.bound(entry.pool_of(storages, temps),
                                                     storages, sc):
            plan = step.plan
            if plan is None or plan.stamp is not token or not plan.compiled.in_cache \
                    or plan.error_arg is not None:
                return None
            kernel, last = thread_kernel(plan)
            launches.append((plan.go, ([_Bound(o) for o in os_], [_Bound(x) for x in st],
                                       scalars, kernel, last)))
        return launches

    def _launch(self, graph: Any) -> None:
        rt = self.runtime
        with rt.launch_lock:  # (after the deferred launches, in order)
            if rt.deferred:
                rt.flush()
            self.backend.launch_graph(self.entry.device, graph, rt.queue)
        self.graph_calls += 1
        n = len(self.entry.steps)
        counters = _counters
        with _stats_lock:  # (counted as the launches it replays)
            counters["memory_cache_hits"] += n
            counters["kernels_launched"] += n

    def _give_up(self) -> None:
        entry = self.entry
        entry.run = entry.replay
        self.sets.clear()
        self.seen.clear()


__all__ = ["ENABLED", "GraphReplay", "suits"]
