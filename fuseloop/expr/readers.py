"""Lazy readers of device buffers: the registry of recent lazy arrays and ``Storage``.

Before anything writes into a buffer, the lazy arrays whose expressions read it are
evaluated, so laziness never lets a later write change an earlier expression's value.
(Split from :mod:`fuseloop.expr.nodes`, which re-exports these names.)
"""

from __future__ import annotations

import sys
import threading
import weakref
from itertools import compress, repeat
from operator import gt as _gt
from operator import is_not as _is_not
from operator import or_ as _or
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from ..runtime.devices import Device

# Storage.readers is shared by every thread that builds expressions on the buffer:
# iterating it while another thread adds or drops a reader would fail (reentrant:
# a finalizer that runs inside may build expressions too)
_readers_lock = threading.RLock()

# Lazy arrays not yet entered in their buffers' ``readers``, held strongly for a
# short while.  Most lazy arrays are the temporaries of a larger expression: by
# the time this list is sorted (when something is about to write into a buffer,
# see :meth:`Storage.live_readers`, or when this many have accumulated) nothing
# but the list holds them, and they are let go without ever costing a weak
# reference; only those still held elsewhere are entered, by weak reference.
# Holding them delays freeing an unheld array's buffers by up to
# ``RECENT_LAZY_MAX`` new lazy arrays, so the list is also sorted before large
# allocations, when an allocation fails and at ``fl.synchronize()``.
# Appends need no lock (``list.append`` is atomic); the sort takes a prefix under
# ``_readers_lock``, so an append racing with it is kept for the next one.
# (``fuseloop.array`` appends to the list itself, as ``note_reader`` does.)
# When the list reaches ``recent_limit`` it is pruned (:func:`prune_recent`): the
# held arrays stay in it, pending, as weak references at its head (made in C), and
# are entered only by a full sort (before a write, a large allocation,
# ``fl.synchronize()``): entering costs a call and a dict entry per buffer, more than
# building the array (a sum tree's levels kept in lists: 0.45 us a node), and most
# held arrays are let go before any write.
recent_lazy: list[Any] = []
RECENT_LAZY_MAX = 64
# RECENT_LAZY_MAX new arrays past twice those held at the last prune (amortised:
# held arrays are counted once per doubling); read as ``readers.recent_limit``
recent_limit = RECENT_LAZY_MAX
# how many entries at the head of recent_lazy are weak references to pending arrays
pending_count = 0
_ref = weakref.ref
_deref = weakref.ref.__call__
_weak_count = weakref.getweakrefcount


def note_reader(array: Any) -> None:
    """Record lazy ``array`` as a reader of the buffers its expression reads."""
    recent_lazy.append(array)
    if len(recent_lazy) >= recent_limit:
        prune_recent()


def forget_recent(array: Any) -> None:
    """Take ``array``, a new lazy array that nothing holds but its caller's call (an
    assigned value about to be let go: ``x[1:-1] = 0.5 * (x[:-2] + x[2:])``), out of
    the recent lazy arrays, so that it is never entered as a reader of its buffers:
    the write's own check would enter it (its caller still holds it then) only to
    skip it, and every statement of a loop would leave one dead reader behind.
    Looked for from the end under the lock: appends (not locked) only add after it,
    and only a locked batch takes a prefix.  Not where reference counts are not exact
    (the caller's "nothing holds it" is a reference count)."""
    if not _EXACT_REFCOUNTS:
        return
    with _readers_lock:
        for k in range(len(recent_lazy) - 1, max(-1, len(recent_lazy) - 5), -1):
            if recent_lazy[k] is array:
                del recent_lazy[k]
                return


def take_last_recent(array: Any) -> bool:
    """Take ``array``, about to be evaluated (then it reads nothing), out of the recent
    lazy arrays if it is the last one; True if taken (put back if evaluation fails)."""
    with _readers_lock:
        if recent_lazy and recent_lazy[-1] is array:
            recent_lazy.pop()
            return True
    return False


def _refcounts(arrays: list[Any]) -> list[int]:
    return list(map(sys.getrefcount, arrays))


class _Probe:
    __slots__ = ("__weakref__",)


# What _refcounts reports for an object that only its list holds (measured, so
# that it holds whatever the interpreter's own references are).  A build whose
# reference counts are not exact (free-threaded CPython, other interpreters)
# treats every recent array as held.
_EXACT_REFCOUNTS = (sys.implementation.name == "cpython"
                    and getattr(sys, "_is_gil_enabled", lambda: True)())
_UNHELD = _refcounts([_Probe()])[0] if _EXACT_REFCOUNTS else -1


def prune_recent() -> None:
    """Let go of the recent lazy arrays that nothing else holds; keep the held ones
    pending, by weak reference, at the head of the list (``pending_count`` of them:
    :func:`register_readers` enters the live ones).  A pending array that its holder
    lets go is freed at once, as an entered one would be."""
    global recent_limit, pending_count
    if not _EXACT_REFCOUNTS:  # (every array counts as held: none would ever go)
        register_readers()
        return
    with _readers_lock:
        n = len(recent_lazy)
        k = pending_count
        refs = recent_lazy[:k]
        batch = recent_lazy[k:n]
        del recent_lazy[:n]
        # held as register_readers tells it; all looped over in C
        held = compress(batch, map(_or, map(
            _gt, _refcounts(batch), repeat(_UNHELD)), map(_weak_count, batch)))
        refs = [*compress(refs, map(_is_not, map(_deref, refs), repeat(None))),
                *map(_ref, held)]
        recent_lazy[:0] = refs  # (appends racing with this one stay after them)
        pending_count = len(refs)
        recent_limit = 2 * len(refs) + RECENT_LAZY_MAX


def register_readers() -> None:
    """Enter the recent lazy arrays that are still lazy and held elsewhere, and the
    pending ones still alive, in their buffers' readers; let go of the rest."""
    global recent_limit, pending_count
    with _readers_lock:
        recent_limit = RECENT_LAZY_MAX
        n = len(recent_lazy)
        if not n:
            return
        k = pending_count
        pending_count = 0
        refs = recent_lazy[:k]
        batch = recent_lazy[k:n]
        del recent_lazy[:n]
        # held: counted more than the batch's own reference, or weakly referenced (a
        # weak reference could hand an unheld array out again); looped over in C, as
        # most of a batch is temporaries
        held = map(_or, map(_gt, _refcounts(batch), repeat(_UNHELD)), map(_weak_count, batch))
        _enter_all(compress(batch, held))
        if refs:
            _enter_all(map(_deref, refs))


def _enter_all(arrays: Any) -> None:
    """Enter each of ``arrays`` still lazy in its buffers' readers (lock held)."""
    for a in arrays:
        if a is not None and a._storage is None:  # (None: a dead pending array)
            ref = _ref(a)
            key = id(a)
            for s in a._node.storages:
                s._enter(key, ref)


#: storages whose buffers pyopencl arrays also use (``fl.to_pyopencl``/``from_pyopencl``):
#: pyopencl's commands do not wait for fuseloop's deferred launches, so a write into one
#: is enqueued at once
SHARED_WITH_PYOPENCL: weakref.WeakSet = weakref.WeakSet()


class Storage:
    """A device buffer with the bookkeeping that keeps lazy readers correct.

    ``readers`` holds the lazy arrays whose expressions read this buffer; before
    anything writes into the buffer they are evaluated, so laziness never lets a
    later write change the value of an earlier expression.  New lazy arrays are
    entered in bulk (see :func:`note_reader`); :meth:`live_readers` enters the
    pending ones first, so it sees every lazy reader created before the call.
    """

    __slots__ = ("__weakref__", "_purge_at", "buffer", "constant", "device", "nbytes",
                 "readers")

    def __init__(self, buffer: Any, nbytes: int, device: Device,
                 constant: bool = False) -> None:
        self.buffer = buffer
        self.nbytes = nbytes
        self.device = device
        # read through OpenCL's __constant address space (fl.constant(array)); part of
        # every leaf's structure token, since the kernel's declaration differs
        self.constant = constant
        # id(array) -> weak reference; arrays are unhashable (== is elementwise);
        # None until the first reader is entered (most buffers never get one)
        self.readers: dict[int, weakref.ref] | None = None
        self._purge_at = 64

    def _enter(self, key: int, ref: weakref.ref) -> None:
        """Add a reader; the caller holds ``_readers_lock``."""
        readers = self.readers
        if readers is None:
            readers = self.readers = {}
        elif len(readers) >= self._purge_at:  # dead entries are dropped in amortised O(1)
            for k in [k for k, r in readers.items() if r() is None]:
                del readers[k]
            self._purge_at = 2 * len(readers) + 64
        readers[key] = ref

    def add_reader(self, array: Any) -> None:
        with _readers_lock:
            self._enter(id(array), _ref(array))

    def discard_reader(self, array: Any) -> None:
        key = id(array)
        readers = self.readers
        if readers is None or key not in readers:  # the common case (see note_reader)
            return
        with _readers_lock:
            ref = readers.get(key)
            if ref is not None and ref() is array:
                del readers[key]

    def live_readers(self) -> list[Any]:
        alive: list[Any] = []
        with _readers_lock:
            register_readers()
            readers = self.readers
            if readers is None:
                return alive
            for k, r in list(readers.items()):
                a = r()
                if a is None:
                    del readers[k]
                else:
                    alive.append(a)
        return alive
