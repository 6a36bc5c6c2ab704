"""Run plans found by signatures without views' offsets (``expr.nodes``: offsets ride in
``offs``): a
loop over rows, slices or elements finds its plan by signature from its second
statement (no walk), each statement bound to its own offsets; which offsets are equal
and how a target meets what it reads still tell plans apart."""

import numpy as np
import pytest

import fuseloop as fl
from fuseloop import run_plans, signed_keys
from fuseloop.expr import nodes
from fuseloop.expr import program as prog


def _walks() -> int:
    return fl.stats()["plans_walked"]


def test_signatures_leave_out_only_offsets(device):
    a = fl.asarray(np.arange(48.0).reshape(6, 8))
    rows = [a[i]._node for i in range(1, 4)]
    assert len({nodes.signature_of(r) for r in rows}) == 1
    assert [r.offs for r in rows] == [(8,), (16,), (24,)]  # (each view's own offset)
    assert nodes.signature_of(a[:, 1]._node) != nodes.signature_of(rows[0])
    whole = a._node
    assert signed_keys.sig_views(nodes.signature_of(whole)) == ((((6, 8), None, -1),), 0)
    assert whole.offs == ()  # (a whole buffer: no offset)
    # which offsets are equal is in the signature: a[i] + a[k] at i == k reads one view
    same, other = (a[2] + a[2])._node, (a[2] + a[3])._node
    assert same.sig != other.sig and same.offs == (16,) and other.offs == (16, 24)
    assert (a[3] + a[3])._node.sig == same.sig
    assert signed_keys.sig_views(same.sig)[0] == (((8,), (1,), 0), ((8,), (1,), 0))


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


def test_moving_slice_flat_evaluation_hits_from_second(device_path, fresh_stats):
    """``(x[i:i + 8] * 2 - x[i + 1:i + 9]).eval()`` over ``i``: one signature, so from
    the second call the flat path's entry serves it at the call's offsets (no structure
    linearised, no plan walked); the reads with equal offsets (``i == j``) have a
    signature of their own."""
    h = np.arange(64.0)
    x = fl.asarray(h)
    sigs = len(nodes._sig_table)
    for i in range(12):
        got = (x[i:i + 8] * 2 - x[i + 1:i + 9]).eval()
        np.testing.assert_array_equal(got.get(), h[i:i + 8] * 2 - h[i + 1:i + 9])
        if i == 0:
            known, walked = len(prog.structures), _walks()
            sigs = len(nodes._sig_table)
    assert len(prog.structures) == known and _walks() == walked
    assert len(nodes._sig_table) == sigs
    for i in range(6):
        for j in (i, i + 3):
            got = (x[i:i + 8] - x[j:j + 8] * 3).eval()
            np.testing.assert_array_equal(got.get(), h[i:i + 8] - h[j:j + 8] * 3)
    assert len(prog.structures) <= known + 2


def test_row_statements_keep_their_signatures(device_path, fresh_stats):
    """floyd_warshall's statement over every row and pivot (its target row read at its
    pivot element: an overlapping read, ``i == k`` too): results equal numpy's, and the
    loop makes no signature after its first pivot."""
    n = 9
    h = np.random.default_rng(3).integers(1, 50, (n, n)).astype(np.int32)
    path = fl.asarray(h)
    for k in range(n):
        for i in range(n):
            path[i, :] = fl.minimum(path[i, :], path[i, k] + path[k, :])
            h[i, :] = np.minimum(h[i, :], h[i, k] + h[k, :])
        if k == 1:
            sigs = len(nodes._sig_table)
    assert len(nodes._sig_table) == sigs
    np.testing.assert_array_equal(path.get(), h)


def test_how_a_target_meets_a_flat_view_follows_their_extents():
    """``signed_keys._meets`` of 0-d and 1-D views (a growing loop meets a new pair at
    every length) answers by the views' extents where they say it, as the general
    test (``overlap.views_disjoint``) answers."""
    from fuseloop.expr.overlap import views_disjoint

    rng = np.random.default_rng(7)

    def view() -> tuple:
        if rng.random() < 0.2:
            return (), (), int(rng.integers(0, 40))
        n = int(rng.integers(0, 12))
        step = int(rng.choice([-3, -2, -1, 0, 1, 1, 2, 3]))
        low = max(0, -(n - 1) * step) if n else 0
        return (n,), (step,), low + int(rng.integers(0, 20))

    for _ in range(4000):
        written, read = view(), view()
        expected = 0 if read == written else 1 if views_disjoint(written, read) else 2
        assert signed_keys._meets(written, read) == expected, (written, read)


def test_contiguous_flat_views_meet_without_the_general_test(monkeypatch):
    """Two 1-D views of steps -1, 0 or 1 (``y[:k]`` and ``y[k-1::-1]``) meet as their
    extents say: the lattice test is not asked."""
    asked = []
    monkeypatch.setattr(signed_keys, "views_disjoint", lambda *a: asked.append(a))
    for k in range(1, 30):
        assert signed_keys._meets(((k,), (1,), 0), ((k,), (-1,), k - 1)) == 2
        assert signed_keys._meets(((k,), (1,), 0), ((), None, k + 3)) == 1
        assert signed_keys._meets(((), (), k), ((k + 1,), (1,), 0)) == 2
    assert not asked
