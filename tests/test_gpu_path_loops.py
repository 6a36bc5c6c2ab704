"""Loops of statements on the device path (the host path off, as on a GPU): kernels built
stay flat over the iterations, and a statement launches few kernels (issue 26)."""

from __future__ import annotations

import numpy as np
from launch_counts import counted, launches

import fuseloop as fl


def test_repeated_mask_selection_builds_no_kernel_per_iteration(device_path):
    # NPBench's mandelbrot2 shrinks its arrays by a mask every iteration (X = X[keep]);
    # each X was a gather of the previous lazy gather: one kernel structure per iteration
    rng = np.random.default_rng(1)
    xh = rng.random(3000)
    wh = rng.random(3000)
    x, w = fl.asarray(xh), fl.asarray(wh)
    lowered = []
    for i in range(12):
        fl.reset_stats()
        keep = w > 0.1 * (i % 3) + 0.05
        x, w = x[keep], w[keep] * 1.0  # (also through an elementwise operation)
        keeph = wh > 0.1 * (i % 3) + 0.05
        xh, wh = xh[keeph], wh[keeph] * 1.0
        np.testing.assert_array_equal((x * 2).get(), xh * 2)
        lowered.append(fl.stats()["kernels_lowered"] + fl.stats()["memory_cache_misses"])
    assert sum(lowered[6:]) == 0, lowered


def test_reading_an_element_or_row_launches_no_kernel(device_path, fresh_stats):
    # float(A[i, j]) / A_row[i] as an index (NPBench's spmv, durbin): the element is read
    # from its place in the buffer; a strided view is still gathered first
    h = np.arange(60.0).reshape(6, 10)
    a = fl.asarray(h)
    ia = fl.asarray(np.arange(9, dtype=np.int64) * 3)
    fl.synchronize()
    fl.reset_stats()
    got = [float(a[2, 7]), a[4, 1].item(), int(ia[5]), list(range(30))[ia[3]]]
    row = a[3].get()
    block = a[1:3].get()
    assert fl.stats()["kernels_launched"] == 0
    assert got == [h[2, 7], h[4, 1], 15, 9]
    np.testing.assert_array_equal(row, h[3])
    np.testing.assert_array_equal(block, h[1:3])
    np.testing.assert_array_equal(a[:, 3].get(), h[:, 3])  # (strided: gathered)
    np.testing.assert_array_equal(a[::2, ::3].get(), h[::2, ::3])


def test_loop_statements_launch_once_and_build_few_kernels(device_path):
    # NPBench's triangular loops (trisolv, cholesky, lu): one launch per statement, and
    # kernels shared by every length (a kernel per length would build one per iteration)
    n = 48
    rng = np.random.default_rng(2)
    lh = np.tril(rng.random((n, n))) + n * np.eye(n)
    bh = rng.random(n)
    L, b, x = fl.asarray(lh), fl.asarray(bh), fl.zeros(n)
    xh = np.zeros(n)
    fl.reset_stats()
    built = 0
    for i in range(n):
        def solve_row(i: int = i) -> None:
            x[i] = (b[i] - L[i, :i] @ x[:i]) / L[i, i]
        done = counted(solve_row)
        assert done.launches == 1, i
        built += done["memory_cache_misses"]
        xh[i] = (bh[i] - lh[i, :i] @ xh[:i]) / lh[i, i]
    np.testing.assert_allclose(x.get(), xh, rtol=1e-12)
    assert built <= 12, built

    a = fl.asarray(lh.copy())
    ah = lh.copy()

    def cholesky_like() -> None:
        a[30, 20] -= fl.dot(a[30, :20], a[20, :20])

    def floyd_row() -> None:  # (reads element 5 of the row it writes: numpy's order)
        a[7, :] = fl.minimum(a[7, :], a[7, 5] + a[5, :])

    assert launches(cholesky_like) == 1
    ah[30, 20] -= ah[30, :20] @ ah[20, :20]
    assert launches(floyd_row) <= 2
    ah[7, :] = np.minimum(ah[7, :], ah[7, 5] + ah[5, :])
    np.testing.assert_allclose(a.get(), ah, rtol=1e-12)


def test_rows_past_a_steps_kept_plans_reuse_its_kernel(device_path, monkeypatch):
    # a loop over rows replays each step at more offsets than the step keeps launch plans
    # for (NPBench's cholesky: one per element below the diagonal); a new offset's plan
    # takes the kernel the step's last one found (same size class), counted as the
    # memory-cache look-up it replaces
    from fuseloop import launching, plan_steps

    monkeypatch.setattr(plan_steps, "STEP_PLANS_MAX", 2)
    made = []
    plan_launch = launching.plan_launch
    monkeypatch.setattr(plan_steps, "plan_launch",
                        lambda *a, **k: made.append(1) or plan_launch(*a, **k))
    n = 12
    rng = np.random.default_rng(3)
    spd = rng.random((n, n))
    spd = spd @ spd.T + n * np.eye(n)
    for rep in range(2):
        a, ah = fl.asarray(spd), spd.copy()
        fl.synchronize()
        fl.reset_stats()
        made.clear()
        for i in range(1, n):
            for j in range(i):
                a[i, j] -= fl.dot(a[i, :j], a[j, :j])
                a[i, j] /= a[j, j]
                ah[i, j] -= ah[i, :j] @ ah[j, :j]
                ah[i, j] /= ah[j, j]
        np.testing.assert_allclose(a.get(), ah, rtol=1e-12)
        stats = fl.stats()
        statements = n * (n - 1)
        assert stats["kernels_launched"] == statements
        if rep:  # (every kernel and plan known: no kernel found the long way)
            assert made == []
            assert stats["memory_cache_misses"] == 0
            assert stats["memory_cache_hits"] == statements


def test_a_plan_at_new_lengths_reuses_its_steps_kernels(device_path, monkeypatch):
    # a loop over lengths (NPBench's trisolv: a row of L and x[:i] per i) replays its plan
    # at each length with new steps (run_plans._at_lengths, dropped beyond PLANS_MAX);
    # they take the kernels their plan's steps found where the size class is the same
    from fuseloop import launching, plan_steps, run_plans

    made = []
    plan_launch = launching.plan_launch
    monkeypatch.setattr(plan_steps, "plan_launch",
                        lambda *a, **k: made.append(1) or plan_launch(*a, **k))
    n = 40
    rng = np.random.default_rng(4)
    lh = np.tril(rng.random((n, n))) + n * np.eye(n)
    bh = rng.random(n)
    for rep in range(2):
        L, b, x = fl.asarray(lh), fl.asarray(bh), fl.zeros(n)
        xh = np.zeros(n)
        run_plans._at.clear()  # (every length's steps made anew, as past PLANS_MAX)
        fl.synchronize()
        fl.reset_stats()
        made.clear()
        for i in range(n):
            x[i] = (b[i] - L[i, :i] @ x[:i]) / L[i, i]
            xh[i] = (bh[i] - lh[i, :i] @ xh[:i]) / lh[i, i]
        np.testing.assert_allclose(x.get(), xh, rtol=1e-12)
        stats = fl.stats()
        assert stats["kernels_launched"] == n
        if rep:
            # (a size class per range of lengths: a kernel found the long way per class)
            assert len(made) <= 6, len(made)
            assert stats["memory_cache_misses"] == 0
            assert stats["memory_cache_hits"] == n


def test_pending_element_sums_are_not_walked_again(device_path):
    """nussinov's ``T[i, j] = max(T[i, j], T[i, k] + T[k + 1, j])``: the lazy 0-d sum
    read by ``max`` is computed before the element's write together with the other
    pending readers; its flat kernel is cached, so the kernels built ahead look its
    plan up no more (each statement walked its key: half of nussinov's launches)."""
    n = 9
    seq = np.random.default_rng(2).integers(0, 4, n)

    def kernel(t, s):
        for i in range(n - 1, -1, -1):
            for j in range(i + 1, n):
                t[i, j] = max(t[i, j], t[i, j - 1])
                if i + 1 < n:
                    t[i, j] = max(t[i, j], t[i + 1, j - 1] + (s[i] + s[j] == 3))
                for k in range(i + 1, j):
                    t[i, j] = max(t[i, j], t[i, k] + t[k + 1, j])
        return t

    want = kernel(np.zeros((n, n), np.int32), seq)
    s = fl.asarray(seq)
    for _ in range(2):  # (the second round: every structure met before)
        fl.reset_stats()
        got = kernel(fl.zeros((n, n), np.int32), s)
        np.testing.assert_array_equal(got.get(), want)
    assert fl.stats()["kernels_launched"] > 0 and fl.stats()["plans_walked"] == 0, fl.stats()
