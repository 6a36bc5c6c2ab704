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


def _center(x, w, s=2.0):
    """An intermediate the function evaluates, then a kernel: two launches (every test
    uses this function, so its kernels are built once)."""
    y = (x * w + 1).eval()
    return (y - fl.sum(y) / y.shape[0]) * s


def _ref(x, w, s=2.0):
    y = x * w + 1
    return (y - np.sum(y) / y.shape[0]) * s


def _host(n, seed):
    rng = np.random.default_rng(seed)
    return rng.random(n, dtype=np.float32), rng.random(n, dtype=np.float32)


def test_loop_replays_graphs_with_results_intact(device, graphs, fresh_stats):
    """``y = f(x, w)`` in a loop: after two captures (one per buffer set) every call
    is a graph; results held meanwhile are never overwritten, and the launch counters
    move as without graphs."""
    xh, wh = _host(3000, 0)
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
    xh, wh = _host(3000, 1)
    x, w = fl.asarray(xh), fl.asarray(wh)
    f = fl.fuse(_center)
    for _ in range(10):
        x = f(x, w, 0.5)
        xh = _ref(xh, wh, 0.5)
    np.testing.assert_allclose(x.get(), xh, rtol=1e-4, atol=1e-5)
    assert f.graph_calls >= 4 and len(graphs) <= 3


def test_changing_scalars_and_new_buffers_fall_back(device, graphs, monkeypatch):
    """A scalar argument changing every call, and new input buffers each call, are
    launched one by one (correctly); past GRAPHS_MAX captures the signature stops."""
    monkeypatch.setattr(fuse_graphs, "GRAPHS_MAX", 2)
    xh, wh = _host(3000, 2)
    x, w = fl.asarray(xh), fl.asarray(wh)
    f = fl.fuse(_center)
    for k in range(12):
        s = float(k % 4)  # (each value seen thrice: captured, until the limit)
        np.testing.assert_allclose(f(x, w, s).get(), _ref(xh, wh, s), rtol=1e-5, atol=1e-6)
    entry = next(iter(f._entries.values()))
    assert entry.run == entry.replay  # (gave up)
    g = fl.fuse(_center)
    for k in range(4):
        fresh = fl.asarray(xh + k)  # (a new buffer: a key never seen twice)
        np.testing.assert_allclose(g(fresh, w, 2.0).get(), _ref(xh + k, wh), rtol=1e-5,
                                   atol=1e-5)
    assert g.graph_calls == 0


def test_refused_capture_falls_back(device, graphs, monkeypatch):
    def refuse(dev, enqueue):
        raise RuntimeError("capture not supported")

    monkeypatch.setattr(backend_for(device), "capture", refuse, raising=False)
    xh, wh = _host(3000, 3)
    x, w = fl.asarray(xh), fl.asarray(wh)
    f = fl.fuse(_center)
    for _ in range(5):
        np.testing.assert_allclose(f(x, w).get(), _ref(xh, wh), rtol=1e-5, atol=1e-6)
    assert f.graph_calls == 0


def test_single_launches_do_not_use_graphs(device, graphs):
    x = fl.asarray(np.arange(10.0))
    f = fl.fuse(lambda x: x * 2 + 1)
    for _ in range(4):
        np.testing.assert_array_equal(f(x).get(), np.arange(10.0) * 2 + 1)
    assert f.graph_calls == 0 and not graphs


def test_graph_calls_with_results_of_other_kinds(device, graphs):
    """A result that is an argument, or a plain value, beside the computed one."""
    xh, wh = _host(3000, 4)
    x, w = fl.asarray(xh), fl.asarray(wh)
    f = fl.fuse(lambda x, w: (_center(x, w), x, 3))
    for _ in range(6):
        y, same, three = f(x, w)
        np.testing.assert_allclose(y.get(), _ref(xh, wh), rtol=1e-5, atol=1e-6)
        assert same is x and three == 3
    assert f.graph_calls >= 2


def test_a_one_launch_reduction_replays_as_a_graph(device, graphs, monkeypatch):
    """A split full reduction is one launch with temporaries (its partial results):
    replayed as a graph like a record of several launches."""
    from fuseloop import splits

    monkeypatch.setattr(splits, "ONE_LAUNCH", True)
    n = splits.TWO_STAGE_MIN_LENGTH * 4 + 3
    xh = np.random.default_rng(7).random(n)
    x = fl.asarray(xh)
    f = fl.fuse(lambda x: fl.sum(x * x) ** 0.5)
    for _ in range(5):
        np.testing.assert_allclose(float(f(x)), np.sqrt((xh * xh).sum()), rtol=1e-12)
    entry = next(iter(f._entries.values()))
    assert len(entry.steps) == 1 and entry.temps
    assert f.graph_calls >= 2 and graphs  # (captured per set of temporaries)
