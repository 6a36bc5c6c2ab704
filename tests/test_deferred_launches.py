"""Small cached launches are deferred and enqueued in batches: results and order stay numpy's."""

from __future__ import annotations

import threading

import numpy as np
import pytest

import fuseloop as fl
import fuseloop.launching as launching
from fuseloop import splits
from fuseloop.runtime import devices
from fuseloop.runtime.devices import _runtime


def rand(n, seed):
    return np.random.default_rng(seed).random(n, dtype=np.float32)


def test_small_launches_wait_for_a_batch_and_run_before_any_read(device):
    xh = rand(1000, 1)
    x = fl.asarray(xh)
    (x * 2).eval()  # the structure's launch plan is made by a first evaluation
    fl.synchronize()
    rt = _runtime(device)
    fl.reset_stats()
    results = [(x * np.float32(k) + 1).eval() for k in range(5)]
    assert len(rt.deferred) == 5  # launched (counted) but not yet enqueued
    assert fl.stats()["kernels_launched"] == 5
    for k, r in enumerate(results):  # the first read enqueues them all
        np.testing.assert_allclose(r.get(), xh * np.float32(k) + 1)
    assert not rt.deferred


def test_a_full_batch_is_enqueued_without_a_read(device):
    x = fl.asarray(rand(100, 2))
    (x + 1).eval()
    rt = _runtime(device)
    fl.synchronize()
    results = [(x + k).eval() for k in range(launching.DEFER_MAX + 3)]
    assert len(rt.deferred) == 3  # DEFER_MAX went out together
    fl.synchronize()
    assert not rt.deferred
    np.testing.assert_allclose(results[-1].get(), x.get() + launching.DEFER_MAX + 2)


def test_writes_and_large_launches_come_after_deferred_ones(device):
    xh, bh = rand(1000, 3), rand(launching.DEFER_MAX_ELEMENTS * 4, 4)
    x, big = fl.asarray(xh), fl.asarray(bh)
    (x * 3).eval()
    (big * 2 + x[3]).eval()
    fl.synchronize()
    small = (x * 3).eval()  # deferred: reads x
    x[...] = 7  # a write into its input is enqueued after it
    np.testing.assert_allclose(small.get(), xh * 3)
    s2 = (x * 3).eval()  # deferred: 21 everywhere
    out = (big * 2 + s2[3]).eval()  # a large launch reading it: enqueued after it
    np.testing.assert_allclose(out.get(), bh * 2 + 21)
    # a reduction (a run plan) reading a deferred result
    s3 = (x - 1).eval()
    assert float(fl.sum(s3)) == 6 * 1000


def launch_interrupted_once():
    """A deferred launch whose first enqueue is interrupted, and the list of its calls."""
    calls = []

    def go(*args):
        calls.append(1)
        if len(calls) == 1:
            raise KeyboardInterrupt

    return go, calls


def test_an_interrupted_flush_loses_no_launch(device):
    xh = rand(500, 5)
    x = fl.asarray(xh)
    (x - 2).eval()
    fl.synchronize()
    rt = _runtime(device)
    r = (x - 2).eval()
    interrupted_once, calls = launch_interrupted_once()
    rt.deferred.appendleft((interrupted_once, ()))
    with pytest.raises(KeyboardInterrupt):
        fl.synchronize()
    assert len(rt.deferred) == 2  # both still waiting, in order
    np.testing.assert_allclose(r.get(), xh - 2)
    assert calls == [1, 1] and not rt.deferred


def test_small_assignments_and_reductions_are_deferred(device, monkeypatch):
    xh = rand(1000, 6)
    x = fl.asarray(xh)
    out = fl.empty_like(x)
    out[...] = x * 2 + 1  # recorded: a run plan
    fl.sum(out).eval()
    fl.synchronize()
    rt = _runtime(device)
    out[...] = x * 3 + 1  # replayed: deferred
    assert len(rt.deferred) == 1
    s = fl.sum(out).eval()  # a replayed small reduction: deferred after the assignment
    assert len(rt.deferred) == 2
    # reading the sum enqueues both, in order: it sees the assignment's values
    np.testing.assert_allclose(float(s), (xh.astype(np.float64) * 3 + 1).sum(), rtol=1e-5)
    assert not rt.deferred
    np.testing.assert_allclose(out.get(), xh * 3 + 1, rtol=1e-6)
    big = fl.asarray(rand(300_000, 7))
    fl.sum(big).eval()
    fl.synchronize()
    # both stages in one launch, which reads more than 4 * DEFER_MAX_ELEMENTS: at once
    t = fl.sum(big).eval()
    if splits.ONE_LAUNCH:
        assert not rt.deferred
    np.testing.assert_allclose(float(t), float(np.sum(big.get(), dtype=np.float64)), rtol=1e-5)
    monkeypatch.setattr(splits, "ONE_LAUNCH", False)
    fl.sum(big).eval()
    fl.synchronize()
    # two launches: the first stage is enqueued at once; the second, combining its
    # partial sums, is small and deferred
    t = fl.sum(big).eval()
    assert len(rt.deferred) == 1
    _go, (_outs, storages, *_rest) = rt.deferred[0]
    assert big._storage not in storages
    np.testing.assert_allclose(float(t), float(np.sum(big.get(), dtype=np.float64)), rtol=1e-5)


@pytest.fixture
def gated(device, monkeypatch):
    """Deferred batches of two or more wait behind a user event, on every device."""
    rt = _runtime(device)
    fl.synchronize()
    monkeypatch.setattr(rt, "gate_at", 2)
    gates = []
    real = type(rt).flush

    def counted(self):
        # (this device's batches: a runtime of another device may flush too, on
        # fl.synchronize(), and a GPU's gate_at is 0)
        if self is rt and len(self.deferred) >= self.gate_at:
            gates.append(len(self.deferred))
        real(self)

    monkeypatch.setattr(type(rt), "flush", counted)
    return rt, gates


def test_a_gated_batch_runs_every_launch_in_order(device, gated):
    rt, gates = gated
    xh = rand(1000, 7)
    x = fl.asarray(xh)
    (x * 2 - 1).eval()
    fl.synchronize()
    gates.clear()
    acc = x
    for _ in range(10):  # each launch reads the previous one's result
        acc = (acc * 2 - 1).eval()
    assert len(rt.deferred) == 10
    fl.synchronize()
    assert gates == [10] and not rt.deferred
    expect = xh.copy()
    for _ in range(10):
        expect = expect * 2 - 1
    np.testing.assert_allclose(acc.get(), expect, rtol=1e-5)


@pytest.mark.opencl_only
def test_an_interrupted_gated_flush_opens_the_gate(device, gated):
    rt, gates = gated
    xh = rand(500, 8)
    x = fl.asarray(xh)
    (x + 1).eval()
    fl.synchronize()
    before = [(x + k).eval() for k in range(3)]
    interrupted_once, calls = launch_interrupted_once()
    rt.deferred.append((interrupted_once, ()))
    after = (x + 10).eval()
    with pytest.raises(KeyboardInterrupt):
        fl.synchronize()
    assert gates == [5] and len(rt.deferred) == 2  # the interrupted launch, the one after
    # the three enqueued behind the gate run: it was opened although the flush failed
    # (the raw queue drains without a flush; a closed gate would block it for good)
    drained = threading.Thread(target=rt.queue.finish, daemon=True)
    drained.start()
    drained.join(timeout=60)
    assert not drained.is_alive(), "the gate stayed closed"
    for k, r in enumerate(before):
        np.testing.assert_allclose(r.get(), xh + k)
    np.testing.assert_allclose(after.get(), xh + 10)
    assert calls == [1, 1] and not rt.deferred


def test_only_the_cpu_gates_batches(device):
    assert _runtime(device).gate_at == (devices.GATE_AT if device.type == "cpu" else 0)
