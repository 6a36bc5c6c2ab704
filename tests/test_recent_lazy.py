"""The registry of recent lazy arrays (``fuseloop.expr.nodes.recent_lazy``).

New lazy arrays are held there strongly until it is sorted: the ones something
else still holds become readers of their buffers (so a later write evaluates them
first); the rest are let go.
"""

import gc
import weakref

import numpy as np
import pytest

import fuseloop as fl
from fuseloop import evaluate
from fuseloop.expr import nodes, readers


class _Thing:
    __slots__ = ("__weakref__",)


@pytest.mark.skipif(not nodes._EXACT_REFCOUNTS, reason="reference counts are not exact here")
def test_reference_count_baseline_tells_held_from_unheld():
    unheld = [_Thing()]
    assert nodes._refcounts(unheld) == [nodes._UNHELD]
    kept = _Thing()
    assert nodes._refcounts([kept]) == [nodes._UNHELD + 1]


def _readers_of(arr):
    readers = arr._storage.readers
    return [] if readers is None else [r() for r in readers.values() if r() is not None]


def test_sorting_enters_held_arrays_and_lets_go_of_the_rest(device):
    x = fl.asarray(np.arange(8, dtype=np.float32))
    nodes.register_readers()
    held = x * 2 + 1  # x * 2 is a temporary
    assert nodes.recent_lazy[-2:][1] is held
    nodes.register_readers()
    assert not nodes.recent_lazy
    assert [r is held for r in _readers_of(x)] == [True]  # the temporary was not entered
    x[...] = 0
    np.testing.assert_array_equal(held.get(), np.arange(8) * 2 + 1)


def test_synchronize_frees_what_only_the_registry_held(device):
    tmp = fl.asarray(np.ones(64, np.float32))
    gone = weakref.ref(tmp._storage)
    _ = tmp * 3  # a lazy array nothing holds after the next statement
    del _, tmp
    gc.collect()
    assert gone() is not None  # the registry still holds the lazy array
    fl.synchronize()
    assert gone() is None


def test_a_large_allocation_frees_what_only_the_registry_held(device):
    tmp = fl.asarray(np.ones(64, np.float32))
    gone = weakref.ref(tmp._storage)
    _ = tmp + 1
    del _, tmp
    big = fl.empty(evaluate.RELEASE_RECENT_AT // 4, np.float32)  # RELEASE_RECENT_AT bytes
    assert gone() is None
    assert big.nbytes == evaluate.RELEASE_RECENT_AT


@pytest.mark.skipif(not nodes._EXACT_REFCOUNTS, reason="reference counts are not exact here")
def test_a_prune_keeps_held_arrays_pending_until_a_write(device):
    """Past ``recent_limit`` new arrays the registry is pruned: arrays nothing else holds
    are let go, held ones stay in it by weak reference without being entered in their
    buffers' readers; a later write into the buffer still evaluates them first, and
    one let go later is freed at once."""
    xh = np.arange(8, dtype=np.float32)
    x = fl.asarray(xh)
    nodes.register_readers()
    kept = [x * float(k) for k in range(3 * nodes.RECENT_LAZY_MAX)]
    assert readers.recent_limit > 3 * nodes.RECENT_LAZY_MAX  # (pruned: the limit grew)
    assert not _readers_of(x)  # pending, not entered
    pending = [r() for r in nodes.recent_lazy[:readers.pending_count]]  # (weakly)
    assert all(any(p is a for p in pending) for a in kept)
    del pending
    watched = weakref.ref(kept[-1])
    del kept[nodes.RECENT_LAZY_MAX:]  # pending, then let go: freed at once
    assert watched() is None
    for _ in range(readers.recent_limit):
        x + 1  # unheld: let go at the next prune, with the dead pending entries
    assert len(nodes.recent_lazy) <= len(kept) + nodes.RECENT_LAZY_MAX
    x[...] = 0  # evaluates every pending reader first
    assert readers.recent_limit == nodes.RECENT_LAZY_MAX
    for k, a in enumerate(kept):
        assert not a.is_lazy
        np.testing.assert_array_equal(a.get(), xh * k)


def test_a_weakly_referenced_array_is_entered(device):
    """An array only the registry and a weak reference hold is entered as a reader:
    another thread could take it back from the weak reference between the sort's
    count and its letting go."""
    x = fl.asarray(np.arange(4, dtype=np.float32))
    nodes.register_readers()
    watched = weakref.ref(x * 5)
    key = id(watched())
    nodes.register_readers()
    # entered under its id (the entry is dead now: nothing held the array after the sort)
    assert key in (x._storage.readers or {})


def test_without_exact_reference_counts_every_array_is_entered(device, monkeypatch):
    monkeypatch.setattr(readers, "_UNHELD", -1)  # (nodes re-exports it)
    xh = np.arange(16, dtype=np.float32)
    x = fl.asarray(xh)
    nodes.register_readers()
    early = x * 2 - 1
    for _ in range(2 * nodes.RECENT_LAZY_MAX):
        (x + 1).eval()
    x += 3
    np.testing.assert_array_equal(early.get(), xh * 2 - 1)
    np.testing.assert_array_equal(x.get(), xh + 3)


def test_assigning_a_new_expression_does_not_keep_it(device):
    """``out[...] = e`` with a just-built ``e``: the registry's reference is not the
    caller's, so ``e`` gets no buffer of its own (one output)."""
    x = fl.asarray(np.arange(32, dtype=np.float32))
    out = fl.empty_like(x)
    out[...] = x * 2 + 5  # compiles the structure
    fl.synchronize()
    fl.reset_stats()
    out[...] = x * 2 + 7
    np.testing.assert_array_equal(out.get(), np.arange(32) * 2 + 7)
    assert fl.stats()["kernels_compiled"] == 0
    kept = x * 2 + 9
    out[...] = kept  # held by the caller: evaluated in the same kernel
    assert not kept.is_lazy
    np.testing.assert_array_equal(kept.get(), np.arange(32) * 2 + 9)


def test_an_evaluation_that_fails_leaves_the_array_a_reader(device, monkeypatch):
    """``e.eval()`` of a large ``e`` takes it out of the registry (once concrete it
    reads nothing); when the evaluation fails ``e`` is still lazy, so it is put back:
    a later write into its input evaluates it first."""
    from fuseloop import array as array_mod

    h = np.arange(evaluate.RELEASE_RECENT_AT // 4, dtype=np.float32)
    x = fl.asarray(h)
    nodes.register_readers()
    e = x * 2 + 1
    real = array_mod.run_flat

    def refuse(*args):
        monkeypatch.setattr(array_mod, "run_flat", real)
        raise RuntimeError("refused")

    monkeypatch.setattr(array_mod, "run_flat", refuse)
    with pytest.raises(RuntimeError, match="refused"):
        e.eval()
    assert e.is_lazy
    x[...] = 0
    np.testing.assert_array_equal(e.get(), h * 2 + 1)


def test_a_replayed_plan_with_a_large_buffer_frees_what_only_the_registry_held(device):
    """A replayed plan takes its buffers from the pool directly (plan_steps.temporaries),
    still letting go of unheld recent lazy arrays before a large one."""
    n = evaluate.RELEASE_RECENT_AT // 4
    x = fl.asarray(np.ones((2, n), np.float32))
    for _ in range(2):  # records the plan, then replays it
        x.sum(axis=0, keepdims=True).eval()
    tmp = fl.asarray(np.ones(64, np.float32))
    gone = weakref.ref(tmp._storage)
    _ = tmp + 1
    del _, tmp
    out = x.sum(axis=0, keepdims=True).eval()  # RELEASE_RECENT_AT bytes
    assert gone() is None
    np.testing.assert_array_equal(out[0, :4].get(), [2, 2, 2, 2])


def test_a_replayed_plan_whose_buffer_is_refused_lets_go_and_tries_again(device, monkeypatch):
    """A refusal of a replayed plan's buffer goes to evaluate.allocate, which lets go of
    unheld recent lazy arrays and tries once more."""
    from fuseloop.errors import OutOfMemoryError
    from fuseloop.runtime.memory import DeviceMemory

    h = np.arange(12, dtype=np.float32).reshape(3, 4)
    x = fl.asarray(h)
    for _ in range(2):  # records the plan, then replays it
        x.sum(axis=0).eval()
    real = DeviceMemory.allocate
    refused = []

    def refuse_once(self, nbytes):
        if not refused:
            refused.append(nbytes)
            raise OutOfMemoryError("refused")
        return real(self, nbytes)

    monkeypatch.setattr(DeviceMemory, "allocate", refuse_once)
    out = x.sum(axis=0).eval()
    monkeypatch.undo()
    assert refused
    np.testing.assert_array_equal(out.get(), h.sum(axis=0))
