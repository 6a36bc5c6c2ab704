"""Loops of statements over views whose offsets move (issue 26): each gives numpy's
result, records and compiles a bounded number of plans and kernels, and a step's launch
plan for new offsets is its last one with the offsets bound anew (plan_steps._rebound),
not a new grid and argument layout per statement; ``plans_walked`` counts the walks."""

from __future__ import annotations

import numpy as np
import pytest

import fuseloop as fl
from fuseloop import launching, plan_steps, run_plans


@pytest.fixture
def device_path(device_path):
    """conftest's ``device_path`` (kernels on ``device``, no numpy shortcut), with the
    run plans starting empty."""
    run_plans.clear()
    return device_path


@pytest.fixture
def full_plans(monkeypatch):
    """Counts the launch plans made the full way (grid, size class, arguments)."""
    made = [0]

    def counted(original):
        def f(*args, **kw):
            made[0] += 1
            return original(*args, **kw)
        return f

    monkeypatch.setattr(plan_steps, "plan_for", counted(plan_steps.plan_for))
    monkeypatch.setattr(plan_steps, "plan_launch", counted(plan_steps.plan_launch))
    return made


def _cholesky_numpy(m: np.ndarray) -> np.ndarray:
    a = m.copy()
    n = len(a)
    a[0, 0] = np.sqrt(a[0, 0])
    for i in range(1, n):
        for j in range(i):
            a[i, j] -= a[i, :j] @ a[j, :j]
            a[i, j] /= a[j, j]
        a[i, i] -= a[i, :i] @ a[i, :i]
        a[i, i] = np.sqrt(a[i, i])
    return a


def test_rows_divided_at_50_offsets_reuse_one_launch_plan(device_path, full_plans):
    # a[i, j] /= a[j, j]: one structure, new offsets every statement, one length
    rng = np.random.default_rng(0)
    ah = rng.random((12, 12)) + 1.0
    for run in range(2):
        a = fl.asarray(ah)
        want = ah.copy()
        fl.synchronize()
        fl.reset_stats()
        full_plans[0] = 0
        count = 0
        for i in range(1, 12):
            for j in range(min(i, 7)):
                a[i, j] /= a[j, j]
                want[i, j] /= want[j, j]
                count += 1
        np.testing.assert_allclose(a.get(), want, rtol=1e-14)
        s = fl.stats()
        assert count >= 50
        assert s["kernels_launched"] == count, s
        # (offsets 0 and not 0 are two structures: a plan each, a launch plan each)
        assert s["plans_recorded"] <= (4 if run == 0 else 0), s
        assert s["kernels_compiled"] <= (4 if run == 0 else 0), s
        assert full_plans[0] <= (6 if run == 0 else 0), full_plans[0]


def test_cholesky_loop_matches_numpy_with_bounded_plans(device_path, full_plans):
    n = 12
    m = np.random.default_rng(1).random((n, n))
    spd = m @ m.T + n * np.eye(n)
    want = _cholesky_numpy(spd)
    statements = 1 + (n - 1) * n + 2 * (n - 1)
    for run in range(2):
        fl.synchronize()
        fl.reset_stats()
        full_plans[0] = 0
        a = fl.asarray(spd)
        a[0, 0] = fl.sqrt(a[0, 0])
        for i in range(1, n):
            for j in range(i):
                a[i, j] -= a[i, :j] @ a[j, :j]
                a[i, j] /= a[j, j]
            a[i, i] -= a[i, :i] @ a[i, :i]
            a[i, i] = fl.sqrt(a[i, i])
        np.testing.assert_allclose(a.get(), want, rtol=1e-12)
        s = fl.stats()
        # lengths 0..11 fall in 5 classes: a few records per class and statement
        assert s["plans_recorded"] <= (40 if run == 0 else 0), s
        assert s["plans_walked"] <= statements, s
        if run == 1:
            assert s["kernels_compiled"] == 0, s
            # a launch plan per length at most, none per offset
            assert full_plans[0] <= 4 * n, (full_plans[0], statements)


def test_time_loop_over_fixed_views_walks_once(device_path):
    # the views repeat every step: found by signature, walked a bounded number of times
    sh = np.random.default_rng(2).random(64)
    s = fl.asarray(sh)
    want = sh.copy()
    fl.synchronize()
    fl.reset_stats()
    for _ in range(50):
        s[1:-1] = 0.5 * (s[:-2] + s[2:])
        want[1:-1] = 0.5 * (want[:-2] + want[2:])
    np.testing.assert_allclose(s.get(), want, rtol=1e-14)
    stats = fl.stats()
    assert stats["plans_walked"] <= 3, stats
    assert stats["plans_replayed"] >= 47, stats


def test_overlapping_and_disjoint_targets_at_moving_offsets(device_path):
    # x[i:i+4] = 2 * x[i+k:i+k+4]: the same structure, but whether the target overlaps
    # the view it reads (k < 4) decides a temporary; rebinding must not mix them up
    xh = np.random.default_rng(3).random(200)
    x = fl.asarray(xh)
    want = xh.copy()
    for i in range(0, 120, 3):
        for k in (1, 2, 5, 7, -2, 0):
            lo = i + 10
            x[lo:lo + 4] = 2.0 * x[lo + k:lo + k + 4] - x[lo - 3:lo + 1]
            want[lo:lo + 4] = 2.0 * want[lo + k:lo + k + 4] - want[lo - 3:lo + 1]
    np.testing.assert_allclose(x.get(), want, rtol=1e-12)


def test_one_buffer_or_two_at_moving_offsets(device_path):
    # a[i] += b[j] and a[i] += a[j] (i == j too): which leaves share a buffer is in the key
    ah = np.random.default_rng(4).random((8, 16))
    bh = np.random.default_rng(5).random((8, 16))
    a, b = fl.asarray(ah), fl.asarray(bh)
    wa = ah.copy()
    for i in range(8):
        for j in range(8):
            src, wsrc = (a, wa) if (i + j) % 2 else (b, bh)
            a[i] += src[j] * 0.5
            wa[i] += wsrc[j] * 0.5
    np.testing.assert_allclose(a.get(), wa, rtol=1e-12)


def test_offsets_in_grid_or_size_class_are_not_rebound(device_path):
    # a kernel whose grid or assumptions name an offset parameter keeps a plan per offset
    class Plan:
        gsize = ["p[2] + 1"]
        lsize = ["1"]

    class Kernel:
        plan = Plan()
        arg_layout = ((), (), (), ((5, 3, 2, np.int32), (6, 3, 4, np.int32)), None)

    assert launching.offset_consts(Kernel(), "", [2]) is None  # type: ignore[arg-type]
    assert launching.offset_consts(Kernel(), "p4 >= 1", [4]) is None  # type: ignore[arg-type]
    assert launching.offset_consts(Kernel(), "p3 >= 1", [4]) == (  # type: ignore[arg-type]
        (1, 4, np.int32),)


def test_row_loop_launches_one_plan_for_every_offset(device_path, monkeypatch):
    # floyd_warshall's row statement: new offsets (i, k) every statement; after the
    # second row the step launches its one plan taking the offsets as launch arguments
    # (launching.moving_plan): no plan bound anew (launching.rebound) per statement
    made = [0]
    original = plan_steps.rebound

    def counted(*args):
        made[0] += 1
        return original(*args)

    monkeypatch.setattr(plan_steps, "rebound", counted)
    ph = np.random.default_rng(6).integers(1, 100, (20, 20)).astype(np.int32)
    path = fl.asarray(ph)
    want = ph.copy()
    for k in range(20):
        for i in range(20):
            path[i, :] = fl.minimum(path[i, :], path[i, k] + path[k, :])
            want[i, :] = np.minimum(want[i, :], want[i, k] + want[k, :])
    np.testing.assert_array_equal(path.get(), want)
    # (a few: the first rows of each structure, offsets 0 and not 0 being two)
    assert made[0] <= 8, made[0]


def test_moving_and_fixed_offsets_share_a_kernel(device_path):
    # one structure at a fixed row (its plan's constants hold the offsets) and at moving
    # rows (the offsets as launch arguments) in turn, on one kernel object: each launch
    # sets the offsets it reads, whichever ran before
    ah = np.random.default_rng(7).random((16, 24))
    a = fl.asarray(ah)
    want = ah.copy()
    for _ in range(3):
        for i in range(2, 16):
            for r in (1, i, 1, i - 1):
                a[r, 1:] -= a[r, :-1] * 0.125
                want[r, 1:] -= want[r, :-1] * 0.125
    np.testing.assert_allclose(a.get(), want, rtol=1e-12)


@pytest.mark.parametrize("key", [(3, 4), (-1, -2), (0, 0), (5, slice(2, 7)),
                                 (-3, slice(None, -2)), (4, slice(6, 2)), (2, slice(None)),
                                 (1, slice(-30, 30)), (7, slice(1, None, 2))])
def test_row_views_match_numpy_and_are_signed(device_path, key):
    # ops.indexing._walk_view's rows (a[i, j], a[i, start:stop] of a matrix) and the walk's
    # signature, made with the view, equal the general path's and signature_of's
    from fuseloop.expr.nodes import signature_of

    ah = np.arange(8 * 10, dtype=np.float64).reshape(8, 10)
    for base, ref in ((fl.asarray(ah), ah), (fl.asarray(ah).T[1:9], ah.T[1:9])):
        base = base.copy() if base.is_lazy else base
        fresh = base[key]._node  # (a leaf's first view: walked, signed as it is made)
        assert fresh.sig or fresh.strides is None
        for _ in range(2):  # (later views of the leaf: remembered)
            v = base[key]
            np.testing.assert_array_equal(v.get(), ref[key])
            node = v._node
            if node.sig:
                sig, node.sig = node.sig, 0
                assert signature_of(node) == sig
        np.testing.assert_array_equal((base[key] * 2).get(), ref[key] * 2)
    with pytest.raises(IndexError):
        fl.asarray(ah)[8, 1]
    with pytest.raises(IndexError):
        fl.asarray(ah)[1, -11]


@pytest.mark.parametrize("key", [slice(2, 5), slice(None, -1), slice(1, None), slice(5, 2),
                                 slice(None), slice(-100, 100), slice(0, 0)])
def test_vector_slices_match_numpy_and_are_signed(device_path, key):
    # ops.indexing._walk_view's ``x[a:b]`` of a vector (a view, or the vector itself)
    xh = np.arange(12, dtype=np.float32)
    for base, ref in ((fl.asarray(xh), xh), (fl.asarray(xh)[::-1].copy()[1:], xh[::-1][1:])):
        v = base[key]
        assert v is base or v._node.sig or v._node.strides is None
        assert (v is base) == (len(ref[key]) == len(ref))
        np.testing.assert_array_equal(v.get(), ref[key])
        np.testing.assert_array_equal((base[key] + 1).get(), ref[key] + 1)
