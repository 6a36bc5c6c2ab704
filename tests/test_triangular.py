"""Triangular views (fl.tril_view, fl.triu_view) and fl.linalg.solve_triangular (issue 28)."""

from __future__ import annotations

import numpy as np
import pytest

import fuseloop as fl

scipy_linalg = pytest.importorskip("scipy.linalg")


def _with_nan_elsewhere(h, lower):
    bad = h.copy()
    bad[np.triu_indices(len(h), 1) if lower else np.tril_indices(len(h), -1)] = np.nan
    return bad


def test_views_are_numpy_triangles_without_reading_the_other(device):
    rng = np.random.default_rng(0)
    h = rng.random((37, 37)).astype(np.float32)
    for lower, make in ((True, fl.tril_view), (False, fl.triu_view)):
        ref = np.tril(h) if lower else np.triu(h)
        # the other triangle holds NaN: never read, so never in a result
        v = make(fl.asarray(_with_nan_elsewhere(h, lower)))
        assert v.triangle == ("lower" if lower else "upper")
        np.testing.assert_array_equal((2 * v + 1).get(), 2 * ref + 1)
    # a matrix product through the view (a contraction kernel: M, N >= 32)
    b = rng.random((37, 33)).astype(np.float32)
    np.testing.assert_allclose((v @ fl.asarray(b)).get(), ref @ b, rtol=1e-5)


@pytest.mark.parametrize("lower", [True, False])
def test_packed_transfers(device, lower, monkeypatch):
    import fuseloop.array as fl_array
    import fuseloop.creation as fl_creation

    rng = np.random.default_rng(1)
    n = 45
    h = rng.random((n, n))
    ref = np.tril(h) if lower else np.triu(h)
    make = fl.tril_view if lower else fl.triu_view
    moved: list[int] = []
    real_read, real_upload = fl_array.read, fl_creation.upload

    def counting_read(host, buffer, device, *at):  # (at: a byte offset, when given)
        moved.append(host.nbytes)
        return real_read(host, buffer, device, *at)

    def counting_upload(host, device):
        moved.append(host.nbytes)
        return real_upload(host, device)

    v = make(fl.asarray(h))
    monkeypatch.setattr(fl_array, "read", counting_read)
    monkeypatch.setattr(fl_creation, "upload", counting_upload)
    np.testing.assert_array_equal(v.get(), ref)
    assert moved == [n * (n + 1) // 2 * 8]  # the triangle only, packed
    # a view of a host matrix uploads its triangle only
    moved.clear()
    u = make(h)
    assert moved == [n * (n + 1) // 2 * 8]
    monkeypatch.undo()
    np.testing.assert_array_equal(u.get(), ref)
    np.testing.assert_array_equal(np.asarray(u + 0), ref)


_ALL = ((True, False), (True, True), (False, False), (False, True))


@pytest.mark.parametrize(("n", "k", "trans", "cases"), [(7, None, 0, _ALL),
                                                         (150, 3, 1, _ALL[1:3])])
def test_solve_triangular_matches_scipy(device, n, k, trans, cases):
    # 150 > the CPU block of 128: a diagonal block solve and a product update
    rng = np.random.default_rng(2)
    h = rng.random((n, n)) + n * np.eye(n)
    b = rng.random(n) if k is None else rng.random((n, k))
    for lower, unit in cases:
        ref = scipy_linalg.solve_triangular(h, b, trans=trans, lower=lower,
                                            unit_diagonal=unit)
        got = fl.linalg.solve_triangular(fl.asarray(h), fl.asarray(b), trans=trans,
                                         lower=lower, unit_diagonal=unit)
        assert got.shape == ref.shape
        np.testing.assert_allclose(got.get(), ref, rtol=1e-10, atol=1e-12)
    # the view gives the triangle (NaN elsewhere is not read); scipy's default is upper
    ref = scipy_linalg.solve_triangular(h, b, lower=True)
    view = fl.tril_view(fl.asarray(_with_nan_elsewhere(h, True)))
    np.testing.assert_allclose(fl.linalg.solve_triangular(view, fl.asarray(b)).get(), ref,
                               rtol=1e-10)
    if n < 128:  # (one block: no float32 product kernels to build)
        f32 = fl.linalg.solve_triangular(fl.asarray(h.astype(np.float32)),
                                         fl.asarray(b.astype(np.float32)), lower=True)
        assert f32.dtype == np.float32
        np.testing.assert_allclose(f32.get(), ref, rtol=2e-4)


def test_solve_triangular_complex(device):
    # through the real solve of size 2n: the triangle divided by its diagonal, each entry
    # a 2 x 2 real block (NaN in the other triangle is still not read)
    rng = np.random.default_rng(4)
    n = 9
    h = rng.random((n, n)) + 1j * rng.random((n, n)) + n * np.eye(n)
    b = rng.random((n, 2)) + 1j * rng.random((n, 2))
    for lower, trans, unit in ((True, 0, False), (False, "C", False), (True, 1, True)):
        ref = scipy_linalg.solve_triangular(h, b, trans=trans, lower=lower,
                                            unit_diagonal=unit)
        got = fl.linalg.solve_triangular(fl.asarray(_with_nan_elsewhere(h, lower)),
                                         fl.asarray(b), trans=trans, lower=lower,
                                         unit_diagonal=unit)
        assert got.dtype == np.complex128
        np.testing.assert_allclose(got.get(), ref, rtol=1e-12, atol=1e-14)
    real = h.real  # a real matrix, a complex right-hand side (a vector)
    np.testing.assert_allclose(
        fl.linalg.solve_triangular(fl.asarray(real), fl.asarray(b[:, 0]), lower=True).get(),
        scipy_linalg.solve_triangular(real, b[:, 0], lower=True), rtol=1e-12)


def test_triangular_errors(device):
    with pytest.raises(fl.errors.NotSquareError, match=r"\(3, 4\)"):
        fl.tril_view(fl.asarray(np.ones((3, 4), np.float32)))
    with pytest.raises(fl.errors.NotSquareError, match=r"\(2, 5\)"):
        fl.triu_view(np.ones((2, 5)))
    assert issubclass(fl.errors.NotSquareError, ValueError)
    with pytest.raises(fl.errors.ShapeError):
        fl.tril_view(fl.asarray(np.ones(4, np.float32)))
    with pytest.raises(np.linalg.LinAlgError):
        fl.linalg.solve_triangular(fl.asarray(np.ones((3, 4))), fl.asarray(np.ones(3)))
    with pytest.raises(fl.errors.ShapeError, match=r"\(4,\)"):
        fl.linalg.solve_triangular(fl.asarray(np.eye(3)), fl.asarray(np.ones(4)))
    with pytest.raises(ValueError, match="trans"):
        fl.linalg.solve_triangular(fl.asarray(np.eye(3)), fl.asarray(np.ones(3)), trans="X")


def test_solve_triangular_blocks_and_groups_of_vectors(device, monkeypatch):
    # blocks of 16, work-groups of 4 solving 64 right-hand sides each: 70 of them take
    # two groups, and each work-item solves several
    from fuseloop import linalg_factor, linalg_kernels

    monkeypatch.setattr(linalg_factor, "block_size", lambda device: 16)
    monkeypatch.setattr(linalg_kernels, "group_size", lambda device, parallel: 4)
    rng = np.random.default_rng(3)
    n = 40
    h = rng.random((n, n)) + n * np.eye(n)
    b = rng.random((n, 70))
    for lower, trans in ((True, 0), (False, 1)):
        ref = scipy_linalg.solve_triangular(h, b, trans=trans, lower=lower)
        got = fl.linalg.solve_triangular(fl.asarray(_with_nan_elsewhere(h, lower)),
                                         fl.asarray(b), trans=trans, lower=lower)
        np.testing.assert_allclose(got.get(), ref, rtol=1e-10, atol=1e-12)
