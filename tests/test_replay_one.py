"""``.eval()`` of one reduction, gather, remap or n-d result whose run plan is remembered
under its signature: replayed in one frame (``fuseloop.run_plans.replay_one``), with
what ``evaluate.run`` would compute, and everything else left to ``evaluate.run``."""

from __future__ import annotations

import numpy as np
import pytest

import fuseloop as fl
from fuseloop import array, evaluate, host_path, run_plans


@pytest.fixture
def kernels_only(monkeypatch):
    """Small work is not computed by numpy on the host (so plans are replayed), and no
    plan is remembered from an earlier test (the counts below start from a recording)."""
    monkeypatch.setattr(host_path, "HOST_MAX_WORK", 0)
    run_plans.clear()


def _counting(monkeypatch):
    """Counts of run_plans.run and replay_one hits."""
    counts = {"run": 0, "one": 0}
    run, one = run_plans.run, run_plans.replay_one

    def counted_run(*args):
        counts["run"] += 1
        return run(*args)

    def counted_one(*args):
        got = one(*args)
        counts["one"] += got is not None
        return got

    monkeypatch.setattr(run_plans, "run", counted_run)
    monkeypatch.setattr(run_plans, "replay_one", counted_one)
    monkeypatch.setattr(array, "_replay_one", counted_one)  # (Array.eval's own route)
    return counts


def test_remembered_plans_are_replayed_in_one_frame(device, kernels_only, monkeypatch):
    counts = _counting(monkeypatch)
    rng = np.random.default_rng(0)
    cases = [
        (lambda x, v: x - x.mean(axis=1, keepdims=True),
         lambda h, g: h - h.mean(axis=1, keepdims=True)),
        (lambda x, v: x @ v, lambda h, g: h @ g),
        (lambda x, v: x.argmin(), lambda h, g: h.argmin()),
        (lambda x, v: x * 2.0 + x.T, lambda h, g: h * 2 + h.T),  # (n-d, elementwise)
    ]
    for fn, want in cases:
        for _ in range(3):  # recorded, then replayed with other buffers and scalars
            h, g = rng.random((6, 6), np.float32), rng.random(6, np.float32)
            got = fn(fl.asarray(h), fl.asarray(g)).eval()
            np.testing.assert_allclose(got.get(), want(h, g), rtol=1e-5)
    assert counts["one"] == 2 * len(cases), counts
    assert counts["run"] == len(cases), counts  # (only the recording evaluations)


def test_the_host_path_keeps_small_work(device, monkeypatch):
    if not host_path.host_device(device):
        pytest.skip("the host path is for devices whose buffers are host memory")
    monkeypatch.setattr(host_path, "HOST_MAX_WORK", 4096)
    counts = _counting(monkeypatch)
    h = np.arange(12, dtype=np.float32).reshape(3, 4)
    for _ in range(3):
        np.testing.assert_allclose(fl.asarray(h).sum(axis=1).eval().get(), h.sum(axis=1))
    assert counts["one"] == 0


def test_a_replay_still_reads_gather_flags(device, kernels_only):
    h = np.arange(10, dtype=np.float32)
    x = fl.asarray(h)
    for _ in range(3):  # (the bad index raises on every replay too)
        good = fl.asarray(np.array([3, 1, 9], np.int64))
        assert float(fl.sum(x[good]).eval().get()) == float(h[[3, 1, 9]].sum())
        bad = fl.asarray(np.array([3, 1, 12], np.int64))
        with pytest.raises(IndexError):
            fl.sum(x[bad]).eval()


def test_checking_and_out_go_to_run(device, kernels_only, monkeypatch):
    from fuseloop.expr import program as prog

    counts = _counting(monkeypatch)
    h = np.arange(12, dtype=np.float32).reshape(3, 4)
    x = fl.asarray(h)
    for _ in range(3):
        x.sum(axis=0).eval()
    assert counts["one"] == 2
    monkeypatch.setattr(prog, "CHECK_STRUCTURE_CACHE", True)
    np.testing.assert_allclose(x.sum(axis=0).eval().get(), h.sum(axis=0))
    assert counts["one"] == 2
    assert evaluate.run_flat(x.sum(axis=0)._node, (4,), x.device,
                             fl.empty(4, np.float32)._storage) is None
