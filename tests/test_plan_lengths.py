"""Run plans whose lengths are run-time values (fuseloop.plan_lengths, issue 26): a loop
over slices of changing length records a bounded number of plans, and every result is
numpy's, also where a length decides the kernels (two-stage reductions, int32)."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

import fuseloop as fl
from fuseloop import evaluate, plan_lengths, run_plans, splits


@pytest.fixture
def device_path(device_path):
    """conftest's ``device_path`` (kernels on ``device``, no numpy shortcut), with the
    run plans starting empty."""
    run_plans.clear()
    return device_path


def _counts() -> tuple[int, int]:
    s = fl.stats()
    return s["plans_recorded"], s["plans_replayed"]


def test_trisolv_over_100_lengths_records_few_plans(device_path):
    n = 100
    rng = np.random.default_rng(0)
    lh = np.tril(rng.random((n, n))) + n * np.eye(n)
    bh = rng.random(n)
    L, b = fl.asarray(lh), fl.asarray(bh)
    xh = np.zeros(n)
    for i in range(n):
        xh[i] = (bh[i] - lh[i, :i] @ xh[:i]) / lh[i, i]
    for run in range(2):
        x = fl.zeros(n)
        fl.synchronize()
        fl.reset_stats()
        for i in range(n):
            x[i] = (b[i] - L[i, :i] @ x[:i]) / L[i, i]
        np.testing.assert_allclose(x.get(), xh, rtol=1e-12)
        recorded, replayed = _counts()
        # lengths 0..99 fall in 8 classes (0, 1 and bit lengths 2..7): at most two
        # records each, then the class's plan follows the lengths
        assert recorded <= 16 if run == 0 else recorded == 0, recorded
        assert replayed >= n - recorded


def test_more_lengths_than_plans_kept_record_nothing_again(device_path, monkeypatch):
    # plans made at other lengths are dropped before the plans they are made from
    monkeypatch.setattr(run_plans, "PLANS_MAX", 12)
    xh = np.random.default_rng(5).random(200)
    x = fl.asarray(xh)
    for run in range(2):
        fl.reset_stats()
        got = [(x[:k] * 2.0 - x[1:k + 1]).sum().get() for k in range(2, 200)]
        np.testing.assert_allclose(got, [(xh[:k] * 2 - xh[1:k + 1]).sum()
                                         for k in range(2, 200)], rtol=1e-12)
        recorded = _counts()[0]
        assert recorded <= 14 if run == 0 else recorded == 0, recorded
    assert len(run_plans._plans) <= 12 and len(run_plans._at) <= 12


def test_cholesky_like_double_loop(device_path):
    n = 24
    rng = np.random.default_rng(1)
    m = rng.random((n, n))
    ah = m @ m.T + n * np.eye(n)
    want = ah.copy()
    a = fl.asarray(ah)
    fl.reset_stats()
    for i in range(1, n):
        for j in range(i):
            want[i, j] -= want[i, :j] @ want[j, :j]
            want[i, j] /= want[j, j]
            a[i, j] -= a[i, :j] @ a[j, :j]
            a[i, j] /= a[j, j]
        want[i, i] = np.sqrt(want[i, i] - want[i, :i] @ want[i, :i])
        a[i, i] = fl.sqrt(a[i, i] - a[i, :i] @ a[i, :i])
    np.testing.assert_allclose(np.tril(a.get()), np.tril(want), rtol=1e-12)
    recorded, replayed = _counts()
    assert recorded <= 40, recorded  # (~300 statements; 24 lengths in 6 classes)
    assert replayed >= 250


def test_lengths_across_the_two_stage_threshold(device_path, monkeypatch):
    # a sum long enough to run in two stages (pieces that follow its length by rounding,
    # from 8192 elements on): such plans keep one plan per lengths; shorter ones follow
    # their lengths
    monkeypatch.setattr(splits, "TWO_STAGE_MIN_LENGTH", 64)
    monkeypatch.setattr(evaluate, "ONE_ROW_MAX_LENGTH", 64)
    n = 20000
    rng = np.random.default_rng(2)
    xh, yh = rng.random(n), rng.random(n)
    x, y = fl.asarray(xh), fl.asarray(yh)
    ks = list(range(5000, n, 611))
    fl.reset_stats()
    got = [fl.sum(x[:k] * y[:k]).get() for k in ks]
    np.testing.assert_allclose(got, [xh[:k] @ yh[:k] for k in ks], rtol=1e-12)
    split = [k for k in ks if splits.piece_count(k, device_path) > 1]
    assert len(split) > 10
    assert _counts()[0] >= len(split)  # (every split length recorded)
    fl.reset_stats()
    short = list(range(3, 4000, 97))  # (no split: they follow their lengths)
    got = [fl.sum(x[:k] * y[:k]).get() for k in short]
    np.testing.assert_allclose(got, [xh[:k] @ yh[:k] for k in short], rtol=1e-12)
    assert _counts()[0] <= 16


@pytest.fixture
def split_k(device_path, restore_recipes):
    """The GPU contraction recipe on ``device`` (the CPU device too): products whose output
    tiles do not fill the device split their reduced range (split-K, a first stage and a
    sum).  A vector's product would take the one-launch lanes kernel by default
    (``stream_lanes``), so the streaming kernel's split is asked for; registered for the
    device's own type, so a GPU run asks for it too."""
    from fuseloop.recipes import contraction

    fl.register_recipe(device_path.type, contraction.gpu_tiled.with_params(stream_lanes=0),
                       name="test-lengths-gpu-tiled", kind="contraction")
    return device_path


def _covariance_rows(d, m: int):
    cov = fl.zeros((m, m))
    for i in range(m):
        cov[i:m, i] = cov[i, i:m] = d[:, i] @ d[:, i:m]
    return cov


def test_split_k_plans_follow_the_lengths_of_one_split(split_k, monkeypatch):
    # covariance's rows: split-K over the fixed column length, a new output length per
    # row; a plan holds its split and follows the lengths where the rule splits so
    # again, so a loop over more lengths than plans kept records few plans, every run
    monkeypatch.setattr(run_plans, "PLANS_MAX", 16)
    m, n = 64, 512
    dh = np.random.default_rng(6).random((n, m))
    d = fl.asarray(dh)
    want = dh.T @ dh
    for run in range(2):
        fl.reset_stats()
        np.testing.assert_allclose(_covariance_rows(d, m).get(), want, rtol=1e-12)
        s = fl.stats()
        split = s["kernels_launched"] - 2 * m  # (rows whose product ran in two launches)
        assert split >= 16, split
        assert s["kernels_compiled"] <= 12 if run == 0 else s["kernels_compiled"] == 0
        # (one split's plan serves its lengths: records where the split changes, each
        # split of a key kept as one of its variants, so a second pass records nothing)
        assert s["plans_recorded"] <= 30 if run == 0 else s["plans_recorded"] == 0, s


def test_split_plans_ask_each_lengths_split_once(split_k, monkeypatch):
    # covariance's rows again: the split of a replay at moving lengths (which plan of the
    # key runs) is decided once per lengths and remembered by the key's plan, so a second
    # pass decides none (the decision walks the expression: most of a row's host cost)
    m, n = 64, 512
    dh = np.random.default_rng(6).random((n, m))
    d = fl.asarray(dh)
    asked = []
    split_of = plan_lengths.split_of

    def counted(*args):
        asked.append(1)
        return split_of(*args)

    monkeypatch.setattr(plan_lengths, "split_of", counted)
    for run in range(2):
        asked.clear()
        fl.reset_stats()
        np.testing.assert_allclose(_covariance_rows(d, m).get(), dh.T @ dh, rtol=1e-12)
        assert fl.stats()["kernels_launched"] - 2 * m >= 16  # (rows split in two launches)
        assert len(asked) <= m if run == 0 else not asked, len(asked)


def test_split_plans_at_other_lengths_equal_fresh_records(split_k, monkeypatch):
    from fuseloop.expr import program

    m, n = 48, 512
    dh = np.random.default_rng(7).random((n, m))
    d = fl.asarray(dh)
    _covariance_rows(d, m)  # (forms learnt)
    assert any(isinstance(p, run_plans._Plan) and p.forms is not None
               and plan_lengths.splits(p) for p in run_plans._plans.values())
    monkeypatch.setattr(program, "CHECK_STRUCTURE_CACHE", True)
    np.testing.assert_allclose(_covariance_rows(d, m).get(), dh.T @ dh, rtol=1e-12)


def test_plans_at_other_lengths_equal_fresh_records(device_path, monkeypatch):
    # checking mode compares each plan made from a key's forms with a fresh record
    from fuseloop.expr import program

    rng = np.random.default_rng(4)
    ah = rng.random((30, 30))
    a = fl.asarray(ah)
    for i in range(2, 30):  # (forms learnt)
        a[i, 0] = a[i, 1:i] @ a[1:i, i] + a[i - 1, 0]
    monkeypatch.setattr(program, "CHECK_STRUCTURE_CACHE", True)
    for i in range(2, 30):
        a[i, 0] = a[i, 1:i] @ a[1:i, i] + a[i - 1, 0]
    for _ in range(2):
        for i in range(2, 30):
            ah[i, 0] = ah[i, 1:i] @ ah[1:i, i] + ah[i - 1, 0]
    np.testing.assert_allclose(a.get(), ah, rtol=1e-12)


def test_two_dimensional_lengths_and_products(device_path):
    # a row block of changing height and width: C strides and sizes are products
    rng = np.random.default_rng(3)
    ah = rng.random((40, 50))
    a = fl.asarray(ah)
    fl.reset_stats()
    for h, w in [(3, 5), (4, 7), (5, 6), (6, 9), (7, 7), (3, 4), (2, 2), (6, 5)]:
        got = (a[:h, :w] * 2.0 - a[1:h + 1, :w]).sum(axis=1).get()
        np.testing.assert_allclose(got, (ah[:h, :w] * 2 - ah[1:h + 1, :w]).sum(axis=1))
        got = (a[:h, :w].T @ a[:h, :w]).get()
        np.testing.assert_allclose(got, ah[:h, :w].T @ ah[:h, :w], rtol=1e-12)


def test_int32_bound_keeps_lengths_exact(device):
    # a node whose class could pass int32 indices keeps its lengths in the key
    x = fl.ones(4, dtype=np.float32, device=device)
    big = fl.broadcast_to(x[:, None, None], (4, 1 << 14, 1 << 14)).sum(axis=(1, 2))
    small = fl.broadcast_to(x[:, None, None], (4, 8, 8)).sum(axis=(1, 2))
    key_big = run_plans._key([big._node], (4,), None, device)
    key_small = run_plans._key([small._node], (4,), None, device)
    assert key_big is not None and key_small is not None
    assert not key_big[4].lengths and key_big[0][-1][0] == "N"
    assert key_small[4].lengths and not any(type(t) is tuple and t[:1] == ("N",)
                                            for t in key_small[0])


def test_forms_fit_only_one_way():
    la, lb = (5, 9), (7, 9)
    monomials = [(0,), (0, 0)]
    assert plan_lengths._fit(10, 14, la, lb, monomials) == (2, (0,))
    assert plan_lengths._fit(9, 9, la, lb, monomials) == (9, ())
    assert plan_lengths._fit(25, 49, la, lb, monomials) == (1, (0, 0))
    assert plan_lengths._fit(10, 15, la, lb, monomials) is None  # (no form)
    assert plan_lengths._fit(16, 64, (4,), (8,), [(0,), (0, 0)]) == (1, (0, 0))
    # 12 at lengths (2, 6) and (3, 4): a constant, or the product of both: unknown
    both = [(0,), (1,), (0, 0), (0, 1), (1, 1)]
    assert plan_lengths._fit(12, 12, (2, 6), (3, 4), both) is None
    assert plan_lengths._fit(6, 9, (2, 6), (3, 4), both) == (3, (0,))


def test_plans_are_dropped_least_recently_used(device_path, monkeypatch):
    monkeypatch.setattr(run_plans, "PLANS_MAX", 4)
    a = fl.asarray(np.arange(64.0).reshape(8, 8))
    statements = [lambda: (a.sum(axis=0) + 1.0).get(), lambda: (a.sum(axis=1) * 2.0).get(),
                  lambda: (a.max(axis=0) - 1.0).get(), lambda: (a.min(axis=1) / 2.0).get(),
                  lambda: (a.T.sum(axis=0) - 3.0).get()]
    for s in statements:
        s()
    statements[0]()  # (evicted by the fifth: recorded again)
    fl.reset_stats()
    statements[4]()
    statements[0]()
    assert len(run_plans._plans) <= 4
    assert _counts()[0] == 0


def test_rows_at_moving_offsets_and_lengths_compile_a_bounded_number(device_path):
    # upper-triangular products row by row: each statement's views start elsewhere and
    # are shorter (offset and length change every iteration); kernels and plans are
    # per length class, and a second pass builds and records nothing
    n = 50
    rng = np.random.default_rng(6)
    ah, xh = rng.random((n, n)), rng.random(n)
    a, x = fl.asarray(ah), fl.asarray(xh)
    want = np.array([ah[i, i:] @ xh[i:] - ah[i, i] for i in range(n)])
    for run in range(2):
        y = fl.zeros(n)
        fl.synchronize()
        fl.reset_stats()
        for i in range(n):
            y[i] = a[i, i:] @ x[i:] - a[i, i]
        np.testing.assert_allclose(y.get(), want, rtol=1e-12)
        s = fl.stats()
        # lengths 1..50 fall in 7 classes (1 and bit lengths 2..6)
        assert s["kernels_compiled"] <= 14 and s["plans_recorded"] <= 14, s
        if run:
            assert s["kernels_compiled"] == 0 and s["plans_recorded"] == 0, s
        assert s["plans_replayed"] >= n - s["plans_recorded"], s


def _as_gpu(device):
    """``device`` presented as a 132-unit GPU: the GPU recipes and split rules, run by it
    (an index of its own: runtimes and kernels are kept per device index)."""
    return dataclasses.replace(device, index=9140 + device.index, type="gpu", compute_units=132,
                               max_work_group_size=1024)


def _columns_splitting_two_ways(m: int, device) -> int:
    """Columns ``n`` at which covariance's row products on ``device`` (``d[:, i] @ d[:,
    i:m]``, ``d`` of shape ``(n, m)``) split two ways within one length class (a run
    plan key's: the bit length of ``m - i``), as the device's split rule decides."""
    for n in (1800, 2400, 3600, 5400, 8100, 12150):
        d = fl.empty((n, m))  # (never read: the rule looks at shapes and strides)
        by_class: dict[int, set] = {}
        for i in range(m - 1):
            e = d[:, i] @ d[:, i:m]
            by_class.setdefault((m - i).bit_length(), set()).add(
                plan_lengths.split_of([e._node], e.shape, device))
        if any(len(found) > 1 for found in by_class.values()):
            return n
    raise AssertionError(f"no column count splits {m} rows two ways on {device.name}")


@pytest.mark.parametrize("present", ["device", "gpu"])
def test_lengths_that_split_otherwise_are_a_variant_recorded_once(split_k, present,
                                                                  monkeypatch):
    # covariance's rows at columns where the device's rule splits some output lengths of
    # a class and not others (a CPU at 1800 columns: split from 19 output rows on), so
    # the key of that class meets two splits; each is one of the key's variants with
    # its own forms, so a second pass records nothing even where the plans made at
    # other lengths were dropped (PLANS_MAX below the loop's lengths)
    if present == "gpu":
        if split_k.type != "cpu":
            pytest.skip("presents the CPU device as a GPU")
        # (a compile worker finds no device of that description: builds in this process)
        monkeypatch.setenv("FUSELOOP_COMPILE", "inline")
    monkeypatch.setattr(run_plans, "PLANS_MAX", 16)
    with fl.device(_as_gpu(split_k) if present == "gpu" else split_k) as dev:
        m = 24
        n = _columns_splitting_two_ways(m, dev)
        dh = np.random.default_rng(8).random((n, m))
        d = fl.asarray(dh)
        for run in range(2):
            fl.reset_stats()
            np.testing.assert_allclose(_covariance_rows(d, m).get(), dh.T @ dh, rtol=1e-12)
            assert fl.stats()["plans_recorded"] <= 30 if run == 0 else \
                fl.stats()["plans_recorded"] == 0, fl.stats()
    plans = [p for p in run_plans._plans.values() if isinstance(p, run_plans._Plan)]
    assert any(p.variants for p in plans)
    for p in plans:
        assert len(p.variants) <= plan_lengths.VARIANTS_MAX
        assert all(v.split != p.split for v in p.variants)


def test_a_loop_over_more_lengths_than_kept_keeps_most_of_them(device_path, monkeypatch):
    # s[i] = sum(x[i:] * y[:n-i]): a plan at each of n lengths, more than the tables
    # keep; they keep those met first (bimodal insertion, fuseloop.plan_tables), so
    # later passes make only the rest again, record nothing, and stay bounded
    monkeypatch.setattr(run_plans, "PLANS_MAX", 32)
    made = []
    at_lengths = run_plans._at_lengths
    monkeypatch.setattr(run_plans, "_at_lengths",
                        lambda plan, lengths: made.append(lengths) or at_lengths(plan, lengths))
    n = 150
    rng = np.random.default_rng(9)
    xh, yh = rng.random(n), rng.random(n)
    x, y = fl.asarray(xh), fl.asarray(yh)
    want = np.array([xh[i:] @ yh[:n - i] for i in range(n)])
    per_pass = []
    for run in range(3):
        made.clear()
        s = fl.zeros(n)
        fl.reset_stats()
        for i in range(n):
            s[i] = fl.sum(x[i:] * y[:n - i])
        np.testing.assert_allclose(s.get(), want, rtol=1e-12)
        recorded = fl.stats()["plans_recorded"]
        assert recorded <= 2 * 9 if run == 0 else recorded == 0, recorded  # (9 classes)
        per_pass.append(len(made))
    # (least recently used, every plan made in the first pass is made again in each)
    assert per_pass[2] <= per_pass[0] - run_plans.PLANS_MAX // 2, per_pass
    for table in (run_plans._plans, run_plans._at, run_plans._at_dropped, run_plans._signed,
                  run_plans._target_sigs):
        assert len(table) <= run_plans.PLANS_MAX


def test_admission_keeps_a_cycle_and_yields_to_a_new_working_set():
    from collections import OrderedDict

    from fuseloop import plan_tables

    table: OrderedDict = OrderedDict()
    dropped: OrderedDict = OrderedDict()

    def passes(group: str, n: int, runs: int) -> list[int]:  # hits per pass over n keys
        hits = []
        for _ in range(runs):
            hits.append(0)
            for k in range(n):
                if (group, k) in table:
                    plan_tables.touch(table, (group, k))
                    hits[-1] += 1
                else:
                    plan_tables.admit(table, (group, k), k, 64, dropped)
        return hits

    # a cycle of 200 keys through 64 places keeps most of the 64 (least recently used
    # eviction alone: none), and a new working set takes the table over at once
    cycle = passes("a", 200, 4)
    assert cycle[0] == 0 and min(cycle[1:]) >= 48, cycle
    assert passes("b", 20, 3) == [0, 20, 20]
    assert passes("c", 60, 3) == [0, 60, 60]
    assert len(table) <= 64 and len(dropped) <= 64
