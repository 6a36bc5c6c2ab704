"""Signatures of reductions, gathers and remaps: run plans found without a walk.

An expression with reductions (``x - x.mean()``, layernorm, ``sum(x*y)**0.5``) is
evaluated through a run plan (:mod:`fuseloop.run_plans`).  Its nodes carry structure
signatures like elementwise ones (:mod:`fuseloop.expr.nodes`), so a later evaluation of
the structure finds its plan by the roots' signatures and the pattern of repeated
operands, without walking the expression.  These tests check that expressions differing
in anything that changes the kernels get different keys, that replays found this way
compute numpy's results with their own buffers, scalars and view offsets, and that
nothing walks.
"""

from __future__ import annotations

import numpy as np
import pytest

import fuseloop as fl
from fuseloop import host_path, run_plans
from fuseloop.expr import program as prog


@pytest.fixture
def plans():
    run_plans.clear()
    yield run_plans
    run_plans.clear()


def _key(*arrays):
    keyed = run_plans._signed_key([a._node for a in arrays], arrays[0].shape,
                                  arrays[0].device)
    assert keyed is not None
    return keyed[0]


def _layernorm(x, eps):
    mu = x.mean(axis=1, keepdims=True)
    var = ((x - mu) ** 2).mean(axis=1, keepdims=True)
    return (x - mu) / fl.sqrt(var + eps)


def _np_layernorm(h, eps):
    mu = h.mean(axis=1, keepdims=True)
    return (h - mu) / np.sqrt(((h - mu) ** 2).mean(axis=1, keepdims=True) + eps)


def test_replays_found_by_signature_walk_nothing(device, plans, monkeypatch):
    rng = np.random.default_rng(0)
    hosts = [rng.random((6, 40), dtype=np.float32) for _ in range(3)]
    v = rng.random(300, dtype=np.float32)
    x, vd = fl.asarray(hosts[0]), fl.asarray(v)
    _layernorm(x, 1e-5).eval()  # recorded (walked once)
    fl.compute(vd.min(), vd.max(), (vd * vd).sum())
    walks = []
    real = prog._walk
    monkeypatch.setattr(prog, "_walk", lambda *a: walks.append(1) or real(*a))
    for k, h in enumerate(hosts):
        eps = 1e-5 * (k + 1)  # (a Python float: passed to the kernel, not baked in)
        got = _layernorm(fl.asarray(h), eps).get()
        np.testing.assert_allclose(got, _np_layernorm(h, np.float32(eps)), rtol=1e-4,
                                   atol=1e-5)
        w = fl.asarray(v * (k + 2))
        lo, hi, sq = fl.compute(w.min(), w.max(), (w * w).sum())
        assert (float(lo.get()), float(hi.get())) == (v.min() * (k + 2), v.max() * (k + 2))
        np.testing.assert_allclose(float(sq.get()), ((v * (k + 2)) ** 2).sum(), rtol=1e-5)
    assert walks == []


def test_keys_tell_apart_what_changes_the_kernels(device):
    rng = np.random.default_rng(1)
    h = rng.random((8, 6), dtype=np.float32)
    x, y = fl.asarray(h), fl.asarray(h + 1)
    xd = fl.asarray(h.astype(np.float64)) if device.has_fp64 else fl.asarray(h.astype(np.int32))
    variants = {
        "base": lambda: x.sum(axis=0) * 2,
        "axis": lambda: x[:6].sum(axis=1) * 2,  # (6,) either way
        "keepdims": lambda: x.sum(axis=0, keepdims=True) * 2,
        "op": lambda: x.max(axis=0) * 2,
        "dtype": lambda: xd.sum(axis=0) * 2,
        "shape": lambda: x[:7].sum(axis=0) * 2,
        "strides": lambda: x[::2].sum(axis=0) * 2,
        "same_shape_other_view": lambda: x[:4].sum(axis=0) * 2,
        "literal": lambda: x.sum(axis=0) * fl.constant(2.0),
        "literal3": lambda: x.sum(axis=0) * fl.constant(3.0),
        "epilogue": lambda: fl.sqrt(x.sum(axis=0)),
        "nested": lambda: (x - x.mean(axis=0)).sum(axis=0) * 2,
        "aliased": lambda: x.sum(axis=0) + x.sum(axis=0),
        "two_buffers": lambda: x.sum(axis=0) + y.sum(axis=0),
        "gather": lambda: x[fl.asarray(np.array([0, 3, 5]))].sum(axis=0) * 2,
        "gather_other_axis": lambda: x[:, fl.asarray(np.array([0, 3, 5]))].sum(axis=1) * 2,
    }
    keys = {name: _key(make()) for name, make in variants.items()}
    assert len(set(keys.values())) == len(keys), keys
    # data that is passed to the kernel is not in the key: other buffers, scalar values
    u = fl.asarray(h * 3)
    assert _key(u.sum(axis=0) * 5) == keys["base"]
    assert _key(u.sum(axis=0) + x.sum(axis=0)) == keys["two_buffers"]
    # nor a view's offset (a kernel parameter): which offsets are equal is
    assert _key(x[4:].sum(axis=0) * 2) == keys["same_shape_other_view"]
    assert _key(x[4:].sum(axis=0) + x[4:].sum(axis=0)) != \
        _key(x[4:].sum(axis=0) + x[:4].sum(axis=0))


@pytest.mark.parametrize("check", [False, True], ids=["replayed", "checked"])
def test_replays_of_similar_structures_compute_their_own(device, plans, monkeypatch, check):
    """Alternating similar structures (other axes, views, aliasing, literals) two rounds:
    each replay computes its own expression (a shared key would mix them up).  Checking,
    every plan found by signature is compared with what the walk finds."""
    monkeypatch.setattr(prog, "CHECK_STRUCTURE_CACHE", check)
    rng = np.random.default_rng(2)
    h, g = rng.random((8, 6), dtype=np.float32), rng.random((8, 6), dtype=np.float32)
    x, y = fl.asarray(h), fl.asarray(g)
    idx = np.array([5, 0, 3])
    cases = [
        (lambda: x.sum(axis=0) * 2, lambda: h.sum(axis=0) * 2),
        (lambda: x[:6].sum(axis=1) * 2, lambda: h[:6].sum(axis=1) * 2),
        (lambda: x.sum(axis=0, keepdims=True) - x, lambda: h.sum(axis=0, keepdims=True) - h),
        (lambda: x[4:].sum(axis=0) * 2, lambda: h[4:].sum(axis=0) * 2),
        (lambda: x[:4].sum(axis=0) * 2, lambda: h[:4].sum(axis=0) * 2),
        (lambda: x[4:].sum(axis=0) - x[:4].sum(axis=0),
         lambda: h[4:].sum(axis=0) - h[:4].sum(axis=0)),
        (lambda: x[4:].sum(axis=0) - x[4:].sum(axis=0), lambda: 0 * h[4:].sum(axis=0)),
        (lambda: x.sum(axis=0) + x.sum(axis=0), lambda: 2 * h.sum(axis=0)),
        (lambda: x.sum(axis=0) + y.sum(axis=0), lambda: h.sum(axis=0) + g.sum(axis=0)),
        (lambda: y.sum(axis=0) + x.sum(axis=0), lambda: g.sum(axis=0) + h.sum(axis=0)),
        (lambda: x.max(axis=1) * fl.constant(3.0), lambda: h.max(axis=1) * 3),
        (lambda: x.max(axis=1) * fl.constant(4.0), lambda: h.max(axis=1) * 4),
        (lambda: x[fl.asarray(idx)].sum(axis=0), lambda: h[idx].sum(axis=0)),
    ]
    for _ in range(2):
        for make, want in cases:
            np.testing.assert_allclose(make().get(), want(), rtol=1e-5, atol=1e-6)
    # (two keys fewer than cases: y.sum + x.sum is x.sum + y.sum with its buffers swapped,
    # x[:4] is x[4:] at another offset)
    assert check or len(plans._signed) == len(cases) - 2
    out = fl.empty((6,), np.float32)  # a target: found by the walk, as before
    fl.compute(x.sum(axis=0) + y.sum(axis=0), out=out)
    np.testing.assert_allclose(out.get(), h.sum(axis=0) + g.sum(axis=0), rtol=1e-5)


def test_rows_of_one_array_share_a_plan_with_their_own_offsets(device, plans, fresh_stats):
    """``A[i]``'s signature without its offset is every row's: one plan (the walk's key
    leaves offsets out too) and one signed entry, found from the second row on (no walk),
    each row replayed with its own offset."""
    rows = run_plans.SIGNED_PER_PLAN + 4
    h = np.random.default_rng(3).random((rows + 1, 50), dtype=np.float32)
    a = fl.asarray(h)
    for _ in range(2):
        for i in range(rows + 1):
            np.testing.assert_allclose((a[i] - a[i].mean()).get(), h[i] - h[i].mean(),
                                       rtol=1e-5, atol=1e-6)
    assert len(plans._plans) == 1 and len(plans._signed) == 1
    assert fl.stats()["plans_walked"] == 1


def test_out_of_range_gather_is_reported_on_a_signed_replay(device, plans):
    x = fl.asarray(np.arange(10, dtype=np.float32))
    assert float(x[fl.asarray(np.array([1, 2]))].sum().get()) == 3
    assert float(x[fl.asarray(np.array([3, 4]))].sum().get()) == 7  # (found by signature)
    with pytest.raises(IndexError):
        x[fl.asarray(np.array([3, 40]))].sum().get()


def test_unsigned_children_leave_reductions_unsigned(device, plans):
    h = np.arange(6, dtype=np.float32)
    x = fl.asarray(h)
    s = fl.concatenate([x, x * 2]).sum()  # (a concatenation has no signature)
    assert s._node.sig == 0 and s._node.operands is None
    assert run_plans._signed_key([s._node], (), x.device) is None
    for _ in range(2):
        assert float(s.get()) == 3 * h.sum()
        s = fl.concatenate([x, x * 2]).sum()


def test_small_reductions_stay_on_the_host_path(device, monkeypatch, fresh_stats):
    """Counting evaluations of a flat structure (to move it onto a kernel) is for
    elementwise work only: a signed reduction stays on the host path."""
    if not host_path.host_device(device):
        pytest.skip("the host path runs on CPU devices only")
    monkeypatch.setattr(host_path, "FLAT_REPEATS_FOR_KERNEL", 2)
    monkeypatch.setattr(host_path, "HOST_MAX_WORK", 4096)
    h = np.arange(1, 9, dtype=np.float32)
    x = fl.asarray(h)
    fl.synchronize()
    fl.reset_stats()
    for _ in range(4):
        np.testing.assert_allclose((x - x.mean()).get(), h - h.mean(), rtol=1e-6)
    assert fresh_stats()["kernels_launched"] == 0


def test_several_shapes_in_one_compute_walk_nothing_when_replayed(device, plans,
                                                                   monkeypatch):
    """``fl.compute`` of results of several shapes builds their kernels ahead; a group
    whose plan is known by signature is found without a walk there too."""
    h = np.random.default_rng(4).random((5, 30), dtype=np.float32)
    x = fl.asarray(h)
    for _ in range(2):
        fl.compute(x - x.mean(axis=0), x.max(axis=1))
    walks = []
    real = prog._walk
    monkeypatch.setattr(prog, "_walk", lambda *a: walks.append(1) or real(*a))
    c, m = fl.compute(x - x.mean(axis=0), x.max(axis=1))
    np.testing.assert_allclose(c.get(), h - h.mean(axis=0), rtol=1e-5, atol=1e-6)
    np.testing.assert_array_equal(m.get(), h.max(axis=1))
    assert walks == []
