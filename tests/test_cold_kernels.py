"""How many kernels a cold computation needs: a loop of small complex statements around a
complex ``solve`` (NPBench's contour_integral, whose first call is its cold build).

The kernels are counted as memory-cache misses after every cache is cleared (a disk hit
still needs its entry: each miss is one kernel the computation needs, built or read).
The count must not grow with the loop's iterations: later iterations move their views
(``int_pts[i]``, ``ham[n]``) and reuse the kernels of the first ones.  Results are
numpy's.  Run on the CPU device and on it presented as a GPU (the GPU's recipes and
linalg path, as ``benchmarks/probes/cold_npbench.py --fake-gpu``).
"""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

import fuseloop as fl


def _contour(xp, ham, points, y):
    """NPBench's contour_integral (preset sizes aside), written once for both libraries."""
    nr, nm = y.shape
    p0 = xp.zeros((nr, nm), dtype=np.complex128)
    p1 = xp.zeros((nr, nm), dtype=np.complex128)
    for z in points:
        tz = xp.zeros((nr, nr), dtype=np.complex128)
        for n in range(ham.shape[0]):
            tz += xp.power(z, (ham.shape[0] - 1) / 2 - n) * ham[n]
        x = xp.linalg.solve(tz, y)
        if abs(z) < 1.0:
            x = -x
        p0 += x
        p1 += z * x
    return p0, p1


def _inputs(nr: int, nm: int, points: int):
    rng = np.random.default_rng(42)

    def c(*shape):
        return rng.random(shape) + 1j * rng.random(shape)

    # (points inside and outside the unit circle in turn: both branches of `abs(z) < 1`)
    k = np.arange(points)
    pts = np.where(k % 2, 1.5, 0.5) * np.exp(1j * (0.3 + k))
    return c(3, nr, nr) + 4 * np.eye(nr), pts, c(nr, nm)


def _kernels_needed(points: int) -> tuple[int, tuple]:
    ham, pts, y = _inputs(12, 20, points)
    fl.clear_caches()
    fl.reset_stats()
    got = _contour(fl, fl.asarray(ham), fl.asarray(pts), fl.asarray(y))
    values = tuple(g.get() for g in got)
    for g, r in zip(values, _contour(np, ham, pts, y), strict=True):
        np.testing.assert_allclose(g, r, rtol=1e-9, atol=1e-9)
    return fl.stats()["memory_cache_misses"], values


def _as_gpu(device):
    return dataclasses.replace(device, index=9132, type="gpu", compute_units=132,
                               max_work_group_size=1024)


@pytest.mark.parametrize("present", ["cpu", "gpu"])
def test_contour_kernels_do_not_grow_with_iterations(device, present, monkeypatch):
    if present == "gpu":
        if device.type != "cpu":
            pytest.skip("presents the CPU device as a GPU")
        # (a compile worker finds no device of that description: builds in this process)
        monkeypatch.setenv("FUSELOOP_COMPILE", "inline")
        with fl.device(_as_gpu(device)):
            few, _ = _kernels_needed(3)
            many, _ = _kernels_needed(8)
    else:
        few, _ = _kernels_needed(3)
        many, _ = _kernels_needed(8)
    assert few > 0
    # (3 points: the first one at its offset 0, the others at moving offsets, both signs)
    assert many == few, (few, many)


def test_contour_warm_call_builds_nothing(device, fresh_stats):
    ham, pts, y = _inputs(12, 20, 4)
    args = fl.asarray(ham), fl.asarray(pts), fl.asarray(y)
    _contour(fl, *args)[0].get()
    before = fl.stats()
    p0, p1 = _contour(fl, *args)
    ref = _contour(np, ham, pts, y)
    np.testing.assert_allclose(p0.get(), ref[0], rtol=1e-9, atol=1e-9)
    np.testing.assert_allclose(p1.get(), ref[1], rtol=1e-9, atol=1e-9)
    after = fl.stats()
    assert after["memory_cache_misses"] == before["memory_cache_misses"]
    assert after["kernels_compiled"] == before["kernels_compiled"]
