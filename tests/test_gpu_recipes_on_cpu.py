"""The GPU recipes applied to the CPU device: results against numpy, and their code.

PoCL runs work-groups of 256 with local memory and barriers, so the GPU
reduction recipe's kernels can be checked here.  PoCL runs the work-items of a
group one after another between barriers, which hides a missing barrier; the
codegen tests read the source for the barriers a GPU needs.
"""

from __future__ import annotations

import re

import numpy as np
import pytest

import fuseloop as fl
from fuseloop.recipes import gpu_coalesced
from fuseloop.recipes.rows import make_gpu_rows


@pytest.fixture(params=[256, 64])
def gpu_recipes_on_cpu(request, restore_recipes):
    group = request.param
    fl.register_recipe("cpu", gpu_coalesced, name="test-gpu-coalesced")
    fl.register_recipe("cpu", make_gpu_rows(group), name=f"test-gpu-rows-{group}",
                       kind="reduction")
    with fl.device("cpu"):
        yield group


def _softmax(x):
    e = fl.exp(x - x.max(axis=-1, keepdims=True))
    return e / e.sum(axis=-1, keepdims=True)


def _np_softmax(h):
    e = np.exp(h - h.max(axis=-1, keepdims=True))
    return e / e.sum(axis=-1, keepdims=True)


@pytest.mark.parametrize("cols", [1, 7, 256, 1000, 4099])
def test_row_reductions(gpu_recipes_on_cpu, cols):
    rng = np.random.default_rng(cols)
    h = rng.standard_normal((5, cols))
    x = fl.asarray(h)
    np.testing.assert_allclose(_softmax(x).get(), _np_softmax(h), rtol=1e-12, atol=1e-15)
    np.testing.assert_allclose((x - x.mean(axis=1, keepdims=True)).get(),
                               h - h.mean(axis=1, keepdims=True), rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(x.var(axis=1).get(), h.var(axis=1), rtol=1e-11)
    np.testing.assert_array_equal(x.argmax(axis=1).get(), h.argmax(axis=1))
    np.testing.assert_allclose(x.sum(axis=0).get(), h.sum(axis=0), rtol=1e-12, atol=1e-12)


def test_full_reductions_two_stage(gpu_recipes_on_cpu):
    rng = np.random.default_rng(3)
    n = 3 * 65536 + 17  # long enough for two stages, not a multiple of the pieces
    xh, yh = rng.random(n), rng.random(n)
    x, y = fl.asarray(xh), fl.asarray(yh)
    np.testing.assert_allclose(float(fl.sum(x * y)), float((xh * yh).sum()), rtol=1e-12)
    lo, hi, total = fl.compute(x.min(), x.max(), x.sum())
    assert (float(lo), float(hi)) == (xh.min(), xh.max())
    np.testing.assert_allclose(float(total), xh.sum(), rtol=1e-12)
    ih = rng.integers(-1000, 1000, n).astype(np.int32)
    assert int(fl.sum(fl.asarray(ih))) == int(ih.sum())


def test_row_results_are_combined_behind_two_barriers(gpu_recipes_on_cpu):
    x = fl.asarray(np.ones((4, 300), np.float32))
    src = fl.show_code(_softmax(x))
    # each work-item stores its partial; a barrier; 32 work-items combine the
    # partials; a barrier; every work-item combines the 32 lane values itself
    results = re.findall(r"\n\s*(t\d+) = acc_j\d+_m;", src)
    assert len(results) == 2, src  # the max is computed once, then the sum
    for name in results:
        partial = src.index(f"part_{name}[lid(0)] =")
        lanes = src.index(f"lanes_{name}[lid(0)] =")
        result = src.index(f"{name} = acc_j")
        assert partial < lanes < result, src
        assert "barrier(CLK_LOCAL_MEM_FENCE)" in src[partial:lanes], (name, src)
        assert "barrier(CLK_LOCAL_MEM_FENCE)" in src[lanes:result], (name, src)
        # the result is private to each work-item: no barrier publishes it
        assert re.search(rf"\n\s*float {name};", src), src
    assert src.count("barrier(") == 4, src


def test_softmax_is_one_kernel_with_one_max(gpu_recipes_on_cpu, fresh_stats):
    h = np.random.default_rng(0).random((8, 512)).astype(np.float32)
    x = fl.asarray(h)
    out = _softmax(x).get()
    np.testing.assert_allclose(out, _np_softmax(h.astype(np.float64)), rtol=2e-6)
    assert fl.stats()["kernels_launched"] == 1
    src = fl.show_code(_softmax(x))
    # one max reduction and one sum, each with its local array of partial results
    assert len(re.findall(r"__local \w+ part_t\d+\[", src)) == 2, src
    # the max starts at -inf in the head and in both combining stages (the row
    # fits the cache: no tail)
    assert len(re.findall(r"= -1 \* INFINITY;", src)) == 3, src


def test_row_cache_in_registers(gpu_recipes_on_cpu):
    group = gpu_recipes_on_cpu
    x = fl.asarray(np.ones((4, 16 * group + 44), np.float32))  # longer than the cache
    src = fl.show_code(_softmax(x))
    # the row is loaded once into a private array and every pass reads it there
    assert re.search(r"float row0\[\d+\];", src), src
    assert src.count("row0[0]") >= 4, src  # the fill, max, sum and output passes
    # the cached part is straight-line code; only the rest of a longer row is a loop
    assert "_outer_outer" not in src, src
    assert re.search(r"for \(int j\d+_t = 0;", src), src


@pytest.mark.parametrize("cols", [50, 300, 2000])
def test_row_cache_with_rows_of_other_lengths(gpu_recipes_on_cpu, cols):
    # the element loop and the reduction read the same row start but cover different
    # lengths: the cache may serve the element loop only when the lengths agree
    h = np.random.default_rng(cols).standard_normal((3, cols))
    x = fl.asarray(h)
    k = cols // 3
    np.testing.assert_allclose((x[:, :k] - x.sum(axis=1, keepdims=True)).get(),
                               h[:, :k] - h.sum(axis=1, keepdims=True), rtol=1e-12)
    np.testing.assert_allclose((x - x[:, :k].max(axis=1, keepdims=True)).get(),
                               h - h[:, :k].max(axis=1, keepdims=True), rtol=1e-12)
    np.testing.assert_allclose((x[:, ::2] * x[:, ::2].sum(axis=1, keepdims=True)).get(),
                               h[:, ::2] * h[:, ::2].sum(axis=1, keepdims=True), rtol=1e-12)


@pytest.mark.parametrize("dt", [np.uint32, np.uint64, np.int64])
def test_integer_sums_stay_integer_in_the_group_combination(gpu_recipes_on_cpu, dt):
    # the combination stage padded missing partials with a bare 0: beside a uint64
    # partial Loopy typed the select double, and large sums lost bits (GPU test suite)
    top = np.iinfo(dt).max
    h = np.array([[top - 12345, 5, 2, top // 3, 7]] * 3, dt)
    x = fl.asarray(h)
    for got, want in ((fl.sum(x), np.sum(h)), (x.sum(axis=1), h.sum(axis=1)),
                      (fl.max(x - 1, axis=1), np.max(h - 1, axis=1))):
        assert "double" not in fl.show_code(got)
        np.testing.assert_array_equal(got.get(), want)
        assert got.dtype == want.dtype


def test_rows_that_fill_the_cache_exactly_have_no_tests(gpu_recipes_on_cpu):
    # a row of exactly c pieces of the group is its own size class: no tail loop,
    # no bounds test on loads, reductions or stores
    group = gpu_recipes_on_cpu
    h = np.random.default_rng(4).standard_normal((6, 4 * group)).astype(np.float32)
    x = fl.asarray(h)
    src = fl.show_code(_softmax(x))
    assert re.search(r"float row0\[4\];", src), src
    assert not re.search(r"for \(int j\d+_t", src), src
    assert not re.search(r"if \([^)]*(p\d|NE)", src), src
    assert not re.search(r"[<>]=? *(p\d+|NE)\b", src), src
    np.testing.assert_allclose(_softmax(x).get(), _np_softmax(h.astype(np.float64)),
                               rtol=2e-6)


def test_rows_shorter_than_their_class_test_only_the_pieces_past_half(gpu_recipes_on_cpu):
    # rows of 3 pieces are in the class of 3..4 pieces (a power of two): 4 cached
    # elements per work-item, the first 2 always inside the row, the last 2 tested
    group = gpu_recipes_on_cpu
    h = np.random.default_rng(5).standard_normal((6, 3 * group - 5))
    x = fl.asarray(h)
    src = fl.show_code(_softmax(x))
    assert re.search(r"double row0\[4\];", src), src
    assert not re.search(r"for \(int j\d+_t", src), src
    stores = re.findall(r"(if \([^\n]*\)\s*\{\s*)?oaddr0 = [^;]*;\s*out0\[oaddr0\]", src)
    assert [bool(s) for s in stores] == [False, False, True, True], src
    np.testing.assert_allclose(_softmax(x).get(), _np_softmax(h), rtol=1e-12)


def test_size_classes_bound_the_number_of_kernels(gpu_recipes_on_cpu, fresh_stats):
    group = gpu_recipes_on_cpu
    rng = np.random.default_rng(6)
    fl.clear_memory_cache()  # kernels of other tests' shapes are not this test's

    def kernels_for(rows, cols):
        before = fl.stats()["memory_cache_misses"]
        h = rng.standard_normal((rows, cols))
        np.testing.assert_allclose(_softmax(fl.asarray(h)).get(), _np_softmax(h), rtol=1e-12)
        return fl.stats()["memory_cache_misses"] - before

    assert kernels_for(3, 2 * group - 7) == 1
    assert kernels_for(9, 2 * group - 1) == 0  # same class: pieces 2, not exact
    assert kernels_for(3, 2 * group) == 1  # exactly two pieces: another class
    assert kernels_for(5, 2 * group) == 0  # the number of rows is not in the class
    assert kernels_for(3, 16 * group + 1) == 1  # longer than the cache: no class
    assert kernels_for(3, 40 * group + 3) == 0


def test_concatenation(gpu_recipes_on_cpu):
    # the selection nest inside the tiled element loop and inside the row reductions
    rng = np.random.default_rng(7)
    hs = [rng.standard_normal((6, n)) for n in (300, 1, 517)]
    c = fl.concatenate([fl.asarray(h) for h in hs], axis=1)
    r = np.concatenate(hs, axis=1)
    np.testing.assert_array_equal((c * 2).get(), r * 2)
    np.testing.assert_allclose(_softmax(c).get(), _np_softmax(r), rtol=1e-12, atol=1e-15)
    np.testing.assert_allclose(c.sum(axis=0).get(), r.sum(axis=0), rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(fl.stack([c, -c]).sum().get(), 0.0, atol=1e-9)
    flat = [rng.standard_normal(n) for n in (70000, 3, 40001)]
    np.testing.assert_allclose(fl.concatenate([fl.asarray(h) for h in flat]).sum().get(),
                               np.concatenate(flat).sum(), rtol=1e-10)


def _np_logsumexp(h):
    m = h.max(axis=1)
    return m + np.log(np.exp(h - m[:, None]).sum(axis=1))


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_cross_entropy_and_logsumexp(gpu_recipes_on_cpu, fresh_stats, dtype):
    """The broad suite's forms on rows of 4096: logsumexp one row kernel; cross-entropy its
    row kernel (the label's logit gathered once per row, no temporary but the row values)
    and the mean's kernel."""
    from fuseloop.bench.broad import cross_entropy, logsumexp_rows

    rng = np.random.default_rng(25)
    h = rng.uniform(-4, 4, (6, 4096)).astype(dtype)
    labels = rng.integers(0, 4096, 6)
    x, rows, lab = fl.asarray(h), fl.asarray(np.arange(6)), fl.asarray(labels)
    want = _np_logsumexp(h.astype(np.float64))
    rtol = 1e-6 if dtype == np.float32 else 1e-13
    np.testing.assert_allclose(logsumexp_rows(fl, x).get(), want, rtol=rtol)
    assert fresh_stats()["kernels_launched"] == 1
    fl.reset_stats()
    got = float(cross_entropy(fl, x, rows, lab))
    assert fresh_stats()["kernels_launched"] == 2
    ref = (want - h.astype(np.float64)[np.arange(6), labels]).mean()
    np.testing.assert_allclose(got, ref, rtol=rtol * 10)
    ex = fl.explain(cross_entropy(fl, x, rows, lab))
    assert [b.nbytes for b in ex.temporaries] == [6 * h.itemsize], ex.as_text()
    src = fl.show_code(cross_entropy(fl, x, rows, lab))
    # the label's logit: one load, by one work-item of the row's group
    assert src.count("-1.0f * in0[" if dtype == np.float32 else "-1.0 * in0[") == 1, src


def test_product_of_centred_columns(gpu_recipes_on_cpu):
    # the column means fused into the product (tests/test_regressions.py), under the
    # GPU recipes: a row's own mean runs on every work-item of the row
    xh = np.random.default_rng(12).standard_normal((5, 3))
    x = fl.asarray(xh)
    d, dh = x - x.mean(axis=0), xh - xh.mean(axis=0)
    np.testing.assert_allclose((d.T @ d).get(), dh.T @ dh, rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(fl.matmul(d, d.T).get(), dh @ dh.T, rtol=1e-12, atol=1e-12)


def test_centred_product_keeps_the_tiled_recipe(restore_recipes):
    # the column means of d.T @ d run first, once for both operands (GPU rows recipe),
    # so the product is the tiled GPU contraction with the centring in its tile fill
    # (one group size: the GPU kernels take PoCL seconds to build)
    from fuseloop.recipes import gpu_tiled

    fl.register_recipe("cpu", gpu_coalesced, name="test-gpu-coalesced")
    fl.register_recipe("cpu", make_gpu_rows(64), name="test-gpu-rows-64", kind="reduction")
    fl.register_recipe("cpu", gpu_tiled, name="test-gpu-tiled-centred", kind="contraction")
    with fl.device("cpu"):
        _centred_product_tiled()


def _centred_product_tiled():
    xh = np.random.default_rng(13).standard_normal((120, 70)).astype(np.float32)
    x = fl.asarray(xh)
    d, dh = x - x.mean(axis=0), (xh - xh.mean(axis=0)).astype(np.float64)
    src = fl.show_code(d.T @ d)
    assert src.count("__kernel") == 2, src
    product = src.split("/* kernel 2 of 2 */")[1]
    assert "fuseloop_contract" in product and "x_tile" in product and "y_tile" in product
    assert "barrier(CLK_LOCAL_MEM_FENCE)" in product
    np.testing.assert_allclose((d.T @ d).get(), dh.T @ dh, rtol=1e-4, atol=1e-4)
