"""A value reached through several views of one lazy array is computed once per
evaluation (fuseloop.sharing): transposed and broadcast views read one temporary."""

import re

import numpy as np
import pytest
from launch_counts import launches_and_result

import fuseloop as fl
from fuseloop import sharing


def _names(expr):
    return re.findall(r"\b(fuseloop_\w+)\(", fl.show_code(expr))


def _softmax(m, s):
    e = m.exp(s - s.max(axis=-1, keepdims=True))
    return e / e.sum(axis=-1, keepdims=True)


def test_attention_computes_scores_once(device):
    """``softmax(Q @ K.T / s) @ V``: the scores, their row maxima and sums each run once
    (Q @ K.T ran three times: for the product, inside the maxima, inside the sums)."""
    rng = np.random.default_rng(0)
    qh, kh, vh = (rng.standard_normal((96, 16)) for _ in range(3))
    q, k, v = map(fl.asarray, (qh, kh, vh))
    expr = _softmax(fl, q @ k.T / 4.0) @ v
    names = _names(expr)
    assert names.count("fuseloop_contract") == 2 and len(names) == 4, names
    launches, got = launches_and_result(lambda: expr)
    assert launches == 4
    want = _softmax(np, qh @ kh.T / 4.0) @ vh
    np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-12)
    # replayed from its run plan: the same kernels, the same values
    launches, got = launches_and_result(lambda: _softmax(fl, q @ k.T / 4.0) @ v)
    assert launches == 4
    np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-12)


def test_row_centred_product_means_once(device):
    """``d @ d.T`` with row-centred ``d``: the row means run once for both operands."""
    xh = np.random.default_rng(1).standard_normal((64, 200))
    x = fl.asarray(xh)
    d, dh = x - x.mean(axis=1, keepdims=True), xh - xh.mean(axis=1, keepdims=True)
    launches, got = launches_and_result(lambda: d @ d.T)
    assert launches == 2
    np.testing.assert_allclose(got, dh @ dh.T, rtol=1e-12, atol=1e-12)


def test_broadcast_sums_run_first(device):
    """``x.T @ x + x.sum(0)``: the column sums were computed inside the product's kernel
    once per output row (one reduction kernel, no tiled contraction); they run first
    and the product keeps the contraction recipe.  ``m[:, None] * m[None, :]`` of the
    column means: the means once, read through both views."""
    xh = np.random.default_rng(2).standard_normal((300, 40))
    x = fl.asarray(xh)
    names = _names(x.T @ x + x.sum(0))
    assert names[-1] == "fuseloop_contract" and len(names) in (2, 3), names
    np.testing.assert_allclose((x.T @ x + x.sum(0)).get(), xh.T @ xh + xh.sum(0),
                               rtol=1e-12, atol=1e-12)
    m, mh = x.mean(0), xh.mean(0)
    launches, got = launches_and_result(lambda: m[:, None] * m[None, :])
    assert launches == 2
    np.testing.assert_allclose(got, mh[:, None] * mh[None, :], rtol=1e-12, atol=1e-12)


def test_views_of_different_values_are_not_shared(device):
    """Equal structures over other buffers, other offsets or other scalar nodes are other
    values; a run plan recorded where two operands were one buffer is not replayed for
    two buffers."""
    rng = np.random.default_rng(3)
    ah, bh = rng.standard_normal((2, 200, 48))
    a, b = fl.asarray(ah), fl.asarray(bh)

    def f(m, x, y, s, t):
        return (x * s).sum(0)[:, None] * (y * t).sum(0)[None, :]

    for x, y, xh, yh in ((a, a, ah, ah), (a, b, ah, bh)):
        got = f(fl, x, y, 2.0, 3.0).get()
        np.testing.assert_allclose(got, f(np, xh, yh, 2.0, 3.0), rtol=1e-12, atol=1e-12)
    rows = a[:100].sum(0)[:, None] - a[100:].sum(0)[None, :]
    np.testing.assert_allclose(rows.get(), ah[:100].sum(0)[:, None] - ah[100:].sum(0)[None, :],
                               rtol=1e-12, atol=1e-12)


def test_centred_product_written_into_its_input(device):
    """A target the expression reads (through a temporary), the means shared."""
    xh = np.random.default_rng(4).standard_normal((96, 96))
    x = fl.asarray(xh)
    d, dh = x - x.mean(axis=0), xh - xh.mean(axis=0)
    x[...] = d.T @ d
    np.testing.assert_allclose(x.get(), dh.T @ dh, rtol=1e-12, atol=1e-12)


def test_switched_off_computes_each_view(device, monkeypatch):
    """``fuseloop.sharing.SHARE_VIEWS = False`` (caches cleared) computes each view's
    means on its own again, with the same values."""
    xh = np.random.default_rng(5).standard_normal((200, 64))
    x = fl.asarray(xh)
    dh = xh - xh.mean(axis=0)
    monkeypatch.setattr(sharing, "SHARE_VIEWS", False)
    fl.clear_caches()
    try:
        d = x - x.mean(axis=0)
        launches, got = launches_and_result(lambda: d.T @ d)
        assert launches == 3
        np.testing.assert_allclose(got, dh.T @ dh, rtol=1e-12, atol=1e-12)
    finally:
        monkeypatch.undo()
        fl.clear_caches()


@pytest.mark.parametrize("shape", [(64, 1, 80)])
def test_canonical_form_of_permuted_views(shape):
    """Two views of one reduction that permute, insert or drop unit axes have one key;
    a slice of it has another."""
    x = fl.asarray(np.arange(np.prod(shape) * 3, dtype=np.float64).reshape(3, *shape))
    s = x.sum(axis=0)
    views = [s, s.transpose(2, 1, 0), s[:, 0, :], s.T[None]]
    keys = {sharing.canonical(v._node)[0] for v in views}
    assert len(keys) == 1
    assert sharing.canonical(s[1:]._node)[0] not in keys
