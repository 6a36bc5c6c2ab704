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


# {{{ gpu-coalesced: what no element index changes, computed once per work-item

@pytest.fixture
def gpu_coalesced_on_cpu(restore_recipes):
    from fuseloop.recipes import gpu_coalesced

    fl.register_recipe("cpu", gpu_coalesced, name="test-gpu-coalesced")
    with fl.device("cpu") as dev:
        yield dev


@pytest.mark.parametrize("n", [1, 300, 4099])
def test_invariant_operands_give_numpy_values(gpu_coalesced_on_cpu, n):
    rng = np.random.default_rng(n)
    ah, bh = rng.random(n) + 1j * rng.random(n), rng.random(n) + 1j * rng.random(n)
    zh, sh = np.complex128(0.7 - 0.4j), np.float64(0.3)
    xh = rng.standard_normal(n)
    a, b, z, s, x = (fl.asarray(v) for v in (ah, bh, zh, sh, xh))
    e = a + z ** 1.5 * b
    assert "_fl_inv0 = fl_power_c128(" in fl.show_code(e)
    np.testing.assert_allclose(e.get(), ah + zh ** 1.5 * bh, rtol=1e-12)
    np.testing.assert_allclose((x * fl.sin(s) + s * s - x / (s + 1)).get(),
                               xh * np.sin(sh) + sh * sh - xh / (sh + 1), rtol=1e-12)
    # under a condition: computed where its element is selected, as before
    np.testing.assert_allclose(fl.where(x > 0, fl.log(fl.abs(s - 0.5 + x)), x).get(),
                               np.where(xh > 0, np.log(np.abs(sh - 0.5 + xh)), xh),
                               rtol=1e-12)
    a += z * b  # in place: the output is read per element
    np.testing.assert_allclose(a.get(), ah + zh * bh, rtol=1e-12)


def test_invariant_power_is_generated_once_per_slab(device):
    """The unrolled elements (4 a work-item here) and the two slabs computed a 0-d
    operand's power 8 times; now once in each slab, before the elements."""
    from matmul_source import fake_h100

    from fuseloop.lower import codegen

    n = 40000
    a = fl.asarray(np.ones(n, np.complex128))
    z = fl.asarray(np.complex128(0.5 + 0.5j))
    low = fl.program(a + z ** 1.5 * a).lower(fake_h100(device))
    assert low.recipe.name == "gpu-coalesced"
    with codegen.loopy_section():
        src = codegen.generate(low.t_unit, low.device).source
    body = src[src.index("__kernel"):]
    assert body.count("fl_power_c128(") == 2, body

# }}}
