"""numpy's shape, creation, placement and selection functions (fuseloop.numpy_shape,
fuseloop.numpy_select; issue 27), against numpy."""

from __future__ import annotations

import numpy as np
import pytest

import fuseloop as fl

RNG = np.random.default_rng(27)
A = RNG.random((4, 6))
I = np.arange(24).reshape(4, 6)  # noqa: E741


def same(got, ref):
    """Values, shape and dtype as numpy's (tuples/lists element by element)."""
    if isinstance(ref, tuple | list):
        assert len(got) == len(ref)
        for g, r in zip(got, ref, strict=True):
            same(g, r)
        return
    g = got.get() if isinstance(got, fl.Array) else np.asarray(got)
    r = np.asarray(ref)
    assert g.shape == r.shape and g.dtype == r.dtype, (g.shape, g.dtype, r.shape, r.dtype)
    np.testing.assert_allclose(g, r, rtol=1e-12)


def test_split_family_gives_numpy_pieces(device):
    a, b = fl.asarray(A), fl.asarray(RNG.random((2, 2, 4)))
    same(fl.split(a, 3, axis=1), np.split(A, 3, axis=1))
    same(fl.array_split(a, 4, axis=1), np.array_split(A, 4, axis=1))
    same(fl.array_split(a, [1, 3]), np.array_split(A, [1, 3]))
    same(fl.hsplit(a, 2), np.hsplit(A, 2))
    same(fl.vsplit(a, [1]), np.vsplit(A, [1]))
    same(fl.dsplit(b, 2), np.dsplit(b.get(), 2))
    with pytest.raises(ValueError, match="equal division"):
        fl.split(a, 4, axis=1)
    with pytest.raises(ValueError, match="3 or more"):
        fl.dsplit(a, 2)


def test_append_insert_delete(device):
    a, ia = fl.asarray(A), fl.asarray(I)
    same(fl.append(a, [1.0, 2.0]), np.append(A, [1.0, 2.0]))
    same(fl.append(ia, ia[:1], axis=0), np.append(I, I[:1], axis=0))
    # one index: values keep their own length; several: broadcast along the axis
    same(fl.insert(ia, 2, [[7], [8]], axis=0), np.insert(I, 2, [[7], [8]], axis=0))
    same(fl.insert(ia, [1, 1, -2], [-1, -2, -3], axis=1),
         np.insert(I, [1, 1, -2], [-1, -2, -3], axis=1))
    same(fl.insert(ia, 3, 5.7), np.insert(I, 3, 5.7))  # (cast to arr's dtype)
    same(fl.delete(ia, [0, -1], axis=1), np.delete(I, [0, -1], axis=1))
    same(fl.delete(ia, slice(1, None, 3)), np.delete(I, slice(1, None, 3)))
    with pytest.raises(IndexError, match="out of bounds"):
        fl.delete(ia, [6], axis=1)


def test_pad_modes(device):
    a = fl.asarray(A)
    for mode in ("constant", "reflect", "wrap"):  # (edge, symmetric: the same gather)
        same(fl.pad(a, ((1, 2), (3, 1)), mode=mode), np.pad(A, ((1, 2), (3, 1)), mode=mode))
    same(fl.pad(a, ((1, 2), (2, 1)), mode="minimum"), np.pad(A, ((1, 2), (2, 1)), "minimum"))
    st = ((1, 2), (3, 2))
    same(fl.pad(fl.asarray(I), 2, mode="mean", stat_length=st),
         np.pad(I, 2, mode="mean", stat_length=st))  # (an integer mean rounds)
    ev = ((1, 5), (-2, 4))  # (an integer ramp rounds toward -inf, as numpy 2's)
    same(fl.pad(fl.asarray(I), 2, mode="linear_ramp", end_values=ev),
         np.pad(I, 2, mode="linear_ramp", end_values=ev))
    an = A.copy()
    an[2, 3] = np.nan  # (a NaN in the window: a NaN median)
    same(fl.pad(fl.asarray(an), ((2, 1), (0, 0)), mode="median"),
         np.pad(an, ((2, 1), (0, 0)), mode="median"))
    cv = ((1, 2), (3, 4))  # corners from the last axis, as numpy's
    same(fl.pad(fl.asarray(I), 1, constant_values=cv), np.pad(I, 1, constant_values=cv))
    got = np.pad(a, 2, mode="edge")  # numpy's dispatch: fuseloop's pad, on the device
    assert isinstance(got, fl.Array)
    same(got, np.pad(A, 2, mode="edge"))
    with pytest.raises(fl.errors.NoEquivalentError, match="callable"):
        fl.pad(a, 1, mode=lambda vector, width, axis, kw: None)


def test_rotations_flips_and_axes(device):
    a, b = fl.asarray(A), fl.asarray(RNG.random((2, 3, 4)))
    for k in range(-1, 3):
        same(fl.rot90(a, k), np.rot90(A, k))
    same(fl.rot90(b, 1, axes=(2, 0)), np.rot90(b.get(), 1, axes=(2, 0)))
    same(fl.fliplr(a), np.fliplr(A))
    same(fl.flipud(a), np.flipud(A))
    for axis, start in ((2, 0), (0, 3), (-1, 1)):
        assert fl.rollaxis(b, axis, start).shape == np.rollaxis(b.get(), axis, start).shape
    same(fl.rollaxis(b, 2, 0), np.rollaxis(b.get(), 2, 0))
    with pytest.raises(ValueError, match="2-d"):
        fl.fliplr(fl.asarray([1.0, 2.0]))


def test_resize_diag_tri_identity(device):
    a, v = fl.asarray(A), fl.asarray([1.0, 2.0, 3.0])
    same(fl.resize(a, (5, 7)), np.resize(A, (5, 7)))
    same(fl.resize(a, 3), np.resize(A, 3))
    same(fl.diag(v, -2), np.diag([1.0, 2.0, 3.0], -2))
    same(fl.diag(a, 1), np.diag(A, 1))
    same(fl.diagflat(fl.asarray([[1, 2], [3, 4]]), 1), np.diagflat([[1, 2], [3, 4]], 1))
    same(fl.tri(3, 5, 1), np.tri(3, 5, 1))
    same(fl.tri(4, k=-1, dtype=int), np.tri(4, k=-1, dtype=int))
    same(fl.identity(3), np.identity(3))


def test_index_helpers(device):
    a = fl.asarray(A)
    same(fl.tril_indices(4, 1, 5), np.tril_indices(4, 1, 5))
    same(fl.triu_indices_from(a, 1), np.triu_indices_from(A, 1))
    same(fl.diag_indices_from(fl.zeros((3, 3, 3))), np.diag_indices_from(np.zeros((3, 3, 3))))
    same(fl.indices((2, 3)), np.indices((2, 3)))
    same(fl.indices((2, 3), sparse=True), np.indices((2, 3), sparse=True))
    same(fl.ix_([0, 1], [True, False, True]), np.ix_([0, 1], [True, False, True]))
    flat = fl.asarray([0, 5, 23])
    same(fl.unravel_index(flat, (4, 6)), np.unravel_index([0, 5, 23], (4, 6)))
    same(fl.unravel_index(flat, (4, 6), order="F"),
         np.unravel_index([0, 5, 23], (4, 6), order="F"))
    rows, cols = fl.asarray([0, 3]), fl.asarray([1, 7])
    same(fl.ravel_multi_index((rows, cols), (4, 6), mode="clip"),
         np.ravel_multi_index(([0, 3], [1, 7]), (4, 6), mode="clip"))
    # numpy raises on an index out of range: a device check does
    with pytest.raises(fl.errors.CheckError, match="index"):
        fl.unravel_index(fl.asarray([24]), (4, 6))[0].get()


def test_sequences_and_products(device):
    a = fl.asarray(A)
    same(fl.logspace(0, 3, 7, base=2), np.logspace(0, 3, 7, base=2))
    lo, hi = np.array([0.0, 1.0]), np.array([[2.0, 3.0], [1.0, -1.0]])
    same(fl.logspace(fl.asarray(lo), fl.asarray(hi), 4, axis=-1, base=fl.asarray([2.0, 3.0])),
         np.logspace(lo, hi, 4, axis=-1, base=[2.0, 3.0]))
    same(fl.geomspace(1, 1000, 4), np.geomspace(1, 1000, 4))
    same(fl.geomspace(-2, -32, 5, endpoint=False), np.geomspace(-2, -32, 5, endpoint=False))
    g0, g1 = np.array([1.0, -2.0]), np.array([[10.0, -20.0], [100.0, -3.0]])
    same(fl.geomspace(fl.asarray(g0), fl.asarray(g1), 4, axis=-1),
         np.geomspace(g0, g1, 4, axis=-1))
    same(fl.vander(fl.asarray([1.0, 2.0, 3.0, 5.0])), np.vander([1.0, 2.0, 3.0, 5.0]))
    same(fl.vander(fl.asarray([1, 2, 3]), 5, True), np.vander([1, 2, 3], 5, True))
    same(fl.kron(a, fl.asarray(np.eye(2))), np.kron(A, np.eye(2)))
    same(fl.block([[a, a[:, :2]], [a[:1], a[:1, :2]]]),
         np.block([[A, A[:, :2]], [A[:1], A[:1, :2]]]))
    same(fl.row_stack([a, a]), np.vstack([A, A]))
    with pytest.raises(TypeError, match="tuple"):
        fl.block([(a, a)])
    with pytest.raises(ValueError, match="zero"):
        fl.geomspace(0, 1)


def test_writes_in_place(device):
    def both(f, base):
        x, y = fl.asarray(base.copy()), base.copy()
        f(fl, x)
        f(np, y)
        same(x, y)

    both(lambda m, x: m.put(x, [0, -1, 5], [1.0, 2.0]), A)
    both(lambda m, x: m.put(x, m.asarray([0, 30]), 9.0, mode="wrap"), A)
    both(lambda m, x: m.putmask(x, x > 0.5, m.asarray([1.0, 2.0, 3.0])), A)
    both(lambda m, x: m.place(x, x > 0.5, [1.0, 2.0, 3.0]), A)
    both(lambda m, x: m.copyto(x, m.asarray([1.0, 2, 3, 4, 5, 6]), where=x > 0.5), A)
    both(lambda m, x: m.fill_diagonal(x, [7, 8]), np.zeros((5, 3)))
    both(lambda m, x: m.fill_diagonal(x, 7, wrap=True), np.zeros((7, 3)))
    base, ref = fl.zeros((3, 6)), np.zeros((3, 6))
    fl.put(base[:, ::2], [0, 8], 1.0)  # into a strided view: written through, as numpy's
    np.put(ref[:, ::2], [0, 8], 1.0)
    same(base, ref)
    x = fl.asarray(np.zeros(4))
    np.put(x, [1], 5.0)  # numpy's dispatch writes into the fuseloop array
    same(x, [0.0, 5.0, 0.0, 0.0])
    with pytest.raises(TypeError, match="same_kind"):
        fl.copyto(fl.asarray(I), 1.5)
    with pytest.raises(IndexError, match="out of bounds"):
        fl.put(fl.zeros(3), [5], 1.0)
    x = fl.zeros(3)
    with pytest.raises(IndexError, match="out of bounds"):  # device indices: checked there
        fl.put(x, fl.asarray([1, 3]), 1.0)
        x.get()


def test_selection(device):
    a = fl.asarray(A)
    same(fl.compress([True, False, True], a, axis=1), np.compress([True, False, True], A, 1))
    same(fl.compress(fl.asarray([False, True]), a), np.compress([False, True], A))
    same(fl.extract(a > 0.5, a), np.extract(A > 0.5, A))
    idx, c0 = [[0, 1, 2], [2, 1, 0]], [1, 2, 3]
    same(fl.choose(fl.asarray(idx), [fl.asarray(c0), 10, fl.asarray([[7], [8]])]),
         np.choose(idx, [c0, 10, [[7], [8]]]))
    same(fl.choose(fl.asarray([0, 4, -1]), [fl.asarray(c0), fl.asarray([4, 5, 6])], mode="wrap"),
         np.choose([0, 4, -1], [c0, [4, 5, 6]], mode="wrap"))
    same(fl.select([a < 0.3, a > 0.7], [a, a * 2], -1.0), np.select([A < 0.3, A > 0.7],
                                                                  [A, A * 2], -1.0))
    z = np.zeros((4, 5))
    z[1:3, 2] = 1
    same(fl.trim_zeros(fl.asarray(z)), np.trim_zeros(z))
    t = np.array([0, 0, 1, 2, 0, 3, 0])
    same(fl.trim_zeros(fl.asarray(t), "f"), np.trim_zeros(t, "f"))
    with pytest.raises(fl.errors.CheckError, match="choose"):
        fl.choose(fl.asarray([0, 2]), [fl.asarray([1, 2]), fl.asarray([3, 4])]).get()
    with pytest.raises(TypeError, match="boolean"):
        fl.select([a], [a])
    ia = fl.asarray(I, dtype=np.int32)  # a Python default keeps the choices' dtype
    same(fl.select([ia > 5], [ia], 0), np.select([I.astype(np.int32) > 5], [I.astype(np.int32)], 0))


def test_properties_and_copies():
    a = fl.asarray(A)
    assert (fl.ndim(a), fl.shape(a), fl.size(a), fl.size(a, 1)) == (2, (4, 6), 24, 6)
    assert (fl.ndim([[1, 2]]), fl.shape([[1, 2]]), fl.size([[1, 2]])) == (2, (1, 2), 2)
    c = fl.copy(a)
    assert c is not a
    same(c, A)
    assert fl.asanyarray(a) is a
    assert fl.ascontiguousarray(3.0).shape == np.ascontiguousarray(3.0).shape


def test_ascontiguousarray_copies_a_strided_view(device):
    a = fl.asarray(A)
    y = fl.ascontiguousarray(a[:, ::2]).eval()
    assert y.is_contiguous
    same(y, np.ascontiguousarray(A[:, ::2]))
    assert fl.ascontiguousarray(a) is a


def test_numpy_dispatch_reaches_these_functions(device):
    a = fl.asarray(A)
    parts = np.array_split(a, 3, axis=1)
    assert all(isinstance(p, fl.Array) for p in parts)
    same(parts, np.array_split(A, 3, axis=1))
    same(np.rot90(a), np.rot90(A))
    same(np.copy(a), A)
    t = np.tri(3, like=a)  # numpy's like=: created by fuseloop
    assert isinstance(t, fl.Array)
    same(t, np.tri(3))
