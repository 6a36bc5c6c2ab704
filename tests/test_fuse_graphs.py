"""``fl.fuse`` replayed as graphs (``fuseloop.fuse_graphs``).

CUDA graphs need a CUDA device; here the device's backend is given a stand-in for
graphs (a "graph" re-enqueues the launches it recorded, with the arguments fixed at
capture as a CUDA graph holds them), so what fuseloop decides (buffer sets, keys,
captures, fall-backs) runs on any device and is checked against numpy.  On a CUDA
device (``FUSELOOP_DEVICE=cuda:0``) the same tests run with the real CUDA graphs.
"""

from __future__ import annotations

import numpy as np
import pytest

import fuseloop as fl
from fuseloop import fuse_graphs
from fuseloop.backends import backend_for


@pytest.fixture
def graphs(device, monkeypatch):
    """The device's backend with graphs (a stand-in unless it has its own); the
    captures made, as a list."""
    backend = backend_for(device)
    captured: list = []
    if backend.graphs:
        real = backend.capture

        def capture(dev, enqueue):
            captured.append(real(dev, enqueue))
            return captured[-1]
    else:
        def capture(dev, enqueue):
            captured.append(enqueue)  # (re-run on replay: its arguments are fixed)
            return enqueue

        monkeypatch.setattr(type(backend), "graphs", True)
        monkeypatch.setattr(backend, "launch_graph", lambda dev, graph, queue: graph(queue),
                            raising=False)
        monkeypatch.setattr(backend, "buffer_address", lambda buffer: id(buffer),
                            raising=False)
    monkeypatch.setattr(backend, "capture", capture, raising=False)
    monkeypatch.setattr(fuse_graphs, "ENABLED", True)
    return captured


def _center(x, w):  # an intermediate the function evaluates, then a kernel: two launches
    y = (x * w + 1).eval()
    return (y - fl.sum(y) / y.shape[0]) * 2


def _ref(x, w):
    y = x * w + 1
    return (y - np.sum(y) / y.shape[0]) * 2


def test_loop_replays_graphs_with_results_intact(device, graphs, fresh_stats):
    """``y = f(x, w)`` in a loop: after two captures (one per buffer set) every call
    is a graph; results held meanwhile are never overwritten, and the launch counters
    move as without graphs."""
    rng = np.random.default_rng(0)
    xh, wh = rng.random(3000, dtype=np.float32), rng.random(3000, dtype=np.float32)
    x, w = fl.asarray(xh), fl.asarray(wh)
    f = fl.fuse(_center)
    want = _ref(xh, wh)
    kept = f(x, w)  # (traced; kept: the sets must not overwrite it)
    before = fl.stats()["kernels_launched"]
    out = None
    for _ in range(8):
        out = f(x, w)
        np.testing.assert_allclose(out.get(), want, rtol=1e-5, atol=1e-6)
    launches = fl.stats()["kernels_launched"] - before
    assert len(graphs) == 2 and f.graph_calls == 5
    assert launches == 8 * len(f._entries[next(iter(f._entries))].steps)
    held = [f(x, w) for _ in range(4)]  # (all held: the sets are busy, plain launches)
    for r in [kept, out, *held]:
        np.testing.assert_allclose(r.get(), want, rtol=1e-5, atol=1e-6)
    assert f.graph_calls == 6  # (the first of the four found a set free)


def test_state_update_alternates_sets(device, graphs):
    """``x = f(x, w)``: each call reads the other set's result; graphs per (input
    buffer, set) pair are captured, and the values follow numpy's iteration."""
    rng = np.random.default_rng(1)
    xh, wh = rng.random(2000), rng.random(2000)
    x, w = fl.asarray(xh), fl.asarray(wh)
    def step(x, w):
        y = (x * w).eval()
        return x * 0.5 + fl.mean(y) * w

    f = fl.fuse(step)
    for _ in range(10):
        x = f(x, w)
        xh = xh * 0.5 + np.mean(xh * wh) * wh
    np.testing.assert_allclose(x.get(), xh, rtol=1e-10)
    assert f.graph_calls >= 4 and len(graphs) <= 3


def test_changing_scalars_and_new_buffers_fall_back(device, graphs, monkeypatch):
    """A scalar argument changing every call, and new input buffers each call, are
    launched one by one (correctly); past GRAPHS_MAX captures the signature stops."""
    monkeypatch.setattr(fuse_graphs, "GRAPHS_MAX", 2)
    rng = np.random.default_rng(2)
    xh = rng.random(1000)
    x = fl.asarray(xh)
    def h(x, s):
        return x * s - fl.max((x * 2).eval()) / 2 * s

    f = fl.fuse(h)
    for k in range(12):
        s = float(k % 4)  # (each value seen thrice: captured, until the limit)
        np.testing.assert_allclose(f(x, s).get(), xh * s - xh.max() * s)
    entry = next(iter(f._entries.values()))
    assert entry.run == entry.replay  # (gave up)
    g = fl.fuse(h)
    for k in range(4):
        fresh = fl.asarray(xh + k)  # (a new buffer: a key never seen twice)
        np.testing.assert_allclose(g(fresh, 2.0).get(), (xh + k) * 2 - (xh + k).max() * 2)
    assert g.graph_calls == 0


def test_refused_capture_falls_back(device, graphs, monkeypatch):
    def refuse(dev, enqueue):
        raise RuntimeError("capture not supported")

    monkeypatch.setattr(backend_for(device), "capture", refuse, raising=False)
    xh = np.arange(100.0)
    x = fl.asarray(xh)
    f = fl.fuse(_center)
    for _ in range(5):
        np.testing.assert_allclose(f(x, x).get(), _ref(xh, xh))
    assert f.graph_calls == 0


def test_single_launches_do_not_use_graphs(device, graphs):
    x = fl.asarray(np.arange(10.0))
    f = fl.fuse(lambda x: x * 2 + 1)
    for _ in range(4):
        np.testing.assert_array_equal(f(x).get(), np.arange(10.0) * 2 + 1)
    assert f.graph_calls == 0 and not graphs
