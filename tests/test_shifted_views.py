"""A lazy array read through many overlapping windows is computed once first
(``fuseloop.passes.shifted_views``): a stencil of a wide stencil is two kernels, a
stencil of a small one (hdiff's Laplacian, a Laplacian of a Laplacian) stays one."""

import numpy as np
import pytest
from launch_counts import launches_and_result

import fuseloop as fl
from fuseloop.passes import shifted_views

N2 = 200  # (windows of 196 x 196: over shifted_views.WINDOW_MIN)
N3 = 36


def box(a, k):
    """The k x k (x k) box sum of ``a``'s interior, as a sum of shifted windows."""
    m = [n - (k - 1) for n in a.shape]
    s = 0
    for shift in np.ndindex(*(k,) * a.ndim):
        s = s + a[tuple(slice(i, i + n) for i, n in zip(shift, m))]
    return s


def laplacian(a):
    """The 5-point (2-D) or 7-point (3-D) Laplacian of ``a``'s interior."""
    inner = tuple(slice(1, -1) for _ in a.shape)
    out = -2.0 * a.ndim * a[inner]
    for axis in range(a.ndim):
        for lo, hi in ((None, -2), (2, None)):
            out = out + a[(*inner[:axis], slice(lo, hi), *inner[axis + 1:])]
    return out


@pytest.mark.parametrize("shape, k", [((N2, N2), 5), ((N3, N3, N3), 3)])
def test_box_of_box_computes_the_inner_box_once(device_path, shape, k):
    # 25 (27) operations recomputed at every window: evaluated once the recomputation
    # passes the budget, so two kernels, not one of 600+ operations an element
    u = np.random.default_rng(0).random(shape).astype(np.float32)
    a = fl.asarray(u)
    launches, got = launches_and_result(lambda: box(box(a, k), k))
    assert launches == 2
    np.testing.assert_allclose(got, box(box(u, k), k), rtol=1e-5)


@pytest.mark.parametrize("shape", [(N2, N2), (N3, N3, N3)])
def test_laplacian_of_laplacian_stays_one_kernel(device_path, shape):
    # 5 (7) operations at 5 (7) windows: recomputing costs less than a pass
    u = np.random.default_rng(1).random(shape)
    a = fl.asarray(u)
    launches, got = launches_and_result(lambda: laplacian(laplacian(a)))
    assert launches == 1
    np.testing.assert_allclose(got, laplacian(laplacian(u)), rtol=1e-12, atol=1e-12)


def test_disjoint_windows_and_small_windows_are_not_counted(device_path):
    u = np.random.default_rng(2).random((N2, N2)).astype(np.float32)
    a = fl.asarray(u)

    def halves():  # (the windows of an expensive value meet nowhere: nothing recomputed)
        y = box(a, 5)
        return y[:98] + y[98:]

    launches, got = launches_and_result(halves)
    assert launches == 1
    y = box(u, 5)
    np.testing.assert_allclose(got, y[:98] + y[98:], rtol=1e-5)
    small = fl.asarray(u[:20, :20])  # (windows of 256 elements: bound by the host)
    launches, got = launches_and_result(lambda: box(box(small, 3), 3))
    assert launches == 1
    np.testing.assert_allclose(got, box(box(u[:20, :20], 3), 3), rtol=1e-5)


def test_budget_decides(device_path, monkeypatch):
    # the same box of a box with the rule off is one kernel, with equal values
    u = np.random.default_rng(3).random((N2, N2)).astype(np.float32)
    a = fl.asarray(u)
    monkeypatch.setattr(shifted_views, "RECOMPUTE_BUDGET", 1 << 30)
    launches, got = launches_and_result(lambda: box(box(a, 3), 3))
    assert launches == 1
    monkeypatch.setattr(shifted_views, "RECOMPUTE_BUDGET", 8)
    launches, again = launches_and_result(lambda: box(box(a, 3), 3))
    assert launches == 2
    np.testing.assert_allclose(got, box(box(u, 3), 3), rtol=1e-5)
    np.testing.assert_allclose(again, got, rtol=1e-5)


def test_fused_function_takes_the_same_kernels(device_path):
    # under fl.fuse the inner box is evaluated while tracing: the replay launches both
    u = np.random.default_rng(4).random((N2, N2)).astype(np.float32)
    a = fl.asarray(u)
    fused = fl.fuse(lambda x: box(box(x, 5), 5))
    fused(a).eval()
    launches, got = launches_and_result(lambda: fused(a))
    assert launches == 2
    np.testing.assert_allclose(got, box(box(u, 5), 5), rtol=1e-5)
