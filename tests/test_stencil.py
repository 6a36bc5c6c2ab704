"""Stencils (fl.stencil, fl.stencil_function): boundary rules against numpy's pad, 1-D to
3-D, fused into the consuming kernel."""

from __future__ import annotations

import numpy as np
import pytest

import fuseloop as fl
from fuseloop.errors import ShapeError

MODES = {"clamp": "edge", "wrap": "wrap", "constant": "constant"}


def reference(h, w, center, boundary, cval=0):
    """numpy: pad by the stencil's reach on each side, then sum the weighted windows."""
    pads = [(c, n - 1 - c) for c, n in zip(center, w.shape)]
    extra = {"constant_values": cval} if boundary == "constant" else {}
    p = np.pad(h, pads, mode=MODES[boundary], **extra)
    out = np.zeros(h.shape, np.result_type(h, w))
    for k in np.ndindex(*w.shape):
        out += w[k] * p[tuple(slice(a, a + n) for a, n in zip(k, h.shape))]
    return out


@pytest.mark.parametrize("boundary", list(MODES))
@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.int32])
def test_1d_fused_one_kernel(device, boundary, dtype):
    h = (np.random.default_rng(1).random(257) * 100).astype(dtype)
    w = np.array([1, -2, 1], dtype)
    x = fl.asarray(h)
    fl.reset_stats()
    y = (2 * fl.stencil(x, w, boundary=boundary, cval=3) + x).get()
    assert fl.stats()["kernels_launched"] == 1
    want = 2 * reference(h, w, (1,), boundary, 3) + h
    assert y.dtype == want.dtype
    np.testing.assert_allclose(y, want, rtol=1e-5)


@pytest.mark.parametrize("boundary", list(MODES))
def test_2d_and_3d_off_centre(device, boundary):
    rng = np.random.default_rng(2)
    h2, w2 = rng.random((9, 7)), rng.random((3, 4))
    got = fl.stencil(fl.asarray(h2), w2, center=(2, 1), boundary=boundary, cval=-1).get()
    np.testing.assert_allclose(got, reference(h2, w2, (2, 1), boundary, -1), rtol=1e-12)
    h3, w3 = rng.random((5, 6, 4)), rng.random((3, 1, 3))
    w3[1, 0, 1] = 0  # a zero weight is skipped
    got = fl.stencil(fl.asarray(h3), w3, center=(0, 0, 2), boundary=boundary).get()
    np.testing.assert_allclose(got, reference(h3, w3, (0, 0, 2), boundary), rtol=1e-12)


@pytest.mark.parametrize("boundary", list(MODES))
def test_rows_longer_than_a_chunk(device, boundary):
    # (a CPU lowers rows longer than its chunk in pieces, rows on the grid's second
    # axis: the clamped neighbour rows are per-row work each piece's group does)
    h = np.random.default_rng(4).random((5, 9000)).astype(np.float32)
    w = np.array([[0, 1, 0], [1, -4, 1], [0, 1, 0]], np.float32)
    x = fl.asarray(h)
    got = (x + np.float32(0.1) * fl.stencil(x, w, boundary=boundary)).get()
    np.testing.assert_allclose(got, h + np.float32(0.1) * reference(h, w, (1, 1), boundary),
                               rtol=1e-5, atol=1e-5)


def test_stencil_of_expression_and_view(device):
    h = np.random.default_rng(3).random((6, 8))
    m = fl.asarray(h)
    w = np.full((3, 3), 1 / 9)
    fl.reset_stats()
    got = fl.stencil(fl.exp(m[:, ::2]), w, boundary="wrap").sum(axis=1).get()
    assert fl.stats()["kernels_launched"] == 1
    np.testing.assert_allclose(got, reference(np.exp(h[:, ::2]), w, (1, 1), "wrap").sum(axis=1))


@pytest.mark.parametrize("boundary", list(MODES))
def test_stencil_function(device, boundary):
    h = np.random.default_rng(4).random(50).astype(np.float32)
    x = fl.asarray(h)
    op = fl.stencil_function(lambda left, mid, right: fl.maximum(left, right) - mid, 3, 1)
    fl.reset_stats()
    got = (op(x, boundary=boundary, cval=0.5) * 2).get()
    assert fl.stats()["kernels_launched"] == 1
    p = np.pad(h, 1, mode=MODES[boundary], **({"constant_values": 0.5}
                                               if boundary == "constant" else {}))
    np.testing.assert_allclose(got, (np.maximum(p[:-2], p[2:]) - p[1:-1]) * 2, rtol=1e-6)
    # 2-D: the four neighbours of a 3x3 cross (positions in C order)
    m = np.random.default_rng(5).random((5, 6))
    lap = fl.stencil_function(lambda *n: n[1] + n[3] + n[5] + n[7] - 4 * n[4], (3, 3))
    want = reference(m, np.array([[0, 1, 0], [1, -4, 1], [0, 1, 0]], float), (1, 1), boundary)
    np.testing.assert_allclose(lap(fl.asarray(m), boundary=boundary).get(), want, atol=1e-12)


def test_errors(device):
    x = fl.asarray(np.arange(4.0))
    with pytest.raises(ShapeError, match="wider than the array"):
        fl.stencil(x, np.ones(5))
    with pytest.raises(ShapeError, match="rank"):
        fl.stencil(x, np.ones((3, 3)))
    with pytest.raises(ShapeError, match="rank"):
        fl.stencil(fl.asarray(np.ones((4, 4))), np.ones(3))
    with pytest.raises(ValueError, match="boundary"):
        fl.stencil(x, np.ones(3), boundary="reflect")
    with pytest.raises(ValueError, match="center"):
        fl.stencil(x, np.ones(3), center=3)
    with pytest.raises(ShapeError, match="empty"):
        fl.stencil(x, np.ones(0))
    op = fl.stencil_function(lambda a, b: a + b, 2)
    with pytest.raises(ShapeError, match="wider"):
        op(fl.asarray(np.ones(1)))
    with pytest.raises(ShapeError, match="rank"):
        op(fl.asarray(np.ones((3, 3))))
    bad = fl.stencil_function(lambda a, b, c: 1.0, 3)
    with pytest.raises(TypeError, match="fuseloop expression"):
        bad(x)


def test_stencil_build_reuses_positions_and_skips_unit_weights(device):
    """Host cost of building a stencil: the shifted positions of an axis are built once
    for every stencil over it, and a weight of 1 (of the result's dtype) needs no product."""
    from fuseloop.expr.nodes import Apply, Gather

    def nodes(node, kind, seen=None):
        seen = set() if seen is None else seen
        if id(node) in seen:
            return []
        seen.add(id(node))
        found = [node] if isinstance(node, kind) else []
        for child in (getattr(node, "args", None) or ()):
            found += nodes(child, kind, seen)
        for name in ("child", "index"):
            if getattr(node, name, None) is not None:
                found += nodes(getattr(node, name), kind, seen)
        return found

    hn = np.random.default_rng(4).random((6, 7)).astype(np.float32)
    x = fl.asarray(hn, device=device)
    w = np.array([[0, 1, 0], [1, -4, 1], [0, 1, 0]], np.float32)
    a, b = fl.stencil(x, w), fl.stencil(x, w)
    first = {id(g.index) for g in nodes(a._node, Gather)}
    assert len(first) == 4 and first == {id(g.index) for g in nodes(b._node, Gather)}
    products = [n for n in nodes(a._node, Apply) if n.op == "multiply"]
    assert len(products) == 1  # (the centre's -4 only)
    np.testing.assert_allclose(a.get(), reference(hn, w, (1, 1), "clamp"), rtol=1e-6)
