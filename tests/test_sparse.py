"""fl.sparse: CSR and ELL matrices, their products against scipy and numpy, fusion, errors."""

from __future__ import annotations

import numpy as np
import pytest

import fuseloop as fl
from fuseloop.errors import DTypeError, ShapeError

sp = pytest.importorskip("scipy.sparse")


def _random_csr(rows, cols, density, seed, dtype=np.float64, empty_rows=()):
    m = sp.random(rows, cols, density=density, format="csr", random_state=seed, dtype=dtype)
    m = m.tolil()
    for r in empty_rows:
        m[r, :] = 0
    m = m.tocsr()
    m.eliminate_zeros()
    return m


def _poisson_2d(n, dtype=np.float64):
    """The 5-point Laplacian on an n x n grid (n^2 rows, Dirichlet boundary)."""
    t = sp.diags([-1.0, 2.0, -1.0], [-1, 0, 1], shape=(n, n), dtype=dtype)
    eye = sp.identity(n)
    return (sp.kron(eye, t) + sp.kron(t, eye)).astype(dtype).tocsr()


def _tol(dtype):
    return dict(rtol=1e-5, atol=1e-5) if dtype == np.float32 else dict(rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("dtype,itype", [(np.float32, np.int32), (np.float64, np.int64)])
def test_csr_from_arrays_matches_scipy(device, dtype, itype):
    m = _random_csr(57, 43, 0.15, 1, dtype, empty_rows=(0, 5, 56))
    a = fl.sparse.csr_matrix((m.data, m.indices.astype(itype), m.indptr.astype(itype)),
                             shape=m.shape)
    assert (a.shape, a.dtype, a.nnz, a.format) == (m.shape, np.dtype(dtype), m.nnz, "csr")
    assert a.indices.dtype == itype and a.indptr.dtype == itype
    h = np.random.default_rng(2).standard_normal(43).astype(dtype)
    x = fl.asarray(h)
    for y in (a @ x, a.dot(x)):
        assert y.shape == (57,) and y.dtype == dtype
        np.testing.assert_allclose(y.get(), m @ h, **_tol(dtype))
    assert (a @ x).get()[[0, 5, 56]].tolist() == [0, 0, 0]  # empty rows


def test_poisson_csr_and_ell_against_scipy_and_dense(device):
    m = _poisson_2d(12)
    dense = m.toarray()
    h = np.random.default_rng(3).standard_normal(m.shape[1])
    a = fl.sparse.csr_matrix(m)
    e = fl.sparse.ell_matrix(m)
    assert e.width == 5 and a.toell().width == 5
    x = fl.asarray(h)
    for mat in (a, e, a.toell()):
        np.testing.assert_allclose((mat @ x).get(), m @ h, rtol=1e-12, atol=1e-12)
        np.testing.assert_allclose((mat @ x).get(), dense @ h, rtol=1e-12, atol=1e-12)
        np.testing.assert_array_equal(mat.get(), dense)
        np.testing.assert_array_equal(mat.toarray(), dense)
        assert abs(mat.to_scipy() - m).max() == 0


def test_small_and_degenerate_shapes(device):
    one_row = sp.csr_matrix(np.array([[0.0, 2.0, 0.0, -1.0]]))
    no_entries = sp.csr_matrix((4, 3))
    no_rows = sp.csr_matrix((0, 3))
    for m in (one_row, no_entries, no_rows):
        h = np.arange(1.0, m.shape[1] + 1)
        for mat in (fl.sparse.csr_matrix(m), fl.sparse.ell_matrix(m)):
            y = (mat @ fl.asarray(h)).get()
            assert y.shape == (m.shape[0],)
            np.testing.assert_array_equal(y, m @ h)
    # from a dense array; the columns inferred from the indices without shape=
    np.testing.assert_array_equal(fl.sparse.csr_matrix(np.eye(3)).get(), np.eye(3))
    a = fl.sparse.csr_matrix((np.ones(2), np.array([0, 4]), np.array([0, 1, 2])))
    assert a.shape == (2, 5)


@pytest.mark.parametrize("fmt", ["csr", "ell"])
def test_product_fuses_into_one_launch(device, fmt):
    m = _random_csr(300, 200, 0.05, 4, empty_rows=(7,))
    a = fl.sparse.csr_matrix(m) if fmt == "csr" else fl.sparse.ell_matrix(m)
    rng = np.random.default_rng(5)
    h, hb = rng.standard_normal(200), rng.standard_normal(300)
    x, b = fl.asarray(h), fl.asarray(hb)
    (2 * (a @ x) - b).get()  # (compiled once)
    fl.reset_stats()
    y = (2 * (a @ x) - b).get()
    assert fl.stats()["kernels_launched"] == 1
    assert fl.stats()["kernels_compiled"] == 0
    np.testing.assert_allclose(y, 2 * (m @ h) - hb, rtol=1e-12, atol=1e-12)
    # the recorded launch replayed with another matrix of the same sizes (other buffers,
    # another pattern), and inside a traced function
    m2 = sp.csr_matrix((-m.data, (m.indices * 7 + 3) % 200, m.indptr), shape=m.shape)
    a2 = fl.sparse.csr_matrix(m2) if fmt == "csr" else fl.sparse.ell_matrix(m2)
    np.testing.assert_allclose((2 * (a2 @ x) - b).get(), 2 * (m2 @ h) - hb, rtol=1e-12,
                               atol=1e-12)
    f = fl.fuse(lambda x, b: 2 * (a @ x) - b)
    f(x, b).get()
    fl.reset_stats()
    np.testing.assert_allclose(f(x, b).get(), y, rtol=1e-12, atol=1e-12)
    assert fl.stats()["kernels_launched"] == 1
    assert f"({fmt} " in str(fl.explain(2 * (a @ x) - b))
    # two products and a scalar argument as one kernel with two results
    fl.reset_stats()
    u, v = fl.compute(a @ x, 2 * (a2 @ x))
    assert fl.stats()["kernels_launched"] == 1
    np.testing.assert_allclose(u.get(), m @ h, rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(v.get(), 2 * (m2 @ h), rtol=1e-12, atol=1e-12)
    # a lazy x is evaluated first (numpy's order): two launches, nothing recomputed per entry
    fl.reset_stats()
    y = (a @ (x * 3 + 1)).get()
    assert fl.stats()["kernels_launched"] == 2
    np.testing.assert_allclose(y, m @ (h * 3 + 1), rtol=1e-12, atol=1e-12)


def test_views_broadcasts_and_reductions_of_products(device):
    m = _random_csr(40, 60, 0.2, 6)
    a = fl.sparse.csr_matrix(m)
    e = a.toell()
    rng = np.random.default_rng(7)
    h, hz = rng.standard_normal(120), rng.standard_normal(3)
    x, z = fl.asarray(h), fl.asarray(hz)
    for mat in (a, e):
        # x through views: every second element, reversed
        np.testing.assert_allclose((mat @ x[::2]).get(), m @ h[::2], rtol=1e-12, atol=1e-12)
        np.testing.assert_allclose((mat @ x[:60][::-1]).get(), m @ h[:60][::-1],
                                   rtol=1e-12, atol=1e-12)
    # what is built around a product does not depend on the format: CSR only
    y = a @ x[1::2]
    ref = m @ h[1::2]
    fl.reset_stats()
    np.testing.assert_allclose(y[::3].get(), ref[::3], rtol=1e-12, atol=1e-12)
    assert fl.stats()["kernels_launched"] == 1  # a view: only the rows it reads
    fl.reset_stats()
    np.testing.assert_allclose((y[:, None] * z).get(), ref[:, None] * hz, rtol=1e-12)
    assert fl.stats()["kernels_launched"] == 2  # broadcast: each row computed once
    # inside reductions the product runs first (the reduction recipes have no row loop)
    np.testing.assert_allclose(float(fl.sum(y * y)), float(ref @ ref), rtol=1e-12)
    np.testing.assert_allclose((y - fl.mean(y)).get(), ref - ref.mean(), rtol=1e-11,
                               atol=1e-12)


def test_mixed_dtypes_and_device_built_matrix(device):
    m = _random_csr(30, 20, 0.2, 8, np.float32)
    h = np.random.default_rng(9).standard_normal(20)
    a = fl.sparse.csr_matrix((fl.asarray(m.data), fl.asarray(m.indices), fl.asarray(m.indptr)),
                             shape=m.shape)
    y = a @ fl.asarray(h)  # float32 matrix, float64 vector: numpy's float64
    assert y.dtype == np.float64
    np.testing.assert_allclose(y.get(), m.astype(np.float64) @ h, rtol=1e-6)
    y32 = a @ fl.asarray(h.astype(np.float32))
    assert y32.dtype == np.float32


def test_ell_padding_ignores_x_values(device):
    # padding entries point nowhere: an inf in x must not reach rows that do not read it
    data = np.array([[1.0, 0.0], [2.0, 3.0], [0.0, 0.0]])
    cols = np.array([[1, -1], [1, 2], [-1, -1]])
    e = fl.sparse.ell_matrix((data, cols), shape=(3, 3))
    h = np.array([np.inf, 1.0, 2.0])
    np.testing.assert_array_equal((e @ fl.asarray(h)).get(), [1.0, 8.0, 0.0])
    np.testing.assert_array_equal(e.get(), [[0, 1, 0], [0, 2, 3], [0, 0, 0]])


def test_ell_rows_side_by_side_on_a_cpu(cpu):
    # cpu-sparse-rows computes 8 ELL rows at a time (one accumulator each): a full chunk
    # of rows, then a last one ending in a partial block of 8; padded rows; fused
    from fuseloop import evaluate
    from fuseloop.recipes.sparse import CPU_ROWS

    m = _random_csr(2 * CPU_ROWS + 13, 300, 0.01, 12, empty_rows=(3, 2 * CPU_ROWS + 12))
    e = fl.sparse.ell_matrix(m)
    rng = np.random.default_rng(13)
    h, b = rng.standard_normal(300), rng.standard_normal(m.shape[0])
    x, fb = fl.asarray(h), fl.asarray(b)
    with evaluate.capturing_sources() as sources:  # (runs nothing)
        (2 * (e @ x) - fb).eval()
    assert "acc_sp" in sources[0] and "[8];" in sources[0], sources[0]
    np.testing.assert_allclose((2 * (e @ x) - fb).get(), 2 * (m @ h) - b, rtol=1e-12,
                               atol=1e-12)


def test_writing_the_vector_it_reads(device):
    m = _poisson_2d(5)
    h = np.arange(25.0)
    x = fl.asarray(h)
    x[...] = fl.sparse.csr_matrix(m) @ x  # reads other rows' x: through a temporary
    np.testing.assert_allclose(x.get(), m @ h, rtol=1e-12)


def test_gpu_recipe_on_the_cpu(cpu, restore_recipes):
    from fuseloop.recipes import gpu_sparse_rows

    m = _random_csr(333, 100, 0.05, 10, empty_rows=(1, 332))
    h = np.random.default_rng(11).standard_normal(100)
    fl.register_recipe("cpu", gpu_sparse_rows.with_params(group=64), name="test-gpu-sparse",
                       kind="sparse")
    x = fl.asarray(h)
    for mat in (fl.sparse.csr_matrix(m), fl.sparse.ell_matrix(m)):
        np.testing.assert_allclose((1 + mat @ x).get(), 1 + m @ h, rtol=1e-12, atol=1e-12)


def test_shape_errors_name_both_shapes(device):
    a = fl.sparse.csr_matrix(_poisson_2d(3))
    out = fl.zeros(9)
    with pytest.raises(ShapeError, match=r"\(9, 9\).*\(8,\)"):
        out[...] = a @ fl.ones(8)
    assert not out.get().any()  # nothing written
    with pytest.raises(ShapeError, match=r"1-D"):
        a @ fl.ones((9, 2))
    with pytest.raises(DTypeError, match="complex128"):
        a @ fl.ones(9, dtype=np.complex128)
    with pytest.raises(ShapeError, match=r"\(9,\) times a sparse matrix of shape \(9, 9\)"):
        fl.ones(9) @ a
    np.testing.assert_array_equal(fl.matmul(a, np.ones(9)).get(), _poisson_2d(3) @ np.ones(9))


def test_construction_errors():
    data, indices, indptr = np.ones(3), np.array([0, 2, 1]), np.array([0, 2, 3])
    with pytest.raises(ShapeError, match="column index 2 out of range"):
        fl.sparse.csr_matrix((data, indices, indptr), shape=(2, 2))
    with pytest.raises(ShapeError, match="column index -1"):
        fl.sparse.csr_matrix((data, np.array([0, -1, 1]), indptr), shape=(2, 3))
    with pytest.raises(ShapeError, match="non-decreasing"):
        fl.sparse.csr_matrix((data, indices, np.array([0, 2, 1, 3])), shape=(3, 3))
    with pytest.raises(ShapeError, match="end at len"):
        fl.sparse.csr_matrix((data, indices, np.array([0, 2])), shape=(1, 3))
    with pytest.raises(ShapeError, match="rows"):
        fl.sparse.csr_matrix((data, indices, indptr), shape=(3, 3))
    with pytest.raises(DTypeError, match="float32 or float64, got int64"):
        fl.sparse.csr_matrix((np.ones(3, np.int64), indices, indptr))
    with pytest.raises(DTypeError, match="indices must be int32 or int64, got float64"):
        fl.sparse.csr_matrix((data, indices.astype(float), indptr))
    with pytest.raises(DTypeError, match="indptr must be int32 or int64, got uint32"):
        fl.sparse.csr_matrix((data, indices, indptr.astype(np.uint32)))
    with pytest.raises(ShapeError, match="column index 3 out of range"):
        fl.sparse.ell_matrix((np.ones((2, 2)), np.array([[0, 3], [1, -1]])), shape=(2, 3))
    # device arrays are checked on the device
    with pytest.raises(ShapeError, match="column index 5 out of range"):
        fl.sparse.csr_matrix((fl.asarray(data), fl.asarray(np.array([0, 5, 1])),
                              fl.asarray(indptr)), shape=(2, 3))
    with pytest.raises(ShapeError, match="non-decreasing"):
        fl.sparse.csr_matrix((fl.asarray(data), fl.asarray(indices),
                              fl.asarray(np.array([0, 2, 1, 3]))), shape=(3, 3))
