"""Lazy ``.eval()`` and ``fl.fuse`` run the same kernels (issue 25).

The broad suite's workloads whose lazy GPU time was furthest from ``fl.fuse``'s, with the
GPU recipes registered for the CPU device: after the lazy evaluation has run, the fused
function (traced, then replayed) finds every kernel it launches in the memory cache (no
kernel of its own) and launches as many per call; both results match numpy.
``benchmarks/probes/lazy_fuse_parity.py`` compares every workload (sources, grids, bytes).
"""

from __future__ import annotations

import numpy as np
import pytest

import fuseloop as fl
from fuseloop.bench import broad
from fuseloop.bench.peers import FuseloopOps
from fuseloop.recipes import contraction, gpu_coalesced
from fuseloop.recipes.rows import make_gpu_rows

OPS = FuseloopOps(fl)


def _cross_entropy(rng):
    x = rng.uniform(-4, 4, (64, 300)).astype(np.float32)
    return broad.cross_entropy, [x, np.arange(64), rng.integers(0, 300, 64)]


def _horner(rng):
    return broad.horner, [rng.random(5000, dtype=np.float32)]


@pytest.fixture
def gpu_recipes(device, restore_recipes):
    fl.register_recipe("cpu", gpu_coalesced, name="parity-gpu-coalesced")
    fl.register_recipe("cpu", make_gpu_rows(256), name="parity-gpu-rows", kind="reduction")
    fl.register_recipe("cpu", contraction.gpu_tiled, name="parity-gpu-tiled",
                       kind="contraction")
    return device


@pytest.mark.parametrize("make", [_cross_entropy, _horner], ids=["cross-entropy", "horner-16"])
def test_fuse_runs_the_lazy_kernels(gpu_recipes, make):
    fn, host = make(np.random.default_rng(5))
    args = [fl.asarray(a) for a in host]
    want = fn(broad.NP_OPS, *[a.astype(np.float64) if a.dtype.kind == "f" else a
                              for a in host])

    def lazy():
        return fn(OPS, *args).eval()

    fused = fl.fuse(lambda *a: fn(OPS, *a))
    for _ in range(2):  # (the run plan recorded, then replayed)
        got = lazy()
    np.testing.assert_allclose(got.get(), want, rtol=2e-5, atol=2e-5)
    fl.synchronize()
    fl.reset_stats()
    lazy()
    fl.synchronize()
    launched = fl.stats()["kernels_launched"]
    assert launched >= 1
    fl.reset_stats()
    got = fused(*args)  # traced: every kernel it asks for is one the lazy path built
    fl.synchronize()
    first = fl.stats()
    assert first["memory_cache_misses"] == 0, first
    assert first["kernels_launched"] == launched, first
    fl.reset_stats()
    got = fused(*args)  # replayed
    fl.synchronize()
    assert fl.stats()["kernels_launched"] == launched
    np.testing.assert_allclose(got.get(), want, rtol=2e-5, atol=2e-5)
