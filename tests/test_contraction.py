"""Contractions (matmul, batched matmul, tensordot, einsum): detection, recipes, fusion."""

from __future__ import annotations

import re

import numpy as np
import pytest

import fuseloop as fl
import fuseloop.ops.linalg as linalg
from fuseloop.expr.contraction import find_contraction
from fuseloop.expr.program import linearize
from fuseloop.recipes import DevicePredicate
from fuseloop.recipes import contraction as rc


def rand(shape, dtype=np.float32, seed=0):
    return (np.random.default_rng(seed).random(shape) - 0.5).astype(dtype)


def ref64(fn, *arrays):
    return fn(*(a.astype(np.float64) for a in arrays))


def assert_close(got, ref, dtype):
    """float64 reference; the tolerance of the operand dtype, relative to the result's scale."""
    rtol = 1e-5 if np.dtype(dtype) == np.float32 else 1e-12
    scale = max(np.abs(ref).max(), 1.0)
    np.testing.assert_allclose(got, ref, rtol=rtol, atol=rtol * scale)


def contraction_of(expr):
    return linearize([expr._node], expr.shape)[0].contraction


@pytest.fixture
def recipe_on(device, restore_recipes):
    """``recipe_on(func)`` applies ``func`` to this device's contractions until the test ends."""
    # as specific as a predicate gets: no built-in registration outranks it
    pred = DevicePredicate(type=device.type, vendor=device.vendor, name=device.name,
                           platform=device.platform)

    def apply(func, name):
        fl.register_recipe(pred, func, name=name, kind="contraction")

    return apply


# {{{ detection

def test_detects_matmul_and_its_variants(device):
    A, B = fl.asarray(rand((40, 50))), fl.asarray(rand((50, 36)))
    c = contraction_of(A @ B)
    assert c is not None and c.m_dims == (0,) and c.n_dims == (1,) and c.b_dims == ()
    assert contraction_of(fl.tanh(A @ B + 1)) is not None  # epilogue
    assert contraction_of(A.T.T @ B) is not None
    assert contraction_of((A * 2) @ B) is not None  # producer in the operand
    X, Y = fl.asarray(rand((3, 40, 50))), fl.asarray(rand((3, 50, 36)))
    c = contraction_of(X @ Y)
    assert c.b_dims == (0,) and c.m_dims == (1,) and c.n_dims == (2,)
    # output transposed: the columns follow the output's last dimension
    c = contraction_of(fl.einsum("ik,kj->ji", A, B))
    assert c.n_dims == (1,) and c.m_dims == (0,)


def test_not_contractions(device):
    A, B = fl.asarray(rand((40, 50))), fl.asarray(rand((50, 36)))
    assert contraction_of(A.sum(axis=1)) is None  # one operand
    assert contraction_of(fl.einsum("ij,ij->i", A, A)) is None  # no columns
    assert contraction_of(A @ B[:, :1]) is None  # too narrow: a matrix-vector product
    small = fl.asarray(rand((8, 16))) @ fl.asarray(rand((16, 4)))
    assert contraction_of(small) is None
    assert "fuseloop_contract" not in fl.show_code(small)
    assert contraction_of((A @ B).max(axis=1)) is None  # another reduction on top


def test_find_contraction_rejects_a_max(device):
    A = fl.asarray(rand((40, 50)))
    prog, bind = linearize([fl.max(A[:, None, :] * A[None, :, :], axis=-1)._node], (40, 40))
    assert prog.contraction is None
    entries = list(prog.entries)
    assert find_contraction(entries, prog.outputs, list(prog.out_specs), prog.root_sizes,
                            bind.params, lambda v: ("p", 0)) is None

# }}}


# {{{ results against numpy

SHAPES = [(64, 64, 64), (128, 32, 96), (33, 70, 45), (100, 13, 257), (37, 5, 41)]


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("m,k,n", SHAPES)
def test_matmul_shapes(device, m, k, n, dtype):
    if dtype == np.float64 and not device.has_fp64:
        pytest.skip("no float64")
    a, b = rand((m, k), dtype, 1), rand((k, n), dtype, 2)
    got = fl.asarray(a) @ fl.asarray(b)
    assert "fuseloop_contract" in fl.show_code(got)
    assert_close(got.get(), ref64(np.matmul, a, b), dtype)


def test_transposed_and_strided_operands(device):
    a, b = rand((50, 40), seed=3), rand((36, 50), seed=4)
    A, B = fl.asarray(a), fl.asarray(b)
    assert_close((A.T @ B.T).get(), ref64(lambda x, y: x.T @ y.T, a, b), np.float32)
    c, d = rand((70, 40), seed=5), rand((41, 36), seed=6)
    C, D = fl.asarray(c), fl.asarray(d)
    sliced = C[::2, 1:] @ D[1:, ::-1][:39]  # strides, offsets, a negative stride
    assert contraction_of(sliced) is not None
    assert_close(sliced.get(), ref64(lambda x, y: x[::2, 1:] @ y[1:, ::-1][:39], c, d),
                 np.float32)
    assert_close((A.T @ A).get(), ref64(lambda x: x.T @ x, a), np.float32)  # one buffer twice


def test_batched_and_broadcast_batches(device):
    x, y = rand((3, 40, 50), seed=5), rand((3, 50, 36), seed=6)
    X, Y = fl.asarray(x), fl.asarray(y)
    assert_close((X @ Y).get(), ref64(np.matmul, x, y), np.float32)
    # batch axes broadcast against each other: rows and columns span two axes each
    z = rand((2, 1, 33, 50), seed=7)
    Z = fl.asarray(z)
    c = contraction_of(Z @ Y)
    assert c is not None and c.m_dims == (0, 2) and c.n_dims == (1, 3)
    assert_close((Z @ Y).get(), ref64(np.matmul, z, y), np.float32)
    # one operand shared by every batch
    w = rand((50, 36), seed=8)
    assert_close((X @ fl.asarray(w)).get(), ref64(np.matmul, x, w), np.float32)


def test_tensordot_and_einsum(device):
    t, u = rand((40, 6, 7), seed=9), rand((6, 7, 33), seed=10)
    T, U = fl.asarray(t), fl.asarray(u)
    got = fl.tensordot(T, U, axes=2)  # two contracted axes
    assert contraction_of(got) is not None
    assert_close(got.get(), ref64(lambda p, q: np.tensordot(p, q, axes=2), t, u), np.float32)
    a, b = rand((40, 50), seed=11), rand((36, 50), seed=12)
    A, B = fl.asarray(a), fl.asarray(b)
    for spec, ops, hs in [("ik,jk->ij", (A, B), (a, b)), ("ik,jk->ji", (A, B), (a, b)),
                          ("bik,bjk->bij", (fl.asarray(rand((2, 40, 9))),
                                            fl.asarray(rand((2, 33, 9), seed=1))), None)]:
        got = fl.einsum(spec, *ops)
        hs = hs or tuple(o.get() for o in ops)
        assert contraction_of(got) is not None, spec
        assert_close(got.get(), ref64(lambda *h, s=spec: np.einsum(s, *h), *hs), np.float32)
    v = rand((40, 5, 50), seed=13)  # rows over two axes
    assert_close(fl.einsum("ipk,jk->ipj", fl.asarray(v), B).get(),
                 ref64(lambda p, q: np.einsum("ipk,jk->ipj", p, q), v, b), np.float32)


def test_integer_matmul_is_exact(device):
    rng = np.random.default_rng(14)
    a = rng.integers(-50, 50, (40, 33)).astype(np.int32)
    b = rng.integers(-50, 50, (33, 45)).astype(np.int32)
    got = fl.asarray(a) @ fl.asarray(b)
    np.testing.assert_array_equal(got.get(), a @ b)
    assert got.dtype == (a @ b).dtype


def test_inf_and_nan_in_the_last_row_stay_where_numpy_puts_them(device):
    # the padded part of a tile is zero, not a repeated element next to an inf
    a, b = rand((40, 13), seed=15), rand((13, 37), seed=16)
    a[3, 12] = np.inf
    b[12, 5] = np.nan
    with np.errstate(invalid="ignore"):
        ref = a.astype(np.float64) @ b
    got = (fl.asarray(a) @ fl.asarray(b)).get()
    np.testing.assert_array_equal(np.isnan(got), np.isnan(ref))
    np.testing.assert_array_equal(np.isinf(got), np.isinf(ref))
    ok = np.isfinite(ref)
    np.testing.assert_allclose(got[ok], ref[ok], rtol=1e-5, atol=1e-5)

# }}}


# {{{ fusion

def test_epilogue_and_producer_fuse_into_one_kernel(device):
    a, b, c = rand((64, 40), seed=17), rand((40, 48), seed=18), rand(48, seed=19)
    A, B, C = fl.asarray(a), fl.asarray(b), fl.asarray(c)
    fl.reset_stats()
    got = fl.tanh((A * 2) @ B + C).get()
    assert fl.stats()["kernels_launched"] == 1
    assert "fuseloop_contract" in fl.show_code(fl.tanh((A * 2) @ B + C))
    assert_close(got, ref64(lambda x, y, z: np.tanh((x * 2) @ y + z), a, b, c), np.float32)
    # two outputs of one contraction, one kernel
    fl.reset_stats()
    p, q = fl.compute(A @ B, fl.exp(A @ B) * C)
    assert fl.stats()["kernels_launched"] == 1
    assert_close(p.get(), ref64(np.matmul, a, b), np.float32)
    assert_close(q.get(), ref64(lambda x, y, z: np.exp(x @ y) * z, a, b, c), np.float32)
    # a 0-d array read by an operand and by the epilogue
    h = fl.asarray(np.float32(1.5))
    assert_close(((A * h) @ B + h).get(), ref64(lambda x, y: (x * 1.5) @ y + 1.5, a, b),
                 np.float32)
    # into a strided view of an existing array
    out = fl.zeros((64, 96), np.float32)
    out[:, ::2] = A @ B
    want = np.zeros((64, 96))
    want[:, ::2] = ref64(np.matmul, a, b)
    assert_close(out.get(), want, np.float32)


def test_writing_the_product_into_an_operand(device):
    a, b = rand((48, 48), seed=35), rand((48, 48), seed=36)
    A, B = fl.asarray(a), fl.asarray(b)
    A[...] = A @ B  # every element of A is read by a whole row of outputs
    assert_close(A.get(), ref64(np.matmul, a, b), np.float32)


def test_costly_producer_is_materialised_first(device, monkeypatch):
    a, b = rand((40, 30), seed=20), rand((30, 50), seed=21)
    A, B = fl.asarray(a), fl.asarray(b)
    monkeypatch.setattr(linalg, "MATERIALISE_REUSE", 32)
    fl.reset_stats()
    s = fl.sin(A)
    prod = s @ B
    assert fl.stats()["kernels_launched"] == 1  # sin(A), when the product was built
    assert s.is_contiguous  # evaluated in place
    assert_close(prod.get(), ref64(lambda x, y: np.sin(x) @ y, a, b), np.float32)
    fl.reset_stats()
    (A * 3 - 1) @ B  # cheap: stays fused
    assert fl.stats()["kernels_launched"] == 0
    monkeypatch.setattr(linalg, "MATERIALISE_REUSE", 1 << 30)
    fl.reset_stats()
    fused = fl.sin(A) @ B
    assert fl.stats()["kernels_launched"] == 0
    assert_close(fused.get(), ref64(lambda x, y: np.sin(x) @ y, a, b), np.float32)

def _kernel_names(src):
    return re.findall(r"\b(fuseloop_\w+)\(", src)


def test_reductions_in_operands_run_first(device, fresh_stats):
    """``d.T @ d`` with ``d = x - x.mean(axis=0)``: the column means run first, once
    for both operands (each operand's view of them reads one buffer), the centring
    stays in the contraction's operands; fused, the product was one reduction kernel
    that recomputed the means for every output."""
    xh = np.random.default_rng(5).standard_normal((200, 64))
    x = fl.asarray(xh)
    d, dh = x - x.mean(axis=0), xh - xh.mean(axis=0)
    src = fl.show_code(d.T @ d)
    names = _kernel_names(src)
    assert len(names) == 2 and names[-1] == "fuseloop_contract", names
    product = src.split("/* kernel 2 of 2 */")[1]
    assert "acc_tile[" in product and " / s0" in product, product  # (the CPU register tile)
    fl.reset_stats()
    got = (d.T @ d).get()
    assert fresh_stats()["kernels_launched"] == 2
    np.testing.assert_allclose(got, dh.T @ dh, rtol=1e-12, atol=1e-12)
    # a gathered operand: the gather runs first, at its own size
    idx = np.random.default_rng(6).permutation(64)
    g = x[:, fl.asarray(idx)]
    names = _kernel_names(fl.show_code(g.T @ x))
    assert len(names) == 2 and names[-1] == "fuseloop_contract", names
    np.testing.assert_allclose((g.T @ x).get(), xh[:, idx].T @ xh, rtol=1e-12, atol=1e-12)
    # no rows and columns of its own (a batch): the column sums of squares stay one kernel
    assert len(_kernel_names(fl.show_code((d * d).sum(axis=0)))) == 1

# }}}


# {{{ recipes and the cache

def test_gpu_recipe_has_local_tiles_and_barriers(device, recipe_on):
    recipe_on(rc.gpu_tiled, "test-gpu-tiled")
    a, b, c = rand((130, 70), seed=22), rand((70, 257), seed=23), rand(257, seed=24)
    A, B, C = fl.asarray(a), fl.asarray(b), fl.asarray(c)
    expr = fl.tanh(A @ B + C)
    src = fl.show_code(expr)
    if device.backend == "cuda":
        local, barrier, group = "__shared__", "__syncthreads()", "__launch_bounds__(256)"
    else:
        local, barrier = "__local", "barrier(CLK_LOCAL_MEM_FENCE)"
        group = "reqd_work_group_size(16, 16, 1)"
    for tile in ("x_tile", "y_tile"):
        # (on OpenCL the tiles are float4 arrays with a scalar view: TileConfig.vec)
        assert f"{local} float {tile}" in src or (
            f"{local} float4 {tile}_store[" in src
            and f"{local} float *const {tile} = ({local} float *const ) ({tile}_store" in src)
    assert barrier in src and group in src
    fl.reset_stats()
    got = expr.get()
    assert fl.stats()["kernels_launched"] == 1
    assert_close(got, ref64(lambda x, y, z: np.tanh(x @ y + z), a, b, c), np.float32)


@pytest.mark.parametrize("layout", ["strided", "blocked"])
def test_small_gpu_tiles_on_odd_shapes(device, recipe_on, layout):
    cfg = rc.TileConfig(32, 32, 4, 8, 8, layout)
    recipe_on(rc.tiled(cfg), f"test-tiles-{layout}")
    for (m, k, n) in [(33, 70, 45), (64, 8, 32), (37, 5, 100)]:
        a, b = rand((m, k), seed=m), rand((k, n), seed=n)
        assert_close((fl.asarray(a) @ fl.asarray(b)).get(), ref64(np.matmul, a, b),
                     np.float32)
    x, y = rand((3, 40, 50), seed=25), rand((50, 36), seed=26)
    xt = fl.asarray(np.ascontiguousarray(x.transpose(0, 2, 1))).transpose(0, 2, 1)
    assert_close((xt @ fl.asarray(y)).get(), ref64(np.matmul, x, y), np.float32)  # rows fastest
    if device.has_fp64:
        a, b = rand((45, 33), np.float64, 27), rand((33, 61), np.float64, 28)
        assert_close((fl.asarray(a) @ fl.asarray(b)).get(), ref64(np.matmul, a, b),
                     np.float64)


def test_untiled_reference_recipe(device, recipe_on):
    recipe_on(rc.untiled, "test-untiled")
    a, b = rand((33, 20), seed=29), rand((20, 40), seed=30)
    assert_close((fl.asarray(a) @ fl.asarray(b)).get(), ref64(np.matmul, a, b), np.float32)


def test_one_kernel_serves_every_size_and_the_recipe_is_in_the_key(device, recipe_on):
    a, b = rand((40, 50), seed=31), rand((50, 36), seed=32)
    (fl.asarray(a) @ fl.asarray(b)).get()
    fl.reset_stats()
    c, d = rand((70, 21), seed=33), rand((21, 90), seed=34)
    assert_close((fl.asarray(c) @ fl.asarray(d)).get(), ref64(np.matmul, c, d), np.float32)
    assert fl.stats()["kernels_compiled"] == 0  # sizes are parameters
    recipe_on(rc.blocked(rc.CpuBlocks(4, 8, 2)), "test-other-recipe")
    fl.reset_stats()
    assert_close((fl.asarray(c) @ fl.asarray(d)).get(), ref64(np.matmul, c, d), np.float32)
    assert fl.stats()["kernels_compiled"] == 1  # another recipe: another kernel


def test_contraction_is_a_recipe_kind(device):
    assert "contraction" in fl.recipes.KINDS
    r = fl.recipe_for(device, "contraction")
    assert r.name in ("gpu-tiled", "cpu-blocked") or r.name.startswith("test-")
    with pytest.raises(ValueError, match="recipe kind"):
        fl.register_recipe("cpu", rc.cpu_blocked, name="x", kind="contractions")

# }}}


def test_contraction_tags_keep_their_former_names():
    # Loopy's disk cache holds pickled kernels whose tags name fuseloop.lower.contraction
    import pickle

    from fuseloop.lower import contraction, contraction_tags

    assert contraction.OperandInfo is contraction_tags.OperandInfo
    assert contraction.ContractionSizes is contraction_tags.ContractionSizes
    old = pickle.dumps(contraction_tags.OperandInfo("f", "f", "k", "n"), protocol=0).replace(
        b"fuseloop.lower.contraction_tags", b"fuseloop.lower.contraction")
    assert pickle.loads(old) == contraction_tags.OperandInfo("f", "f", "k", "n")
