"""Run plans found by signatures without views' offsets (``nodes.free_signature``): a
loop over rows, slices or elements finds its plan by signature from its second
statement (no walk), each statement bound to its own offsets; which offsets are equal
and how a target meets what it reads still tell plans apart."""

import numpy as np
import pytest

import fuseloop as fl
from fuseloop import run_plans
from fuseloop.expr import nodes
from fuseloop.expr import program as prog


def _walks() -> int:
    return fl.stats()["plans_walked"]


def test_free_signature_leaves_out_only_offsets(device):
    a = fl.asarray(np.arange(48.0).reshape(6, 8))
    free = [nodes.free_signature(nodes.signature_of(a[i]._node)) for i in range(1, 4)]
    assert free[0] is not None and len({f[0] for f in free}) == 1
    assert [f[3] for f in free] == [(8,), (16,), (24,)]  # (each view's own offset)
    assert nodes.free_signature(nodes.signature_of(a[:, 1]._node))[0] != free[0][0]
    whole = nodes.free_signature(nodes.signature_of(a._node))
    assert whole[1:] == ((((6, 8), None, 0),), (), ())  # (a whole buffer: no offset)


def test_row_loop_walks_once(device_path, fresh_stats):
    h = np.random.default_rng(0).random((12, 50))
    a = fl.asarray(h)
    for i in range(12):
        a[i, :] -= a[i, :].mean()
        h[i, :] -= h[i, :].mean()
        if i == 0:
            first = _walks()
    assert first >= 1 and _walks() == first
    np.testing.assert_allclose(a.get(), h, rtol=1e-12, atol=1e-12)


def test_moving_slices_and_elements_walk_once(device_path, fresh_stats):
    h = np.arange(40.0)
    x = fl.asarray(h)
    got = []
    for i in range(8):
        got.append(float((x[i:i + 4] * 2 - x[i + 1:i + 5]).sum().get()))
        if i == 0:
            first = _walks()
    assert first >= 1 and _walks() == first
    assert got == [float((h[i:i + 4] * 2 - h[i + 1:i + 5]).sum()) for i in range(8)]
    # 0-d reads of a matrix's elements: the diagonal's two reads share an offset (a key
    # of its own), the others do not
    t = np.random.default_rng(1).random((5, 5))
    d = fl.asarray(t)
    for i in range(5):
        for k in range(5):
            assert float((d[i, k] * 2 + d[k, i]).get()) == t[i, k] * 2 + t[k, i]
    assert _walks() <= first + 2


def test_tridiagonal_sweep_walks_once(device_path, fresh_stats):
    rng = np.random.default_rng(2)
    n = 30
    a, b, d = rng.random(n), rng.random(n) + 2, rng.random(n)
    want = np.zeros(n)
    want[0] = d[0] / b[0]
    for i in range(1, n):
        want[i] = (d[i] - a[i] * want[i - 1]) / b[i]
    fa, fb, fd = fl.asarray(a), fl.asarray(b), fl.asarray(d)
    x = fl.zeros(n)
    x[0] = fd[0] / fb[0]
    first = _walks()
    for i in range(1, n):
        x[i] = (fd[i] - fa[i] * x[i - 1]) / fb[i]
    assert _walks() == first + 1
    np.testing.assert_allclose(x.get(), want, rtol=1e-12)


@pytest.mark.parametrize("check", [False, True], ids=["replayed", "checked"])
def test_overlapping_targets_keep_their_own_plans(device_path, monkeypatch, check):
    """One structure whose target overlaps what it reads at some offsets and not at
    others, alternating: each evaluation reads the values from before its write (numpy's
    order), whatever plan the other took.  Checking, each plan found by signature is
    compared with the walk's (buffers, scalars, offsets)."""
    monkeypatch.setattr(prog, "CHECK_STRUCTURE_CACHE", check)
    run_plans.clear()
    h = np.arange(64.0)
    x = fl.asarray(h)
    for i in range(8, 40, 3):
        for j in (i - 2, i + 8, i + 1, i - 8):  # (overlapping, disjoint, ...)
            x[i:i + 6] = x[j:j + 6] * 2 + 1
            h[i:i + 6] = h[j:j + 6] * 2 + 1
    np.testing.assert_allclose(x.get(), h, rtol=1e-12)
    m = np.arange(80.0).reshape(8, 10)
    a = fl.asarray(m)
    for i in range(7):
        a[i, 1:] = a[i, :-1] * 2 + 1  # (overlaps: through a temporary)
        m[i, 1:] = m[i, :-1] * 2 + 1
        a[i, 1:] = a[i + 1, :-1] * 2 + 1  # (disjoint: in place)
        m[i, 1:] = m[i + 1, :-1] * 2 + 1
    np.testing.assert_allclose(a.get(), m, rtol=1e-12)
