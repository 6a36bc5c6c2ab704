"""Run plans found by signature at lengths of their own (fuseloop.plan_free, issue 26): a
loop over slices of changing length walks its statements per size class, not per
length, and every replay at a new length gives numpy's result."""

from __future__ import annotations

import numpy as np
import pytest

import fuseloop as fl
from fuseloop import plan_free, run_plans
from fuseloop.expr import program


@pytest.fixture
def device_path(device_path):
    """conftest's ``device_path`` with the run plans starting empty."""
    run_plans.clear()
    return device_path


def _durbin(rh: np.ndarray, fl_or_np: object) -> np.ndarray:
    xp: object = fl_or_np
    r = xp.asarray(rh)  # type: ignore[attr-defined]
    y = xp.empty_like(r)  # type: ignore[attr-defined]
    alpha = -r[0]
    beta = 1.0
    y[0] = -r[0]
    for k in range(1, len(rh)):
        beta *= 1.0 - alpha * alpha
        alpha = -(r[k] + xp.dot(xp.flip(r[:k]), y[:k])) / beta  # type: ignore[attr-defined]
        y[:k] += alpha * xp.flip(y[:k])  # type: ignore[attr-defined]
        y[k] = alpha
    return y.get() if xp is fl else y  # type: ignore[attr-defined,return-value]


def test_durbin_walks_per_class_not_per_length(device_path):
    # lengths 1..149 cross the classes at 64 and 128; the update's overlapping target
    # and the dot's reduction each walked at every length before
    rh = np.random.default_rng(3).random(150) / 150
    want = _durbin(rh, np)
    for run in range(2):
        fl.reset_stats()
        np.testing.assert_allclose(_durbin(rh, fl), want, rtol=1e-10)
        walked = fl.stats()["plans_walked"]
        assert walked <= 60 if run == 0 else walked == 0, (run, walked)


def test_a_loop_over_more_lengths_than_plans_kept_walks_little(device_path, monkeypatch):
    # the plans at each length are dropped every pass; the free keys (a few per class)
    # stay, so a pass makes its plans at the lengths again without walking
    monkeypatch.setattr(run_plans, "PLANS_MAX", 24)
    xh = np.random.default_rng(5).random(201)
    x = fl.asarray(xh)
    for run in range(2):
        fl.reset_stats()
        y = fl.zeros(200)
        for k in range(200):
            y[k] = (x[:k] * 2.0 - x[1:k + 1]).sum()
        np.testing.assert_allclose(y.get(), [(xh[:k] * 2 - xh[1:k + 1]).sum()
                                             for k in range(200)], rtol=1e-12, atol=1e-14)
        walked = fl.stats()["plans_walked"]
        assert walked <= 40, (run, walked)


@pytest.mark.parametrize("order", ["growing", "shuffled"])
def test_replays_at_new_lengths_are_numpys(device_path, order):
    # 0, 1, a class's first and last lengths, in an order that replays the plans of a
    # key learnt at other lengths (the first lengths of each class record)
    n = 140
    rng = np.random.default_rng(7)
    ah = rng.random((n, n))
    vh = rng.random(n)
    lengths = [0, 1, 2, 3, 63, 64, 65, 127, 128, 129, 5, 100, 33, 17, 130, 70]
    if order == "shuffled":
        lengths = [int(k) for k in rng.permutation(lengths)]
    for _ in range(2):
        a, v = fl.asarray(ah), fl.asarray(vh)
        want_a, want_v = ah.copy(), vh.copy()
        for k in lengths:
            v[:k] += 0.5 * fl.flip(v[:k])
            want_v[:k] += 0.5 * np.flip(want_v[:k])
            got = (a[k % n, :k] @ v[:k]).get()
            np.testing.assert_allclose(got, want_a[k % n, :k] @ want_v[:k], rtol=1e-12)
            a[:k, 3] -= a[:k, 2] * v[k]
            want_a[:k, 3] -= want_a[:k, 2] * want_v[k]
        np.testing.assert_allclose(v.get(), want_v, rtol=1e-12)
        np.testing.assert_allclose(a.get(), want_a, rtol=1e-12)


def test_checking_equal_free_keys_are_one_walk_key(device_path, monkeypatch):
    # checking, every walk asks that the free key it met before named its key and lengths
    monkeypatch.setattr(program, "CHECK_STRUCTURE_CACHE", True)
    rng = np.random.default_rng(8)
    lh = np.tril(rng.random((90, 90))) + 90 * np.eye(90)
    L, b = fl.asarray(lh), fl.asarray(rng.random(90))
    x = fl.zeros(90)
    xh = np.zeros(90)
    for i in range(90):
        x[i] = (b[i] - L[i, :i] @ x[:i]) / L[i, i]
        xh[i] = (b.get()[i] - lh[i, :i] @ xh[:i]) / lh[i, i]
    np.testing.assert_allclose(x.get(), xh, rtol=1e-12)
    assert run_plans._free


def _free(node: fl.Array, out_shape: tuple[int, ...] | None = None) -> tuple | None:
    e = node._node
    got = plan_free.free_of((e.sig,), e.shape if out_shape is None else out_shape)
    return None if got is None else got[:2]


def test_free_keys_name_lengths_by_place_and_class():
    x = fl.asarray(np.arange(300.0))
    a = fl.asarray(np.ones((40, 40)))
    five, seven, nine = (_free(x[:k] * 2.0) for k in (5, 7, 9))
    assert five is not None and seven is not None and nine is not None
    assert five[0] == seven[0] and (five[1], seven[1]) == ((5,), (7,))
    assert nine[0] != five[0]  # (9 is of the next class)
    square, wide = _free(a[:5, :5] + 1.0), _free(a[:5, :6] + 1.0)
    assert square is not None and wide is not None and square[0] != wide[0]
    assert _free(x[:1] * 2.0)[0] != _free(x[:2] * 2.0)[0]  # (1 is never a symbol)
