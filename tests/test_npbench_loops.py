"""NPBench's loop kernels' statement shapes (issue 26): results equal numpy's on every
path a statement may take, its replays included."""

from __future__ import annotations

import numpy as np

import fuseloop as fl
from fuseloop import host_path


def test_an_empty_statement_in_a_loop_replays_on_the_device_path(device_path):
    # symm's first row: ``C[:i, j] += ...`` with i == 0 writes nothing; its replayed
    # plan has no launches (plan_ready.Ready.run took the first of none)
    rng = np.random.default_rng(0)
    hc, ha, hb = (rng.random((5, 4)) for _ in range(3))
    c, a, b = fl.asarray(hc), fl.asarray(ha), fl.asarray(hb)
    for _ in range(3):  # (a plan is made ready at its second replay)
        for i in range(3):
            for j in range(4):
                c[:i, j] += 1.5 * b[i, j] * a[i, :i]
                hc[:i, j] += 1.5 * hb[i, j] * ha[i, :i]
    np.testing.assert_allclose(c.get(), hc, rtol=1e-12)


def _counted(fn):
    """``fn()``'s result and the host evaluations and kernel launches it took."""
    fl.synchronize()
    before = fl.stats()
    out = fn()
    fl.synchronize()
    after = fl.stats()
    return out, (after["host_evaluations"] - before["host_evaluations"],
                 after["kernels_launched"] - before["kernels_launched"])


def test_cheap_work_beyond_the_element_limit_runs_on_the_host(host):
    # mandelbrot2's ``np.logical_not(I, I)``: 40000 booleans, one cheap operation
    # (80 kB moved) is numpy's; float sums of as many elements (960 kB) and a division
    # (not a cheap operation) stay kernels
    n = 40000
    assert n > host_path.HOST_MAX_WORK
    rng = np.random.default_rng(1)
    hb, hx, hy = rng.random(n) > 0.5, rng.random(n), rng.random(n) + 0.5
    b, x, y = fl.asarray(hb), fl.asarray(hx), fl.asarray(hy)
    for _ in range(2):  # (a kernel built the first time would be replayed the second)
        _, (on_host, launched) = _counted(lambda: np.logical_not(b, b))
        np.logical_not(hb, hb)
        assert (on_host, launched) == (1, 0)
        np.testing.assert_array_equal(b.get(), hb)
        got, (on_host, launched) = _counted(lambda: (b ^ (~b)).eval())  # (120 kB)
        assert (on_host, launched) == (1, 0)
        np.testing.assert_array_equal(got.get(), hb ^ (~hb))
    for expr, ref in ((lambda: (x + y).eval(), hx + hy),
                      (lambda: (b / y.astype(np.float32)).eval(), hb / hy.astype(np.float32))):
        got, (on_host, launched) = _counted(expr)
        assert on_host == 0 and launched == 1
        np.testing.assert_allclose(got.get(), ref, rtol=1e-6)


def test_a_mask_selection_is_numpy_s_for_views_and_empty_masks(host):
    rng = np.random.default_rng(2)
    hz = rng.random((30, 40)) + 1j * rng.random((30, 40))
    z = fl.asarray(hz)
    for view, hview in ((z, hz), (z[:, ::2], hz[:, ::2]), (z.T, hz.T)):
        for cut in (0.3, 2.0):  # (some elements, none)
            got = view[abs(view) > cut]
            np.testing.assert_array_equal(got.get(), hview[abs(hview) > cut])
            assert got.shape == hview[abs(hview) > cut].shape


def test_a_host_statement_computed_into_its_target_reads_overlapping_operands_first(host):
    # the host path's one operation writes its target's memory directly: numpy reads
    # operands overlapping it first, as the kernels do
    h = np.arange(64, dtype=np.float64)
    x = fl.asarray(h)
    x[1:] = x[:-1] * 0.5
    h[1:] = h[:-1] * 0.5
    x[::-1] = x + 1
    h[::-1] = h + 1
    x[:32] = x[32:] - x[:32]
    h[:32] = h[32:] - h[:32]
    np.testing.assert_array_equal(x.get(), h)
    m = fl.asarray(h.reshape(8, 8))
    m[1:, :] = m[:-1, :] * m[1:, :]
    hm = h.reshape(8, 8).copy()
    hm[1:, :] = hm[:-1, :] * hm[1:, :]
    f = fl.zeros((8, 8), np.float32)
    f[...] = m > 100  # (a cast at the root: its value written over)
    np.testing.assert_array_equal(m.get(), hm)
    np.testing.assert_array_equal(f.get(), (hm > 100).astype(np.float32))
